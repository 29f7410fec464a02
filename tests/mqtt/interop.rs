//! The scenarios of the Eclipse Paho MQTT interoperability tests, played with
//! rumqttc against the broker: basic publish and subscribe, retained
//! messages, wills, zero-length client ids, offline queueing, overlapping
//! subscriptions, keep alive, redelivery on reconnect, subscribe failure,
//! `$` topics and unsubscribe.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::common::mqtt_raw::{MqttRaw, RawWill, connect_packet};
use crate::common::*;
use lavinmq::core::user::{Permissions, SHA256, User, hash_password};
use rumqttc::{
    AsyncClient, ConnAck, ConnectReturnCode, ConnectionError, Event, EventLoop, Incoming, LastWill, MqttOptions,
    Publish, QoS, SubscribeFilter, SubscribeReasonCode,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Options of a clean-session client `id` connecting anonymously.
fn opts(broker: &TestBroker, id: &str) -> MqttOptions {
    let addr = broker.server().mqtt_addr();
    let mut o = MqttOptions::new(id, addr.ip().to_string(), addr.port());
    o.set_keep_alive(Duration::from_secs(30));
    o
}

/// Options of a client `id` with a persistent session.
fn persistent(broker: &TestBroker, id: &str) -> MqttOptions {
    let mut o = opts(broker, id);
    o.set_clean_session(false);
    o
}

/// A rumqttc client whose event loop runs in its own task, forwarding every
/// incoming packet (and the error that ends it) to a channel.
struct Client {
    client: AsyncClient,
    rx: mpsc::UnboundedReceiver<Result<Incoming, ConnectionError>>,
    /// Packets read but not yet asked for, in arrival order.
    pending: VecDeque<Incoming>,
    task: JoinHandle<()>,
}

fn drive(mut eventloop: EventLoop, tx: mpsc::UnboundedSender<Result<Incoming, ConnectionError>>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(p)) => {
                    if tx.send(Ok(p)).is_err() {
                        return;
                    }
                }
                Ok(Event::Outgoing(_)) => {}
                Err(e) => {
                    // No reconnect: the test decides when to connect again.
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
    })
}

