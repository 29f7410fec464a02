//! TLS on the AMQPS, MQTTS and HTTPS listeners: handshakes and round trips over
//! each, WebSocket over TLS, minimum versions and cipher suites, certificates
//! picked by SNI, mutual TLS with SASL EXTERNAL and MQTT certificate login,
//! certificate reload (in process and by SIGHUP to the binary), and clients
//! that send plaintext or stop halfway through the handshake.

use crate::common;
use crate::process;
use crate::tls_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::api::Api;
use common::{TestBroker, uniq, within};
use futures_util::{SinkExt, StreamExt};
use lavinmq::amqp::codec::{Frame, Method, parse_frame};
use lavinmq::config::{Config, SniConfig, TlsKeys};
use lavinmq::mqtt::codec::{Connect, MqttStr, Packet, ProtocolVersion, ReasonCode, write_packet};
use serde_json::Value;
use tempfile::TempDir;
use tls_support::amqp::Amqp;
use tls_support::client::{ClientTls, Tls, server_leaf};
use tls_support::logs;
use tls_support::mqtt::Mqtt;
use tls_support::pki::{Ca, Issued, subject};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

/// A CA and the broker's certificate for `localhost` and 127.0.0.1, on disk.
struct Certs {
    dir: TempDir,
    ca: Ca,
    ca_path: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Certs {
    fn new() -> Certs {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("Test CA");
        let ca_path = ca.write(dir.path(), "ca.pem");
        let (cert, key) = ca
            .server("localhost", &["localhost", "127.0.0.1"])
            .write(dir.path(), "server");
        Certs {
            dir,
            ca,
            ca_path,
            cert,
            key,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A client trusting this CA.
    fn client(&self) -> ClientTls {
        ClientTls::trusting(&self.ca)
    }
}

/// Starts a broker with `certs` on ephemeral TLS ports, after `tweak`.
async fn start_tls(certs: &Certs, tweak: impl FnOnce(&mut Config)) -> TestBroker {
    logs::capture();
    common::start_with(|c| {
        c.main.tls_cert = Some(certs.cert.clone());
        c.main.tls_key = Some(certs.key.clone());
        c.amqp.tls_port = Some(0);
        c.mqtt.tls_port = Some(0);
        c.mgmt.tls_port = Some(0);
        tweak(c);
    })
    .await
}

/// Loopback addresses of the TLS listeners.
fn amqps(b: &TestBroker) -> SocketAddr {
    loopback(b.server().amqps_addr().expect("AMQPS is bound"))
}

fn mqtts(b: &TestBroker) -> SocketAddr {
    loopback(b.server().mqtts_addr().expect("MQTTS is bound"))
}

fn https(b: &TestBroker) -> SocketAddr {
    loopback(b.server().https_addr().expect("HTTPS is bound"))
}

fn loopback(addr: SocketAddr) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], addr.port()))
}

/// The subject CN of the certificate the server presented.
fn served_cn(stream: &Tls) -> String {
    subject(&server_leaf(stream)).0
}

