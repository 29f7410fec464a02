//! MQTT 3.1.1 at the byte level: the broker closes the network connection on
//! every protocol violation (MQTT has no error packet), answers the CONNECT
//! refusals it must answer, and a misbehaving client harms nobody else: a
//! client connected meanwhile keeps working and a message waiting in a
//! persistent session is still delivered.

use std::net::SocketAddr;

use crate::common::mqtt_raw::*;
use crate::common::*;

fn mqtt(broker: &TestBroker) -> SocketAddr {
    broker.server().mqtt_addr()
}

/// The well-behaved clients around a misbehaving one: a persistent session
/// holding a queued QoS 1 message while its client is away, and a client
/// connected throughout.
struct Bystanders {
    addr: SocketAddr,
    keeper_id: String,
    bystander: MqttRaw,
}

impl Bystanders {
    async fn new(broker: &TestBroker) -> Bystanders {
        let addr = mqtt(broker);
        let keeper_id = uniq("keeper");
        let (mut keeper, _) = MqttRaw::connect(addr, &keeper_id, false).await;
        assert_eq!(keeper.subscribe("keep/#", 1).await, 1, "keeper SUBACK");
        keeper.disconnect().await;
        let (mut bystander, _) = MqttRaw::connect(addr, &uniq("bystander"), true).await;
        assert_eq!(bystander.subscribe("bystander/#", 1).await, 1, "bystander SUBACK");
        bystander.publish("keep/queued", 1, false, b"queued before").await;
        Bystanders {
            addr,
            keeper_id,
            bystander,
        }
    }

    /// The bystander's publish-subscribe round trip still works (and nothing
    /// the misbehaving client sent reached it first), and the persistent
    /// session gets its queued message.
    async fn verify(mut self) {
        self.bystander.publish("bystander/echo", 1, false, b"still works").await;
        let p = self.bystander.next_publish().await;
        assert_eq!(
            (p.topic.as_str(), p.payload.as_slice(), p.qos),
            ("bystander/echo", &b"still works"[..], 1),
            "the bystander's first message after the violation"
        );
        self.bystander.ping().await;
        let (mut keeper, present) = MqttRaw::connect(self.addr, &self.keeper_id, false).await;
        assert!(present, "the persistent session is resumed");
        let p = keeper.next_publish().await;
        assert_eq!(
            (p.topic.as_str(), p.payload.as_slice(), p.qos),
            ("keep/queued", &b"queued before"[..], 1),
            "the message queued in the persistent session"
        );
        keeper.disconnect().await;
    }
}

/// A client that connects properly and then sends `bad` is disconnected
/// without an answer, and the bystanders are unharmed.
async fn violation_after_connect(broker: &TestBroker, bad: &[u8]) {
    let others = Bystanders::new(broker).await;
    let (mut client, _) = MqttRaw::connect(mqtt(broker), &uniq("bad"), true).await;
    client.send(bad).await;
    client.expect_silent_close().await;
    others.verify().await;
}

/// A client whose first bytes are `bad` is disconnected without an answer,
/// and the bystanders are unharmed.
async fn violation_at_connect(broker: &TestBroker, bad: &[u8]) {
    let others = Bystanders::new(broker).await;
    let mut client = MqttRaw::tcp(mqtt(broker)).await;
    client.send(bad).await;
    client.expect_silent_close().await;
    others.verify().await;
}

/// A client whose CONNECT is `connect` gets CONNACK with return code `rc` and
/// is disconnected, and the bystanders are unharmed.
async fn refused_at_connect(broker: &TestBroker, connect: &[u8], rc: u8) {
    let others = Bystanders::new(broker).await;
    let mut client = MqttRaw::tcp(mqtt(broker)).await;
    client.send(connect).await;
    let rest = client.expect_eof().await;
    assert_eq!(
        rest,
        [CONNACK << 4, 2, 0, rc],
        "expected CONNACK with return code {rc} and session present 0, then the close"
    );
    others.verify().await;
}

/// CONNECT flags of a clean session with nothing else.
const CLEAN: u8 = 0b0000_0010;

