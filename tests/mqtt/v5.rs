//! MQTT 5 sessions with rumqttc's v5 client, where a broker restart or the
//! broker's own state is involved (the protocol features themselves are
//! exercised by the paho-mqtt suite in tests/compat/python/test_mqtt5.py).

use std::time::Duration;

use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{ConnAck, ConnectProperties, Packet, Publish};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use tokio::sync::mpsc;

use super::common::mqtt::{connect, mqtt_addr, options};
use super::common::{QUIET, TestBroker, start, start_with, within};
use super::session_queue;

/// An MQTT 5 client whose event loop forwards incoming packets.
pub(super) struct V5 {
    pub(super) client: AsyncClient,
    incoming: mpsc::UnboundedReceiver<Packet>,
}

impl V5 {
    /// Connects `client_id` with clean start off and `expiry` as the session
    /// expiry interval; returns the client and its CONNACK.
    pub(super) async fn connect(b: &TestBroker, client_id: &str, expiry: u32) -> (V5, ConnAck) {
        let mut props = ConnectProperties::new();
        props.session_expiry_interval = Some(expiry);
        V5::connect_with(b, client_id, props).await
    }

    /// Connects `client_id` with clean start on (a stored session is
    /// discarded) and `expiry` as the session expiry interval.
    pub(super) async fn connect_clean(b: &TestBroker, client_id: &str, expiry: u32) -> (V5, ConnAck) {
        let mut props = ConnectProperties::new();
        props.session_expiry_interval = Some(expiry);
        V5::connect_opts(b, client_id, true, props).await
    }

    /// Connects `client_id` with clean start off and these CONNECT properties.
    async fn connect_with(b: &TestBroker, client_id: &str, props: ConnectProperties) -> (V5, ConnAck) {
        V5::connect_opts(b, client_id, false, props).await
    }