/// Connects; the error is the one the event loop reported instead of CONNACK.
async fn try_open(o: MqttOptions) -> Result<(Client, ConnAck), ConnectionError> {
    let (client, eventloop) = AsyncClient::new(o, 100);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let task = drive(eventloop, tx);
    let first = within("CONNACK", rx.recv()).await.expect("event loop task ended");
    match first? {
        Incoming::ConnAck(ack) => Ok((
            Client {
                client,
                rx,
                pending: VecDeque::new(),
                task,
            },
            ack,
        )),
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

/// Connects, failing the test if the broker refuses.
async fn open(o: MqttOptions) -> (Client, ConnAck) {
    let id = o.client_id();
    match try_open(o).await {
        Ok(c) => c,
        Err(e) => panic!("client {id:?} could not connect: {e}"),
    }
}

impl Client {
    /// Reads the next packet off the channel into `pending`.
    async fn read(&mut self, what: &str) {
        match within(what, self.rx.recv()).await {
            Some(Ok(p)) => self.pending.push_back(p),
            Some(Err(e)) => panic!("connection failed while waiting for {what}: {e}"),
            None => panic!("event loop ended while waiting for {what}"),
        }
    }

    /// The first packet `f` maps to something, waiting for it if need be;
    /// other packets stay pending.
    async fn expect<T>(&mut self, what: &str, mut f: impl FnMut(&Incoming) -> Option<T>) -> T {
        let mut seen = 0;
        loop {
            while seen < self.pending.len() {
                if let Some(v) = f(&self.pending[seen]) {
                    self.pending.remove(seen);
                    return v;
                }
                seen += 1;
            }
            self.read(what).await;
        }
    }

    /// The next PUBLISH delivered to this client.
    async fn next_publish(&mut self) -> Publish {
        self.expect("a PUBLISH", |p| match p {
            Incoming::Publish(p) => Some(p.clone()),
            _ => None,
        })
        .await
    }

    /// Asserts that no PUBLISH arrives for [`QUIET`].
    async fn assert_no_publish(&mut self) {
        if let Some(p) = self.pending.iter().find(|p| matches!(p, Incoming::Publish(_))) {
            panic!("unexpected {p:?}");
        }
        let deadline = tokio::time::Instant::now() + QUIET;
        while let Ok(item) = tokio::time::timeout_at(deadline, self.rx.recv()).await {
            match item {
                Some(Ok(Incoming::Publish(p))) => panic!("unexpected {p:?}"),
                Some(Ok(p)) => self.pending.push_back(p),
                Some(Err(e)) => panic!("connection failed: {e}"),
                None => panic!("event loop ended"),
            }
        }
    }

    /// Subscribes to several filters in one SUBSCRIBE; returns SUBACK's codes.
    async fn subscribe_many(&mut self, filters: &[(&str, QoS)]) -> Vec<SubscribeReasonCode> {
        let filters: Vec<SubscribeFilter> = filters
            .iter()
            .map(|(f, q)| SubscribeFilter::new((*f).to_string(), *q))
            .collect();
        within("subscribe request", self.client.subscribe_many(filters))
            .await
            .expect("subscribe request");
        self.expect("SUBACK", |p| match p {
            Incoming::SubAck(s) => Some(s.return_codes.clone()),
            _ => None,
        })
        .await
    }

    /// Subscribes to one filter; returns SUBACK's code.
    async fn subscribe(&mut self, filter: &str, qos: QoS) -> SubscribeReasonCode {
        let codes = self.subscribe_many(&[(filter, qos)]).await;
        assert_eq!(codes.len(), 1, "SUBACK codes for {filter}: {codes:?}");
        codes[0]
    }

    /// Subscribes and asserts the broker grants the requested QoS.
    async fn subscribe_ok(&mut self, filter: &str, qos: QoS) {
        let code = self.subscribe(filter, qos).await;
        assert_eq!(code, SubscribeReasonCode::Success(qos), "SUBACK for {filter}");
    }

    /// Unsubscribes and waits for UNSUBACK.
    async fn unsubscribe(&mut self, filter: &str) {
        within("unsubscribe request", self.client.unsubscribe(filter))
            .await
            .expect("unsubscribe request");
        self.expect("UNSUBACK", |p| matches!(p, Incoming::UnsubAck(_)).then_some(()))
            .await;
    }

    /// Publishes and, for QoS 1 and 2, waits until the broker has taken the
    /// message (PUBACK, PUBCOMP).
    async fn publish(&mut self, topic: &str, qos: QoS, retain: bool, payload: &[u8]) {
        within(
            "publish request",
            self.client.publish(topic, qos, retain, payload.to_vec()),
        )
        .await
        .expect("publish request");
        match qos {
            QoS::AtMostOnce => {}
            QoS::AtLeastOnce => {
                self.expect("PUBACK", |p| matches!(p, Incoming::PubAck(_)).then_some(()))
                    .await
            }
            QoS::ExactlyOnce => {
                self.expect("PUBCOMP", |p| matches!(p, Incoming::PubComp(_)).then_some(()))
                    .await
            }
        }
    }

    /// Sends DISCONNECT and waits until the broker has closed the connection.
    async fn disconnect(self) {
        let Client { client, task, .. } = self;
        within("disconnect request", client.disconnect())
            .await
            .expect("disconnect request");
        within("the broker to close after DISCONNECT", task)
            .await
            .expect("event loop task");
        drop(client);
    }

    /// Drops the network connection without DISCONNECT.
    async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

fn payload(p: &Publish) -> &[u8] {
    &p.payload
}

/// Connect, subscribe and publish to oneself at QoS 0, 1 and 2: all three come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic() {
    let broker = start().await;
    let (c, _) = open(opts(&broker, "basic")).await;
    c.disconnect().await;
    let (mut c, ack) = open(opts(&broker, "basic")).await;
    assert!(!ack.session_present);
    c.subscribe_ok("TopicA", QoS::ExactlyOnce).await;
    let sent = [
        (QoS::AtMostOnce, &b"qos 0"[..]),
        (QoS::AtLeastOnce, b"qos 1"),
        (QoS::ExactlyOnce, b"qos 2"),
    ];
    for (qos, body) in sent {
        c.publish("TopicA", qos, false, body).await;
    }
    for (qos, body) in sent {
        let p = c.next_publish().await;
        assert_eq!((p.topic.as_str(), payload(&p), p.qos), ("TopicA", body, qos));
        assert!(!p.retain && !p.dup, "{p:?}");
    }
    c.assert_no_publish().await;
    c.disconnect().await;
}

/// Retained messages reach a later subscription, flagged retained; empty retained payloads clear them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_messages() {
    let broker = start().await;
    let retained = [
        ("TopicA/B", QoS::AtMostOnce, &b"qos 0"[..]),
        ("Topic/C", QoS::AtLeastOnce, b"qos 1"),
        ("TopicA/C", QoS::ExactlyOnce, b"qos 2"),
    ];
    let (mut publisher, _) = open(opts(&broker, "retain-publisher")).await;
    for (topic, qos, body) in retained {
        publisher.publish(topic, qos, true, body).await;
    }
    // Make sure the QoS 0 one is in too: the broker handles packets in order.
    publisher.publish("other", QoS::AtLeastOnce, false, b"sync").await;

    let (mut c, _) = open(opts(&broker, "retain-subscriber")).await;
    c.subscribe_ok("+/+", QoS::ExactlyOnce).await;
    let mut got = BTreeMap::new();
    for _ in 0..retained.len() {
        let p = c.next_publish().await;
        assert!(p.retain, "retained message delivered without the retain flag: {p:?}");
        got.insert(p.topic.clone(), (p.qos, p.payload.to_vec()));
    }
    let want: BTreeMap<_, _> = retained
        .iter()
        .map(|(t, q, b)| (t.to_string(), (*q, b.to_vec())))
        .collect();
    assert_eq!(got, want);
    c.assert_no_publish().await;
    c.disconnect().await;

    for (topic, qos, _) in retained {
        publisher.publish(topic, qos, true, b"").await;
    }
    publisher.publish("other", QoS::AtLeastOnce, false, b"sync").await;
    publisher.disconnect().await;

    let (mut c, _) = open(opts(&broker, "retain-late")).await;
    c.subscribe_ok("+/+", QoS::ExactlyOnce).await;
    // Retained messages would be queued at subscription, ahead of this one.
    c.publish("marker/x", QoS::AtLeastOnce, false, b"marker").await;
    let p = c.next_publish().await;
    assert_eq!(
        (p.topic.as_str(), payload(&p), p.retain),
        ("marker/x", &b"marker"[..], false),
        "cleared retained messages must not be delivered"
    );
    c.disconnect().await;
}

/// The will of a client whose connection drops without DISCONNECT is published; a polite client's is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn will_message() {
    let broker = start().await;
    let (mut watcher, _) = open(opts(&broker, "will-watcher")).await;
    watcher.subscribe_ok("Topic/C", QoS::ExactlyOnce).await;

    let mut o = opts(&broker, "will-doomed");
    o.set_last_will(LastWill::new(
        "Topic/C",
        "client not disconnected",
        QoS::AtLeastOnce,
        false,
    ));
    let (doomed, _) = open(o).await;
    watcher.assert_no_publish().await;
    doomed.kill().await;
    let p = watcher.next_publish().await;
    assert_eq!(
        (p.topic.as_str(), payload(&p), p.qos, p.retain),
        ("Topic/C", &b"client not disconnected"[..], QoS::AtLeastOnce, false)
    );

    let mut o = opts(&broker, "will-polite");
    o.set_last_will(LastWill::new(
        "Topic/C",
        "must not be published",
        QoS::AtLeastOnce,
        false,
    ));
    let (polite, _) = open(o).await;
    polite.disconnect().await;
    watcher.publish("Topic/C", QoS::AtLeastOnce, false, b"marker").await;
    let p = watcher.next_publish().await;
    assert_eq!(
        payload(&p),
        b"marker",
        "the will of a client that sent DISCONNECT was published"
    );
    watcher.disconnect().await;
}

