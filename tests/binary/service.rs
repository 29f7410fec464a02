//! Running under a service manager: systemd's readiness, reload and stop
//! notifications and watchdog pings, journald's line format, SIGHUP reloading
//! the config file without dropping clients, the pidfile's life, and the
//! flags LavinMQ accepts that have no work to do here.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;

use crate::process::{BIN, BrokerProcess, TIMEOUT, free_port, send_signal, within};

/// Reads notifications from `socket` until one contains `wanted`, returning
/// every message seen (the last one holds `wanted`).
fn wait_for_notification(socket: &UnixDatagram, wanted: &str) -> Vec<String> {
    let deadline = Instant::now() + TIMEOUT;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if let Ok(n) = socket.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            let done = msg.lines().any(|l| l == wanted);
            seen.push(msg);
            if done {
                return seen;
            }
        }
    }
    panic!("no {wanted} notification; got {seen:?}");
}

#[test]
fn systemd_hears_ready_only_once_listening_then_reloading_watchdog_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let notify_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&notify_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let (amqp, http, mqtt) = (free_port(), free_port(), free_port());
    let mut child = Command::new(BIN)
        .arg("-D")
        .arg(dir.path().join("data"))
        .args(["--metrics-http-port", "0"])
        .args(["-p", &amqp.to_string()])
        .args(["--http-port", &http.to_string()])
        .args(["--mqtt-port", &mqtt.to_string(), "--stream-port", "0"])
        .arg("--control-unix-path")
        .arg(dir.path().join("ctl.sock"))
        .env("NOTIFY_SOCKET", &notify_path)
        .env("WATCHDOG_USEC", "200000")
        .env_remove("WATCHDOG_PID")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ready = wait_for_notification(&socket, "READY=1");
    // Every listener accepts the moment systemd hears READY=1.
    for port in [amqp, http, mqtt] {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("port {port} not listening at READY=1: {e}"));
    }
    let ready = ready.last().unwrap();
    assert!(ready.contains(&format!("MAINPID={}", child.id())), "{ready}");
    wait_for_notification(&socket, "WATCHDOG=1");

    send_signal(child.id(), rustix::process::Signal::HUP);
    let reload = wait_for_notification(&socket, "RELOADING=1");
    let reloading = reload.last().unwrap();
    assert!(reloading.contains("MONOTONIC_USEC="), "{reloading}");
    wait_for_notification(&socket, "READY=1");

    send_signal(child.id(), rustix::process::Signal::TERM);
    wait_for_notification(&socket, "STOPPING=1");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// The broker on `dir`, every listener on an ephemeral port.
fn ephemeral_broker(dir: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("-D").arg(dir.join("data")).args([
        "-p",
        "0",
        "--http-port",
        "0",
        "--mqtt-port",
        "0",
        "--stream-port",
        "0",
        "--metrics-http-port",
        "0",
    ]);
    cmd.arg("--control-unix-path").arg(dir.join("ctl.sock"));
    cmd
}

#[test]
fn under_journald_lines_carry_a_priority_and_no_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    let st = rustix::fs::fstat(&writer).unwrap();
    let mut child = ephemeral_broker(dir.path())
        .env("JOURNAL_STREAM", format!("{}:{}", st.st_dev, st.st_ino))
        .stdout(writer)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(reader).lines();
    let line = lines
        .by_ref()
        .map(|l| l.unwrap())
        .find(|l| l.contains("AMQP listening on"))
        .expect("listening line");
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.starts_with("<6>"), "journald priority prefix missing: {line:?}");
    assert!(!line.contains("\u{1b}["), "no colours for the journal: {line:?}");
    // The usual line starts with its time (`2026-12-01T10:00:00.000000Z`).
    let rest = line[3..].trim_start();
    assert!(rest.starts_with("INFO"), "no timestamp of its own: {line:?}");
}

/// Log lines written to a pipe carry no colour codes even without `NO_COLOR`:
/// colours are for terminals only.
#[test]
fn log_lines_to_a_pipe_have_no_colours() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = ephemeral_broker(dir.path())
        .env_remove("NO_COLOR")
        .env_remove("JOURNAL_STREAM")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        let listening = line.contains("AMQP listening on");
        lines.push(line);
        if listening {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        lines.last().is_some_and(|l| l.contains("AMQP listening on")),
        "{lines:?}"
    );
    for line in &lines {
        assert!(!line.contains('\u{1b}'), "colour codes in piped output: {line:?}");
    }
}

/// Publishes a `size`-byte message on a new confirm channel of `conn`: `Ok`
/// when confirmed, `Err` with the channel's error otherwise.
async fn publish_sized(conn: &lapin::Connection, queue: &str, size: usize) -> Result<(), String> {
    let ch = conn.create_channel().await.map_err(|e| e.to_string())?;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let confirm = ch
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            &vec![b'x'; size],
            BasicProperties::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
    confirm.await.map(|_| ()).map_err(|e| e.to_string())
}

