//! Shovels across brands: RabbitMQ's own shovel plugin moving a queue into
//! this broker, and this broker's shovel moving one back into RabbitMQ. Runs
//! where Debian's `rabbitmq-server` is installed (`scripts/start-rabbitmq.sh`
//! installs it; the test setup does not, to keep the test command short) and
//! says why it skipped otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use serde_json::json;

use super::{add_shovel, fill, receive_at, shovel_in_state};
use crate::common::api::*;
use crate::common::*;

const RABBITMQ_BIN: &str = "/usr/lib/rabbitmq/bin";

/// A private RabbitMQ node (its own name, ports and data dir) with the shovel
/// plugin enabled, stopped when dropped.
struct Rabbit {
    base: tempfile::TempDir,
    node: String,
    port: u16,
}

impl Rabbit {
    /// Starts the node, or says why not and returns `None` when RabbitMQ is
    /// not installed.
    fn start() -> Option<Rabbit> {
        if !Path::new(RABBITMQ_BIN).join("rabbitmq-server").exists() {
            eprintln!("skipped: Debian's rabbitmq-server is not installed (scripts/start-rabbitmq.sh installs it)");
            return None;
        }
        let base = tempfile::tempdir().expect("temp dir");
        let (port, dist_port) = (free_port(), free_port());
        let node = format!("lavinmq-shovel-{port}@localhost");
        std::fs::write(base.path().join("enabled_plugins"), "[rabbitmq_shovel].\n").expect("plugins file");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/start-rabbitmq.sh");
        let status = Command::new("bash")
            .arg(script)
            .env("RABBITMQ_COMPAT_BASE", base.path())
            .env("RABBITMQ_COMPAT_NODENAME", &node)
            .env("RABBITMQ_COMPAT_PORT", port.to_string())
            .env("RABBITMQ_COMPAT_DIST_PORT", dist_port.to_string())
            .status()
            .expect("run scripts/start-rabbitmq.sh");
        let rabbit = Rabbit { base, node, port };
        assert!(status.success(), "RabbitMQ did not start");
        Some(rabbit)
    }

    fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2F", self.port)
    }

    fn home(&self) -> PathBuf {
        self.base.path().join("home")
    }

    /// Runs `rabbitmqctl` against the node; panics with its output on failure.
    fn ctl(&self, args: &[&str]) {
        let out = Command::new(Path::new(RABBITMQ_BIN).join("rabbitmqctl"))
            .arg("-n")
            .arg(&self.node)
            .args(args)
            .env("HOME", self.home())
            .output()
            .expect("run rabbitmqctl");
        assert!(
            out.status.success(),
            "rabbitmqctl {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Rabbit {
    fn drop(&mut self) {
        let _ = Command::new(Path::new(RABBITMQ_BIN).join("rabbitmqctl"))
            .arg("-n")
            .arg(&self.node)
            .arg("stop")
            .env("HOME", self.home())
            .output();
    }
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("local addr").port()
}

#[tokio::test]
async fn shovels_move_messages_from_rabbitmq_into_this_broker_and_back() {
    let Some(rabbit) = Rabbit::start() else {
        return;
    };
    let ours = start().await;
    let want: Vec<String> = (0..500).map(|i| format!("m{i}")).collect();

    // RabbitMQ's shovel, on-confirm, into a queue it declares here.
    let rconn = try_connect(&rabbit.url()).await.expect("connect to RabbitMQ");
    let rch = rconn.create_channel().await.expect("channel");
    rch.queue_declare("to-lavinmq".into(), durable(), FieldTable::default())
        .await
        .expect("declare on RabbitMQ");
    fill(&rch, "to-lavinmq", 0, 500).await;
    let value = json!({
        "src-uri": "amqp://", "src-queue": "to-lavinmq",
        "dest-uri": ours.url(), "dest-queue": "from-rabbitmq",
        "ack-mode": "on-confirm", "src-prefetch-count": 100,
    });
    rabbit.ctl(&["set_parameter", "shovel", "into-lavinmq", &value.to_string()]);
    assert_eq!(
        receive_at(&ours.url(), "from-rabbitmq", 500).await,
        want,
        "RabbitMQ's shovel delivered every message, once, in order"
    );
    eventually("RabbitMQ's source queue emptied", || async {
        message_count(&rconn, "to-lavinmq").await == 0
    })
    .await;

    // This broker's shovel, on-confirm, into a queue it declares at RabbitMQ.
    let (_c, ch) = ours.channel().await;
    ch.queue_declare(
        "to-rabbitmq".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("declare here");
    fill(&ch, "to-rabbitmq", 0, 500).await;
    let api = Api::new(&ours);
    add_shovel(
        &api,
        "into-rabbitmq",
        json!({"src-uri": "amqp://", "src-queue": "to-rabbitmq",
               "dest-uri": rabbit.url(), "dest-queue": "from-lavinmq", "ack-mode": "on-confirm"}),
    )
    .await;
    assert_eq!(
        receive_at(&rabbit.url(), "from-lavinmq", 500).await,
        want,
        "this broker's shovel delivered every message to RabbitMQ, once, in order"
    );
    shovel_in_state(&api, "into-rabbitmq", "running").await;
    eventually("the source queue here emptied", || async {
        message_count(&_c, "to-rabbitmq").await == 0
    })
    .await;
}