/// An empty client id is accepted with a clean session and refused (return code 2) with a persistent one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_length_client_id() {
    let broker = start().await;
    let (mut c, ack) = open(opts(&broker, "")).await;
    assert_eq!(ack.code, ConnectReturnCode::Success);
    assert!(!ack.session_present);
    c.subscribe_ok("TopicA", QoS::AtLeastOnce).await;
    c.publish("TopicA", QoS::AtLeastOnce, false, b"anonymous").await;
    assert_eq!(payload(&c.next_publish().await), b"anonymous");
    c.disconnect().await;

    let mut o = persistent(&broker, "placeholder");
    o.set_client_id(String::new());
    match try_open(o).await {
        Err(ConnectionError::ConnectionRefused(code)) => assert_eq!(code, ConnectReturnCode::BadClientId),
        Err(e) => panic!("expected CONNACK 2, got {e}"),
        Ok((_, ack)) => panic!("expected CONNACK 2, got {ack:?}"),
    }
}

/// Messages published while a persistent session's client is away are delivered when it comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_message_queueing() {
    let broker = start().await;
    let (mut c, ack) = open(persistent(&broker, "offline-sub")).await;
    assert!(!ack.session_present);
    c.subscribe_ok("+/+", QoS::ExactlyOnce).await;
    c.disconnect().await;

    let (mut publisher, _) = open(opts(&broker, "offline-pub")).await;
    publisher.publish("TopicA/B", QoS::AtMostOnce, false, b"qos 0").await;
    publisher.publish("Topic/C", QoS::AtLeastOnce, false, b"qos 1").await;
    publisher.publish("TopicA/C", QoS::ExactlyOnce, false, b"qos 2").await;
    publisher.publish("end/x", QoS::AtLeastOnce, false, b"end").await;
    publisher.disconnect().await;

    let (mut c, ack) = open(persistent(&broker, "offline-sub")).await;
    assert!(ack.session_present, "the stored session is resumed");
    let mut got = Vec::new();
    loop {
        let p = c.next_publish().await;
        if p.topic == "end/x" {
            break;
        }
        got.push((p.topic.clone(), p.qos, p.payload.to_vec()));
    }
    let qos1 = ("Topic/C".to_string(), QoS::AtLeastOnce, b"qos 1".to_vec());
    let qos2 = ("TopicA/C".to_string(), QoS::ExactlyOnce, b"qos 2".to_vec());
    assert!(got.contains(&qos1) && got.contains(&qos2), "queued messages: {got:?}");
    // The QoS 0 message may be queued or not, but nothing else may turn up.
    let qos0 = ("TopicA/B".to_string(), QoS::AtMostOnce, b"qos 0".to_vec());
    assert!(
        got.len() == 2 || (got.len() == 3 && got.contains(&qos0)),
        "queued messages: {got:?}"
    );
    c.disconnect().await;
}

