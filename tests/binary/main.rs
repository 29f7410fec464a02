//! Tests of the real binaries, run as child processes: here configuration
//! errors, the bound port being logged, and graceful shutdown on SIGTERM with
//! 320 CONNECTION_FORCED; in the modules the service integration, taking over
//! a LavinMQ data directory, damaged data directories, crash safety, TLS,
//! the `lavinmqctl` and `lavinmqperf` tools, 10,000 connections and a soak.
//! They share one test binary so that the client libraries are compiled once.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BIN: &str = env!("CARGO_BIN_EXE_lavinmq");

#[path = "../common/mod.rs"]
mod common;
mod corruption;
mod crash;
mod lavinmq_fixture;
mod lavinmqctl;
mod lavinmqperf;
mod many_connections;
mod process;
mod service;
mod soak;
mod takeover;
mod tls;
mod tls_support;

fn write_ini(dir: &std::path::Path, text: &str) -> std::path::PathBuf {
    let p = dir.join("lavinmq.ini");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn bad_value_exits_with_an_error_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let ini = write_ini(dir.path(), "[amqp]\nport = abc\n");
    let out = Command::new(BIN)
        .arg("-c")
        .arg(&ini)
        .arg("-D")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("port") && err.contains("abc"), "stderr: {err}");
}

#[test]
fn unknown_section_exits_with_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let ini = write_ini(dir.path(), "[bogus]\nx = 1\n");
    let out = Command::new(BIN)
        .arg("-c")
        .arg(&ini)
        .arg("-D")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus"));
}

/// Starts the binary on an ephemeral port and returns it with the bound port,
/// read from its log.
fn spawn(data: &std::path::Path, extra: &[&str]) -> (Child, u16) {
    let mut child = Command::new(BIN)
        .arg("-D")
        .arg(data)
        .args([
            "-p",
            "0",
            "--http-port",
            "0",
            "--metrics-http-port",
            "0",
            "--mqtt-port",
            "0",
            "--stream-port",
            "0",
        ])
        .arg("--control-unix-path")
        .arg(data.join("ctl.sock"))
        .args(extra)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let port = loop {
        let line = lines.next().expect("broker exited before listening").unwrap();
        if let Some(addr) = line.split("AMQP listening on ").nth(1) {
            let addr = addr.trim().trim_end_matches("\u{1b}[0m");
            break addr.rsplit(':').next().unwrap().parse::<u16>().unwrap();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, port)
}

fn sigterm(child: &Child) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a child's pid is positive");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    for _ in 0..200 {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("broker did not exit after SIGTERM");
}

/// Performs the AMQP handshake by hand and returns the open socket.
async fn handshake(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(b"AMQP\x00\x00\x09\x01").await.unwrap();
    let mut buf = vec![0u8; 4096];
    let _ = s.read(&mut buf).await.unwrap(); // connection.start
    let mut start_ok = Vec::new();
    start_ok.extend_from_slice(&[0, 10, 0, 11]);
    start_ok.extend_from_slice(&0u32.to_be_bytes()); // empty client properties
    start_ok.push(5);
    start_ok.extend_from_slice(b"PLAIN");
    let resp = b"\0guest\0guest";
    start_ok.extend_from_slice(&(resp.len() as u32).to_be_bytes());
    start_ok.extend_from_slice(resp);
    start_ok.push(5);
    start_ok.extend_from_slice(b"en_US");
    send_method(&mut s, &start_ok).await;
    let _ = s.read(&mut buf).await.unwrap(); // connection.tune
    let mut tune_ok = vec![0, 10, 0, 31]; // channel_max 0: the server's offer
    tune_ok.extend_from_slice(&0u16.to_be_bytes());
    tune_ok.extend_from_slice(&131072u32.to_be_bytes());
    tune_ok.extend_from_slice(&0u16.to_be_bytes());
    send_method(&mut s, &tune_ok).await;
    send_method(&mut s, &[0, 10, 0, 40, 1, b'/', 0, 0]).await;
    let n = s.read(&mut buf).await.unwrap(); // connection.open-ok
    assert!(n >= 12 && buf[7..11] == [0, 10, 0, 41], "expected open-ok");
    s
}

