//! The control socket (the management API over a Unix socket, where every caller
//! is an administrator) and `load_definitions` (a definitions file imported at
//! start-up), against the in-process server.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::common::api::*;
use crate::common::*;
use lapin::ExchangeKind;
use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lavinmq::config::Config;
use lavinmq::server::{Server, StartError};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// RabbitMQ's hash of the password `guest`.
const GUEST_HASH: &str = "+pHuxkR9fCyrrwXjOD4BP4XbzO3l8LJr8YkThMgJ0yVHFRE+";

/// Decodes a `Transfer-Encoding: chunked` body.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = String::from_utf8_lossy(&raw[..eol]);
        let size_hex = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16).expect("chunk size");
        if size == 0 {
            return out;
        }
        let start = eol + 2;
        out.extend_from_slice(&raw[start..start + size]);
        raw = &raw[start + size + 2..];
    }
}

/// Sends one HTTP/1.1 request over the Unix socket at `path` (with Basic
/// credentials when `auth` is given) and returns the status and JSON body
/// (`Value::Null` when the body is empty or not JSON).
async fn ctl(path: &Path, method: &str, uri: &str, auth: Option<(&str, &str)>, body: Option<Value>) -> (u16, Value) {
    within("control socket request", async {
        let mut sock = UnixStream::connect(path).await.expect("connect to the control socket");
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut req = format!("{method} {uri} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
        if let Some((u, p)) = auth {
            use base64::Engine;
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
            req.push_str(&format!("Authorization: Basic {token}\r\n"));
        }
        if !body.is_empty() {
            req.push_str("Content-Type: application/json\r\n");
        }
        req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        sock.write_all(req.as_bytes()).await.expect("write request");
        let mut raw = Vec::new();
        sock.read_to_end(&mut raw).await.expect("read response");
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("end of the response head");
        let head = String::from_utf8_lossy(&raw[..split]).to_string();
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status code");
        let chunked = head
            .lines()
            .any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.contains("chunked"));
        let payload = if chunked {
            dechunk(&raw[split + 4..])
        } else {
            raw[split + 4..].to_vec()
        };
        (status, serde_json::from_slice(&payload).unwrap_or(Value::Null))
    })
    .await
}

/// The control socket path of a running test broker.
fn socket_of(b: &TestBroker) -> PathBuf {
    b.server().control_path().expect("control socket enabled").to_path_buf()
}

/// A config like the test helper's, for starts that are expected to fail.
fn bare_config(dir: &Path) -> Config {
    let mut config = Config::default();
    config.main.data_dir = dir.join("data");
    config.amqp.bind = "127.0.0.1".to_owned();
    config.amqp.port = 0;
    config.mgmt.port = 0;
    config.mqtt.port = 0;
    config.stream.port = Some(0);
    config.main.control_unix_path = dir.join("ctl.sock");
    config
}

/// Starts a server that must fail, and returns its error.
async fn start_error(config: &Config) -> StartError {
    match Server::start(config).await {
        Ok(server) => {
            server.shutdown().await;
            panic!("the server started");
        }
        Err(e) => e,
    }
}