/// A message matching two subscriptions arrives once at the higher QoS, or once per subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_subscriptions() {
    let broker = start().await;
    let (mut c, _) = open(opts(&broker, "overlap")).await;
    let codes = c
        .subscribe_many(&[("TopicA/#", QoS::ExactlyOnce), ("TopicA/+", QoS::AtLeastOnce)])
        .await;
    assert_eq!(
        codes,
        [
            SubscribeReasonCode::Success(QoS::ExactlyOnce),
            SubscribeReasonCode::Success(QoS::AtLeastOnce)
        ]
    );
    c.subscribe_ok("marker", QoS::AtMostOnce).await;
    c.publish("TopicA/C", QoS::ExactlyOnce, false, b"overlapping topic filters")
        .await;
    c.publish("marker", QoS::AtMostOnce, false, b"marker").await;
    let mut qos = Vec::new();
    loop {
        let p = c.next_publish().await;
        if p.topic == "marker" {
            break;
        }
        assert_eq!(
            (p.topic.as_str(), payload(&p)),
            ("TopicA/C", &b"overlapping topic filters"[..])
        );
        qos.push(p.qos);
    }
    qos.sort_by_key(|q| *q as u8);
    assert!(
        qos == [QoS::ExactlyOnce] || qos == [QoS::AtLeastOnce, QoS::ExactlyOnce],
        "deliveries at {qos:?}: expected one at QoS 2, or one at QoS 1 and one at QoS 2"
    );
    c.disconnect().await;
}

