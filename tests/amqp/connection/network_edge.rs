//! The network edge beyond TLS: PROXY protocol v1 and v2 in front of AMQP
//! (trusted and untrusted sources, the proxied address in the API and in
//! loopback checks), and AMQP, MQTT and HTTP over Unix sockets.
//!
//! Real clients (lapin, rumqttc, reqwest) cannot speak either, so each test
//! puts a small relay in front of the broker: it accepts the client's TCP
//! connection, opens its own to the broker (TCP or Unix socket), optionally
//! writes a PROXY header first, and then copies bytes both ways, which is
//! what HAProxy does.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::common::api::Api;
use crate::common::{TestBroker, within};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

/// Where a relay sends its connections.
#[derive(Clone)]
enum Upstream {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// Starts a relay on an ephemeral loopback port that forwards every
/// connection to `upstream`, writing `header` before the client's bytes.
async fn relay(upstream: Upstream, header: Vec<u8>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
    let addr = listener.local_addr().expect("relay addr");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (upstream, header) = (upstream.clone(), header.clone());
            tokio::spawn(async move {
                match upstream {
                    Upstream::Tcp(a) => {
                        if let Ok(s) = TcpStream::connect(a).await {
                            pipe(client, s, &header).await;
                        }
                    }
                    Upstream::Unix(p) => {
                        if let Ok(s) = UnixStream::connect(p).await {
                            pipe(client, s, &header).await;
                        }
                    }
                }
            });
        }
    });
    addr
}

async fn pipe<S: AsyncRead + AsyncWrite + Unpin>(mut client: TcpStream, mut server: S, header: &[u8]) {
    if server.write_all(header).await.is_ok() {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
    }
}

/// A version 1 header claiming the client is `source`.
fn v1(source: &str, broker: SocketAddr) -> Vec<u8> {
    let source: SocketAddr = source.parse().expect("source");
    format!(
        "PROXY TCP4 {} {} {} {}\r\n",
        source.ip(),
        broker.ip(),
        source.port(),
        broker.port()
    )
    .into_bytes()
}

/// A version 2 header claiming the client is `source`.
fn v2(source: &str, broker: SocketAddr) -> Vec<u8> {
    let source: SocketAddr = source.parse().expect("source");
    ppp::v2::Builder::with_addresses(
        ppp::v2::Version::Two | ppp::v2::Command::Proxy,
        ppp::v2::Protocol::Stream,
        (source, broker),
    )
    .build()
    .expect("v2 header")
}

async fn proxied_broker(trusted: &str) -> TestBroker {
    let trusted = trusted.to_owned();
    crate::common::start_with(move |c| {
        c.amqp.tcp_proxy_protocol = true;
        c.amqp.proxy_protocol_trusted_sources = trusted;
        c.main.default_user_only_loopback = false;
    })
    .await
}

/// The peer address the API shows for the only connection.
async fn peer_in_api(api: &Api) -> (String, u64) {
    crate::common::eventually("the connection is listed", || async {
        let conns = api.get_ok("/api/connections").await;
        conns.as_array().is_some_and(|a| a.len() == 1)
    })
    .await;
    let conns: Value = api.get_ok("/api/connections").await;
    let c = &conns[0];
    (
        c["peer_host"].as_str().expect("peer_host").to_owned(),
        c["peer_port"].as_u64().expect("peer_port"),
    )
}

async fn connect(addr: SocketAddr) -> lapin::Result<lapin::Connection> {
    crate::common::try_connect(&format!("amqp://guest:guest@{addr}/%2f")).await
}

#[tokio::test]
async fn proxy_v1_from_a_trusted_source_shows_the_client_address() {
    let b = proxied_broker("127.0.0.1").await;
    let front = relay(Upstream::Tcp(b.addr()), v1("192.0.2.10:40001", b.addr())).await;
    let conn = connect(front).await.expect("connects through the proxy");
    let ch = conn.create_channel().await.expect("channel");
    ch.queue_declare(
        "via-proxy".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("declare");
    assert_eq!(peer_in_api(&Api::new(&b)).await, ("192.0.2.10".to_owned(), 40001));
}

#[tokio::test]
async fn proxy_v2_from_a_trusted_network_shows_the_client_address() {
    let b = proxied_broker("10.0.0.0/8, 127.0.0.0/8").await;
    let dest = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, b.addr().port()));
    let front = relay(Upstream::Tcp(b.addr()), v2("[2001:db8::5]:50002", dest)).await;
    let conn = connect(front).await.expect("connects through the proxy");
    assert!(conn.status().connected());
    assert_eq!(peer_in_api(&Api::new(&b)).await, ("2001:db8::5".to_owned(), 50002));
}

