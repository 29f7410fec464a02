//! MQTT 3.1.1: connecting and logging in, QoS 0/1/2 in both directions,
//! interoperation with AMQP through `amq.topic`, persistent sessions,
//! redelivery, retained messages, wills, takeover and keep alive; the codec
//! and protocol rules on raw packets (`mqtt/protocol.rs`), other clients
//! (`mqtt/interop.rs`), MQTT 5 sessions across restarts (`mqtt/v5.rs`),
//! shared subscription groups of stored sessions (`mqtt/shared.rs`), and
//! MQTT and AMQP over WebSocket (`mqtt/websocket.rs`).

#[path = "../common/mod.rs"]
mod common;
mod interop;
mod protocol;
mod shared;
mod v5;
mod websocket;

use std::time::Duration;

use common::api::Api;
use common::mqtt::*;
use common::*;
use lapin::BasicProperties;
use lapin::options::{BasicAckOptions, QueueBindOptions};
use lapin::types::FieldTable;
use lavinmq::core::FieldValue;
use lavinmq::core::exchange::Destination;
use lavinmq::core::user::{Permissions, SHA256, User, hash_password};
use rumqttc::{ConnectReturnCode, LastWill, QoS};

/// The name of the queue that holds the session of `client_id`.
fn session_queue(client_id: &str) -> String {
    format!("mqtt-subscription-{client_id}qos1")
}

/// Creates `user` (password `pw`) with full permissions on `vhost`.
fn add_user(b: &TestBroker, user: &str, vhost: &str) {
    let user = User {
        limits: Default::default(),
        topic_permissions: Default::default(),
        name: user.into(),
        password_hash: hash_password("pw"),
        hashing_algorithm: SHA256.into(),
        tags: vec![],
        permissions: [(
            vhost.to_string(),
            Permissions {
                configure: ".*".into(),
                write: ".*".into(),
                read: ".*".into(),
            },
        )]
        .into_iter()
        .collect(),
    };
    b.server().broker.users.put(user).expect("user stored");
}

/// Payloads of `publishes` as strings.
fn bodies(publishes: &[rumqttc::Publish]) -> Vec<String> {
    publishes
        .iter()
        .map(|p| String::from_utf8_lossy(&p.payload).into_owned())
        .collect()
}

/// Binding keys and `x-mqtt-subscription-qos` of the bindings from
/// `amq.topic` to `queue` in vhost `/`.
fn session_bindings(b: &TestBroker, queue: &str) -> Vec<(String, Option<i64>)> {
    let vhost = b.server().broker.vhost("/").expect("vhost /");
    let exchange = vhost.exchange("amq.topic").expect("amq.topic");
    let mut out: Vec<(String, Option<i64>)> = exchange
        .bindings()
        .into_iter()
        .filter(|b| matches!(&b.destination, Destination::Queue(q) if q.name == queue))
        .map(|b| {
            let qos = b.arguments.get("x-mqtt-subscription-qos").and_then(FieldValue::as_i64);
            (b.routing_key, qos)
        })
        .collect();
    out.sort();
    out
}

// ---------------------------------------------------------------------------
// Connecting
// ---------------------------------------------------------------------------

/// CONNACK accepts; session present is false for a clean session and for a
/// new persistent one, true when a persistent session resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connack_reports_session_present() {
    let broker = start().await;
    let clean = connect(options(&broker, "clean-one")).await;
    assert!(!clean.session_present(), "a clean session is never present");
    clean.disconnect().await;

    let first = connect(persistent(&broker, "keeper")).await;
    assert!(!first.session_present(), "no stored session yet");
    first.disconnect().await;
    let again = connect(persistent(&broker, "keeper")).await;
    assert!(again.session_present(), "the stored session resumes");
    again.disconnect().await;

    // A clean session discards the stored one.
    let clean = connect(options(&broker, "keeper")).await;
    assert!(!clean.session_present());
    clean.disconnect().await;
    let after = connect(persistent(&broker, "keeper")).await;
    assert!(!after.session_present(), "the clean session discarded the stored one");
    after.disconnect().await;
}