/// A client that goes silent past its keep alive is disconnected and its will published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive() {
    let broker = start().await;
    let (mut watcher, _) = open(opts(&broker, "keepalive-watcher")).await;
    watcher.subscribe_ok("/TopicA", QoS::ExactlyOnce).await;

    let mut silent = MqttRaw::tcp(broker.server().mqtt_addr()).await;
    let will = RawWill {
        topic: "/TopicA",
        payload: b"keepalive expiry",
        qos: 1,
        retain: false,
    };
    silent
        .send(&connect_packet("keepalive-silent", true, 2, Some(will)))
        .await;
    assert_eq!(silent.expect_connack().await, (false, 0));
    // Well within the keep alive: still connected, no will.
    watcher.assert_no_publish().await;
    silent.expect_silent_close().await;
    let p = watcher.next_publish().await;
    assert_eq!(
        (p.topic.as_str(), payload(&p), p.qos),
        ("/TopicA", &b"keepalive expiry"[..], QoS::AtLeastOnce)
    );
    watcher.disconnect().await;
}

/// QoS 1 and 2 messages left unacknowledged are sent again, flagged DUP, when the persistent session reconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redelivery_on_reconnect() {
    let broker = start().await;
    let mut o = persistent(&broker, "redeliver");
    o.set_manual_acks(true);
    let (mut c, _) = open(o).await;
    c.subscribe_ok("TopicA/#", QoS::ExactlyOnce).await;
    c.publish("TopicA/B", QoS::AtLeastOnce, false, b"qos 1").await;
    c.publish("TopicA/C", QoS::ExactlyOnce, false, b"qos 2").await;
    let mut first = BTreeMap::new();
    for _ in 0..2 {
        let p = c.next_publish().await;
        assert!(!p.dup, "first delivery flagged DUP: {p:?}");
        first.insert(p.topic.clone(), (p.qos, p.payload.to_vec()));
    }
    let want: BTreeMap<_, _> = [
        ("TopicA/B".to_string(), (QoS::AtLeastOnce, b"qos 1".to_vec())),
        ("TopicA/C".to_string(), (QoS::ExactlyOnce, b"qos 2".to_vec())),
    ]
    .into_iter()
    .collect();
    assert_eq!(first, want);
    // Neither is acknowledged.
    c.disconnect().await;

    let (mut c, ack) = open(persistent(&broker, "redeliver")).await;
    assert!(ack.session_present, "the stored session is resumed");
    let mut again = BTreeMap::new();
    for _ in 0..2 {
        let p = c.next_publish().await;
        assert!(p.dup, "redelivery without DUP: {p:?}");
        again.insert(p.topic.clone(), (p.qos, p.payload.to_vec()));
    }
    assert_eq!(again, want);
    // Acknowledged this time (automatically); the QoS 2 exchange ends with
    // PUBREL, answered with PUBCOMP.
    c.expect("PUBREL", |p| matches!(p, Incoming::PubRel(_)).then_some(()))
        .await;
    c.disconnect().await;

    let (mut c, ack) = open(persistent(&broker, "redeliver")).await;
    assert!(ack.session_present);
    c.publish("TopicA/marker", QoS::AtLeastOnce, false, b"marker").await;
    let p = c.next_publish().await;
    assert_eq!(
        (p.topic.as_str(), payload(&p)),
        ("TopicA/marker", &b"marker"[..]),
        "acknowledged messages were delivered again"
    );
    c.disconnect().await;
}

