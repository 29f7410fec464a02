//! RabbitMQ's stream protocol, driven by RabbitMQ's Rust stream client
//! (`rabbitmq-stream-client`) against the broker's stream listener:
//! publishing with confirms and deduplication (`stream_protocol/publish.rs`),
//! subscribing from every offset specification, filtering and stored
//! offsets (`stream_protocol/consume.rs`), streams shared with AMQP 0-9-1
//! (`stream_protocol/interop.rs`), and refusals and malformed frames
//! (`stream_protocol/errors.rs`).

mod consume;
mod errors;
mod interop;
mod management;
mod publish;
mod single_active;
mod super_streams;

use std::time::Duration;

use futures_lite::StreamExt;
use rabbitmq_stream_client::types::{Delivery, Message, OffsetSpecification};
use rabbitmq_stream_client::{Consumer, Environment};

use crate::common::{TestBroker, within};

/// An environment logged in as guest on vhost `/`.
pub async fn env(b: &TestBroker) -> Environment {
    env_for(b, "guest", "guest", "/").await.expect("stream environment")
}

/// An environment with other credentials or vhost.
pub async fn env_for(
    b: &TestBroker,
    user: &str,
    password: &str,
    vhost: &str,
) -> rabbitmq_stream_client::RabbitMQStreamResult<Environment> {
    Environment::builder()
        .host("127.0.0.1")
        .port(b.stream_addr().port())
        .username(user)
        .password(password)
        .virtual_host(vhost)
        .build()
        .await
}

/// A message with a text body.
pub fn text(body: &str) -> Message {
    Message::builder().body(body.as_bytes().to_vec()).build()
}

/// Publishes `bodies` to `stream` with confirms; every one is confirmed.
pub async fn publish_all(env: &Environment, stream: &str, bodies: &[String]) {
    let producer = env.producer().build(stream).await.expect("producer");
    let messages: Vec<Message> = bodies.iter().map(|b| text(b)).collect();
    let confirms = within("publish", producer.batch_send_with_confirm(messages))
        .await
        .expect("batch sent");
    assert_eq!(confirms.len(), bodies.len());
    assert!(confirms.iter().all(|c| c.confirmed()), "every message confirmed");
    producer.close().await.expect("producer closed");
}

/// A consumer of `stream` from `offset`.
pub async fn consumer(env: &Environment, stream: &str, offset: OffsetSpecification) -> Consumer {
    env.consumer().offset(offset).build(stream).await.expect("consumer")
}

/// The next `n` deliveries of `consumer`.
pub async fn take(consumer: &mut Consumer, n: usize) -> Vec<Delivery> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let d = within("delivery", consumer.next())
            .await
            .expect("consumer still open")
            .expect("delivery");
        out.push(d);
    }
    out
}

/// The body of a delivery as text.
pub fn body(d: &Delivery) -> String {
    String::from_utf8_lossy(d.message().data().unwrap_or_default()).into_owned()
}

/// True when `consumer` gets nothing within a short while.
pub async fn quiet(consumer: &mut Consumer) -> bool {
    tokio::time::timeout(Duration::from_millis(300), consumer.next())
        .await
        .is_err()
}

/// `n` numbered bodies with a prefix.
pub fn numbered(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}-{i}")).collect()
}