/// A user name `vhost:user` logs in to that vhost, whose traffic is separate
/// from the default vhost's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhost_in_user_name_selects_vhost() {
    let broker = start().await;
    broker.server().broker.create_vhost("mqtt-vh").expect("vhost created");
    add_user(&broker, "mqtt-user", "mqtt-vh");

    let mut opts = options(&broker, "vh-sub");
    opts.set_credentials("mqtt-vh:mqtt-user", "pw");
    let mut sub = connect(opts).await;
    sub.subscribe_ok("vh/t", QoS::AtLeastOnce).await;
    let vhost = broker.server().broker.vhost("mqtt-vh").expect("vhost");
    assert!(
        vhost.queue(&session_queue("vh-sub")).is_some(),
        "the session queue lives in the selected vhost"
    );
    assert!(
        broker
            .server()
            .broker
            .vhost("/")
            .expect("vhost /")
            .queue(&session_queue("vh-sub"))
            .is_none(),
        "and not in the default vhost"
    );

    // A subscriber in the default vhost to the same topic hears nothing.
    let mut other = connect(options(&broker, "default-sub")).await;
    other.subscribe_ok("vh/t", QoS::AtLeastOnce).await;

    let mut opts = options(&broker, "vh-pub");
    opts.set_credentials("mqtt-vh:mqtt-user", "pw");
    let mut publisher = connect(opts).await;
    publisher.publish("vh/t", QoS::AtLeastOnce, false, b"in vhost").await;
    let p = sub.next_publish().await;
    assert_eq!((p.topic.as_str(), &p.payload[..]), ("vh/t", &b"in vhost"[..]));
    other.assert_no_publish().await;
}

/// A wrong password is refused with CONNACK return code 4 (bad user name or
/// password).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_password_is_refused() {
    let broker = start().await;
    let mut opts = options(&broker, "bad-pw");
    opts.set_credentials("guest", "not-the-password");
    assert_eq!(refusal(opts).await, ConnectReturnCode::BadUserNamePassword);
    let mut opts = options(&broker, "no-user");
    opts.set_credentials("nobody", "guest");
    assert_eq!(refusal(opts).await, ConnectReturnCode::BadUserNamePassword);
    // The listener still serves other clients.
    connect(options(&broker, "after-refusal")).await.disconnect().await;
}

/// A user name naming a vhost that does not exist is refused with CONNACK
/// return code 5 (not authorized).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_vhost_is_not_authorized() {
    let broker = start().await;
    let mut opts = options(&broker, "lost");
    opts.set_credentials("no-such-vhost:guest", "guest");
    assert_eq!(refusal(opts).await, ConnectReturnCode::NotAuthorized);
}

// ---------------------------------------------------------------------------
// QoS between MQTT clients
// ---------------------------------------------------------------------------

/// A QoS 0 publish reaches a QoS 0 subscriber as QoS 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos0_publish_reaches_subscriber() {
    let broker = start().await;
    let mut sub = connect(options(&broker, "q0-sub")).await;
    sub.subscribe_ok("q/0", QoS::AtMostOnce).await;
    let mut publisher = connect(options(&broker, "q0-pub")).await;
    publisher.publish("q/0", QoS::AtMostOnce, false, b"zero").await;
    let p = sub.next_publish().await;
    assert_eq!((p.topic.as_str(), &p.payload[..]), ("q/0", &b"zero"[..]));
    assert_eq!(p.qos, QoS::AtMostOnce);
    assert_eq!(p.pkid, 0);
    assert!(!p.retain && !p.dup);
}

/// A QoS 1 publish is acknowledged with PUBACK and reaches a QoS 1 subscriber
/// as QoS 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos1_publish_reaches_subscriber() {
    let broker = start().await;
    let mut sub = connect(options(&broker, "q1-sub")).await;
    sub.subscribe_ok("q/1", QoS::AtLeastOnce).await;
    let mut publisher = connect(options(&broker, "q1-pub")).await;
    publisher.publish("q/1", QoS::AtLeastOnce, false, b"one").await;
    let p = sub.next_publish().await;
    assert_eq!((p.topic.as_str(), &p.payload[..]), ("q/1", &b"one"[..]));
    assert_eq!(p.qos, QoS::AtLeastOnce);
    assert_ne!(p.pkid, 0);
    assert!(!p.dup);
    sub.assert_no_publish().await;
}