/// The connection the management API lists on local port `port` (waiting
/// briefly for it to appear).
async fn listed_connection(b: &TestBroker, port: u16) -> Value {
    let api = Api::new(b);
    for _ in 0..100 {
        let conns = api.get_ok("/api/connections").await;
        if let Some(c) = conns.as_array().unwrap().iter().find(|c| c["port"] == port) {
            return c.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no connection listed on port {port}");
}

/// Asserts that a TLS connection attempt was refused: the handshake failed,
/// or (TLS 1.3, where the client finishes before the server has checked its
/// certificate) the first read fails or finds the socket closed.
async fn assert_refused(attempt: std::io::Result<Tls>, what: &str) {
    let Ok(mut stream) = attempt else { return };
    let _ = stream.write_all(b"AMQP\x00\x00\x09\x01").await;
    let _ = stream.flush().await;
    let mut buf = [0u8; 64];
    match within(what, stream.read(&mut buf)).await {
        Ok(0) | Err(_) => {}
        Ok(n) => panic!("{what}: the server answered {:?}", &buf[..n]),
    }
}

/// Waits until a log line contains every one of `needles`.
async fn logged(needles: &[&str]) -> String {
    for _ in 0..200 {
        if let Some(line) = logs::lines_with(needles).pop() {
            return line;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("nothing logged with {needles:?}");
}

/// A user `name` (any password) with full permissions on `/`.
async fn add_user(b: &TestBroker, name: &str) {
    let api = Api::new(b);
    let status = api
        .put(
            &format!("/api/users/{name}"),
            serde_json::json!({"password": "not-used-here", "tags": ""}),
        )
        .await;
    assert!(status.is_success(), "create user {name}: {status}");
    let status = api
        .put(
            &format!("/api/permissions/%2F/{name}"),
            serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"}),
        )
        .await;
    assert!(status.is_success(), "permissions of {name}: {status}");
}

/// `GET path` over HTTPS with HTTP/1.1, as guest: status and body.
async fn https_get(stream: Tls, path: &str) -> (u16, String) {
    let mut stream = stream;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.flush().await.unwrap();
    let mut response = Vec::new();
    // The server may close without close_notify; what arrived is enough.
    let _ = within("HTTPS response", stream.read_to_end(&mut response)).await;
    let text = String::from_utf8_lossy(&response).to_string();
    let (head, body) = text.split_once("\r\n\r\n").expect("a whole HTTP response");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    (status, body.to_string())
}

// ---------------------------------------------------------------------------
// The three listeners
// ---------------------------------------------------------------------------

#[tokio::test]
async fn tls_listeners_are_not_bound_without_a_certificate() {
    let broker = common::start().await;
    let server = broker.server();
    assert_eq!(
        (server.amqps_addr(), server.mqtts_addr(), server.https_addr()),
        (None, None, None)
    );
}

#[tokio::test]
async fn a_tls_port_of_minus_one_leaves_that_listener_out() {
    let certs = Certs::new();
    let broker = start_tls(&certs, |c| c.mqtt.tls_port = None).await;
    let server = broker.server();
    assert!(server.amqps_addr().is_some() && server.https_addr().is_some());
    assert_eq!(server.mqtts_addr(), None);
    let listeners = Api::new(&broker).get_ok("/api/overview").await["listeners"].clone();
    let protocols: Vec<_> = listeners
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["protocol"].clone())
        .collect();
    assert!(
        protocols.contains(&"amqps".into()) && !protocols.contains(&"mqtts".into()),
        "{listeners}"
    );
}

#[tokio::test]
async fn a_proxy_protocol_header_comes_before_the_tls_handshake() {
    let certs = Certs::new();
    let broker = start_tls(&certs, |c| {
        c.amqp.tcp_proxy_protocol = true;
        c.amqp.proxy_protocol_trusted_sources = "127.0.0.0/8".into();
        c.main.default_user_only_loopback = false;
    })
    .await;
    let mut tcp = TcpStream::connect(amqps(&broker)).await.unwrap();
    let header = format!("PROXY TCP4 198.51.100.7 127.0.0.1 41000 {}\r\n", amqps(&broker).port());
    tcp.write_all(header.as_bytes()).await.unwrap();
    let stream = certs.client().handshake(tcp, "localhost").await.unwrap();
    let (mut c, _) = Amqp::start(stream).await;
    c.login("PLAIN", b"\0guest\0guest").await.unwrap();
    c.round_trip(&uniq("proxied-amqps"), b"behind a balancer").await;
    let conn = listed_connection(&broker, amqps(&broker).port()).await;
    assert_eq!(
        (&conn["peer_host"], &conn["peer_port"], &conn["ssl"]),
        (&"198.51.100.7".into(), &41000.into(), &true.into()),
        "{conn}"
    );

    // A TLS client that sends no header is refused; the listener goes on.
    assert_refused(certs.client().connect(amqps(&broker), "localhost").await, "no header").await;
    let mut tcp = TcpStream::connect(amqps(&broker)).await.unwrap();
    tcp.write_all(b"PROXY UNKNOWN\r\n").await.unwrap();
    let stream = certs.client().handshake(tcp, "localhost").await.unwrap();
    let (mut c, _) = Amqp::start(stream).await;
    c.login("PLAIN", b"\0guest\0guest").await.unwrap();
}

#[tokio::test]
async fn amqps_handshake_declare_publish_get() {
    let certs = Certs::new();
    let keylog = certs.path().join("keys.log");
    let broker = start_tls(&certs, |c| c.main.tls_keylog_file = Some(keylog.clone())).await;
    let stream = certs.client().connect(amqps(&broker), "localhost").await.unwrap();
    assert_eq!(served_cn(&stream), "localhost");
    let local_port = stream.get_ref().0.local_addr().unwrap().port();
    let (mut c, mechanisms) = Amqp::start(stream).await;
    assert_eq!(
        mechanisms,
        ["PLAIN", "AMQPLAIN"],
        "no EXTERNAL without a client certificate"
    );
    c.login("PLAIN", b"\0guest\0guest").await.unwrap();
    c.round_trip(&uniq("amqps"), b"over TLS").await;

    let conn = listed_connection(&broker, amqps(&broker).port()).await;
    assert_eq!(conn["ssl"], true, "{conn}");
    assert_eq!(conn["protocol"], "AMQP 0-9-1");
    assert_eq!(conn["peer_port"], local_port, "{conn}");
    assert_eq!(conn["ssl_protocol"], "tlsv1.3", "{conn}");
    assert!(
        conn["ssl_cipher"].as_str().is_some_and(|c| c.starts_with("TLS13_")),
        "{conn}"
    );
    assert!(conn.get("peer_cert_subject").is_none(), "no client certificate: {conn}");

    // The secrets of the session went to the key log.
    let secrets = std::fs::read_to_string(&keylog).unwrap();
    assert!(secrets.contains("CLIENT_TRAFFIC_SECRET_0 "), "{secrets}");

    // Plain AMQP on its own port is unaffected, and not listed as TLS.
    let (plain, ch) = broker.channel().await;
    common::declare_queue(&ch, &uniq("plain")).await;
    let conn = listed_connection(&broker, broker.server().amqp_addr().port()).await;
    assert_eq!(conn["ssl"], false, "{conn}");
    within("close", plain.close(200, "OK".into())).await.unwrap();
}

#[tokio::test]
async fn mqtts_connect_subscribe_publish() {
    let certs = Certs::new();
    let broker = start_tls(&certs, |_| {}).await;
    let stream = certs.client().connect(mqtts(&broker), "localhost").await.unwrap();
    let (mut c, ack) = Mqtt::connect(stream, &uniq("mqtts"), None).await;
    assert_eq!(ack.expect("CONNACK").code, ReasonCode::SUCCESS);
    let topic = format!("tls/{}", uniq("t"));
    c.subscribe(&topic).await;
    c.publish(&topic, b"secret").await;
    let got = c.next_publish().await;
    assert_eq!((got.topic.as_str(), &got.payload[..]), (topic.as_str(), &b"secret"[..]));

    let conn = listed_connection(&broker, mqtts(&broker).port()).await;
    assert_eq!(conn["ssl"], true, "{conn}");
    assert_eq!(conn["protocol"], "MQTT 3.1.1");
    assert_eq!(conn["user"], "guest");
}

#[tokio::test]
async fn https_serves_the_api() {
    let certs = Certs::new();
    let broker = start_tls(&certs, |_| {}).await;
    let stream = certs.client().connect(https(&broker), "localhost").await.unwrap();
    let (status, body) = https_get(stream, "/api/overview").await;
    assert_eq!(status, 200, "{body}");
    let overview: Value = serde_json::from_str(&body).unwrap();
    let listeners = overview["listeners"].as_array().unwrap();
    for (protocol, addr) in [
        ("amqps", amqps(&broker)),
        ("mqtts", mqtts(&broker)),
        ("https", https(&broker)),
    ] {
        assert!(
            listeners
                .iter()
                .any(|l| l["protocol"] == protocol && l["port"] == addr.port()),
            "{protocol} missing from {listeners:?}"
        );
    }
    // Authentication applies as over HTTP.
    let mut stream = certs.client().connect(https(&broker), "localhost").await.unwrap();
    stream
        .write_all(b"GET /api/overview HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    stream.flush().await.unwrap();
    let mut response = Vec::new();
    let _ = within("HTTPS response", stream.read_to_end(&mut response)).await;
    assert!(
        response.starts_with(b"HTTP/1.1 401"),
        "{}",
        String::from_utf8_lossy(&response)
    );
}

#[tokio::test]
async fn websocket_over_tls_carries_mqtt_and_amqp() {
    let certs = Certs::new();
    let broker = start_tls(&certs, |_| {}).await;
    let port = https(&broker).port();

    // MQTT: CONNECT, CONNACK, PINGREQ, PINGRESP as binary messages.
    let stream = certs.client().connect(https(&broker), "localhost").await.unwrap();
    let mut req = format!("wss://localhost:{port}/mqtt").into_client_request().unwrap();
    req.headers_mut()
        .insert("Sec-WebSocket-Protocol", HeaderValue::from_static("mqtt"));
    let (mut ws, resp) = within("WebSocket handshake", tokio_tungstenite::client_async(req, stream))
        .await
        .unwrap();
    assert_eq!(resp.headers()["Sec-WebSocket-Protocol"], "mqtt");
    let client_id = uniq("wss");
    let mut connect = bytes::BytesMut::new();
    let packet = Connect {
        protocol: ProtocolVersion::V3_1_1,
        clean_session: true,
        keep_alive: 30,
        client_id: MqttStr::try_from(client_id.as_str()).unwrap(),
        will: None,
        username: None,
        password: None,
        properties: None,
    };
    write_packet(
        &mut connect,
        &Packet::Connect(Box::new(packet)),
        ProtocolVersion::V3_1_1,
    )
    .unwrap();
    ws.send(Message::binary(connect.freeze())).await.unwrap();
    let ack = within("CONNACK", ws.next()).await.unwrap().unwrap();
    assert_eq!(ack.into_data().as_ref(), [0x20, 2, 0, 0], "CONNACK accepted");
    ws.send(Message::binary(vec![0xC0, 0])).await.unwrap();
    let pong = within("PINGRESP", ws.next()).await.unwrap().unwrap();
    assert_eq!(pong.into_data().as_ref(), [0xD0, 0]);
    let conn = listed_connection(&broker, port).await;
    assert_eq!(conn["ssl"], true, "{conn}");
    assert_eq!(conn["client_properties"]["client_id"], client_id.as_str());

    // AMQP: the protocol header is answered with connection.start.
    let stream = certs.client().connect(https(&broker), "localhost").await.unwrap();
    let mut req = format!("wss://localhost:{port}/").into_client_request().unwrap();
    req.headers_mut()
        .insert("Sec-WebSocket-Protocol", HeaderValue::from_static("amqp"));
    let (mut ws, _) = within("WebSocket handshake", tokio_tungstenite::client_async(req, stream))
        .await
        .unwrap();
    ws.send(Message::binary(b"AMQP\x00\x00\x09\x01".to_vec()))
        .await
        .unwrap();
    let start = within("connection.start", ws.next()).await.unwrap().unwrap();
    let mut buf = bytes::BytesMut::from(start.into_data().as_ref());
    match parse_frame(&mut buf, 0).unwrap() {
        Some(Frame::Method {
            method: Method::ConnectionStart { .. },
            ..
        }) => {}
        other => panic!("expected connection.start, got {other:?}"),
    }
}

#[tokio::test]
async fn the_key_is_read_from_the_certificate_file_when_tls_key_is_unset() {
    let certs = Certs::new();
    let combined = certs
        .ca
        .server("combined", &["localhost"])
        .write_combined(certs.path(), "combined");
    let broker = start_tls(&certs, |c| {
        c.main.tls_cert = Some(combined);
        c.main.tls_key = None;
    })
    .await;
    let stream = certs.client().connect(amqps(&broker), "localhost").await.unwrap();
    assert_eq!(served_cn(&stream), "combined");
    Amqp::open_as_guest(stream)
        .await
        .round_trip(&uniq("combined"), b"k")
        .await;
}

// ---------------------------------------------------------------------------
// Versions and cipher suites
// ---------------------------------------------------------------------------

#[tokio::test]
async fn tls13_minimum_refuses_a_tls12_client() {
    let certs = Certs::new();
    let broker = start_tls(&certs, |c| c.main.tls_min_version = Some("1.3".into())).await;
    let (me, refused) = certs
        .client()
        .tls12_only()
        .connect_from(amqps(&broker), "localhost")
        .await;
    assert!(refused.is_err(), "a TLS 1.2 client got through");
    let line = logged(&["AMQPS TLS handshake with", &me.to_string()]).await;
    assert!(line.contains("incompatible"), "{line}");
    let stream = certs.client().connect(amqps(&broker), "localhost").await.unwrap();
    assert_eq!(
        stream.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    Amqp::open_as_guest(stream)
        .await
        .round_trip(&uniq("tls13"), b"1.3")
        .await;
}

#[tokio::test]
async fn ciphers_limit_the_tls12_suites() {
    let certs = Certs::new();
    // rcgen's keys are ECDSA P-256, so the ECDSA suites are the usable ones.
    let broker = start_tls(&certs, |c| {
        c.main.tls_ciphers = Some("ECDHE-ECDSA-AES256-GCM-SHA384:!aNULL".into());
    })
    .await;
    let stream = certs
        .client()
        .tls12_only()
        .connect(amqps(&broker), "localhost")
        .await
        .unwrap();
    let conn = stream.get_ref().1;
    assert_eq!(conn.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_2));
    assert_eq!(
        conn.negotiated_cipher_suite().map(|s| s.suite()),
        Some(rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384)
    );
    Amqp::open_as_guest(stream)
        .await
        .round_trip(&uniq("suite"), b"gcm")
        .await;

    // Unusable settings stop the start with a clear error (checked before the
    // data dir, so this broker's lock is no obstacle).
    let mut config = broker.config.clone();
    config.main.tls_ciphers = Some("RC4-MD5:DES-CBC3-SHA".into());
    let err = lavinmq::server::Server::start(&config)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("tls_ciphers") && err.contains("RC4-MD5"), "{err}");
    config.main.tls_ciphers = None;
    config.main.tls_min_version = Some("1.4".into());
    let err = lavinmq::server::Server::start(&config)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("tls_min_version"), "{err}");
    config.main.tls_min_version = None;
    config.main.tls_cert = Some(certs.path().join("missing.pem"));
    let err = lavinmq::server::Server::start(&config)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("missing.pem"), "{err}");
}

// ---------------------------------------------------------------------------
// SNI
// ---------------------------------------------------------------------------

/// An `[sni:HOST]` section with this certificate and key.
fn sni_section(cert: PathBuf, key: PathBuf) -> SniConfig {
    SniConfig {
        tls: TlsKeys {
            cert: Some(cert),
            key: Some(key),
            ..TlsKeys::default()
        },
        ..SniConfig::default()
    }
}

#[tokio::test]
async fn sni_picks_the_certificate() {
    let certs = Certs::new();
    let dir = certs.path();
    let (other, other_key) = certs.ca.server("other.test", &["other.test"]).write(dir, "other");
    let (wild, wild_key) = certs.ca.server("wildcard", &["*.wild.test"]).write(dir, "wild");
    let mqtt_only = certs.ca.server("other.test for MQTT", &["other.test"]);
    // Key left unset: read from the certificate file, as LavinMQ does.
    let mqtt_only = mqtt_only.write_combined(dir, "other-mqtt");
    let broker = start_tls(&certs, |c| {
        let mut other = sni_section(other, other_key);
        other.mqtt.cert = Some(mqtt_only.clone());
        other.mqtt.key = Some(mqtt_only.clone());
        c.sni.insert("other.test".into(), other);
        c.sni.insert("*.wild.test".into(), sni_section(wild, wild_key));
    })
    .await;
    let client = certs.client();
    for (name, cn) in [
        ("localhost", "localhost"),
        ("127.0.0.1", "localhost"),
        ("other.test", "other.test"),
        ("OTHER.test", "other.test"),
        ("a.wild.test", "wildcard"),
    ] {
        let stream = client.connect(amqps(&broker), name).await.unwrap();
        assert_eq!(served_cn(&stream), cn, "AMQPS certificate for {name}");
    }
    // A name one label deeper than the wildcard gets the default certificate,
    // which does not cover it.
    let err = client.connect(amqps(&broker), "a.b.wild.test").await.unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");

    // The mqtt_ keys override the section's for MQTTS only.
    let stream = client.connect(mqtts(&broker), "other.test").await.unwrap();
    assert_eq!(served_cn(&stream), "other.test for MQTT");
    let stream = client.connect(https(&broker), "other.test").await.unwrap();
    assert_eq!(served_cn(&stream), "other.test");
    let (status, _) = https_get(stream, "/api/overview").await;
    assert_eq!(status, 200);
    let stream = client.connect(amqps(&broker), "x.wild.test").await.unwrap();
    let (_, names) = subject(&server_leaf(&stream));
    assert_eq!(names, ["*.wild.test"]);
}

// ---------------------------------------------------------------------------
// Mutual TLS
// ---------------------------------------------------------------------------

/// A broker that requires client certificates from `certs.ca`.
async fn start_mtls(certs: &Certs) -> TestBroker {
    let ca = certs.ca_path.clone();
    start_tls(certs, |c| {
        c.main.tls_verify_peer = true;
        c.main.tls_ca_cert = Some(ca);
    })
    .await
}

#[tokio::test]
async fn mutual_tls_accepts_a_good_certificate_and_refuses_none_a_foreign_or_an_expired_one() {
    let certs = Certs::new();
    let broker = start_mtls(&certs).await;
    let good = certs.ca.client("guest");
    let stream = certs
        .client()
        .with_identity(&good)
        .connect(amqps(&broker), "localhost")
        .await
        .unwrap();
    let mut c = Amqp::open_as_guest(stream).await;
    c.round_trip(&uniq("mtls"), b"verified").await;

    let (me, attempt) = certs.client().connect_from(amqps(&broker), "localhost").await;
    assert_refused(attempt, "a client without a certificate").await;
    logged(&["AMQPS TLS handshake with", &me.to_string(), "certificate"]).await;

    let foreign = Ca::new("Other CA").client("guest");
    let (me, attempt) = certs
        .client()
        .with_identity(&foreign)
        .connect_from(mqtts(&broker), "localhost")
        .await;
    assert_refused(attempt, "a client with another CA's certificate").await;
    logged(&["MQTTS TLS handshake with", &me.to_string(), "certificate"]).await;

    let expired = certs.ca.expired_client("guest");
    let (me, attempt) = certs
        .client()
        .with_identity(&expired)
        .connect_from(amqps(&broker), "localhost")
        .await;
    assert_refused(attempt, "a client with an expired certificate").await;
    logged(&["AMQPS TLS handshake with", &me.to_string(), "expired"]).await;

    // The verified connection was not disturbed.
    c.round_trip(&uniq("still"), b"up").await;
}

#[tokio::test]
async fn mutual_tls_in_an_sni_section_only() {
    let certs = Certs::new();
    let dir = certs.path();
    let (cert, key) = certs.ca.server("secure.test", &["secure.test"]).write(dir, "secure");
    let ca = certs.ca_path.clone();
    let broker = start_tls(&certs, |c| {
        let mut section = sni_section(cert, key);
        section.tls.verify_peer = Some(true);
        section.tls.ca_cert = Some(ca);
        c.sni.insert("secure.test".into(), section);
    })
    .await;
    // The default name needs no client certificate...
    let stream = certs.client().connect(amqps(&broker), "localhost").await.unwrap();
    Amqp::open_as_guest(stream).await.round_trip(&uniq("open"), b"x").await;
    // ...the secure one does.
    let attempt = certs.client().connect(amqps(&broker), "secure.test").await;
    assert_refused(attempt, "secure.test without a certificate").await;
    let id = certs.ca.client("guest");
    let stream = certs
        .client()
        .with_identity(&id)
        .connect(amqps(&broker), "secure.test")
        .await
        .unwrap();
    assert_eq!(served_cn(&stream), "secure.test");
    Amqp::open_as_guest(stream)
        .await
        .round_trip(&uniq("secure"), b"y")
        .await;
}

#[tokio::test]
async fn amqp_external_login_with_the_client_certificate() {
    let certs = Certs::new();
    let broker = start_mtls(&certs).await;
    let user = uniq("certuser");
    add_user(&broker, &user).await;

    let id = certs.ca.client(&user);
    let stream = certs
        .client()
        .with_identity(&id)
        .connect(amqps(&broker), "localhost")
        .await
        .unwrap();
    let local_port = stream.get_ref().0.local_addr().unwrap().port();
    let (mut c, mechanisms) = Amqp::start(stream).await;
    assert!(mechanisms.iter().any(|m| m == "EXTERNAL"), "{mechanisms:?}");
    c.login("EXTERNAL", b"").await.expect("EXTERNAL login");
    c.round_trip(&uniq("external"), b"as the certificate").await;
    let conn = Api::new(&broker)
        .get_ok("/api/connections")
        .await
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["peer_port"] == local_port)
        .cloned()
        .expect("listed");
    assert_eq!(conn["user"], user.as_str(), "{conn}");
    assert_eq!(conn["auth_mechanism"], "EXTERNAL");
    assert_eq!(conn["ssl"], true);
    assert_eq!(conn["peer_cert_subject"], format!("CN={user}"), "{conn}");

    // A certificate whose CN is no user is refused (403).
    let nobody = certs.ca.client(&uniq("nobody"));
    let stream = certs
        .client()
        .with_identity(&nobody)
        .connect(amqps(&broker), "localhost")
        .await
        .unwrap();
    let (mut c, _) = Amqp::start(stream).await;
    let (code, text) = c.login("EXTERNAL", b"").await.expect_err("no such user");
    assert_eq!(code, 403, "{text}");

    // PLAIN still works next to it.
    let stream = certs
        .client()
        .with_identity(&id)
        .connect(amqps(&broker), "localhost")
        .await
        .unwrap();
    Amqp::open_as_guest(stream).await;
}

