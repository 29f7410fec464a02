//! A compacted stream (`stream-compaction` given at create) read over the
//! stream protocol: removed messages leave gaps in the offsets, which chunks
//! never span, and readers before, across and after a pass see each message
//! at its own offset.

use std::collections::HashMap;

use rabbitmq_stream_client::Consumer;
use rabbitmq_stream_client::types::{Message, OffsetSpecification};

use super::{body, client_at, consumer, env, take};
use crate::common::{eventually, start, uniq, within};

/// Reads `c` until the message at offset `last`: offset and body of each.
async fn read_until(c: &mut Consumer, last: u64) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    loop {
        let d = take(c, 1).await.remove(0);
        out.push((d.offset(), body(&d)));
        if d.offset() >= last {
            return out;
        }
    }
}

#[tokio::test]
async fn readers_of_a_compacted_stream_see_each_message_at_its_offset() {
    let b = start().await;
    let env = env(&b).await;
    let stream = uniq("compacted");
    let client = client_at(b.stream_addr().port()).await;
    let options = HashMap::from([
        ("stream-compaction".to_string(), "header:key".to_string()),
        ("stream-max-segment-size-bytes".to_string(), "4096".to_string()),
    ]);
    let created = client.create_stream(&stream, options).await.expect("create");
    assert!(created.is_ok(), "{:?}", created.code());
    let n = 300u64;
    let key = |i: u64| format!("k{}", i % 5);
    // Subscribed before anything is published: it reads while passes run.
    let mut early = consumer(&env, &stream, OffsetSpecification::First).await;
    let producer = env.producer().build(&stream).await.expect("producer");
    let messages: Vec<Message> = (0..n)
        .map(|i| {
            Message::builder()
                .body(format!("m{i}").into_bytes())
                .application_properties()
                .insert("key", key(i).as_str())
                .message_builder()
                .build()
        })
        .collect();
    let confirms = within("publish", producer.batch_send_with_confirm(messages))
        .await
        .expect("sent");
    assert!(confirms.iter().all(|c| c.confirmed()));
    producer.close().await.expect("producer closed");
    let shape = |read: &[(u64, String)]| {
        assert!(read.windows(2).all(|w| w[0].0 < w[1].0), "{read:?}");
        assert!(read.iter().all(|(o, b)| *b == format!("m{o}")), "{read:?}");
    };
    shape(&read_until(&mut early, n - 1).await);
    eventually("sealed segments compacted", || async {
        let mut c = consumer(&env, &stream, OffsetSpecification::First).await;
        read_until(&mut c, n - 1).await.len() < (n / 2) as usize
    })
    .await;
    let mut c = consumer(&env, &stream, OffsetSpecification::First).await;
    let read = read_until(&mut c, n - 1).await;
    shape(&read);
    // Of each key, the kept messages are its newest.
    for (i, (o, _)) in read.iter().enumerate() {
        let newer_gone = (o + 1..n).any(|j| key(j) == key(*o) && !read[i..].iter().any(|r| r.0 == j));
        assert!(!newer_gone, "offset {o} kept but a newer one of its key removed");
    }
    // An offset that was removed reads from the next message kept.
    let removed = (0..n)
        .find(|o| !read.iter().any(|r| r.0 == *o))
        .expect("something removed");
    let mut c = consumer(&env, &stream, OffsetSpecification::Offset(removed)).await;
    let first = take(&mut c, 1).await.remove(0).offset();
    assert_eq!(first, read.iter().find(|r| r.0 > removed).unwrap().0);
}
