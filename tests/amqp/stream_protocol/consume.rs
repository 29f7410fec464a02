//! Subscribing: every offset specification, credit across many chunks,
//! filter values, stored offsets, and a deleted stream.

use std::collections::HashMap;

use rabbitmq_stream_client::FilterConfiguration;
use rabbitmq_stream_client::types::{Message, MessageResult, OffsetSpecification, ResponseKind};

use super::{body, client_at, consumer, env, numbered, publish_all, quiet, take};
use crate::common::{start, uniq, within};

#[tokio::test]
async fn each_offset_specification_starts_where_it_says() {
    let b = start().await;
    let env = env(&b).await;
    let stream = uniq("offsets");
    env.stream_creator().create(&stream).await.unwrap();
    publish_all(&env, &stream, &numbered("old", 0..10)).await;

    let mut from_offset = consumer(&env, &stream, OffsetSpecification::Offset(6)).await;
    let got = take(&mut from_offset, 4).await;
    assert_eq!(got.iter().map(|d| d.offset()).collect::<Vec<_>>(), [6, 7, 8, 9]);

    let mut last = consumer(&env, &stream, OffsetSpecification::Last).await;
    assert_eq!(body(&take(&mut last, 1).await[0]), "old-9");

    let past = chrono_ms() - 60_000;
    let mut by_time = consumer(&env, &stream, OffsetSpecification::Timestamp(past)).await;
    assert_eq!(body(&take(&mut by_time, 1).await[0]), "old-0");

    let mut next = consumer(&env, &stream, OffsetSpecification::Next).await;
    assert!(quiet(&mut next).await, "next skips what is there");
    publish_all(&env, &stream, &numbered("new", 0..3)).await;
    let got: Vec<String> = take(&mut next, 3).await.iter().map(body).collect();
    assert_eq!(got, numbered("new", 0..3));
    // The others go on with the new messages too.
    let got: Vec<u64> = take(&mut from_offset, 3).await.iter().map(|d| d.offset()).collect();
    assert_eq!(got, [10, 11, 12]);
}

fn chrono_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test]
async fn a_large_backlog_arrives_over_many_chunks_of_credit() {
    let b = start().await;
    let env = env(&b).await;
    let stream = uniq("backlog");
    env.stream_creator().create(&stream).await.unwrap();
    let bodies = numbered("b", 0..5000);
    publish_all(&env, &stream, &bodies).await;
    let mut c = consumer(&env, &stream, OffsetSpecification::First).await;
    let got = take(&mut c, 5000).await;
    assert!(
        got.iter()
            .enumerate()
            .all(|(i, d)| d.offset() == i as u64 && body(d) == bodies[i]),
        "every message once, in order"
    );
}

#[tokio::test]
async fn a_filtering_subscriber_gets_only_its_values() {
    let b = start().await;
    let env = env(&b).await;
    let stream = uniq("filter");
    env.stream_creator().create(&stream).await.unwrap();
    let producer = env
        .producer()
        .filter_value_extractor(|m: &Message| {
            let body = String::from_utf8_lossy(m.data().unwrap_or_default()).into_owned();
            body.split(':').next().unwrap_or_default().to_owned()
        })
        .build(&stream)
        .await
        .expect("a filtering producer");
    let mut messages = Vec::new();
    for i in 0..30 {
        let colour = ["red", "blue", "green"][i % 3];
        messages.push(Message::builder().body(format!("{colour}:{i}").into_bytes()).build());
    }
    let confirms = within("publish", producer.batch_send_with_confirm(messages))
        .await
        .unwrap();
    assert!(confirms.iter().all(|c| c.confirmed()));
    producer.close().await.unwrap();
    let mut c = env
        .consumer()
        .offset(OffsetSpecification::First)
        .filter_input(Some(FilterConfiguration::new(vec!["blue".into()], false)))
        .build(&stream)
        .await
        .expect("a filtering consumer");
    let got: Vec<String> = take(&mut c, 10).await.iter().map(body).collect();
    assert!(got.iter().all(|b| b.starts_with("blue:")), "only blue: {got:?}");
    assert!(quiet(&mut c).await, "nothing else");
}

#[tokio::test]
async fn a_stored_offset_is_there_after_a_restart() {
    let mut b = start().await;
    let stream = uniq("stored");
    {
        let env = env(&b).await;
        env.stream_creator().create(&stream).await.unwrap();
        publish_all(&env, &stream, &numbered("m", 0..20)).await;
        let mut c = env
            .consumer()
            .name("reader")
            .offset(OffsetSpecification::First)
            .build(&stream)
            .await
            .unwrap();
        let got = take(&mut c, 12).await;
        c.store_offset(got[11].offset()).await.expect("offset stored");
        assert_eq!(c.query_offset().await.expect("offset queried"), 11);
        c.handle().close().await.unwrap();
    }
    b.restart().await;
    let env = env(&b).await;
    let mut c = env
        .consumer()
        .name("reader")
        .offset(OffsetSpecification::First)
        .build(&stream)
        .await
        .unwrap();
    let stored = c.query_offset().await.expect("offset queried after restart");
    assert_eq!(stored, 11);
    let mut resumed = consumer(&env, &stream, OffsetSpecification::Offset(stored + 1)).await;
    assert_eq!(body(&take(&mut resumed, 1).await[0]), "m-12");
    drop(take(&mut c, 1).await);
    // A name that stored nothing has no offset.
    let other = env
        .consumer()
        .name("never-stored")
        .offset(OffsetSpecification::First)
        .build(&stream)
        .await
        .unwrap();
    assert!(other.query_offset().await.is_err(), "no offset for a new name");
}

#[tokio::test]
async fn deleting_a_stream_tells_its_subscribers() {
    let b = start().await;
    let env = env(&b).await;
    let stream = uniq("gone");
    env.stream_creator().create(&stream).await.unwrap();
    publish_all(&env, &stream, &numbered("m", 0..3)).await;
    let client = client_at(b.stream_addr().port()).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let handler = move |item: MessageResult| {
        let tx = tx.clone();
        async move {
            if let Some(Ok(r)) = item {
                let text = match r.kind_ref() {
                    ResponseKind::Deliver(d) => format!("deliver {} {}", d.chunk_first_offset, d.messages.len()),
                    other => format!("{other:?}"),
                };
                let _ = tx.send(text);
            }
            Ok(())
        }
    };
    client.set_handler(handler).await;
    let subscribed = client
        .subscribe(1, &stream, OffsetSpecification::First, 1, HashMap::new())
        .await
        .expect("subscribed");
    assert!(subscribed.is_ok());
    let first = within("a chunk", rx.recv()).await.unwrap();
    assert_eq!(first, "deliver 0 3", "one chunk with the three messages");
    env.delete_stream(&stream).await.unwrap();
    let update = within("metadata update", rx.recv()).await.unwrap();
    assert!(
        update.contains("MetadataUpdate") && update.contains("StreamNotAvailable"),
        "{update}"
    );
    // The subscription id is free again, for a stream of the same name too.
    env.stream_creator().create(&stream).await.unwrap();
    let again = client
        .subscribe(1, &stream, OffsetSpecification::First, 1, HashMap::new())
        .await
        .expect("subscribed again");
    assert!(again.is_ok(), "the id of a deleted stream's subscription is free");
    client.close().await.unwrap();
}