#[tokio::test]
async fn an_untrusted_source_and_a_missing_header_are_refused_and_others_go_on() {
    let b = proxied_broker("10.9.9.9").await;
    let front = relay(Upstream::Tcp(b.addr()), v1("192.0.2.10:40001", b.addr())).await;
    assert!(
        connect(front).await.is_err(),
        "a header from an untrusted source is refused"
    );

    let b = proxied_broker("127.0.0.1").await;
    assert!(
        connect(b.addr()).await.is_err(),
        "a connection without a header is refused"
    );
    let garbage = relay(Upstream::Tcp(b.addr()), b"PROXY TCP4 not an address\r\n".to_vec()).await;
    assert!(connect(garbage).await.is_err(), "a malformed header is refused");
    let front = relay(Upstream::Tcp(b.addr()), v1("192.0.2.10:40001", b.addr())).await;
    let conn = connect(front).await.expect("a good header still works");
    assert!(conn.status().connected());
}

#[tokio::test]
async fn loopback_only_users_are_checked_against_the_proxied_address() {
    let b = crate::common::start_with(|c| {
        c.amqp.tcp_proxy_protocol = true;
        c.amqp.proxy_protocol_trusted_sources = "127.0.0.1".into();
        c.main.default_user_only_loopback = true;
    })
    .await;
    let remote = relay(Upstream::Tcp(b.addr()), v1("192.0.2.10:40001", b.addr())).await;
    let err = connect(remote)
        .await
        .expect_err("guest from a remote client is refused");
    assert_eq!(crate::common::reply_code(&err), Some(403), "{err:?}");
    let local = relay(Upstream::Tcp(b.addr()), v1("127.0.0.1:40002", b.addr())).await;
    connect(local).await.expect("guest from a local client logs in");
}

async fn unix_broker() -> (TestBroker, PathBuf, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("socket dir").keep();
    let (amqp, mqtt, http) = (dir.join("amqp.sock"), dir.join("mqtt.sock"), dir.join("http.sock"));
    let (a, m, h) = (amqp.clone(), mqtt.clone(), http.clone());
    let b = crate::common::start_with(move |c| {
        c.amqp.unix_path = Some(a);
        c.mqtt.unix_path = Some(m);
        c.mgmt.unix_path = Some(h);
    })
    .await;
    (b, amqp, mqtt, http)
}

#[tokio::test]
async fn amqp_mqtt_and_http_work_over_unix_sockets() {
    let (b, amqp, mqtt, http) = unix_broker().await;

    // AMQP: the loopback-only default user may log in, as the socket is local.
    let front = relay(Upstream::Unix(amqp.clone()), Vec::new()).await;
    let conn = connect(front).await.expect("AMQP over the unix socket");
    let ch = conn.create_channel().await.expect("channel");
    ch.queue_declare(
        "over-unix".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("declare");
    crate::common::publish(&ch, "", "over-unix", b"hello").await;

    // HTTP: the same API, with credentials; the message is there.
    let front = relay(Upstream::Unix(http.clone()), Vec::new()).await;
    let api = Api::at(format!("http://{front}"));
    let q = api.get_ok("/api/queues/%2f/over-unix").await;
    assert_eq!(q["messages"], 1, "{q}");
    let (status, _) = api.call(reqwest::Method::GET, "/api/overview", None, None).await;
    assert_eq!(status, 401, "the unix socket still needs credentials");

    // MQTT: a subscriber over the unix socket gets a message published over TCP.
    let front = relay(Upstream::Unix(mqtt.clone()), Vec::new()).await;
    let mut o = rumqttc::MqttOptions::new("unix-sub", front.ip().to_string(), front.port());
    o.set_keep_alive(std::time::Duration::from_secs(30));
    let mut sub = crate::common::mqtt::connect(o).await;
    sub.subscribe_ok("edge/unix", rumqttc::QoS::AtLeastOnce).await;
    let mut publisher = crate::common::mqtt::connect(crate::common::mqtt::options(&b, "tcp-pub")).await;
    publisher
        .publish("edge/unix", rumqttc::QoS::AtLeastOnce, false, b"over unix")
        .await;
    let p = sub.next_publish().await;
    assert_eq!(&p.payload[..], b"over unix");

    // The files go away with the broker.
    b.stop().await;
    for path in [&amqp, &mqtt, &http] {
        assert!(!path.exists(), "{} removed at shutdown", path.display());
    }
}

#[tokio::test]
async fn a_file_in_the_way_of_a_unix_socket_stops_the_start() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("not-a-socket");
    std::fs::write(&path, b"keep me").expect("write");
    let mut config = lavinmq::config::Config::default();
    config.main.data_dir = dir.path().join("data");
    config.main.control_unix_path = dir.path().join("ctl.sock");
    config.main.metrics_http_port = None;
    config.amqp.port = 0;
    config.mqtt.port = 0;
    config.stream.port = Some(0);
    config.mgmt.port = 0;
    config.amqp.unix_path = Some(path.clone());
    let err = within("start", lavinmq::server::Server::start(&config))
        .await
        .err()
        .expect("start fails");
    assert!(err.to_string().contains("is not a socket"), "{err}");
    assert_eq!(std::fs::read(&path).expect("still there"), b"keep me");
}