fn write_ini(path: &Path, log_level: &str, max_message_size: usize, segment_size: u64) {
    std::fs::write(
        path,
        format!(
            "[main]\nlog_level = {log_level}\nsegment_size = {segment_size}\n\
             [amqp]\nmax_message_size = {max_message_size}\n"
        ),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_a_new_log_level_and_limit_without_dropping_clients() {
    let dir = tempfile::tempdir().unwrap();
    let ini = dir.path().join("lavinmq.ini");
    write_ini(&ini, "info", 2048, 8 * 1024 * 1024);
    let pidfile = dir.path().join("lavinmq.pid");
    let broker = BrokerProcess::spawn_with(&dir.path().join("data"), Some(&ini), |cmd| {
        cmd.arg("--pidfile").arg(&pidfile);
    });
    let pid_text = std::fs::read_to_string(&pidfile).unwrap();
    assert_eq!(pid_text.trim(), broker.pid().to_string());
    let conn = broker.connect().await;
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare("reload".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap();
    within("publish before reload", publish_sized(&conn, "reload", 1500))
        .await
        .expect("1500 bytes are within the limit at start");

    // Warn level hides the info lines that a new connection logs; the lower
    // limit refuses the same message; the segment size waits for a restart.
    write_ini(&ini, "warn", 1024, 4 * 1024 * 1024);
    send_signal(broker.pid(), rustix::process::Signal::HUP);
    let deadline = Instant::now() + TIMEOUT;
    while !broker.log_text().contains("take effect only after a restart") {
        assert!(Instant::now() < deadline, "no restart notice:\n{}", broker.log_text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        broker.log_text().contains("[main] segment_size"),
        "{}",
        broker.log_text()
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let quiet_from = broker.log_lines().len();
    let err = within("publish after reload", publish_sized(&conn, "reload", 1500))
        .await
        .expect_err("the reloaded limit refuses 1500 bytes");
    assert!(err.contains("PRECONDITION_FAILED") || err.contains("406"), "{err}");
    let second = broker.connect().await;
    second.close(200, "bye".into()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after: Vec<String> = broker.log_lines()[quiet_from..].to_vec();
    assert!(
        !after.iter().any(|l| l.contains("connection established")),
        "info lines still logged at warn level: {after:?}"
    );
    // The client that was connected across the reload still works.
    within("publish small", publish_sized(&conn, "reload", 100))
        .await
        .expect("the connection survived the reload");
    assert!(conn.status().connected());

    write_ini(&ini, "info", 1024, 4 * 1024 * 1024);
    send_signal(broker.pid(), rustix::process::Signal::HUP);
    let third_from = broker.log_lines().len();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let third = broker.connect().await;
        third.close(200, "bye".into()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        if broker.log_lines()[third_from..]
            .iter()
            .any(|l| l.contains("connection established"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "info level never came back");
    }
    drop(conn);
    let mut broker = broker;
    broker.stop();
    assert!(!pidfile.exists(), "the pidfile is removed at a clean exit");
}

#[test]
fn build_info_names_the_version_and_compiler() {
    let out = Command::new(BIN).arg("--build-info").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(env!("CARGO_PKG_VERSION")), "{text}");
    assert!(text.contains("rustc "), "{text}");
    assert!(text.contains("Features:"), "{text}");
}

#[test]
fn lavinmq_only_flags_start_the_broker_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::spawn_with(&dir.path().join("data"), None, |cmd| {
        cmd.args(["--tls-ktls=true", "--raise-gc-warn"]);
    });
    let log = broker.log_text();
    assert!(log.contains("'--tls-ktls' has no effect"), "{log}");
    assert!(log.contains("'--raise-gc-warn' has no effect"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_exchange_carries_the_log_by_level() {
    use futures_lite::StreamExt;
    use lapin::options::{BasicConsumeOptions, QueueBindOptions};
    let dir = tempfile::tempdir().unwrap();
    let ini = dir.path().join("lavinmq.ini");
    std::fs::write(&ini, "[main]\nlog_exchange = true\n").unwrap();
    let broker = BrokerProcess::spawn(&dir.path().join("data"), Some(&ini));
    let conn = broker.connect().await;
    let ch = conn.create_channel().await.unwrap();
    let q = ch
        .queue_declare("".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap();
    ch.queue_bind(
        q.name().clone(),
        "amq.lavinmq.log".into(),
        "info".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let mut consumer = ch
        .basic_consume(
            q.name().clone(),
            "".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    // A new connection logs an info line, which the queue then receives.
    let other = broker.connect().await;
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let delivery = within("a log line", consumer.next()).await.unwrap().unwrap();
        assert_eq!(delivery.routing_key.as_str(), "info");
        assert_eq!(
            delivery.properties.content_type().as_ref().map(|c| c.as_str()),
            Some("text/plain")
        );
        if String::from_utf8_lossy(&delivery.data).contains("connection established") {
            break;
        }
        assert!(Instant::now() < deadline, "no 'connection established' line");
    }
    other.close(200, "bye".into()).await.unwrap();
    // Clients may not publish to it: it is internal.
    let err = publish_to(&conn, "amq.lavinmq.log").await;
    assert!(err.contains("ACCESS_REFUSED") || err.contains("403"), "{err}");
}

/// Publishes to `exchange` on a new confirm channel; returns the error text.
async fn publish_to(conn: &lapin::Connection, exchange: &str) -> String {
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let res = async {
        ch.basic_publish(
            exchange.into(),
            "info".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default(),
        )
        .await?
        .await
    }
    .await;
    match res {
        Ok(c) => format!("published: {c:?}"),
        Err(e) => e.to_string(),
    }
}