/// A PUBLISH or PINGREQ before CONNECT closes the connection [MQTT-3.1.0-1].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_packet_must_be_connect() {
    let broker = start().await;
    // A PUBLISH before CONNECT is not routed either: the bystander would see it
    // before its own round trip.
    violation_at_connect(&broker, &publish_packet(b"bystander/early", 0, false, 0, b"early")).await;
    let others = Bystanders::new(&broker).await;
    let mut client = MqttRaw::tcp(mqtt(&broker)).await;
    client.send(&[PINGREQ << 4, 0]).await;
    client.expect_silent_close().await;
    others.verify().await;
}

/// A second CONNECT closes the connection [MQTT-3.1.0-2].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_connect_closes() {
    let broker = start().await;
    violation_after_connect(&broker, &connect_packet(&uniq("again"), true, 0, None)).await;
}

/// A protocol name other than "MQTT" (or "MQIsdp") closes the connection [MQTT-3.1.2-1].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_protocol_name_closes() {
    let broker = start().await;
    let payload = mqtt_str(uniq("name").as_bytes());
    violation_at_connect(&broker, &connect_raw(b"MQTX", 4, CLEAN, 0, &payload)).await;
    // Case matters.
    violation_at_connect(&broker, &connect_raw(b"mqtt", 4, CLEAN, 0, &payload)).await;
}

/// A CONNECT of a protocol level the broker does not speak (6, after MQTT 5)
/// gets CONNACK return code 1 and the connection is closed [MQTT-3.1.2-2].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_protocol_level_is_refused_with_return_code_1() {
    let broker = start().await;
    let mut payload = vec![0];
    payload.extend(mqtt_str(uniq("v6").as_bytes()));
    refused_at_connect(&broker, &connect_raw(b"MQTT", 6, CLEAN, 0, &payload), 1).await;
}

/// An MQTT 5 CONNECT (level 5, an empty property block) is accepted with an
/// MQTT 5 CONNACK: flags, reason code 0, properties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_level_5_is_accepted() {
    let broker = start().await;
    let mut payload = vec![0];
    payload.extend(mqtt_str(uniq("v5").as_bytes()));
    let mut c = MqttRaw::tcp(mqtt(&broker)).await;
    c.send(&connect_raw(b"MQTT", 5, CLEAN, 0, &payload)).await;
    let ack = c.read_packet().await.expect("CONNACK");
    assert_eq!(ack.kind(), 2, "CONNACK");
    assert_eq!(&ack.body[..2], &[0, 0], "no session present, reason success");
    assert!(ack.body.len() > 2, "an MQTT 5 CONNACK carries a property length");
}

/// CONNECT with the reserved flag set closes the connection [MQTT-3.1.2-3].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_connect_flag_closes() {
    let broker = start().await;
    let payload = mqtt_str(uniq("reserved").as_bytes());
    violation_at_connect(&broker, &connect_raw(b"MQTT", 4, CLEAN | 1, 0, &payload)).await;
}

/// SUBSCRIBE whose fixed header flags are not 0b0010 closes the connection [MQTT-3.8.1-1].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_with_wrong_fixed_header_flags_closes() {
    let broker = start().await;
    for first in [0x80, 0x83, 0x8A] {
        let bad = subscribe_packet(first, 1, &[(b"bystander/#", 1)]);
        violation_after_connect(&broker, &bad).await;
    }
}

/// PUBLISH with both QoS bits set closes the connection [MQTT-3.3.1-4].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_with_qos_3_closes() {
    let broker = start().await;
    let bad = publish_packet(b"bystander/qos3", 3, false, 1, b"qos 3");
    assert_eq!(bad[0], 0x36);
    violation_after_connect(&broker, &bad).await;
}

/// PUBLISH to a topic name with a wildcard closes the connection [MQTT-3.3.2-2].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_to_wildcard_topic_closes() {
    let broker = start().await;
    for topic in [&b"bystander/+"[..], b"bystander/#", b"bystander/a+b"] {
        violation_after_connect(&broker, &publish_packet(topic, 1, false, 1, b"wild")).await;
    }
}

/// SUBSCRIBE without any topic filter closes the connection [MQTT-3.8.3-3].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_without_filters_closes() {
    let broker = start().await;
    violation_after_connect(&broker, &subscribe_packet(0x82, 1, &[])).await;
}