#[tokio::test]
async fn api_without_credentials_over_the_socket() {
    let b = start().await;
    let path = socket_of(&b);
    assert_eq!(path, b.data_dir().join("ctl.sock"));
    let (status, overview) = ctl(&path, "GET", "/api/overview", None, None).await;
    assert_eq!(status, 200, "{overview}");
    assert!(overview.is_object(), "{overview}");
    let (status, me) = ctl(&path, "GET", "/api/whoami", None, None).await;
    assert_eq!(status, 200);
    assert_eq!(me["name"], "guest");
    assert_eq!(me["tags"], json!(["administrator"]));
    // Over TCP the same request still needs credentials.
    let api = Api::new(&b);
    let (status, _) = api.call(Method::GET, "/api/overview", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn socket_callers_are_administrators() {
    let b = start().await;
    let path = socket_of(&b);
    let api = Api::new(&b);
    let vhost = uniq("ctl-vhost");
    let (status, body) = ctl(&path, "PUT", &format!("/api/vhosts/{vhost}"), None, None).await;
    assert_eq!(status, 201, "{body}");
    api.get_ok(&format!("/api/vhosts/{vhost}")).await;
    let (status, _) = ctl(&path, "PUT", &format!("/api/vhosts/{vhost}"), None, None).await;
    assert_eq!(status, 204);
    let (status, defs) = ctl(&path, "GET", "/api/definitions", None, None).await;
    assert_eq!(status, 200);
    assert!(
        defs["vhosts"]
            .as_array()
            .expect("vhosts")
            .iter()
            .any(|v| v["name"] == vhost)
    );

    // A user without tags, which the TCP API refuses, is an administrator here;
    // the name it gives is the name requests act under.
    let (status, _) = ctl(
        &path,
        "PUT",
        "/api/users/plain",
        None,
        Some(json!({"password": "pw", "tags": ""})),
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = api
        .call(Method::GET, "/api/overview", Some(("plain", "pw")), None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, me) = ctl(&path, "GET", "/api/whoami", Some(("plain", "pw")), None).await;
    assert_eq!(status, 200);
    assert_eq!(me["name"], "plain");
    assert_eq!(me["tags"], json!(["administrator"]));
    let (status, body) = ctl(
        &path,
        "DELETE",
        &format!("/api/vhosts/{vhost}"),
        Some(("plain", "pw")),
        None,
    )
    .await;
    assert_eq!(status, 204, "{body}");
    // Credentials that are sent must be right.
    let (status, _) = ctl(&path, "GET", "/api/whoami", Some(("plain", "wrong")), None).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn socket_file_mode_is_0660() {
    let b = start().await;
    let meta = std::fs::metadata(socket_of(&b)).expect("socket file");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
}

#[tokio::test]
async fn socket_file_is_removed_on_shutdown_and_back_after_restart() {
    let mut b = start().await;
    let path = socket_of(&b);
    assert!(path.exists());
    b.restart().await;
    assert_eq!(socket_of(&b), path);
    let (status, _) = ctl(&path, "GET", "/api/overview", None, None).await;
    assert_eq!(status, 200);
    b.stop().await;
    assert!(!path.exists(), "socket file left behind");
}

#[tokio::test]
async fn stale_socket_is_replaced_and_missing_dirs_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).expect("bind stale socket"));
    assert!(stale.exists());
    let b = start_with(|c| c.main.control_unix_path = stale.clone()).await;
    let (status, _) = ctl(&stale, "GET", "/api/overview", None, None).await;
    assert_eq!(status, 200);
    b.stop().await;
    assert!(!stale.exists());

    let nested = dir.path().join("a/b/ctl.sock");
    let b = start_with(|c| c.main.control_unix_path = nested.clone()).await;
    let (status, _) = ctl(&nested, "GET", "/api/overview", None, None).await;
    assert_eq!(status, 200);
    b.stop().await;
}

#[tokio::test]
async fn empty_path_disables_the_socket() {
    let b = start_with(|c| c.main.control_unix_path = PathBuf::new()).await;
    assert!(b.server().control_path().is_none());
    b.stop().await;
}

#[tokio::test]
async fn unusable_socket_paths_refuse_to_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A regular file in the way is not deleted.
    let mut config = bare_config(dir.path());
    std::fs::write(&config.main.control_unix_path, b"keep me").expect("write file");
    let err = start_error(&config).await;
    assert!(matches!(err, StartError::UnixSocket(_)), "{err}");
    assert!(err.to_string().contains("ctl.sock"), "{err}");
    assert_eq!(
        std::fs::read(&config.main.control_unix_path).expect("file kept"),
        b"keep me"
    );
    // A path longer than a socket address can hold.
    config.main.control_unix_path = dir.path().join("x".repeat(120));
    let err = start_error(&config).await;
    assert!(err.to_string().contains("limit"), "{err}");
}

/// A definitions file with a user, a vhost, permissions, a policy, exchanges,
/// a queue and bindings between them.
fn definitions() -> Value {
    json!({
        "rabbit_version": "3.10.7",
        "users": [
            {"name": "loader", "password_hash": GUEST_HASH, "hashing_algorithm": "rabbit_password_hashing_sha256",
             "tags": ["management"]}
        ],
        "vhosts": [{"name": "boot"}],
        "permissions": [
            {"user": "loader", "vhost": "boot", "configure": ".*", "write": ".*", "read": ".*"}
        ],
        "policies": [
            {"vhost": "boot", "name": "cap", "pattern": "^jobs$", "apply-to": "queues",
             "definition": {"max-length": 10}, "priority": 0}
        ],
        "queues": [
            {"name": "jobs", "vhost": "boot", "durable": true, "auto_delete": false, "arguments": {}}
        ],
        "exchanges": [
            {"name": "work", "vhost": "boot", "type": "topic", "durable": true, "auto_delete": false,
             "internal": false, "arguments": {}},
            {"name": "fan", "vhost": "boot", "type": "fanout", "durable": true, "auto_delete": false,
             "internal": false, "arguments": {}}
        ],
        "bindings": [
            {"source": "work", "vhost": "boot", "destination": "jobs", "destination_type": "queue",
             "routing_key": "job.#", "arguments": {}},
            {"source": "fan", "vhost": "boot", "destination": "work", "destination_type": "exchange",
             "routing_key": "", "arguments": {}}
        ]
    })
}

