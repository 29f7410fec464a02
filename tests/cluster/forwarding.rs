//! A follower forwards clients to the leader on every protocol port, and the
//! leader sees a forwarded AMQP client's own address (the follower sends a
//! PROXY header), not the follower's.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::harness::{Cluster, Etcd, LOG_IN_SYNC, TIMEOUT, http_request};

/// Connects to `port` on loopback, sends `hello` and reads the first bytes of
/// the answer; returns them with the local address the connection had.
fn exchange(port: u16, hello: &[u8]) -> (std::net::SocketAddr, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect through the follower");
    s.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    s.write_all(hello).expect("send");
    let mut back = vec![0u8; 64];
    let n = s.read(&mut back).unwrap_or(0);
    back.truncate(n);
    (s.local_addr().expect("local address"), back)
}

#[test]
fn followers_forward_every_protocol_and_the_leader_sees_the_client() {
    let etcd = Etcd::start();
    let cluster = Cluster::start(2, &etcd, true);
    let leader = cluster.wait_leader(Duration::from_secs(45));
    let follower = cluster.node(1 - leader);
    follower.expect_log(LOG_IN_SYNC, Duration::from_secs(45));
    let leader = cluster.node(leader);

    // AMQP: the leader's connection.start comes back, and the leader logs the
    // connection under the client's address and port.
    let mark = leader.log_len();
    let (client, back) = exchange(follower.amqp_port(), b"AMQP\x00\x00\x09\x01");
    assert_eq!(
        back.first(),
        Some(&1u8),
        "a method frame (connection.start) comes back: {back:?}"
    );
    leader.expect_log_after(mark, &format!("client={client}"), TIMEOUT);

    // AMQP 1.0 on the same port: the SASL layer's protocol header comes back
    // from the leader (a 0-9-1 broker would answer with its own header, or
    // nothing), which logs the client's own address.
    let mark = leader.log_len();
    let (client, back) = exchange(follower.amqp_port(), b"AMQP\x03\x01\x00\x00");
    assert!(
        back.starts_with(b"AMQP\x03\x01\x00\x00"),
        "the SASL protocol header comes back: {back:?}"
    );
    leader.expect_log_after(mark, &format!("client={client}"), TIMEOUT);

    // MQTT: a CONNECT (clean session, client id "fw", guest) is answered by
    // CONNACK 0.
    let connect = b"\x10\x1c\x00\x04MQTT\x04\xc2\x00\x3c\x00\x02fw\x00\x05guest\x00\x05guest";
    let (_, back) = exchange(follower.mqtt_port(), connect);
    assert_eq!(back, b"\x20\x02\x00\x00", "CONNACK accepted");

    // Stream protocol: a peer properties request (correlation id 7, no
    // properties) is answered by the leader: key 0x8011, correlation id 7,
    // response code 1 (OK).
    let request = b"\x00\x00\x00\x0c\x00\x11\x00\x01\x00\x00\x00\x07\x00\x00\x00\x00";
    let (_, back) = exchange(follower.stream_port(), request);
    assert!(back.len() >= 14, "a peer properties response: {back:?}");
    assert_eq!(&back[4..12], b"\x80\x11\x00\x01\x00\x00\x00\x07", "{back:?}");
    assert_eq!(&back[12..14], b"\x00\x01", "response code OK: {back:?}");

    // HTTP: the management API answers through the follower's port.
    let resp = http_request(
        "GET",
        &follower.http_addr(),
        "/api/overview",
        Some(("guest", "guest")),
        None,
        TIMEOUT,
    )
    .expect("HTTP through the follower");
    assert_eq!(resp.status, 200, "{}", resp.body);
}

/// The stream protocol's TLS port is forwarded too: TLS ends at the leader,
/// whose certificate the client checks through the follower's port.
#[test]
fn followers_forward_the_stream_tls_port() {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("certificate");
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).expect("write certificate");
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).expect("write key");
    let ini = format!(
        "[main]\ntls_cert = {}\ntls_key = {}\n",
        cert_path.display(),
        key_path.display()
    );
    let etcd = Etcd::start();
    let cluster = Cluster::start_with(2, &etcd, true, |_, cfg| cfg.tls_listeners(true).ini(ini.clone()));
    let leader = cluster.wait_leader(Duration::from_secs(45));
    let follower = cluster.node(1 - leader);
    follower.expect_log(LOG_IN_SYNC, Duration::from_secs(45));
    let port = follower.stream_tls_port().expect("a stream TLS port");

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).expect("trust the certificate");
    let config =
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("server name");
    let tls = rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("TLS client");
    let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect through the follower");
    tcp.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    let mut stream = rustls::StreamOwned::new(tls, tcp);
    // A peer properties request, answered by the leader as on the plain port.
    stream
        .write_all(b"\x00\x00\x00\x0c\x00\x11\x00\x01\x00\x00\x00\x07\x00\x00\x00\x00")
        .expect("send over TLS");
    let mut back = [0u8; 14];
    stream
        .read_exact(&mut back)
        .expect("a peer properties response over TLS");
    assert_eq!(&back[4..12], b"\x80\x11\x00\x01\x00\x00\x00\x07", "{back:?}");
    assert_eq!(&back[12..14], b"\x00\x01", "response code OK: {back:?}");
}
