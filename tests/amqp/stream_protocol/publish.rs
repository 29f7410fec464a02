//! Creating streams, publishing with confirms, and deduplication by
//! publisher name across reconnects and restarts.

use rabbitmq_stream_client::types::{ByteCapacity, Message, OffsetSpecification};

use super::{body, consumer, env, numbered, publish_all, quiet, take};
use crate::common::{start, uniq, within};

#[tokio::test]
async fn a_created_stream_keeps_every_confirmed_message_in_order() {
    let b = start().await;
    let env = env(&b).await;
    let stream = uniq("s");
    env.stream_creator()
        .max_length(ByteCapacity::MB(50))
        .create(&stream)
        .await
        .expect("stream created");
    let q = b.server().broker.vhost("/").unwrap().queue(&stream).expect("a queue");
    assert!(q.is_stream(), "created as a stream queue");
    let bodies = numbered("m", 0..300);
    publish_all(&env, &stream, &bodies).await;
    let mut c = consumer(&env, &stream, OffsetSpecification::First).await;
    let got = take(&mut c, 300).await;
    assert_eq!(got.iter().map(body).collect::<Vec<_>>(), bodies);
    assert_eq!(
        got.iter().map(|d| d.offset()).collect::<Vec<_>>(),
        (0..300).collect::<Vec<u64>>()
    );
    assert!(quiet(&mut c).await, "nothing more");
    env.delete_stream(&stream).await.expect("stream deleted");
    assert!(b.server().broker.vhost("/").unwrap().queue(&stream).is_none());
}

#[tokio::test]
async fn a_named_publisher_is_deduplicated_across_reconnects_and_restarts() {
    let mut b = start().await;
    let stream = uniq("dedup");
    {
        let env = env(&b).await;
        env.stream_creator().create(&stream).await.expect("stream created");
        let mut producer = env.producer().name("p1").build(&stream).await.expect("producer");
        let messages: Vec<Message> = (1..=5)
            .map(|i| {
                Message::builder()
                    .body(format!("m{i}").into_bytes())
                    .publishing_id(i)
                    .build()
            })
            .collect();
        let confirms = within("publish", producer.batch_send_with_confirm(messages))
            .await
            .unwrap();
        assert!(confirms.iter().all(|c| c.confirmed()));
        producer.close().await.unwrap();
    }
    b.restart().await;
    let env = env(&b).await;
    // The sequence is the last id stored, after the restart too.
    let mut producer = env.producer().name("p1").build(&stream).await.expect("producer");
    // Ids 3..=5 again, and new ones 6..=7: only the new ones are stored,
    // yet every one is confirmed.
    let messages: Vec<Message> = (3..=7)
        .map(|i| {
            Message::builder()
                .body(format!("m{i}").into_bytes())
                .publishing_id(i)
                .build()
        })
        .collect();
    let confirms = within("publish", producer.batch_send_with_confirm(messages))
        .await
        .unwrap();
    assert_eq!(confirms.len(), 5);
    assert!(confirms.iter().all(|c| c.confirmed()));
    producer.close().await.unwrap();
    let mut c = consumer(&env, &stream, OffsetSpecification::First).await;
    let got: Vec<String> = take(&mut c, 7).await.iter().map(body).collect();
    assert_eq!(got, ["m1", "m2", "m3", "m4", "m5", "m6", "m7"]);
    assert!(quiet(&mut c).await, "no duplicate");
}

#[tokio::test]
async fn the_publisher_sequence_is_queried_per_name_and_stream() {
    let b = start().await;
    let env = env(&b).await;
    let stream = uniq("seq");
    env.stream_creator().create(&stream).await.unwrap();
    let port = b.stream_addr().port();
    let client = super::client_at(port).await;
    assert_eq!(client.query_publisher_sequence("nobody", &stream).await.unwrap(), 0);
    let mut producer = env.producer().name("named").build(&stream).await.unwrap();
    let m = Message::builder().body(b"x".to_vec()).publishing_id(41).build();
    within("confirm", producer.send_with_confirm(m)).await.unwrap();
    assert_eq!(client.query_publisher_sequence("named", &stream).await.unwrap(), 41);
    assert_eq!(
        client
            .query_publisher_sequence("named", "no-such-stream")
            .await
            .unwrap_or(0),
        0,
        "nothing for a missing stream"
    );
    producer.close().await.unwrap();
    client.close().await.unwrap();
}
