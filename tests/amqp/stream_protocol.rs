//! RabbitMQ's stream protocol, driven by RabbitMQ's Rust stream client
//! (`rabbitmq-stream-client`) against the broker's stream listener:
//! publishing with confirms and deduplication (`stream_protocol/publish.rs`),
//! subscribing from every offset specification, filtering and stored
//! offsets (`stream_protocol/consume.rs`), deliver frames within the frame
//! size a client tuned (`stream_protocol/frame_max.rs`), streams shared with
//! AMQP 0-9-1 (`stream_protocol/interop.rs`), publish frames sent to
//! subscribers as they were published (`stream_protocol/runs.rs`), compacted streams
//! (`stream_protocol/compaction.rs`), and refusals and malformed frames
//! (`stream_protocol/errors.rs`).

mod compaction;
mod consume;
mod errors;
mod frame_max;
mod interop;
mod management;
mod publish;
mod runs;
mod single_active;
mod super_streams;

use std::time::Duration;

use futures_lite::StreamExt;
use rabbitmq_stream_client::types::{Delivery, Message, OffsetSpecification};
use rabbitmq_stream_client::{Consumer, Environment};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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

/// A low-level client (one connection, no environment) logged in as guest
/// on the stream listener at `port`.
pub async fn client_at(port: u16) -> rabbitmq_stream_client::Client {
    let options = rabbitmq_stream_client::ClientOptions::builder()
        .host("127.0.0.1")
        .port(port)
        .build();
    within("client", rabbitmq_stream_client::Client::connect(options))
        .await
        .expect("client")
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

/// Opens a stream connection by hand, as guest on `/`, tuned to frames of
/// at most `frame_max` bytes.
pub async fn raw_open(port: u16, frame_max: u32) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut frames = Vec::new();
    let frame = |out: &mut Vec<u8>, body: &[u8]| {
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(body);
    };
    // Peer properties (no properties), SASL handshake, PLAIN authenticate.
    frame(&mut frames, &[0, 17, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0]);
    frame(&mut frames, &[0, 18, 0, 1, 0, 0, 0, 2]);
    let mut auth = vec![0, 19, 0, 1, 0, 0, 0, 3, 0, 5];
    auth.extend_from_slice(b"PLAIN");
    let plain = b"\0guest\0guest";
    auth.extend_from_slice(&(plain.len() as u32).to_be_bytes());
    auth.extend_from_slice(plain);
    frame(&mut frames, &auth);
    s.write_all(&frames).await.unwrap();
    // The tune arrives after the authenticate answer; answer it, then open.
    let mut seen = Vec::new();
    while !seen.windows(4).any(|w| w == [0, 20, 0, 1]) {
        let mut buf = [0u8; 1024];
        let n = within("tune", s.read(&mut buf)).await.unwrap();
        assert!(n > 0, "the broker answers the opening");
        seen.extend_from_slice(&buf[..n]);
    }
    let mut rest = Vec::new();
    let mut tune = vec![0, 20, 0, 1];
    tune.extend_from_slice(&frame_max.to_be_bytes());
    tune.extend_from_slice(&0u32.to_be_bytes()); // no heartbeat
    frame(&mut rest, &tune);
    frame(&mut rest, &[0, 21, 0, 1, 0, 0, 0, 4, 0, 1, b'/']);
    s.write_all(&rest).await.unwrap();
    let mut buf = [0u8; 1024];
    let mut opened = Vec::new();
    while !opened.windows(4).any(|w| w == [0x80, 21, 0, 1]) {
        let n = within("open", s.read(&mut buf)).await.unwrap();
        assert!(n > 0, "the broker answers the open");
        opened.extend_from_slice(&buf[..n]);
    }
    s
}