/// Checks everything [`definitions`] defines, over AMQP and the API, and that
/// `jobs` holds `expected` messages.
async fn assert_defined(b: &TestBroker, expected: u32) {
    let conn = b.connect_url(&b.url_for("loader", "guest", "boot")).await;
    let ch = within("channel.open", conn.create_channel()).await.expect("channel");
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let q = ch
        .queue_declare("jobs".into(), passive, FieldTable::default())
        .await
        .expect("queue jobs exists");
    assert_eq!(q.message_count(), expected);
    for (name, kind) in [("work", ExchangeKind::Topic), ("fan", ExchangeKind::Fanout)] {
        let opts = ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        };
        ch.exchange_declare(name.into(), kind, opts, FieldTable::default())
            .await
            .unwrap_or_else(|e| panic!("exchange {name} exists: {e}"));
    }
    conn.close(200, "bye".into()).await.ok();

    let api = Api::new(b);
    let (status, me) = api
        .call(Method::GET, "/api/whoami", Some(("loader", "guest")), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(me["tags"], json!(["management"]));
    assert_eq!(api.get_ok("/api/queues/boot/jobs").await["policy"], "cap");
    assert_eq!(
        api.get_ok("/api/policies/boot/cap").await["definition"]["max-length"],
        10
    );
    let bindings = api.get_ok("/api/bindings/boot").await;
    let explicit: Vec<_> = bindings
        .as_array()
        .expect("bindings")
        .iter()
        .filter(|x| x["source"] != "")
        .collect();
    assert_eq!(explicit.len(), 2, "{bindings}");
}

#[tokio::test]
async fn load_definitions_at_start_and_again_at_restart() {
    let file_dir = tempfile::tempdir().expect("tempdir");
    let file = file_dir.path().join("definitions.json");
    std::fs::write(&file, definitions().to_string()).expect("write definitions");
    let mut b = start_with(|c| c.main.load_definitions = Some(file.clone())).await;
    assert_defined(&b, 0).await;

    // The imported bindings route: fan -> work -> jobs.
    let conn = b.connect_url(&b.url_for("loader", "guest", "boot")).await;
    let ch = within("channel.open", conn.create_channel()).await.expect("channel");
    confirm_select(&ch).await;
    publish_confirmed(&ch, "fan", "job.a", b"one").await;
    publish_confirmed(&ch, "work", "job.b", b"two").await;
    publish_confirmed(&ch, "work", "other", b"dropped").await;
    conn.close(200, "bye".into()).await.ok();

    // Importing again at the next start changes nothing and loses nothing.
    b.restart().await;
    assert_defined(&b, 2).await;
    b.stop().await;
}

#[tokio::test]
async fn broken_definitions_file_refuses_to_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = bare_config(dir.path());

    let missing = dir.path().join("missing.json");
    config.main.load_definitions = Some(missing);
    let err = start_error(&config).await;
    assert!(matches!(err, StartError::Definitions { .. }), "{err}");
    assert!(err.to_string().contains("missing.json"), "{err}");

    let invalid = dir.path().join("invalid.json");
    std::fs::write(&invalid, b"{\"queues\": [").expect("write");
    config.main.load_definitions = Some(invalid);
    let err = start_error(&config).await;
    assert!(err.to_string().contains("invalid.json"), "{err}");

    // Well-formed JSON that cannot be applied (a queue in a vhost that does not exist).
    let unknown = dir.path().join("unknown-vhost.json");
    let defs = json!({"queues": [{"name": "q", "vhost": "nowhere", "durable": true}]});
    std::fs::write(&unknown, defs.to_string()).expect("write");
    config.main.load_definitions = Some(unknown);
    let err = start_error(&config).await;
    let text = err.to_string();
    assert!(
        text.contains("unknown-vhost.json") && text.contains("nowhere"),
        "{text}"
    );
    // The failed starts left no control socket behind.
    assert!(!config.main.control_unix_path.exists());
}