/// A QoS 2 publish completes with PUBREC/PUBCOMP and reaches a QoS 2
/// subscriber as QoS 2, whose PUBREC the broker answers with PUBREL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos2_publish_reaches_subscriber() {
    let broker = start().await;
    let mut sub = connect(options(&broker, "q2-sub")).await;
    sub.subscribe_ok("q/2", QoS::ExactlyOnce).await;
    let mut publisher = connect(options(&broker, "q2-pub")).await;
    publisher.publish("q/2", QoS::ExactlyOnce, false, b"two").await;
    let p = sub.next_publish().await;
    assert_eq!((p.topic.as_str(), &p.payload[..]), ("q/2", &b"two"[..]));
    assert_eq!(p.qos, QoS::ExactlyOnce);
    assert_ne!(p.pkid, 0);
    let released = sub
        .expect("PUBREL", |i| match i {
            rumqttc::Incoming::PubRel(r) => Some(r.pkid),
            _ => None,
        })
        .await;
    assert_eq!(released, p.pkid, "PUBREL names the delivery's packet id");
    sub.assert_no_publish().await;
}

/// The delivered QoS is the lower of the publish QoS and the subscription QoS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_is_downgraded_to_subscription_qos() {
    let broker = start().await;
    let mut sub = connect(options(&broker, "down-sub")).await;
    sub.subscribe_ok("down/0", QoS::AtMostOnce).await;
    sub.subscribe_ok("down/1", QoS::AtLeastOnce).await;
    sub.subscribe_ok("down/2", QoS::ExactlyOnce).await;
    let mut publisher = connect(options(&broker, "down-pub")).await;
    let cases = [
        ("down/0", QoS::ExactlyOnce, QoS::AtMostOnce),
        ("down/1", QoS::ExactlyOnce, QoS::AtLeastOnce),
        ("down/0", QoS::AtLeastOnce, QoS::AtMostOnce),
        ("down/2", QoS::AtLeastOnce, QoS::AtLeastOnce),
        ("down/2", QoS::AtMostOnce, QoS::AtMostOnce),
    ];
    for (topic, published, expected) in cases {
        publisher.publish(topic, published, false, b"x").await;
        let p = sub.next_publish().await;
        assert_eq!(p.topic, topic);
        assert_eq!(
            p.qos, expected,
            "publish at {published:?} to {topic} is delivered at {expected:?}"
        );
    }
}

/// A message matching several subscriptions of a session is delivered once,
/// at the highest QoS granted among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_subscriptions_deliver_once_at_max_qos() {
    let broker = start().await;
    let mut sub = connect(options(&broker, "ovl-sub")).await;
    sub.subscribe_ok("ovl/+", QoS::AtMostOnce).await;
    sub.subscribe_ok("ovl/#", QoS::ExactlyOnce).await;
    sub.subscribe_ok("ovl/x", QoS::AtLeastOnce).await;
    let mut publisher = connect(options(&broker, "ovl-pub")).await;
    publisher.publish("ovl/x", QoS::ExactlyOnce, false, b"once").await;
    let p = sub.next_publish().await;
    assert_eq!((p.topic.as_str(), &p.payload[..]), ("ovl/x", &b"once"[..]));
    assert_eq!(p.qos, QoS::ExactlyOnce, "the highest granted QoS applies");
    sub.assert_no_publish().await;
}

/// Subscribing again to a filter replaces its QoS (one binding, not two), and
/// each of many filters on one session is unsubscribed on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resubscribing_replaces_the_qos_among_many_filters() {
    let broker = start().await;
    let mut sub = connect(options(&broker, "re-sub")).await;
    for i in 0..200 {
        sub.subscribe_ok(&format!("re/{i}"), QoS::AtMostOnce).await;
    }
    sub.subscribe_ok("re/7", QoS::AtLeastOnce).await;
    sub.subscribe_ok("re/7", QoS::ExactlyOnce).await;
    let mut publisher = connect(options(&broker, "re-pub")).await;
    publisher.publish("re/7", QoS::ExactlyOnce, false, b"once").await;
    let p = sub.next_publish().await;
    assert_eq!((p.topic.as_str(), p.qos), ("re/7", QoS::ExactlyOnce));
    sub.assert_no_publish().await;

    let api = Api::new(&broker);
    let bindings = api.get_ok("/api/exchanges/%2F/amq.topic/bindings/source").await;
    let keys: Vec<&str> = bindings
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|b| b["routing_key"].as_str())
        .filter(|k| k.starts_with("re."))
        .collect();
    assert_eq!(keys.len(), 200, "{keys:?}");
    assert_eq!(keys.iter().filter(|k| **k == "re.7").count(), 1, "{keys:?}");
}

