//! Connection-level behaviour: handshake, server properties, authentication,
//! vhosts, channels, tuning, heartbeats and graceful shutdown; malformed input
//! (`connection/bad_input.rs`), closes racing each other
//! (`connection/close_race.rs`), PROXY headers and Unix sockets
//! (`connection/network_edge.rs`) and the node's connection and channel
//! limits (`connection/node_limits.rs`).

mod bad_input;
mod close_race;
use crate::common;
mod network_edge;
mod node_limits;

use std::time::Duration;

use common::*;
use lapin::protocol::{AMQPClass, connection};
use lapin::types::AMQPValue;
use lapin::{ErrorKind, options::QueueDeclareOptions, types::FieldTable};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_and_close() {
    let broker = start().await;
    let conn = broker.connect().await;
    assert!(conn.status().connected());
    assert_eq!(conn.status().vhost().as_str(), "/");
    // RabbitMQ's default: a client asking for "no limit" gets 2047 channels.
    assert_eq!(conn.configuration().channel_max(), 2047);
    let ch = conn.create_channel().await.expect("channel.open");
    assert!(ch.status().connected());
    conn.close(200, "OK".into()).await.expect("connection.close");
    // Closed, or Error when lapin sees the server's socket close (which follows
    // close-ok) before it finished processing close-ok itself.
    assert!(!conn.status().connected(), "state after close: {:?}", conn.status());
    assert!(conn.create_channel().await.is_err());
    // The broker keeps serving other clients.
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_properties_in_connection_start() {
    let broker = start().await;
    let mut raw = RawConn::tcp(broker.addr()).await;
    raw.send(PROTOCOL_HEADER).await;
    let f = raw.read_method().await;
    assert_eq!(f.channel, 0);
    assert_eq!(f.method_ids(), Some((10, 10)), "expected connection.start");
    let (_, class) = lapin::protocol::parse_class(&f.payload[..]).expect("decodable start");
    let AMQPClass::Connection(connection::AMQPMethod::Start(start)) = class else {
        panic!("not a connection.start: {class:?}");
    };
    assert_eq!((start.version_major, start.version_minor), (0, 9));
    let mechanisms = start.mechanisms.to_string();
    let mechs: Vec<&str> = mechanisms.split_whitespace().collect();
    assert!(mechs.contains(&"PLAIN"), "mechanisms: {mechanisms}");
    assert!(mechs.contains(&"AMQPLAIN"), "mechanisms: {mechanisms}");
    assert!(
        start.locales.to_string().split_whitespace().any(|l| l == "en_US"),
        "locales: {}",
        start.locales
    );

    let props = start.server_properties.inner();
    let longstr = |key: &str| match props.get(key) {
        Some(AMQPValue::LongString(s)) => s.to_string(),
        other => panic!("server property {key} is not a long string: {other:?}"),
    };
    assert_eq!(longstr("product"), "LavinMQ");
    assert!(!longstr("version").is_empty());
    assert!(!longstr("platform").is_empty());
    let Some(AMQPValue::FieldTable(caps)) = props.get("capabilities") else {
        panic!("no capabilities table: {props:?}");
    };
    for cap in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "consumer_priorities",
        "authentication_failure_close",
        "per_consumer_qos",
        "direct_reply_to",
    ] {
        assert_eq!(
            caps.inner().get(cap),
            Some(&AMQPValue::Boolean(true)),
            "capability {cap}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tune_offers_configured_limits() {
    let broker = start_with(|c| {
        c.amqp.channel_max = 100;
        c.amqp.frame_max = 65_536;
        c.amqp.heartbeat = 30;
    })
    .await;
    let mut raw = RawConn::tcp(broker.addr()).await;
    raw.send(PROTOCOL_HEADER).await;
    let start = raw.read_method().await;
    assert_eq!(start.method_ids(), Some((10, 10)));
    raw.send(&start_ok("guest", "guest")).await;
    let tune = raw.read_method().await;
    assert_eq!(tune.method_ids(), Some((10, 30)), "expected connection.tune");
    let a = tune.args();
    assert_eq!(u16::from_be_bytes([a[0], a[1]]), 100, "channel_max");
    assert_eq!(u32::from_be_bytes([a[2], a[3], a[4], a[5]]), 65_536, "frame_max");
    assert_eq!(u16::from_be_bytes([a[6], a[7]]), 30, "heartbeat");

    // lapin takes the server's values when it asks for none...
    let conn = broker.connect().await;
    assert_eq!(conn.configuration().channel_max(), 100);
    assert_eq!(conn.configuration().frame_max(), 65_536);
    assert_eq!(conn.configuration().heartbeat(), 30);
    conn.close(200, "OK".into()).await.expect("close");
    // ...and the lower of the two when it asks for less.
    let url = format!("{}?channel_max=10&frame_max=8192&heartbeat=10", broker.url());
    let conn = broker.connect_url(&url).await;
    assert_eq!(conn.configuration().channel_max(), 10);
    assert_eq!(conn.configuration().frame_max(), 8192);
    assert_eq!(conn.configuration().heartbeat(), 10);
    // A small frame_max still carries big messages (split into many frames).
    let ch = conn.create_channel().await.expect("channel");
    let q = uniq("small-frames");
    declare_queue(&ch, &q).await;
    let body: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
    confirm_select(&ch).await;
    publish_confirmed(&ch, "", &q, &body).await;
    let m = get(&ch, &q, true).await.expect("message");
    assert_eq!(m.delivery.data, body);
    conn.close(200, "OK".into()).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_max_is_negotiated_and_enforced_by_client() {
    let broker = start_with(|c| c.amqp.channel_max = 8).await;
    let conn = broker.connect().await;
    assert_eq!(conn.configuration().channel_max(), 8);
    let mut channels = Vec::new();
    for _ in 0..8 {
        channels.push(conn.create_channel().await.expect("channel within channel_max"));
    }
    let err = conn
        .create_channel()
        .await
        .expect_err("a 9th channel exceeds channel_max");
    assert!(
        matches!(err.kind(), ErrorKind::ChannelsLimitReached),
        "unexpected error: {err}"
    );
    // Every one of the 8 channels works.
    for ch in &channels {
        declare_queue(ch, &uniq("chmax")).await;
    }
    conn.close(200, "OK".into()).await.expect("close");

    let url = format!("{}?channel_max=3", broker.url());
    let conn = broker.connect_url(&url).await;
    assert_eq!(conn.configuration().channel_max(), 3);
    conn.close(200, "OK".into()).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tune_ok_above_server_limits_is_refused() {
    let broker = start_with(|c| {
        c.amqp.channel_max = 16;
        c.amqp.frame_max = 65_536;
    })
    .await;
    for (channel_max, frame_max, what) in [
        (17u16, 65_536u32, "channel_max above the server's"),
        (16, 65_537, "frame_max above the server's"),
        (16, 1024, "frame_max below 4096"),
    ] {
        let mut raw = RawConn::tcp(broker.addr()).await;
        raw.send(PROTOCOL_HEADER).await;
        raw.read_method().await;
        raw.send(&start_ok("guest", "guest")).await;
        let tune = raw.read_method().await;
        assert_eq!(tune.method_ids(), Some((10, 30)));
        raw.send(&tune_ok(channel_max, frame_max, 0)).await;
        raw.send(&connection_open("/")).await;
        let close = raw.expect_connection_close().await;
        assert_eq!(close.code, 530, "{what}: {close:?}");
    }
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_refused() {
    let broker = start().await;
    let err = try_connect(&broker.url_for("guest", "wrong", "%2f"))
        .await
        .expect_err("login with a wrong password");
    // lapin announces authentication_failure_close, so the broker must say why.
    assert_eq!(reply_code(&err), Some(403), "unexpected error: {err}");
    let err = try_connect(&broker.url_for("nobody", "guest", "%2f"))
        .await
        .expect_err("login as an unknown user");
    assert_eq!(reply_code(&err), Some(403), "unexpected error: {err}");
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_without_failure_close_capability_drops_socket() {
    // A client that does not announce authentication_failure_close gets the socket
    // closed (RabbitMQ) or a close frame; either way no open-ok and no hang.
    let broker = start().await;
    let mut raw = RawConn::tcp(broker.addr()).await;
    raw.send(PROTOCOL_HEADER).await;
    raw.read_method().await;
    raw.send(&start_ok("guest", "not-the-password")).await;
    loop {
        match raw.read_frame().await {
            None => break,
            Some(f) => {
                assert_ne!(
                    f.method_ids(),
                    Some((10, 30)),
                    "server tuned a connection with bad credentials"
                );
                if f.method_ids() == Some((10, 50)) {
                    assert_eq!(parse_close(&f).code, 403);
                    break;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_vhost_is_refused() {
    let broker = start().await;
    let err = try_connect(&broker.url_for("guest", "guest", "no-such-vhost"))
        .await
        .expect_err("open of a missing vhost");
    assert_eq!(reply_code(&err), Some(530), "unexpected error: {err}");
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_open_and_close_many_times() {
    let broker = start().await;
    let conn = broker.connect().await;
    for i in 0..200 {
        let ch = conn.create_channel().await.expect("channel.open");
        if i % 20 == 0 {
            declare_queue(&ch, &uniq("churn")).await;
        }
        ch.close(200, "OK".into()).await.expect("channel.close");
    }
    // Many at once, then all closed.
    let mut open = Vec::new();
    for _ in 0..100 {
        open.push(conn.create_channel().await.expect("channel.open"));
    }
    let mut ids: Vec<u16> = open.iter().map(|c| c.id()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 100, "channel ids are distinct");
    for ch in &open {
        ch.close(200, "OK".into()).await.expect("channel.close");
    }
    // The connection is still healthy.
    let ch = conn.create_channel().await.expect("channel.open");
    let q = uniq("after-churn");
    declare_queue(&ch, &q).await;
    publish(&ch, "", &q, b"x").await;
    assert_eq!(get(&ch, &q, true).await.expect("message").delivery.data, b"x");
    conn.close(200, "OK".into()).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_reopened_after_server_close() {
    // A channel closed by a soft error can be replaced by a new one; the
    // connection is unaffected.
    let broker = start().await;
    let conn = broker.connect().await;
    let ch = conn.create_channel().await.expect("channel");
    let r = ch
        .queue_declare(
            uniq("missing").as_str().into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await;
    assert_code(r, 404);
    assert!(conn.status().connected());
    let ch2 = conn.create_channel().await.expect("new channel");
    declare_queue(&ch2, &uniq("ok")).await;
    conn.close(200, "OK".into()).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_closes_clients_with_connection_forced() {
    let broker = start().await;
    let c1 = broker.connect().await;
    let c2 = broker.connect().await;
    let _ch = c1.create_channel().await.expect("channel");
    let mut ev1 = events(&c1);
    let mut ev2 = events(&c2);
    broker.stop().await;
    let text = expect_error(&mut ev1, 320).await;
    assert!(text.contains("CONNECTION_FORCED"), "reply text: {text}");
    expect_error(&mut ev2, 320).await;
    wait_connection_closed(&c1).await;
    wait_connection_closed(&c2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_close_frame_on_the_wire() {
    let mut broker = start().await;
    let mut raw = RawConn::open(broker.addr()).await;
    let stopping = tokio::spawn(async move {
        broker.restart().await;
        broker
    });
    let close = raw.expect_connection_close().await;
    assert_eq!(close.code, 320, "{close:?}");
    assert_eq!(close.channel, 0);
    let broker = within("restart", stopping).await.expect("restart task");
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_heartbeats_and_drops_a_silent_client() {
    let broker = start().await;
    let mut raw = RawConn::tcp(broker.addr()).await;
    raw.send(PROTOCOL_HEADER).await;
    raw.read_method().await;
    raw.send(&start_ok("guest", "guest")).await;
    let tune = raw.read_method().await;
    assert_eq!(tune.method_ids(), Some((10, 30)));
    raw.send(&tune_ok(0, 131_072, 1)).await;
    raw.send(&connection_open("/")).await;
    assert_eq!(raw.read_method().await.method_ids(), Some((10, 41)));
    // The server heartbeats an idle connection...
    let hb = raw.read_frame().await.expect("a heartbeat");
    assert_eq!((hb.kind, hb.channel), (FRAME_HEARTBEAT, 0), "{hb:?}");
    // ...and gives up on a client that never sends anything (after about two
    // intervals; the generous bound only guards against a hang).
    let dropped = tokio::time::timeout(Duration::from_secs(8), async {
        while raw.read_frame().await.is_some() {}
    })
    .await;
    assert!(dropped.is_ok(), "silent client was not disconnected");
    assert_broker_alive(&broker).await;
}

/// connection.start-ok with the AMQPLAIN mechanism (response: a field table
/// without its length prefix).
fn amqplain_start_ok(user: &str, password: &str) -> Vec<u8> {
    let mut response = shortstr("LOGIN");
    response.push(b'S');
    response.extend(longstr(user.as_bytes()));
    response.extend(shortstr("PASSWORD"));
    response.push(b'S');
    response.extend(longstr(password.as_bytes()));
    let mut a = 0u32.to_be_bytes().to_vec();
    a.extend(shortstr("AMQPLAIN"));
    a.extend(longstr(&response));
    a.extend(shortstr("en_US"));
    method_frame(0, 10, 11, &a)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqplain_login_works() {
    let broker = start().await;
    let mut raw = RawConn::tcp(broker.addr()).await;
    raw.send(PROTOCOL_HEADER).await;
    raw.read_method().await;
    raw.send(&amqplain_start_ok("guest", "guest")).await;
    let tune = raw.read_method().await;
    assert_eq!(tune.method_ids(), Some((10, 30)), "expected connection.tune");
    let a = tune.args();
    let frame_max = u32::from_be_bytes([a[2], a[3], a[4], a[5]]);
    raw.send(&tune_ok(0, frame_max, 0)).await;
    raw.send(&connection_open("/")).await;
    assert_eq!(raw.read_method().await.method_ids(), Some((10, 41)));
    raw.send(&channel_open(1)).await;
    assert_eq!(raw.read_method().await.method_ids(), Some((20, 11)));

    // And a wrong AMQPLAIN password is refused.
    let mut raw = RawConn::tcp(broker.addr()).await;
    raw.send(PROTOCOL_HEADER).await;
    raw.read_method().await;
    raw.send(&amqplain_start_ok("guest", "nope")).await;
    while let Some(f) = raw.read_frame().await {
        assert_ne!(f.method_ids(), Some((10, 30)), "tuned with a bad password");
        if f.method_ids() == Some((10, 50)) {
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_mechanism_is_refused() {
    let broker = start().await;
    let mut raw = RawConn::tcp(broker.addr()).await;
    raw.send(PROTOCOL_HEADER).await;
    raw.read_method().await;
    let mut a = 0u32.to_be_bytes().to_vec();
    a.extend(shortstr("EXTERNAL"));
    a.extend(longstr(b""));
    a.extend(shortstr("en_US"));
    raw.send(&method_frame(0, 10, 11, &a)).await;
    while let Some(f) = raw.read_frame().await {
        assert_ne!(f.method_ids(), Some((10, 30)), "tuned with an unsupported mechanism");
        if f.method_ids() == Some((10, 50)) {
            break;
        }
    }
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_more_channels_than_channel_max_is_not_allowed_530() {
    // RabbitMQ and LavinMQ: "number of channels opened (N) has reached the
    // negotiated channel_max (N)", a 530 NOT_ALLOWED connection error.
    let broker = start_with(|c| c.amqp.channel_max = 4).await;
    let mut raw = RawConn::open(broker.addr()).await;
    for n in 1..=4u16 {
        raw.send(&channel_open(n)).await;
        let ok = raw.read_method().await;
        assert_eq!((ok.channel, ok.method_ids()), (n, Some((20, 11))));
    }
    raw.send(&channel_open(5)).await;
    let close = raw.expect_connection_close().await;
    assert_eq!(close.code, 530, "{close:?}");
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossing_channel_closes_end_the_channel_and_spare_the_connection() {
    let broker = start().await;
    let mut raw = RawConn::open(broker.addr()).await;
    raw.send(&channel_open(1)).await;
    assert_eq!(raw.read_method().await.method_ids(), Some((20, 11)));
    // In one write: a passive declare of a missing queue (the broker closes
    // the channel with 404) and the client's own channel.close, so the two
    // closes cross.
    let mut declare = vec![0, 0];
    declare.extend(shortstr("no-such-queue"));
    declare.push(1); // passive
    declare.extend(0u32.to_be_bytes());
    let mut close = 200u16.to_be_bytes().to_vec();
    close.extend(shortstr("bye"));
    close.extend([0, 0, 0, 0]);
    let mut both = method_frame(1, 50, 10, &declare);
    both.extend(method_frame(1, 20, 40, &close));
    raw.send(&both).await;
    let theirs = raw.expect_channel_close().await;
    assert_eq!((theirs.channel, theirs.code), (1, 404), "{theirs:?}");
    let ok = raw.read_method().await;
    assert_eq!(
        (ok.channel, ok.method_ids()),
        (1, Some((20, 41))),
        "close-ok for the client's close"
    );
    // A publish the client sent before it saw either close arrives, then its
    // close-ok for the broker's close: both are dropped quietly.
    let mut late = basic_publish(1, "", "q");
    late.extend(content_header(1, 0));
    late.extend(method_frame(1, 20, 41, &[]));
    raw.send(&late).await;
    // The connection is unharmed: the channel number opens again.
    raw.send(&channel_open(1)).await;
    let reopened = raw.read_method().await;
    assert_eq!(
        (reopened.channel, reopened.method_ids()),
        (1, Some((20, 11))),
        "{reopened:?}"
    );
    raw.send(&method_frame(0, 10, 50, &close)).await;
    assert_eq!(raw.read_method().await.method_ids(), Some((10, 51)));
    assert_broker_alive(&broker).await;
}