/// A subscription the broker refuses gets SUBACK return code 0x80, and the connection stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_failure() {
    let broker = start_with(|c| c.mqtt.permission_check_enabled = true).await;
    let user = User {
        limits: Default::default(),
        topic_permissions: Default::default(),
        name: "no-reader".into(),
        password_hash: hash_password("pw"),
        hashing_algorithm: SHA256.into(),
        tags: vec![],
        permissions: [(
            "/".to_string(),
            Permissions {
                configure: ".*".into(),
                write: ".*".into(),
                read: "^nothing$".into(),
            },
        )]
        .into_iter()
        .collect(),
    };
    broker.server().broker.users.put(user).expect("user stored");

    let (mut guest, _) = open(opts(&broker, "allowed")).await;
    guest.subscribe_ok("test/nosubscribe", QoS::ExactlyOnce).await;

    let mut o = opts(&broker, "refused");
    o.set_credentials("no-reader", "pw");
    let (mut c, _) = open(o).await;
    assert_eq!(
        c.subscribe("test/nosubscribe", QoS::ExactlyOnce).await,
        SubscribeReasonCode::Failure
    );
    // Still connected, and allowed to publish.
    c.publish("test/nosubscribe", QoS::AtLeastOnce, false, b"published anyway")
        .await;
    let p = guest.next_publish().await;
    assert_eq!(payload(&p), b"published anyway");
    c.assert_no_publish().await;
    c.disconnect().await;
    guest.disconnect().await;
}

/// Filters starting with a wildcard do not match `$` topics; a filter naming `$SYS` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dollar_topics() {
    let broker = start().await;
    let (mut hash, _) = open(opts(&broker, "dollar-hash")).await;
    hash.subscribe_ok("#", QoS::ExactlyOnce).await;
    let (mut plus, _) = open(opts(&broker, "dollar-plus")).await;
    plus.subscribe_ok("+/+", QoS::ExactlyOnce).await;
    let (mut sys, _) = open(opts(&broker, "dollar-sys")).await;
    sys.subscribe_ok("$SYS/#", QoS::ExactlyOnce).await;

    let (mut publisher, _) = open(opts(&broker, "dollar-pub")).await;
    publisher.publish("$SYS/x", QoS::AtLeastOnce, false, b"sys").await;
    publisher.publish("$TopicA/B", QoS::AtLeastOnce, false, b"dollar").await;
    publisher.publish("normal/x", QoS::AtLeastOnce, false, b"normal").await;
    publisher.disconnect().await;

    for (name, c) in [("#", &mut hash), ("+/+", &mut plus)] {
        let p = c.next_publish().await;
        assert_eq!(
            (p.topic.as_str(), payload(&p)),
            ("normal/x", &b"normal"[..]),
            "first message for {name}: `$` topics must not match"
        );
    }
    let p = sys.next_publish().await;
    assert_eq!((p.topic.as_str(), payload(&p)), ("$SYS/x", &b"sys"[..]));
    sys.assert_no_publish().await;
    for c in [hash, plus, sys] {
        c.disconnect().await;
    }
}