    /// Connects `client_id` with `clean_start` and these CONNECT properties.
    async fn connect_opts(
        b: &TestBroker,
        client_id: &str,
        clean_start: bool,
        props: ConnectProperties,
    ) -> (V5, ConnAck) {
        let addr = mqtt_addr(b);
        let mut o = MqttOptions::new(client_id, addr.ip().to_string(), addr.port());
        o.set_keep_alive(Duration::from_secs(30));
        o.set_clean_start(clean_start);
        o.set_connect_properties(props);
        let (client, mut eventloop) = AsyncClient::new(o, 16);
        let (tx, incoming) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(event) = eventloop.poll().await {
                if let Event::Incoming(p) = event
                    && tx.send(p).is_err()
                {
                    return;
                }
            }
        });
        let mut c = V5 { client, incoming };
        let ack = c
            .expect("CONNACK", |p| match p {
                Packet::ConnAck(a) => Some(a.clone()),
                _ => None,
            })
            .await;
        (c, ack)
    }

    pub(super) async fn expect<T>(&mut self, what: &str, mut pick: impl FnMut(&Packet) -> Option<T>) -> T {
        within(what, async {
            loop {
                let p = self.incoming.recv().await.expect("the event loop ended");
                if let Some(t) = pick(&p) {
                    return t;
                }
            }
        })
        .await
    }

    pub(super) async fn subscribe(&mut self, filter: &str) {
        self.client
            .subscribe(filter, QoS::AtLeastOnce)
            .await
            .expect("SUBSCRIBE sent");
        self.expect("SUBACK", |p| matches!(p, Packet::SubAck(_)).then_some(()))
            .await;
    }

    pub(super) async fn next_publish(&mut self) -> Publish {
        self.expect("PUBLISH", |p| match p {
            Packet::Publish(p) => Some(p.clone()),
            _ => None,
        })
        .await
    }

    /// Asserts that no PUBLISH arrives for [`QUIET`].
    pub(super) async fn assert_no_publish(&mut self) {
        let quiet = tokio::time::sleep(QUIET);
        tokio::pin!(quiet);
        loop {
            tokio::select! {
                _ = &mut quiet => return,
                p = self.incoming.recv() => match p {
                    Some(Packet::Publish(p)) => panic!("unexpected PUBLISH: {p:?}"),
                    Some(_) => {}
                    None => return,
                },
            }
        }
    }

    pub(super) async fn disconnect(self) {
        self.client.disconnect().await.expect("DISCONNECT sent");
        // The broker closes the socket after DISCONNECT; give it the moment.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_with_expiry_interval_survives_a_restart() {
    let mut b = start().await;
    let (mut c, ack) = V5::connect(&b, "v5-restart", 300).await;
    assert!(!ack.session_present);
    c.subscribe("v5/restart").await;
    c.disconnect().await;
    let mut publisher = connect(options(&b, "v5-restart-pub")).await;
    publisher
        .publish("v5/restart", rumqttc::QoS::AtLeastOnce, false, b"kept")
        .await;
    publisher.disconnect().await;
    assert_eq!(
        expires_ms(&b, "v5-restart"),
        Some(300_000),
        "the session expiry is the queue's x-expires"
    );
    b.restart().await;
    // Resumed with another interval: the new one replaces the first, and
    // that too outlives a restart.
    let (mut c, ack) = V5::connect(&b, "v5-restart", 600).await;
    assert!(ack.session_present, "the session outlived the restart");
    assert_eq!(&c.next_publish().await.payload[..], b"kept");
    c.disconnect().await;
    assert_eq!(
        expires_ms(&b, "v5-restart"),
        Some(600_000),
        "a reconnect changes the expiry"
    );
    b.restart().await;
    assert_eq!(
        expires_ms(&b, "v5-restart"),
        Some(600_000),
        "the changed expiry is stored"
    );
    let (_c, ack) = V5::connect(&b, "v5-restart", 600).await;
    assert!(ack.session_present, "the session outlived the second restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_subscription_of_a_stored_session_survives_a_restart() {
    let mut b = start().await;
    let (mut c, _) = V5::connect(&b, "v5-shared", 300).await;
    c.subscribe("$share/workers/v5/jobs").await;
    c.disconnect().await;
    b.restart().await;
    let (mut c, ack) = V5::connect(&b, "v5-shared", 300).await;
    assert!(ack.session_present, "the session outlived the restart");
    let mut publisher = connect(options(&b, "v5-shared-pub")).await;
    publisher
        .publish("v5/jobs", rumqttc::QoS::AtLeastOnce, false, b"job")
        .await;
    let p = c.next_publish().await;
    assert_eq!((&p.topic[..], &p.payload[..]), (&b"v5/jobs"[..], &b"job"[..]));
    // Unsubscribed, the session leaves the group for good.
    c.client
        .unsubscribe("$share/workers/v5/jobs")
        .await
        .expect("UNSUBSCRIBE sent");
    c.expect("UNSUBACK", |p| matches!(p, Packet::UnsubAck(_)).then_some(()))
        .await;
    c.disconnect().await;
    b.restart().await;
    let queue = b
        .server()
        .broker
        .vhost("/")
        .and_then(|v| v.queue(&session_queue("v5-shared")));
    let args = queue.map(|q| q.arguments()).expect("the session queue");
    assert!(
        args.get("x-mqtt-shared-subscriptions").is_none(),
        "no shared subscription is left stored: {args:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_above_the_maximum_is_replaced_in_connack() {
    let b = start_with(|c| c.mqtt.max_keep_alive = 20).await;
    // The client asks for 30 s: CONNACK's Server Keep Alive says 20.
    let (_c, ack) = V5::connect(&b, "v5-keepalive", 0).await;
    let server_keep_alive = ack.properties.as_ref().and_then(|p| p.server_keep_alive);
    assert_eq!(server_keep_alive, Some(20));
    // Without a maximum, the client's own stands and CONNACK does not say it.
    let b = start().await;
    let (_c, ack) = V5::connect(&b, "v5-keepalive", 0).await;
    assert_eq!(ack.properties.as_ref().and_then(|p| p.server_keep_alive), None);
}

/// The `x-expires` of the session queue of `client_id`, in milliseconds.
fn expires_ms(b: &TestBroker, client_id: &str) -> Option<i64> {
    let queue = b.server().broker.vhost("/")?.queue(&session_queue(client_id))?;
    queue.arguments().get("x-expires")?.as_i64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_ends_when_its_expiry_interval_passes() {
    let b = start().await;
    let (mut c, _) = V5::connect(&b, "v5-expiring", 1).await;
    c.subscribe("v5/expiring").await;
    c.disconnect().await;
    let queue = session_queue("v5-expiring");
    within("the session queue to expire", async {
        while b.server().broker.vhost("/").and_then(|v| v.queue(&queue)).is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let (_c, ack) = V5::connect(&b, "v5-expiring", 1).await;
    assert!(!ack.session_present, "an expired session is not resumed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_use_topic_aliases_the_client_accepts() {
    let b = start().await;
    let mut props = ConnectProperties::new();
    props.topic_alias_max = Some(1);
    let (mut c, _) = V5::connect_with(&b, "v5-alias", props).await;
    c.subscribe("v5/alias/#").await;
    let mut publisher = connect(options(&b, "v5-alias-pub")).await;
    for topic in ["v5/alias/a", "v5/alias/a", "v5/alias/b", "v5/alias/a"] {
        publisher
            .publish(topic, rumqttc::QoS::AtLeastOnce, false, topic.as_bytes())
            .await;
    }
    // rumqttc hands out PUBLISHes as they came off the wire, before it
    // resolves aliases: the test resolves them itself.
    let mut aliases = std::collections::HashMap::new();
    let mut seen = Vec::new();
    for _ in 0..4 {
        let p = c.next_publish().await;
        let alias = p.properties.as_ref().and_then(|props| props.topic_alias);
        let wire_topic = String::from_utf8_lossy(&p.topic).into_owned();
        let topic = match alias {
            Some(a) if wire_topic.is_empty() => aliases.get(&a).cloned().expect("a known alias"),
            Some(a) => {
                aliases.insert(a, wire_topic.clone());
                wire_topic.clone()
            }
            None => wire_topic.clone(),
        };
        assert_eq!(
            topic.as_bytes(),
            &p.payload[..],
            "the alias stands for the message's topic"
        );
        seen.push((wire_topic, alias));
    }
    // One alias allowed: the first topic gets it and is then sent as the
    // alias alone; the second topic goes in full.
    assert_eq!(
        seen,
        [
            ("v5/alias/a".to_string(), Some(1)),
            (String::new(), Some(1)),
            ("v5/alias/b".to_string(), None),
            (String::new(), Some(1)),
        ]
    );
}