// ---------------------------------------------------------------------------
// MQTT and AMQP
// ---------------------------------------------------------------------------

/// An MQTT publish to `sensors/1/temp` reaches an AMQP queue bound to
/// `amq.topic` with `sensors.*.temp`, with routing key `sensors.1.temp`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_publish_reaches_amqp_queue() {
    let broker = start().await;
    let (_conn, ch) = broker.channel().await;
    let q = uniq("temps");
    declare_queue(&ch, &q).await;
    ch.queue_bind(
        q.as_str().into(),
        "amq.topic".into(),
        "sensors.*.temp".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("queue.bind");
    let mut consumer = consume(&ch, &q).await;

    let mut publisher = connect(options(&broker, "sensor")).await;
    publisher
        .publish("sensors/1/temp", QoS::AtLeastOnce, false, b"21.5")
        .await;
    let d = next_delivery(&mut consumer).await;
    assert_eq!(d.data, b"21.5");
    assert_eq!(d.exchange.as_str(), "amq.topic");
    assert_eq!(d.routing_key.as_str(), "sensors.1.temp");
    assert_eq!(d.properties.delivery_mode(), &Some(2), "QoS 1 is persistent");
    d.ack(BasicAckOptions::default()).await.expect("ack");

    publisher.publish("sensors/2/temp", QoS::AtMostOnce, false, b"19").await;
    let d = next_delivery(&mut consumer).await;
    assert_eq!(d.data, b"19");
    assert_eq!(d.routing_key.as_str(), "sensors.2.temp");
    assert_ne!(d.properties.delivery_mode(), &Some(2), "QoS 0 is transient");
    d.ack(BasicAckOptions::default()).await.expect("ack");

    // Topics the binding does not match stay away.
    publisher
        .publish("sensors/1/humidity", QoS::AtLeastOnce, false, b"40")
        .await;
    assert_no_delivery(&mut consumer).await;
}

/// An AMQP publish to `amq.topic` with routing key `a.b` reaches an MQTT
/// subscriber of `a/+` on topic `a/b`; persistent messages count as QoS 1,
/// transient ones as QoS 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_publish_reaches_mqtt_subscriber() {
    let broker = start().await;
    let mut sub = connect(options(&broker, "amqp-listener")).await;
    sub.subscribe_ok("a/+", QoS::ExactlyOnce).await;
    let (_conn, ch) = broker.channel().await;

    publish(&ch, "amq.topic", "a.b", b"transient").await;
    let p = sub.next_publish().await;
    assert_eq!((p.topic.as_str(), &p.payload[..]), ("a/b", &b"transient"[..]));
    assert_eq!(p.qos, QoS::AtMostOnce, "a transient AMQP message is QoS 0");

    publish_props(
        &ch,
        "amq.topic",
        "a.c",
        b"persistent",
        BasicProperties::default().with_delivery_mode(2),
    )
    .await;
    let p = sub.next_publish().await;
    assert_eq!((p.topic.as_str(), &p.payload[..]), ("a/c", &b"persistent"[..]));
    assert_eq!(p.qos, QoS::AtLeastOnce, "a persistent AMQP message is QoS 1");

    publish(&ch, "amq.topic", "a.b.c", b"too deep").await;
    sub.assert_no_publish().await;
}

// ---------------------------------------------------------------------------
// Persistent sessions
// ---------------------------------------------------------------------------

