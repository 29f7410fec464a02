//! Stream deduplication survives `kill -9`: a named publisher's messages are
//! confirmed over the stream protocol and the broker is killed at once. After
//! the restart the publisher's sequence is its last confirmed id, and sending
//! every message again stores none of them twice.

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use rabbitmq_stream_client::types::Message;
use rabbitmq_stream_client::{Client, ClientOptions, Environment};

use crate::process::*;

const STREAM: &str = "dedup-crash";
const MESSAGES: u64 = 2000;

async fn environment(broker: &BrokerProcess) -> Environment {
    within(
        "stream environment",
        Environment::builder()
            .host("127.0.0.1")
            .port(broker.stream_addr().port())
            .build(),
    )
    .await
    .expect("stream environment")
}

/// Sends messages `0..MESSAGES` with their own numbers as publishing ids, as
/// the publisher named `writer`; every one is confirmed.
async fn send_all(env: &Environment) -> rabbitmq_stream_client::Producer<rabbitmq_stream_client::Dedup> {
    let mut producer = env.producer().name("writer").build(STREAM).await.expect("producer");
    let messages: Vec<Message> = (0..MESSAGES)
        .map(|i| {
            Message::builder()
                .body(format!("m{i}").into_bytes())
                .publishing_id(i)
                .build()
        })
        .collect();
    let confirms = within("confirms", producer.batch_send_with_confirm(messages))
        .await
        .expect("sent");
    assert_eq!(confirms.len() as u64, MESSAGES);
    assert!(confirms.iter().all(|c| c.confirmed()), "every message confirmed");
    producer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_publisher_resending_after_a_kill_stores_nothing_twice() {
    let data = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::spawn(data.path(), None);
    let env = environment(&broker).await;
    env.stream_creator().create(STREAM).await.expect("stream created");
    let producer = send_all(&env).await;
    broker.kill9();
    // Their connections are gone with the broker: nothing to close.
    std::mem::forget(producer);
    std::mem::forget(env);

    let mut broker = BrokerProcess::spawn(data.path(), None);
    let client = within(
        "client",
        Client::connect(
            ClientOptions::builder()
                .host("127.0.0.1")
                .port(broker.stream_addr().port())
                .build(),
        ),
    )
    .await
    .expect("client");
    let sequence = within("query", client.query_publisher_sequence("writer", STREAM))
        .await
        .expect("sequence");
    assert_eq!(sequence, MESSAGES - 1);
    client.close().await.expect("client closed");
    let env = environment(&broker).await;
    let producer = send_all(&env).await;
    producer.close().await.expect("producer closed");
    let conn = broker.connect().await;
    let ch = conn.create_channel().await.unwrap();
    let passive = QueueDeclareOptions {
        passive: true,
        durable: true,
        ..Default::default()
    };
    let q = ch
        .queue_declare(STREAM.into(), passive, FieldTable::default())
        .await
        .expect("stream exists");
    assert_eq!(u64::from(q.message_count()), MESSAGES, "resent messages stored again");
    broker.stop();
}