#[tokio::test]
async fn mqtt_client_without_user_name_logs_in_as_the_certificate() {
    let certs = Certs::new();
    let broker = start_mtls(&certs).await;
    let user = uniq("device");
    add_user(&broker, &user).await;

    let id = certs.ca.client(&user);
    let stream = certs
        .client()
        .with_identity(&id)
        .connect(mqtts(&broker), "localhost")
        .await
        .unwrap();
    let client_id = uniq("cert-login");
    let (mut c, ack) = Mqtt::connect(stream, &client_id, None).await;
    assert_eq!(ack.expect("CONNACK").code, ReasonCode::SUCCESS);
    let topic = format!("devices/{}", uniq("d"));
    c.subscribe(&topic).await;
    c.publish(&topic, b"hello").await;
    assert_eq!(&c.next_publish().await.payload[..], b"hello");
    let conns = Api::new(&broker).get_ok("/api/connections").await;
    let conn = conns
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["client_properties"]["client_id"] == client_id.as_str())
        .expect("listed");
    assert_eq!(conn["user"], user.as_str(), "{conn}");
    assert_eq!(conn["auth_mechanism"], "EXTERNAL");

    let nobody = certs.ca.client(&uniq("nobody"));
    let stream = certs
        .client()
        .with_identity(&nobody)
        .connect(mqtts(&broker), "localhost")
        .await
        .unwrap();
    let (_, ack) = Mqtt::connect(stream, &uniq("refused"), None).await;
    assert_eq!(ack.expect("CONNACK").code, ReasonCode::BAD_USER_NAME_OR_PASSWORD);

    // A user name and password still decide when given.
    let stream = certs
        .client()
        .with_identity(&id)
        .connect(mqtts(&broker), "localhost")
        .await
        .unwrap();
    let (_, ack) = Mqtt::connect(stream, &uniq("pw"), Some(("guest", "guest"))).await;
    assert_eq!(ack.expect("CONNACK").code, ReasonCode::SUCCESS);
}

