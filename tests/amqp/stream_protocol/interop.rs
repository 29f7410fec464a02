//! One stream, two protocols: what a stream client publishes an AMQP 0-9-1
//! consumer reads with its offset argument, properties and application
//! properties as headers, and the reverse.

use futures_lite::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use rabbitmq_stream_client::types::{Message, OffsetSpecification, SimpleValue};

use super::{body, consumer, env, take};
use crate::common::{publish_props, start, uniq, within};

#[tokio::test]
async fn a_stream_client_message_reaches_an_amqp_consumer() {
    let b = start().await;
    let env = env(&b).await;
    let stream = uniq("to-amqp");
    env.stream_creator().create(&stream).await.unwrap();
    let producer = env.producer().build(&stream).await.unwrap();
    let m = Message::builder()
        .body(b"hello".to_vec())
        .properties()
        .message_id(b"id-1".to_vec())
        .correlation_id(b"corr-1".to_vec())
        .content_type("text/plain")
        .message_builder()
        .application_properties()
        .insert("colour", "blue")
        // Above 127: the client writes small longs one byte shorter than it
        // announces.
        .insert("size", 300i64)
        .message_builder()
        .build();
    within("confirm", producer.send_with_confirm(m)).await.unwrap();
    producer.close().await.unwrap();

    let (_conn, ch) = b.channel().await;
    ch.basic_qos(10, BasicQosOptions::default()).await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-stream-offset".into(), AMQPValue::LongString("first".into()));
    let mut c = ch
        .basic_consume(
            stream.as_str().into(),
            "amqp-reader".into(),
            BasicConsumeOptions::default(),
            args,
        )
        .await
        .unwrap();
    let d = within("delivery", c.next()).await.unwrap().unwrap();
    assert_eq!(d.data, b"hello");
    let p = &d.properties;
    assert_eq!(p.message_id().as_ref().map(ShortString::as_str), Some("id-1"));
    assert_eq!(p.correlation_id().as_ref().map(ShortString::as_str), Some("corr-1"));
    assert_eq!(p.content_type().as_ref().map(ShortString::as_str), Some("text/plain"));
    let headers = p.headers().as_ref().expect("headers").inner();
    assert_eq!(
        headers
            .get("colour")
            .and_then(|v| v.as_long_string())
            .map(|s| s.to_string()),
        Some("blue".to_owned())
    );
    assert!(
        matches!(headers.get("size"), Some(AMQPValue::LongLongInt(300))),
        "{headers:?}"
    );
    assert!(
        matches!(headers.get("x-stream-offset"), Some(AMQPValue::LongLongInt(0))),
        "the AMQP consumer gets the offset"
    );
    d.ack(BasicAckOptions::default()).await.unwrap();
}

#[tokio::test]
async fn an_amqp_message_reaches_a_stream_client() {
    let b = start().await;
    let stream = uniq("from-amqp");
    let (_conn, ch) = b.channel().await;
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("stream".into()));
    ch.queue_declare(
        stream.as_str().into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args,
    )
    .await
    .unwrap();
    let mut headers = FieldTable::default();
    headers.insert("colour".into(), AMQPValue::LongString("red".into()));
    let props = lapin::BasicProperties::default()
        .with_message_id("m-7".into())
        .with_headers(headers);
    publish_props(&ch, "", &stream, b"from 0-9-1", props).await;

    let env = env(&b).await;
    let mut c = consumer(&env, &stream, OffsetSpecification::First).await;
    let d = &take(&mut c, 1).await[0];
    assert_eq!(body(d), "from 0-9-1");
    let m = d.message();
    let id = m
        .properties()
        .and_then(|p| p.message_id.as_ref())
        .map(|id| format!("{id:?}"));
    assert!(id.is_some_and(|id| id.contains("m-7")), "message id kept");
    let colour = m.application_properties().and_then(|a| a.get("colour"));
    assert!(
        matches!(colour, Some(SimpleValue::String(s)) if s == "red"),
        "header as application property: {colour:?}"
    );
}

/// A stream client's message comes back to stream clients with its
/// properties and application properties as it sent them: a binary message
/// id stays binary, a uint stays a uint, the subject and group id are kept
/// (0-9-1 has no place for them).
#[tokio::test]
async fn a_stream_client_message_reads_back_as_sent() {
    let b = start().await;
    let env = env(&b).await;
    let stream = uniq("as-sent");
    env.stream_creator().create(&stream).await.unwrap();
    let producer = env.producer().build(&stream).await.unwrap();
    let m = Message::builder()
        .body(b"kept".to_vec())
        .properties()
        .message_id(b"id-1".to_vec())
        .subject("the-subject")
        .group_id("g")
        .message_builder()
        .application_properties()
        .insert("n", 5u32)
        .insert("colour", "blue")
        .message_builder()
        .build();
    let sent_properties = m.properties().cloned();
    let sent_application = m.application_properties().cloned();
    within("confirm", producer.send_with_confirm(m)).await.unwrap();
    producer.close().await.unwrap();

    let mut c = consumer(&env, &stream, OffsetSpecification::First).await;
    let d = &take(&mut c, 1).await[0];
    assert_eq!(body(d), "kept");
    let m = d.message();
    assert_eq!(m.properties().cloned(), sent_properties);
    assert_eq!(m.application_properties().cloned(), sent_application);
    assert!(
        matches!(
            m.application_properties().and_then(|a| a.get("n")),
            Some(SimpleValue::Uint(5))
        ),
        "{:?}",
        m.application_properties()
    );
}