/// After UNSUBACK, nothing more arrives for the dropped filters; the others still deliver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribe() {
    let broker = start().await;
    let (mut c, _) = open(opts(&broker, "unsubscriber")).await;
    c.subscribe_ok("TopicA/B", QoS::ExactlyOnce).await;
    c.subscribe_ok("Topic/C", QoS::AtLeastOnce).await;
    c.subscribe_ok("TopicA/C", QoS::AtMostOnce).await;
    c.unsubscribe("TopicA/B").await;
    c.unsubscribe("Topic/C").await;
    // Unsubscribing from a filter never subscribed to is answered too.
    c.unsubscribe("never/subscribed").await;

    let (mut publisher, _) = open(opts(&broker, "unsub-pub")).await;
    publisher
        .publish("TopicA/B", QoS::AtLeastOnce, false, b"dropped 1")
        .await;
    publisher
        .publish("Topic/C", QoS::AtLeastOnce, false, b"dropped 2")
        .await;
    publisher.publish("TopicA/C", QoS::AtLeastOnce, false, b"kept").await;
    publisher.disconnect().await;

    let p = c.next_publish().await;
    assert_eq!(
        (p.topic.as_str(), payload(&p)),
        ("TopicA/C", &b"kept"[..]),
        "messages arrived for unsubscribed filters"
    );
    c.assert_no_publish().await;
    c.disconnect().await;
}

/// Publishes `body` to `again/t` at QoS 1 and returns the QoS `c` gets it at.
async fn next(c: &mut Client, publisher: &mut Client, body: &[u8]) -> QoS {
    publisher.publish("again/t", QoS::AtLeastOnce, false, body).await;
    let p = c.next_publish().await;
    assert_eq!((p.topic.as_str(), payload(&p)), ("again/t", body));
    p.qos
}

/// A subscription changed between two messages of the same topic applies to
/// the second: deliveries work out the granted QoS again after any change,
/// even when the topic repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_subscription_applies_to_the_next_message_of_its_topic() {
    let broker = start().await;
    let (mut c, _) = open(opts(&broker, "resubscriber")).await;
    let (mut publisher, _) = open(opts(&broker, "resubscriber-pub")).await;
    c.subscribe_ok("again/t", QoS::AtLeastOnce).await;
    assert_eq!(next(&mut c, &mut publisher, b"one").await, QoS::AtLeastOnce);
    assert_eq!(next(&mut c, &mut publisher, b"two").await, QoS::AtLeastOnce);
    // Subscribing to the same filter again replaces the subscription.
    c.subscribe_ok("again/t", QoS::AtMostOnce).await;
    assert_eq!(next(&mut c, &mut publisher, b"three").await, QoS::AtMostOnce);
    c.subscribe_ok("again/#", QoS::AtLeastOnce).await;
    let qos = next(&mut c, &mut publisher, b"four").await;
    assert_eq!(qos, QoS::AtLeastOnce, "the overlapping filter grants QoS 1");
    c.unsubscribe("again/#").await;
    assert_eq!(next(&mut c, &mut publisher, b"five").await, QoS::AtMostOnce);
    c.assert_no_publish().await;
    publisher.disconnect().await;
    c.disconnect().await;
}

/// One publisher going back and forth between topics: each message keeps its
/// own topic and payload, whether the topic repeats the previous one or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternating_topics_keep_their_own_names() {
    let broker = start().await;
    let (mut c, _) = open(opts(&broker, "alternating")).await;
    let (mut publisher, _) = open(opts(&broker, "alternating-pub")).await;
    c.subscribe_ok("alt/#", QoS::AtLeastOnce).await;
    let sent = [
        ("alt/1", QoS::AtLeastOnce, &b"a"[..]),
        ("alt/2", QoS::AtLeastOnce, b"b"),
        ("alt/1", QoS::AtLeastOnce, b"c"),
        ("alt/1", QoS::AtLeastOnce, b"d"),
        ("alt/1", QoS::AtMostOnce, b"e"),
        ("alt/2", QoS::AtMostOnce, b"f"),
        ("alt/22", QoS::AtLeastOnce, b"g"),
        ("alt/2", QoS::AtLeastOnce, b"h"),
    ];
    for (topic, qos, body) in sent {
        publisher.publish(topic, qos, false, body).await;
    }
    for (topic, qos, body) in sent {
        let p = c.next_publish().await;
        assert_eq!((p.topic.as_str(), payload(&p), p.qos), (topic, body, qos));
    }
    c.assert_no_publish().await;
    publisher.disconnect().await;
    c.disconnect().await;
}
