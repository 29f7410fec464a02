//! Node-wide protection from one client: `connection_max` (every protocol
//! counted), `connection_rate_limit` (checked before the login) and
//! `channel_rate_limit` (per connection); each refusal is a protocol error
//! naming the limit, and a reload applies new values.

use crate::common::mqtt_raw::{MqttRaw, connect_packet};
use crate::common::*;

/// Connects over raw MQTT 3.1.1; returns the CONNACK return code.
async fn mqtt_connack(broker: &TestBroker, client_id: &str) -> (MqttRaw, u8) {
    let mut mqtt = MqttRaw::tcp(broker.server().mqtt_addr()).await;
    mqtt.send(&connect_packet(client_id, true, 0, None)).await;
    let code = mqtt.expect_connack().await.1;
    (mqtt, code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_max_counts_every_protocol_and_follows_a_reload() {
    let broker = start_with(|c| c.main.connection_max = Some(2)).await;
    let first = broker.connect().await;
    let (_mqtt, code) = mqtt_connack(&broker, "counted").await;
    assert_eq!(code, 0);

    let err = try_connect(&broker.url()).await.expect_err("a third connection");
    assert_eq!(reply_code(&err), Some(530), "{err}");
    assert_eq!(
        reply_text(&err),
        "NOT_ALLOWED - connection refused: node connection limit (2) is reached"
    );
    // MQTT: CONNACK 3, server unavailable (MQTT 5's Quota exceeded).
    assert_eq!(mqtt_connack(&broker, "over").await.1, 3);

    // A closed connection frees its place.
    first.close(200, "bye".into()).await.expect("close");
    let registry = broker.server().broker.connections.clone();
    eventually("the closed connection unlisted", || async {
        registry.list().len() == 1
    })
    .await;
    let second = broker.connect().await;

    // A reload lifts the limit for new connections.
    let mut config = broker.config.clone();
    config.main.connection_max = None;
    broker.server().reload(&config).expect("reload");
    let third = broker.connect().await;
    assert!(second.status().connected() && third.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_creation_rate_are_refused_before_their_login() {
    let broker = start_with(|c| c.main.connection_rate_limit = 1).await;
    let logins = &broker.server().broker.logins;
    let failures_before = logins.failures();
    // A burst of one, refilled once a second: of twenty connections opened
    // one after another, some are refused unless each took a second. Each
    // has a wrong password, so a login that was checked fails (403).
    let url = broker.url_for("guest", "not-the-password", "%2f");
    let (mut over_rate, mut login_failed) = (Vec::new(), 0u64);
    for _ in 0..20 {
        match try_connect(&url).await {
            Err(e) if reply_code(&e) == Some(530) => over_rate.push(e),
            Err(_) => login_failed += 1,
            Ok(_) => panic!("a wrong password was accepted"),
        }
    }
    let err = over_rate.first().expect("a connection over the rate limit is refused");
    assert_eq!(
        reply_text(err),
        "NOT_ALLOWED - connection refused: connection rate limit (1/s) is reached"
    );
    // Only the connections within the rate had their password checked.
    assert_eq!(logins.failures() - failures_before, login_failed);

    // MQTT shares the node's rate: CONNACK 3 (MQTT 5: 0x9F).
    let mut codes = Vec::new();
    for i in 0..20 {
        let (_c, code) = mqtt_connack(&broker, &format!("rate-{i}")).await;
        codes.push(code);
        if code != 0 {
            break;
        }
    }
    assert_eq!(codes.last(), Some(&3), "{codes:?}");
    assert_broker_alive_with(&broker, |c| c.main.connection_rate_limit = 0).await;
}

/// Reloads with `tweak` applied and checks that a client is served.
async fn assert_broker_alive_with(broker: &TestBroker, tweak: impl FnOnce(&mut lavinmq::config::Config)) {
    let mut config = broker.config.clone();
    tweak(&mut config);
    broker.server().reload(&config).expect("reload");
    let (_conn, ch) = broker.channel().await;
    let q = uniq("alive");
    declare_queue(&ch, &q).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_over_the_creation_rate_close_the_connection() {
    let broker = start_with(|c| c.amqp.channel_rate_limit = 1).await;
    let mut raw = RawConn::open(broker.addr()).await;
    // A burst of one a second: the second of twenty channel.open frames sent
    // at once is over the limit.
    for n in 1..=20 {
        raw.send(&channel_open(n)).await;
    }
    let close = raw.expect_connection_close().await;
    assert_eq!(close.code, 530, "{close:?}");
    assert_eq!(close.text, "NOT_ALLOWED - channel creation rate limit (1/s) is reached");
    assert_eq!((close.class_id, close.method_id), (20, 10));
    // Other connections have their own allowance.
    let (_conn, ch) = broker.channel().await;
    assert!(ch.status().connected());
}