// ---------------------------------------------------------------------------
// Reload
// ---------------------------------------------------------------------------

/// Replaces the broker's certificate files with a certificate for localhost
/// whose subject CN is `cn`.
fn replace_server_cert(certs: &Certs, cn: &str) -> Issued {
    let issued = certs.ca.server(cn, &["localhost", "127.0.0.1"]);
    std::fs::write(&certs.cert, &issued.cert_pem).unwrap();
    std::fs::write(&certs.key, &issued.key_pem).unwrap();
    issued
}

#[tokio::test]
async fn reload_changes_the_certificate_for_new_connections_only() {
    let certs = Certs::new();
    replace_server_cert(&certs, "first");
    let broker = start_tls(&certs, |_| {}).await;
    let stream = certs.client().connect(amqps(&broker), "localhost").await.unwrap();
    assert_eq!(served_cn(&stream), "first");
    let mut open = Amqp::open_as_guest(stream).await;
    open.round_trip(&uniq("before"), b"1").await;

    replace_server_cert(&certs, "second");
    broker.server().reload_tls(&broker.config).expect("reload");
    for addr in [amqps(&broker), mqtts(&broker), https(&broker)] {
        let stream = certs.client().connect(addr, "localhost").await.unwrap();
        assert_eq!(served_cn(&stream), "second", "{addr}");
    }
    open.round_trip(&uniq("after"), b"2").await;

    // A broken certificate keeps the current one.
    std::fs::write(&certs.cert, "not a certificate").unwrap();
    let err = broker
        .server()
        .reload_tls(&broker.config)
        .expect_err("broken certificate");
    assert!(err.to_string().contains(&certs.cert.display().to_string()), "{err}");
    // A key that does not belong to the certificate, too.
    let third = certs.ca.server("third", &["localhost"]);
    std::fs::write(&certs.cert, &third.cert_pem).unwrap();
    let err = broker.server().reload_tls(&broker.config).expect_err("mismatched key");
    assert!(err.to_string().contains("certificate"), "{err}");
    let stream = certs.client().connect(amqps(&broker), "localhost").await.unwrap();
    assert_eq!(served_cn(&stream), "second");
    open.round_trip(&uniq("still"), b"3").await;

    // Turning TLS on needs a restart.
    let plain = common::start().await;
    let err = plain.server().reload_tls(&broker.config).expect_err("not bound");
    assert!(err.to_string().contains("restart"), "{err}");
}