/// A persistent session keeps its subscriptions and queues QoS 1 messages
/// while the client is away; they are delivered in order when it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_session_queues_messages_while_offline() {
    let broker = start().await;
    let mut sub = connect(persistent(&broker, "offline")).await;
    sub.subscribe_ok("off/t", QoS::AtLeastOnce).await;
    sub.disconnect().await;

    let mut publisher = connect(options(&broker, "off-pub")).await;
    let sent: Vec<String> = (1..=5).map(|i| format!("m{i}")).collect();
    for m in &sent {
        publisher.publish("off/t", QoS::AtLeastOnce, false, m.as_bytes()).await;
    }

    let mut sub = connect(persistent(&broker, "offline")).await;
    assert!(sub.session_present());
    let mut got = Vec::new();
    for _ in 0..sent.len() {
        let p = sub.next_publish().await;
        assert_eq!(p.topic, "off/t");
        assert_eq!(p.qos, QoS::AtLeastOnce);
        got.push(p);
    }
    assert_eq!(bodies(&got), sent, "delivered in publish order");
    sub.assert_no_publish().await;

    // The resumed subscription keeps working without subscribing again.
    publisher.publish("off/t", QoS::AtLeastOnce, false, b"live").await;
    assert_eq!(&sub.next_publish().await.payload[..], b"live");
}

/// A persistent session, its subscriptions with their QoS, and the messages
/// queued for it survive a broker restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_session_survives_restart() {
    let mut broker = start().await;
    let mut sub = connect(persistent(&broker, "durable-sub")).await;
    sub.subscribe_ok("rs/1", QoS::AtLeastOnce).await;
    sub.subscribe_ok("rs/2", QoS::ExactlyOnce).await;
    sub.disconnect().await;
    let mut publisher = connect(options(&broker, "rs-pub")).await;
    let sent: Vec<String> = (1..=3).map(|i| format!("m{i}")).collect();
    for m in &sent {
        publisher.publish("rs/1", QoS::AtLeastOnce, false, m.as_bytes()).await;
    }
    publisher.disconnect().await;

    broker.restart().await;

    let mut sub = connect(persistent(&broker, "durable-sub")).await;
    assert!(sub.session_present(), "the session survived the restart");
    let mut got = Vec::new();
    for _ in 0..sent.len() {
        let p = sub.next_publish().await;
        assert_eq!((p.topic.as_str(), p.qos), ("rs/1", QoS::AtLeastOnce));
        got.push(p);
    }
    assert_eq!(bodies(&got), sent, "queued messages delivered in order");
    sub.assert_no_publish().await;

    // The subscriptions, with their granted QoS, came back from the bindings.
    let mut publisher = connect(options(&broker, "rs-pub")).await;
    publisher.publish("rs/2", QoS::ExactlyOnce, false, b"two").await;
    let p = sub.next_publish().await;
    assert_eq!((p.topic.as_str(), &p.payload[..]), ("rs/2", &b"two"[..]));
    assert_eq!(p.qos, QoS::ExactlyOnce, "the QoS 2 subscription kept its QoS");
    publisher.publish("rs/1", QoS::ExactlyOnce, false, b"one").await;
    let p = sub.next_publish().await;
    assert_eq!((p.topic.as_str(), &p.payload[..]), ("rs/1", &b"one"[..]));
    assert_eq!(p.qos, QoS::AtLeastOnce, "the QoS 1 subscription kept its QoS");
}

/// A QoS 1 delivery that was not acknowledged before the connection dropped
/// is sent again, with DUP set, when the persistent session resumes; once
/// acknowledged it is not sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_delivery_is_redelivered_with_dup() {
    let broker = start().await;
    let mut opts = persistent(&broker, "forgetful");
    opts.set_manual_acks(true);
    let mut sub = connect(opts.clone()).await;
    sub.subscribe_ok("dup/t", QoS::AtLeastOnce).await;
    let mut publisher = connect(options(&broker, "dup-pub")).await;
    publisher.publish("dup/t", QoS::AtLeastOnce, false, b"again").await;
    let first = sub.next_publish().await;
    assert_eq!(&first.payload[..], b"again");
    assert!(!first.dup, "a first delivery has no DUP");
    sub.kill().await;

    let mut sub = connect(opts.clone()).await;
    assert!(sub.session_present());
    let again = sub.next_publish().await;
    assert_eq!((again.topic.as_str(), &again.payload[..]), ("dup/t", &b"again"[..]));
    assert_eq!(again.qos, QoS::AtLeastOnce);
    assert!(again.dup, "a redelivery has DUP set");
    sub.ack(&again).await;
    sub.assert_no_publish().await;
    sub.disconnect().await;

    let mut sub = connect(opts).await;
    sub.assert_no_publish().await;
}