/// SUBSCRIBE to `a/#/b` closes the connection [MQTT-4.7.1-2].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_with_misplaced_multi_level_wildcard_closes() {
    let broker = start().await;
    violation_after_connect(&broker, &subscribe_packet(0x82, 1, &[(b"a/#/b", 1)])).await;
    // One bad filter among good ones spoils the whole packet: no SUBACK at all.
    let bad = subscribe_packet(0x82, 2, &[(b"bystander/#", 0), (b"a/#/b", 1)]);
    violation_after_connect(&broker, &bad).await;
}

/// A topic that is not well-formed UTF-8 closes the connection [MQTT-1.5.3-1].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_in_topic_closes() {
    let broker = start().await;
    violation_after_connect(&broker, &publish_packet(b"bystander/\xff\xfe", 0, false, 0, b"bad")).await;
    // An encoded surrogate (U+D800) is ill-formed UTF-8 too.
    violation_after_connect(&broker, &publish_packet(b"bystander/\xed\xa0\x80", 1, false, 1, b"bad")).await;
}

/// A remaining length whose fifth byte is still needed closes the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remaining_length_over_four_bytes_closes() {
    let broker = start().await;
    violation_after_connect(&broker, &[0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]).await;
    violation_at_connect(&broker, &[0x10, 0x80, 0x80, 0x80, 0x80, 0x01]).await;
}

/// A packet larger than `max_packet_size` closes the connection; a smaller one passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packet_over_max_packet_size_closes() {
    let broker = start_with(|c| c.mqtt.max_packet_size = 1024).await;
    let others = Bystanders::new(&broker).await;
    let (mut client, _) = MqttRaw::connect(mqtt(&broker), &uniq("big"), true).await;
    // Within the limit: accepted.
    client.publish("other/small", 1, false, &[b's'; 500]).await;
    client
        .send(&publish_packet(b"bystander/big", 1, false, 7, &[b'b'; 2000]))
        .await;
    client.expect_silent_close().await;
    others.verify().await;
    // A CONNECT over the limit is refused the same way.
    let others = Bystanders::new(&broker).await;
    let mut client = MqttRaw::tcp(mqtt(&broker)).await;
    client.send(&connect_packet(&"c".repeat(1100), true, 0, None)).await;
    client.expect_silent_close().await;
    others.verify().await;
}

/// CONNACK, which only a server sends, closes the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connack_from_client_closes() {
    let broker = start().await;
    violation_after_connect(&broker, &[CONNACK << 4, 2, 0, 0]).await;
}

/// SUBACK, which only a server sends, closes the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suback_from_client_closes() {
    let broker = start().await;
    violation_after_connect(&broker, &[SUBACK << 4, 3, 0, 1, 0]).await;
}

/// UNSUBACK, which only a server sends, closes the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsuback_from_client_closes() {
    let broker = start().await;
    violation_after_connect(&broker, &[UNSUBACK << 4, 2, 0, 1]).await;
}

/// PINGRESP, which only a server sends, closes the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pingresp_from_client_closes() {
    let broker = start().await;
    violation_after_connect(&broker, &[PINGRESP << 4, 0]).await;
}

/// An empty client id with clean session 0 gets CONNACK return code 2 [MQTT-3.1.3-8].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_client_id_with_persistent_session_is_refused_with_return_code_2() {
    let broker = start().await;
    refused_at_connect(&broker, &connect_raw(b"MQTT", 4, 0, 0, &mqtt_str(b"")), 2).await;
}

/// An empty client id with clean session 1 is accepted, each such client with a session of its own [MQTT-3.1.3-6].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_client_id_with_clean_session_is_accepted() {
    let broker = start().await;
    let (mut a, present) = MqttRaw::connect(mqtt(&broker), "", true).await;
    assert!(!present, "a clean session is never present");
    let (mut b, _) = MqttRaw::connect(mqtt(&broker), "", true).await;
    // Each gets a session of its own: both are subscribed and both receive.
    assert_eq!(a.subscribe("anon/t", 1).await, 1);
    assert_eq!(b.subscribe("anon/t", 1).await, 1);
    a.publish("anon/t", 1, false, b"to both").await;
    for c in [&mut a, &mut b] {
        let p = c.next_publish().await;
        assert_eq!((p.topic.as_str(), p.payload.as_slice()), ("anon/t", &b"to both"[..]));
    }
    a.disconnect().await;
    b.ping().await;
    b.disconnect().await;
}