#[tokio::test]
async fn sighup_reloads_the_certificate_of_the_running_binary() {
    let certs = Certs::new();
    replace_server_cert(&certs, "first");
    let data = tempfile::tempdir().unwrap();
    let ini = data.path().join("lavinmq.ini");
    std::fs::write(
        &ini,
        format!(
            "[main]\ntls_cert = {}\ntls_key = {}\n[amqp]\ntls_port = 0\n[mqtt]\ntls_port = 0\n[mgmt]\ntls_port = 0\n",
            certs.cert.display(),
            certs.key.display()
        ),
    )
    .unwrap();
    let broker = process::BrokerProcess::spawn(&data.path().join("data"), Some(&ini));
    let logged_port = || -> Option<u16> {
        broker.log_lines().iter().find_map(|l| {
            l.split("AMQPS listening on ")
                .nth(1)?
                .trim()
                .rsplit(':')
                .next()?
                .parse()
                .ok()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let port = loop {
        if let Some(port) = logged_port() {
            break port;
        }
        assert!(
            Instant::now() < deadline,
            "no AMQPS port logged:\n{}",
            broker.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let stream = certs.client().connect(addr, "localhost").await.unwrap();
    assert_eq!(served_cn(&stream), "first");
    let mut open = Amqp::open_as_guest(stream).await;

    replace_server_cert(&certs, "second");
    let pid = rustix::process::Pid::from_raw(broker.pid() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !broker.log_text().contains("TLS certificates reloaded") {
        assert!(Instant::now() < deadline, "no reload logged:\n{}", broker.log_text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stream = certs.client().connect(addr, "localhost").await.unwrap();
    assert_eq!(served_cn(&stream), "second");
    Amqp::open_as_guest(stream).await.round_trip(&uniq("new"), b"new").await;
    open.round_trip(&uniq("old"), b"old").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lavinmqperf_over_amqps() {
    let certs = Certs::new();
    let broker = start_tls(&certs, |_| {}).await;
    let port = amqps(&broker).port();
    let verified = format!(
        "amqps://guest:guest@localhost:{port}?cacertfile={}",
        certs.ca_path.display()
    );
    let unverified = format!("amqps://guest:guest@127.0.0.1:{port}?verify=none");
    for uri in [verified.as_str(), unverified.as_str()] {
        let args = ["throughput", "-C", "2000", "-D", "2000", "-j", "-q", "--uri", uri];
        let out = within(
            "lavinmqperf",
            tokio::process::Command::new(crate::process::PERF)
                .args(args)
                .kill_on_drop(true)
                .output(),
        )
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{uri}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summary: Value = serde_json::from_str(stdout.lines().find(|l| l.starts_with('{')).unwrap()).unwrap();
        assert!(summary["avg_consume_rate"].as_f64().unwrap() > 0.0, "{summary}");
    }
    // Verification is on by default: another CA's certificate is refused.
    let other = Ca::new("Other CA").write(certs.path(), "other-ca.pem");
    let uri = format!("amqps://guest:guest@localhost:{port}?cacertfile={}", other.display());
    let out = tokio::process::Command::new(crate::process::PERF)
        .args(["throughput", "-C", "10", "-D", "10", "--uri", &uri])
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("certificate"), "{stderr}");
}

// ---------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------

/// Reads until the server closes the socket; how long that took.
async fn wait_closed(sock: &mut TcpStream, limit: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    tokio::time::timeout(limit, async {
        loop {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the server did not close the socket within {limit:?}"));
    started.elapsed()
}

/// The start of a real ClientHello (`len` bytes of it).
fn client_hello_prefix(certs: &Certs, len: usize) -> Vec<u8> {
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut conn = rustls::ClientConnection::new(certs.client().config(), name).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    assert!(hello.len() > len, "ClientHello of {} bytes", hello.len());
    hello.truncate(len);
    hello
}

#[tokio::test]
async fn plaintext_to_the_amqps_port_is_closed_and_logged() {
    let certs = Certs::new();
    let broker = start_tls(&certs, |_| {}).await;
    let stream = certs.client().connect(amqps(&broker), "localhost").await.unwrap();
    let mut open = Amqp::open_as_guest(stream).await;

    let mut sock = TcpStream::connect(amqps(&broker)).await.unwrap();
    let me = sock.local_addr().unwrap().to_string();
    sock.write_all(b"AMQP\x00\x00\x09\x01").await.unwrap();
    wait_closed(&mut sock, Duration::from_secs(5)).await;
    let line = logged(&["AMQPS TLS handshake with", &me, "does not speak TLS"]).await;
    assert_eq!(logs::lines_with(&[&me]).len(), 1, "one line for {me}: {line}");

    open.round_trip(&uniq("unaffected"), b"fine").await;
    let stream = certs.client().connect(amqps(&broker), "localhost").await.unwrap();
    Amqp::open_as_guest(stream).await.round_trip(&uniq("next"), b"ok").await;
}

#[tokio::test]
async fn a_handshake_that_stops_halfway_is_closed_and_logged() {
    let certs = Certs::new();
    let broker = start_tls(&certs, |_| {}).await;
    let stream = certs.client().connect(amqps(&broker), "localhost").await.unwrap();
    let mut open = Amqp::open_as_guest(stream).await;
    let hello = client_hello_prefix(&certs, 40);

    // Half a ClientHello, then the client hangs up.
    let mut sock = TcpStream::connect(amqps(&broker)).await.unwrap();
    let me = sock.local_addr().unwrap().to_string();
    sock.write_all(&hello).await.unwrap();
    sock.shutdown().await.unwrap();
    wait_closed(&mut sock, Duration::from_secs(5)).await;
    logged(&["AMQPS TLS handshake with", &me]).await;

    // Half a ClientHello, then silence: closed after the handshake timeout.
    let mut sock = TcpStream::connect(amqps(&broker)).await.unwrap();
    let me = sock.local_addr().unwrap().to_string();
    sock.write_all(&hello).await.unwrap();
    let waited = wait_closed(&mut sock, Duration::from_secs(20)).await;
    assert!(waited >= Duration::from_secs(9), "closed after {waited:?}");
    logged(&["AMQPS TLS handshake with", "not completed within 10s", &me]).await;

    open.round_trip(&uniq("unaffected"), b"fine").await;
}