// ---------------------------------------------------------------------------
// Retained messages
// ---------------------------------------------------------------------------

/// A retained message goes to existing subscribers with retain unset and to
/// later subscribers with retain set; an empty retained payload clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_message_reaches_later_subscribers() {
    let broker = start().await;
    let mut early = connect(options(&broker, "early")).await;
    early.subscribe_ok("ret/#", QoS::AtLeastOnce).await;
    let mut publisher = connect(options(&broker, "ret-pub")).await;
    publisher.publish("ret/a", QoS::AtLeastOnce, true, b"kept").await;

    let p = early.next_publish().await;
    assert_eq!((p.topic.as_str(), &p.payload[..]), ("ret/a", &b"kept"[..]));
    assert!(!p.retain, "a live delivery has retain unset");

    let mut late = connect(options(&broker, "late")).await;
    late.subscribe_ok("ret/+", QoS::AtLeastOnce).await;
    let p = late.next_publish().await;
    assert_eq!((p.topic.as_str(), &p.payload[..]), ("ret/a", &b"kept"[..]));
    assert!(p.retain, "the stored message has retain set");
    assert_eq!(p.qos, QoS::AtLeastOnce);
    late.assert_no_publish().await;

    // A newer retained message replaces the old one.
    publisher.publish("ret/a", QoS::AtLeastOnce, true, b"newer").await;
    let mut later = connect(options(&broker, "later")).await;
    later.subscribe_ok("ret/a", QoS::AtLeastOnce).await;
    let p = later.next_publish().await;
    assert_eq!(&p.payload[..], b"newer");
    assert!(p.retain);
    later.assert_no_publish().await;

    // An empty retained payload clears the topic.
    publisher.publish("ret/a", QoS::AtLeastOnce, true, b"").await;
    let mut last = connect(options(&broker, "last")).await;
    last.subscribe_ok("ret/#", QoS::AtLeastOnce).await;
    last.assert_no_publish().await;
}

/// Retained messages are kept across a broker restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_message_survives_restart() {
    let mut broker = start().await;
    let mut publisher = connect(options(&broker, "ret-pub")).await;
    publisher.publish("keep/me", QoS::AtLeastOnce, true, b"stored").await;
    publisher.publish("keep/gone", QoS::AtLeastOnce, true, b"dropped").await;
    publisher.publish("keep/gone", QoS::AtLeastOnce, true, b"").await;
    publisher.disconnect().await;

    broker.restart().await;

    let mut sub = connect(options(&broker, "ret-sub")).await;
    sub.subscribe_ok("keep/#", QoS::AtLeastOnce).await;
    let p = sub.next_publish().await;
    assert_eq!((p.topic.as_str(), &p.payload[..]), ("keep/me", &b"stored"[..]));
    assert!(p.retain);
    sub.assert_no_publish().await;
}

// ---------------------------------------------------------------------------
// Wills
// ---------------------------------------------------------------------------

/// The will is published when the client's connection drops without
/// DISCONNECT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn will_is_published_when_connection_drops() {
    let broker = start().await;
    let mut watcher = connect(options(&broker, "watcher")).await;
    watcher.subscribe_ok("wills/#", QoS::AtLeastOnce).await;
    let mut opts = options(&broker, "mortal");
    opts.set_last_will(LastWill::new("wills/mortal", "gone", QoS::AtLeastOnce, false));
    let client = connect(opts).await;
    client.kill().await;
    let p = watcher.next_publish().await;
    assert_eq!((p.topic.as_str(), &p.payload[..]), ("wills/mortal", &b"gone"[..]));
    assert_eq!(p.qos, QoS::AtLeastOnce);
    watcher.assert_no_publish().await;
}

/// The will is not published after a clean DISCONNECT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn will_is_not_published_after_disconnect() {
    let broker = start().await;
    let mut watcher = connect(options(&broker, "watcher")).await;
    watcher.subscribe_ok("wills/#", QoS::AtLeastOnce).await;
    let mut opts = options(&broker, "polite");
    opts.set_last_will(LastWill::new("wills/polite", "gone", QoS::AtLeastOnce, false));
    let client = connect(opts).await;
    client.disconnect().await;
    watcher.assert_no_publish().await;
    // The watcher does hear other traffic on the topic.
    let mut other = connect(options(&broker, "other")).await;
    other.publish("wills/other", QoS::AtLeastOnce, false, b"hello").await;
    assert_eq!(&watcher.next_publish().await.payload[..], b"hello");
}

