//! Messages across protocols: an AMQP 1.0 message read with 0-9-1 keeps its
//! body and maps its header, properties and application properties to basic
//! properties and headers; a 0-9-1 message read with AMQP 1.0 arrives as a
//! Data section with the same properties and application properties.

use fe2o3_amqp::types::messaging::{ApplicationProperties, Data, Header, MessageId, Properties};
use fe2o3_amqp::types::primitives::{SimpleValue, Symbol, Timestamp};
use lapin::BasicProperties;
use lapin::types::AMQPValue;

use super::*;
use crate::common::{declare_queue, get, long_str, publish_props, start, table, uniq};

/// A body that is not UTF-8, so that no conversion to text goes unnoticed.
const BODY: &[u8] = &[0, 1, 2, 0xfe, 0xff, b'{', b'}', b'\n'];

/// The integer in a 0-9-1 field value, whatever its width.
fn amqp091_int(v: &AMQPValue) -> Option<i64> {
    Some(match v {
        AMQPValue::ShortShortInt(n) => (*n).into(),
        AMQPValue::ShortShortUInt(n) => (*n).into(),
        AMQPValue::ShortInt(n) => (*n).into(),
        AMQPValue::ShortUInt(n) => (*n).into(),
        AMQPValue::LongInt(n) => (*n).into(),
        AMQPValue::LongUInt(n) => (*n).into(),
        AMQPValue::LongLongInt(n) => *n,
        _ => return None,
    })
}

/// The integer in an AMQP 1.0 simple value, whatever its width.
fn amqp1_int(v: &SimpleValue) -> Option<i64> {
    Some(match v {
        SimpleValue::Byte(n) => (*n).into(),
        SimpleValue::Ubyte(n) => (*n).into(),
        SimpleValue::Short(n) => (*n).into(),
        SimpleValue::Ushort(n) => (*n).into(),
        SimpleValue::Int(n) => (*n).into(),
        SimpleValue::Uint(n) => (*n).into(),
        SimpleValue::Long(n) => *n,
        SimpleValue::Ulong(n) => i64::try_from(*n).ok()?,
        _ => return None,
    })
}

/// The AMQP 1.0 message of the mapping tests.
fn full_message() -> Message<Data> {
    Message::builder()
        .header(Header::builder().durable(true).priority(7).build())
        .properties(
            Properties::builder()
                .message_id(String::from("mid-1"))
                .correlation_id(String::from("cid-1"))
                .content_type("application/octet-stream")
                .reply_to("reply-here")
                .subject("the-subject")
                .build(),
        )
        .application_properties(ApplicationProperties::builder().insert("k", "v").insert("n", 5i32))
        .data(BODY.to_vec())
        .build()
}

/// Asserts that a received AMQP 1.0 message carries what [`full_message`]
/// (or the equivalent 0-9-1 publish) put in it.
fn assert_amqp1_fields(d: &Received, message_id: &str, correlation_id: &str, content_type: &str) {
    assert_eq!(body_bytes(d), BODY, "body bytes");
    let m = d.message();
    let header = m.header.as_ref().expect("a header section");
    assert!(header.durable, "durable: {header:?}");
    let props = m.properties.as_ref().expect("a properties section");
    assert_eq!(
        props.message_id,
        Some(MessageId::String(message_id.into())),
        "message-id"
    );
    assert_eq!(
        props.correlation_id,
        Some(MessageId::String(correlation_id.into())),
        "correlation-id"
    );
    assert_eq!(props.content_type, Some(Symbol::from(content_type)), "content-type");
    let app = m
        .application_properties
        .as_ref()
        .expect("an application-properties section");
    assert_eq!(app.get("k"), Some(&SimpleValue::String("v".into())), "k in {app:?}");
    let n = app.get("n").unwrap_or_else(|| panic!("no n in {app:?}"));
    assert_eq!(amqp1_int(n), Some(5), "n: {n:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp1_message_read_with_0_9_1() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-map-out");
    declare_queue(&ch, &q).await;
    let mut c = Client::new(&b).await;
    let mut s = c.sender(&queue_address(&q)).await;
    let outcome = send_outcome(&mut s, full_message()).await;
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");

    let m = get(&ch, &q, true).await.expect("the AMQP 1.0 message");
    assert_eq!(m.delivery.data, BODY, "body bytes");
    let p = &m.delivery.properties;
    let s = |v: &Option<lapin::types::ShortString>| v.as_ref().map(|s| s.as_str().to_owned());
    assert_eq!(s(p.content_type()).as_deref(), Some("application/octet-stream"));
    assert_eq!(s(p.message_id()).as_deref(), Some("mid-1"));
    assert_eq!(s(p.correlation_id()).as_deref(), Some("cid-1"));
    assert_eq!(s(p.reply_to()).as_deref(), Some("reply-here"));
    assert_eq!(*p.priority(), Some(7), "priority");
    assert_eq!(*p.delivery_mode(), Some(2), "durable maps to delivery mode 2");
    let headers = p.headers().as_ref().expect("application properties as headers");
    assert_eq!(headers.inner().get("k"), Some(&long_str("v")), "k in {headers:?}");
    let n = headers
        .inner()
        .get("n")
        .unwrap_or_else(|| panic!("no n in {headers:?}"));
    assert_eq!(amqp091_int(n), Some(5), "n: {n:?}");
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_0_9_1_message_read_with_amqp1() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-map-in");
    declare_queue(&ch, &q).await;
    let props = BasicProperties::default()
        .with_content_type("text/plain".into())
        .with_message_id("mid-2".into())
        .with_correlation_id("cid-2".into())
        .with_delivery_mode(2)
        .with_headers(table(&[("k", long_str("v")), ("n", AMQPValue::LongInt(5))]));
    publish_props(&ch, "", &q, BODY, props).await;

    let mut c = Client::new(&b).await;
    let mut r = c.receiver(&queue_address(&q)).await;
    let d = recv(&mut r).await;
    assert_amqp1_fields(&d, "mid-2", "cid-2", "text/plain");
    within_accept(&r, &d).await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp1_message_read_with_amqp1() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-map-1-1");
    declare_queue(&ch, &q).await;
    let mut c = Client::new(&b).await;
    let mut s = c.sender(&queue_address(&q)).await;
    let outcome = send_outcome(&mut s, full_message()).await;
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    let mut r = c.receiver(&queue_address(&q)).await;
    let d = recv(&mut r).await;
    assert_amqp1_fields(&d, "mid-1", "cid-1", "application/octet-stream");
    let m = d.message();
    let header = m.header.as_ref().expect("a header section");
    assert_eq!(header.priority.0, 7, "priority");
    let props = m.properties.as_ref().expect("a properties section");
    assert_eq!(props.reply_to.as_deref(), Some("reply-here"), "reply-to");
    within_accept(&r, &d).await;
    c.close().await;
}