async fn send_method(s: &mut TcpStream, payload: &[u8]) {
    let mut f = vec![1, 0, 0];
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f.push(0xCE);
    s.write_all(&f).await.unwrap();
}

#[tokio::test]
async fn sigterm_closes_connections_with_connection_forced_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, port) = spawn(dir.path(), &[]);
    let mut sock = handshake(port).await;
    sigterm(&child);
    let mut buf = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(10), sock.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    // connection.close (10, 50) with reply code 320.
    assert!(n > 13, "no close frame received");
    assert_eq!(&buf[7..11], &[0, 10, 0, 50]);
    assert_eq!(u16::from_be_bytes([buf[11], buf[12]]), 320);
    send_method(&mut sock, &[0, 10, 0, 51]).await;
    assert!(wait_exit(&mut child).success());
}

#[tokio::test]
async fn durable_messages_survive_a_restart_of_the_binary() {
    use lapin::options::*;
    use lapin::types::FieldTable;
    use lapin::{BasicProperties, Connection, ConnectionProperties};

    let dir = tempfile::tempdir().unwrap();
    let (mut child, port) = spawn(dir.path(), &[]);
    let uri = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    let conn = Connection::connect(&uri, ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.queue_declare("kept".into(), durable, FieldTable::default())
        .await
        .unwrap();
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for i in 0..100u32 {
        let props = BasicProperties::default().with_delivery_mode(2);
        ch.basic_publish(
            "".into(),
            "kept".into(),
            BasicPublishOptions::default(),
            &i.to_be_bytes(),
            props,
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    let _ = conn.close(200, "bye".into()).await;
    sigterm(&child);
    assert!(wait_exit(&mut child).success());

    let (mut child, port) = spawn(dir.path(), &[]);
    let uri = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    let conn = Connection::connect(&uri, ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    let q = ch
        .queue_declare("kept".into(), durable, FieldTable::default())
        .await
        .unwrap();
    assert_eq!(q.message_count(), 100);
    for i in 0..100u32 {
        let m = ch
            .basic_get("kept".into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
            .expect("message");
        assert_eq!(m.delivery.data, i.to_be_bytes());
    }
    let _ = conn.close(200, "bye".into()).await;
    sigterm(&child);
    assert!(wait_exit(&mut child).success());
}

/// The HTTP API's port, from the broker's log line (waiting for it a while).
fn http_port(broker: &process::BrokerProcess) -> u16 {
    for _ in 0..100 {
        let found = broker
            .log_text()
            .lines()
            .find_map(|l| l.split("HTTP API listening on ").nth(1))
            .and_then(|addr| addr.trim().rsplit(':').next()?.parse().ok());
        if let Some(port) = found {
            return port;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no HTTP listener in the log:\n{}", broker.log_text())
}

#[tokio::test]
async fn the_node_name_comes_from_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let ini = dir.path().join("lavinmq.ini");
    std::fs::write(&ini, "[main]\nnode_name = rabbit@mq1\n").unwrap();
    let data = dir.path().join("data");
    let broker = process::BrokerProcess::spawn(&data, Some(&ini));
    let base = format!("http://127.0.0.1:{}", http_port(&broker));
    let get = |path: &str| {
        let url = format!("{base}{path}");
        async move {
            let r = reqwest::Client::new()
                .get(url)
                .basic_auth("guest", Some("guest"))
                .send()
                .await
                .expect("request");
            r.json::<serde_json::Value>().await.expect("json")
        }
    };
    let overview = get("/api/overview").await;
    assert_eq!(overview["node"], "rabbit@mq1", "{overview}");
    assert_eq!(overview["cluster_name"], "rabbit@mq1");
    let nodes = get("/api/nodes").await;
    assert_eq!(nodes[0]["name"], "rabbit@mq1", "{nodes}");
    let node = get("/api/nodes/rabbit@mq1").await;
    assert_eq!(node["name"], "rabbit@mq1", "{node}");
    let vhost = get("/api/vhosts/%2F").await;
    assert_eq!(vhost["cluster_state"]["rabbit@mq1"], "running", "{vhost}");
}