// ---------------------------------------------------------------------------
// Takeover and keep alive
// ---------------------------------------------------------------------------

/// A second connection with the same client id closes the first and works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_connection_takes_client_id_over() {
    let broker = start().await;
    let mut first = connect(options(&broker, "twin")).await;
    first.subscribe_ok("twin/t", QoS::AtLeastOnce).await;
    let mut second = connect(options(&broker, "twin")).await;
    first.wait_closed().await;

    second.subscribe_ok("twin/t", QoS::AtLeastOnce).await;
    let mut publisher = connect(options(&broker, "twin-pub")).await;
    publisher
        .publish("twin/t", QoS::AtLeastOnce, false, b"for the second")
        .await;
    let p = second.next_publish().await;
    assert_eq!(&p.payload[..], b"for the second");
    second.assert_no_publish().await;
    let twins = || {
        broker
            .server()
            .broker
            .connections
            .list()
            .iter()
            .filter(|c| {
                c.info
                    .client_properties
                    .unpack()
                    .get("client_id")
                    .and_then(FieldValue::as_str)
                    .is_some_and(|id| id == "twin")
            })
            .count()
    };
    eventually("only the second connection to remain", || {
        let n = twins();
        async move { n == 1 }
    })
    .await;
}

/// Client ids are per vhost: the same id in another vhost takes nothing over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_is_per_vhost() {
    let broker = start().await;
    broker.server().broker.create_vhost("other-vh").expect("vhost created");
    add_user(&broker, "other-user", "other-vh");
    let mut here = connect(options(&broker, "same-id")).await;
    let mut opts = options(&broker, "same-id");
    opts.set_credentials("other-vh:other-user", "pw");
    let mut there = connect(opts).await;

    here.subscribe_ok("pv/t", QoS::AtLeastOnce).await;
    there.subscribe_ok("pv/t", QoS::AtLeastOnce).await;
    here.publish("pv/t", QoS::AtLeastOnce, false, b"here").await;
    there.publish("pv/t", QoS::AtLeastOnce, false, b"there").await;
    assert_eq!(&here.next_publish().await.payload[..], b"here");
    assert_eq!(&there.next_publish().await.payload[..], b"there");
    here.assert_no_publish().await;
    there.assert_no_publish().await;
}

/// A client that sends nothing after CONNACK is disconnected after 1.5 times
/// its keep alive, and its will is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_client_is_dropped_after_keep_alive() {
    let broker = start().await;
    let mut watcher = connect(options(&broker, "ka-watcher")).await;
    watcher.subscribe_ok("ka/#", QoS::AtLeastOnce).await;

    let connect = connect_packet("sleepy", true, 1, Some(("ka/sleepy", b"timed out", 1, false)));
    let mut raw = RawMqtt::open(&broker, &connect).await;
    let connected = tokio::time::Instant::now();
    raw.expect_eof().await;
    assert!(
        connected.elapsed() >= Duration::from_secs(1),
        "closed after {:?}, before the keep alive ran out",
        connected.elapsed()
    );
    let p = watcher.next_publish().await;
    assert_eq!((p.topic.as_str(), &p.payload[..]), ("ka/sleepy", &b"timed out"[..]));
}

// ---------------------------------------------------------------------------
// Session queues
// ---------------------------------------------------------------------------