/// PINGREQ is answered with PINGRESP [MQTT-3.12.4-1].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pingreq_gets_pingresp() {
    let broker = start().await;
    let (mut c, _) = MqttRaw::connect(mqtt(&broker), &uniq("ping"), true).await;
    for _ in 0..3 {
        c.ping().await;
    }
    // Two in one write: two answers.
    c.send(&[PINGREQ << 4, 0, PINGREQ << 4, 0]).await;
    for _ in 0..2 {
        let p = c.read_packet().await.expect("PINGRESP");
        assert_eq!((p.first, p.body.len()), (PINGRESP << 4, 0));
    }
    c.disconnect().await;
}

/// An MQTT 3.1 client (protocol name "MQIsdp", level 3) connects and works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_client_connects() {
    let broker = start().await;
    let mut c = MqttRaw::tcp(mqtt(&broker)).await;
    let payload = mqtt_str(b"mqisdp-client");
    c.send(&connect_raw(b"MQIsdp", 3, CLEAN, 0, &payload)).await;
    assert_eq!(c.expect_connack().await, (false, 0), "CONNACK of an MQTT 3.1 client");
    assert_eq!(c.subscribe("v31/t", 2).await, 2);
    c.publish("v31/t", 2, false, b"three point one").await;
    let p = c.next_publish().await;
    assert_eq!(
        (p.topic.as_str(), p.payload.as_slice(), p.qos),
        ("v31/t", &b"three point one"[..], 2)
    );
    c.ping().await;
    c.disconnect().await;
}

/// PUBACKs that arrive in one write settle together (the broker removes them
/// from the queue once per read): none of the acknowledged messages comes
/// back when the persistent session resumes, the one left unacknowledged
/// does, and a PUBACK for an unknown packet id among them changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubacks_sent_in_one_write_settle_together() {
    let broker = start().await;
    let addr = mqtt(&broker);
    let client_id = uniq("batch-acker");
    let (mut sub, _) = MqttRaw::connect(addr, &client_id, false).await;
    assert_eq!(sub.subscribe("batch/t", 1).await, 1, "SUBACK");
    let (mut publisher, _) = MqttRaw::connect(addr, &uniq("batch-pub"), true).await;
    for i in 0..20 {
        publisher.publish("batch/t", 1, false, format!("m{i}").as_bytes()).await;
    }
    // Read without acknowledging: the helper's next_publish would ack each.
    let mut deliveries = Vec::new();
    while deliveries.len() < 20 {
        let p = sub.read_packet().await.expect("a PUBLISH");
        deliveries.push(RawPublish::parse(&p));
    }
    let payloads: Vec<String> = deliveries
        .iter()
        .map(|d| String::from_utf8_lossy(&d.payload).into_owned())
        .collect();
    assert_eq!(payloads, (0..20).map(|i| format!("m{i}")).collect::<Vec<_>>());
    let mut acks = Vec::new();
    for (i, d) in deliveries[..19].iter().enumerate() {
        if i == 10 {
            acks.extend(id_packet(PUBACK << 4, 60_000));
        }
        acks.extend(id_packet(PUBACK << 4, d.packet_id));
    }
    acks.extend([PINGREQ << 4, 0]);
    sub.send(&acks).await;
    let pong = sub.read_packet().await.expect("PINGRESP");
    assert_eq!(pong.kind(), PINGRESP, "got {pong:?}");
    // The PINGRESP follows the batch: its acks are in the queue by now.
    let queue = broker
        .server()
        .broker
        .vhost("/")
        .and_then(|v| v.queue(&format!("mqtt-subscription-{client_id}qos1")))
        .expect("the session's queue");
    let stats = queue.stats();
    assert_eq!((stats.ready, stats.unacked), (0, 1), "only m19 left, unacknowledged");
    sub.disconnect().await;

    let (mut sub, present) = MqttRaw::connect(addr, &client_id, false).await;
    assert!(present, "the session was kept");
    let again = sub.next_publish().await;
    assert_eq!((again.payload.as_slice(), again.dup), (&b"m19"[..], true));
    sub.assert_no_publish().await;
}