/// What 0-9-1 properties cannot hold (`to`, `subject`, group fields, an
/// expiry time, a numeric message id, typed application properties, a key
/// longer than 255 bytes) comes back to an AMQP 1.0 consumer as sent, while
/// a 0-9-1 consumer of the same message sees RabbitMQ 4's mapping and none
/// of the broker's copies of the sections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp1_properties_come_back_as_sent() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-map-bare");
    declare_queue(&ch, &q).await;
    let properties = Properties::builder()
        .message_id(7u64)
        .to("/queues/elsewhere")
        .subject("subj")
        .group_id(Some(String::from("g")))
        .group_sequence(3)
        .absolute_expiry_time(Timestamp::from_milliseconds(4_102_444_800_000))
        .creation_time(Timestamp::from_milliseconds(1_700_000_000_123))
        .build();
    let long_key = "k".repeat(300);
    let application = ApplicationProperties::builder()
        .insert("u", 5u32)
        .insert("s", Symbol::from("sym"))
        .insert(long_key.as_str(), 'é')
        .build();
    let message = || {
        Message::builder()
            .properties(properties.clone())
            .application_properties(application.clone())
            .data(BODY.to_vec())
            .build()
    };
    let mut c = Client::new(&b).await;
    let mut s = c.sender(&queue_address(&q)).await;
    for _ in 0..2 {
        let outcome = send_outcome(&mut s, message()).await;
        assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    }

    // Read with 0-9-1 first: the receiver's credit would take both.
    let m = get(&ch, &q, true).await.expect("the first message, read with 0-9-1");
    let p = &m.delivery.properties;
    assert_eq!(p.app_id().as_ref().map(|s| s.as_str()), Some("g"), "group-id as app-id");
    let headers = p.headers().as_ref().expect("application properties as headers");
    assert!(
        headers.inner().keys().all(|k| !k.as_str().starts_with("x-amqp-1.0-")),
        "the broker's own headers reached 0-9-1: {headers:?}"
    );
    let u = headers
        .inner()
        .get("u")
        .unwrap_or_else(|| panic!("no u in {headers:?}"));
    assert_eq!(amqp091_int(u), Some(5), "u: {u:?}");

    let mut r = c.receiver(&queue_address(&q)).await;
    let d = recv(&mut r).await;
    assert_eq!(d.message().properties.as_ref(), Some(&properties));
    assert_eq!(d.message().application_properties.as_ref(), Some(&application));
    assert_eq!(body_bytes(&d), BODY);
    within_accept(&r, &d).await;
    c.close().await;
}

/// Accepts `d`, bounded in time.
async fn within_accept(r: &Receiver, d: &Received) {
    crate::common::within("accept", r.accept(d)).await.expect("accept");
}