/// A clean session is an exclusive transient queue that goes away at
/// disconnect; a persistent session is a durable queue whose bindings to
/// `amq.topic` are its subscriptions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_queue_exists_while_connected() {
    let broker = start().await;
    let vhost = broker.server().broker.vhost("/").expect("vhost /");

    let mut clean = connect(options(&broker, "visible")).await;
    clean.subscribe_ok("vis/+/x", QoS::AtLeastOnce).await;
    let name = session_queue("visible");
    let q = vhost.queue(&name).expect("clean session queue exists");
    assert!(!q.durable, "a clean session's queue is transient");
    assert!(q.exclusive_owner.is_some(), "a clean session's queue is exclusive");
    assert_eq!(session_bindings(&broker, &name), vec![("vis.*.x".to_string(), Some(1))]);
    drop(q);
    clean.disconnect().await;
    eventually("the clean session's queue to be deleted", || {
        let gone = vhost.queue(&name).is_none();
        async move { gone }
    })
    .await;

    let mut kept = connect(persistent(&broker, "kept")).await;
    kept.subscribe_ok("kept/#", QoS::ExactlyOnce).await;
    kept.subscribe_ok("kept/+/y", QoS::AtMostOnce).await;
    let name = session_queue("kept");
    let q = vhost.queue(&name).expect("persistent session queue exists");
    assert!(q.durable, "a persistent session's queue is durable");
    assert!(q.exclusive_owner.is_none());
    assert_eq!(
        session_bindings(&broker, &name),
        vec![("kept.#".to_string(), Some(2)), ("kept.*.y".to_string(), Some(0))]
    );
    kept.disconnect().await;
    assert!(vhost.queue(&name).is_some(), "the persistent session's queue stays");
    assert_eq!(session_bindings(&broker, &name).len(), 2, "and so do its bindings");

    // AMQP sees the same queue.
    let conn = broker.connect().await;
    assert!(queue_exists(&conn, &name).await);
}

// ---------------------------------------------------------------------------
// QoS 2 from a client
// ---------------------------------------------------------------------------

/// A QoS 2 PUBLISH sent again with DUP before PUBREL is routed only once; after
/// PUBREL the packet id is free for a new message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos2_retransmission_is_delivered_once() {
    let broker = start().await;
    let mut sub = connect(options(&broker, "eo-sub")).await;
    sub.subscribe_ok("eo/t", QoS::AtLeastOnce).await;

    let mut raw = RawMqtt::open(&broker, &connect_packet("eo-pub", true, 30, None)).await;
    raw.send(&publish_packet("eo/t", 2, false, false, 7, b"exactly once"))
        .await;
    raw.expect_ack(PUBREC, 7).await;
    raw.send(&publish_packet("eo/t", 2, true, false, 7, b"exactly once"))
        .await;
    raw.expect_ack(PUBREC, 7).await;
    raw.send(&pubrel_packet(7)).await;
    raw.expect_ack(PUBCOMP, 7).await;

    let p = sub.next_publish().await;
    assert_eq!(&p.payload[..], b"exactly once");
    sub.assert_no_publish().await;

    // The exchange is complete: the same packet id carries a new message.
    raw.send(&publish_packet("eo/t", 2, false, false, 7, b"next")).await;
    raw.expect_ack(PUBREC, 7).await;
    raw.send(&pubrel_packet(7)).await;
    raw.expect_ack(PUBCOMP, 7).await;
    assert_eq!(&sub.next_publish().await.payload[..], b"next");
    sub.assert_no_publish().await;
}

/// A QoS 2 PUBLISH whose PUBREC was received before the connection dropped
/// is routed only once when the client sends it again in the resumed
/// persistent session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos2_retransmission_after_reconnect_is_delivered_once() {
    let broker = start().await;
    let mut sub = connect(options(&broker, "eo2-sub")).await;
    sub.subscribe_ok("eo2/t", QoS::AtLeastOnce).await;

    let connect = connect_packet("eo2-pub", false, 30, None);
    let mut raw = RawMqtt::open(&broker, &connect).await;
    raw.send(&publish_packet("eo2/t", 2, false, false, 9, b"survivor"))
        .await;
    raw.expect_ack(PUBREC, 9).await;
    drop(raw);
    let p = sub.next_publish().await;
    assert_eq!(&p.payload[..], b"survivor");

    let mut raw = RawMqtt::tcp(&broker).await;
    raw.send(&connect).await;
    let ack = raw.read_packet().await.expect("CONNACK");
    assert_eq!((ack.kind(), ack.body.clone()), (CONNACK, vec![1, 0]), "session present");
    raw.send(&publish_packet("eo2/t", 2, true, false, 9, b"survivor")).await;
    raw.expect_ack(PUBREC, 9).await;
    raw.send(&pubrel_packet(9)).await;
    raw.expect_ack(PUBCOMP, 9).await;
    sub.assert_no_publish().await;
}
