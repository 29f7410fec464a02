//! Runs the `lavinmqctl` binary against an in-process broker, over its
//! control socket and over the HTTP API (`--uri`), and checks each command's
//! effect through the management API or AMQP.

use crate::common;

use std::path::Path;
use std::process::Stdio;

use common::api::*;
use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// What one run of the binary did.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts a zero exit code and returns the run.
    #[track_caller]
    fn ok(self) -> Run {
        assert_eq!(self.code, Some(0), "lavinmqctl failed: {self:?}");
        self
    }

    /// Asserts a failure with exit code `code` and returns the run.
    #[track_caller]
    fn fails_with(self, code: i32) -> Run {
        assert_eq!(self.code, Some(code), "expected exit code {code}: {self:?}");
        self
    }

    /// Standard output parsed as one JSON document.
    #[track_caller]
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    /// Standard output split into lines, each split into whitespace-separated cells.
    fn cells(&self) -> Vec<Vec<String>> {
        self.stdout
            .lines()
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect()
    }
}

/// Runs lavinmqctl with `args`, extra environment variables and optional
/// standard input, without any `LAVINMQCTL_*` variables of the test's own
/// environment.
async fn run_with(args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lavinmqctl"));
    cmd.args(args)
        .env_remove("LAVINMQCTL_HOST")
        .env_remove("LAVINMQCTL_CONTROL_UNIX_PATH")
        .envs(env.iter().copied())
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn lavinmqctl");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        pipe.write_all(input.as_bytes()).await.expect("write stdin");
        drop(pipe);
    }
    let out = within("lavinmqctl", child.wait_with_output())
        .await
        .expect("lavinmqctl output");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The control socket of `b`.
fn socket(b: &TestBroker) -> String {
    b.server()
        .control_path()
        .expect("control socket enabled")
        .display()
        .to_string()
}

/// Runs lavinmqctl against `b`'s control socket.
async fn ctl(b: &TestBroker, args: &[&str]) -> Run {
    let path = socket(b);
    let mut all = vec!["--control-unix-path", path.as_str()];
    all.extend_from_slice(args);
    run_with(&all, &[], None).await
}

/// The `--uri` of `b`'s HTTP API with the given credentials.
fn http_uri(b: &TestBroker, user: &str, password: &str) -> String {
    format!("http://{user}:{password}@{}", b.server().http_addr())
}

#[tokio::test]
async fn users_are_added_listed_tagged_given_permissions_and_deleted() {
    let b = start().await;
    let api = Api::new(&b);
    let user = uniq("ctl-user");

    ctl(&b, &["add_user", &user, "s3cret"]).await.ok();
    let shown = api.get_ok(&format!("/api/users/{}", enc(&user))).await;
    assert_eq!(shown["hashing_algorithm"], "rabbit_password_hashing_sha256");

    ctl(&b, &["set_user_tags", &user, "monitoring", "policymaker"])
        .await
        .ok();
    let shown = api.get_ok(&format!("/api/users/{}", enc(&user))).await;
    assert_eq!(shown["tags"], json!(["monitoring", "policymaker"]));

    // Text: an informational line, a header, one aligned row per user.
    let text = ctl(&b, &["list_users"]).await.ok();
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines[0], "Listing users ...");
    assert_eq!(text.cells()[1], ["name", "tags"]);
    let row = text.cells().into_iter().find(|r| r[0] == user).expect("user listed");
    assert_eq!(row, [user.as_str(), "monitoring,policymaker"]);
    let header_tags_at = lines[1].find("tags").expect("tags column");
    let row_line = lines.iter().find(|l| l.starts_with(&user)).expect("row");
    assert_eq!(
        row_line.find("monitoring"),
        Some(header_tags_at),
        "columns aligned: {text:?}"
    );

    // JSON: the default columns, with the broker's values.
    let listed = ctl(&b, &["-f", "json", "list_users"]).await.ok().json();
    let entry = listed
        .as_array()
        .expect("array")
        .iter()
        .find(|u| u["name"] == user.as_str())
        .expect("user in JSON")
        .clone();
    assert_eq!(entry, json!({"name": user, "tags": ["monitoring", "policymaker"]}));

    // Permissions in a vhost, then AMQP logins with the old and new password.
    ctl(&b, &["set_permissions", &user, "^c$", "^w$", ".*"]).await.ok();
    let perm = api.get_ok(&format!("/api/permissions/%2F/{}", enc(&user))).await;
    assert_eq!(
        (perm["configure"].as_str(), perm["write"].as_str()),
        (Some("^c$"), Some("^w$"))
    );
    assert_eq!(perm["read"], ".*");
    b.connect_url(&b.url_for(&user, "s3cret", "%2f")).await;

    // Topic permissions: set on two exchanges, listed per vhost and per
    // user, cleared on one exchange, then all.
    ctl(&b, &["set_topic_permissions", &user, "amq.topic", "^a\\.", "^b\\."])
        .await
        .ok();
    ctl(&b, &["set_topic_permissions", &user, "logs", ".*", "^$"])
        .await
        .ok();
    let listed = ctl(&b, &["list_topic_permissions"]).await.ok();
    assert_eq!(listed.cells()[1], ["user", "exchange", "write", "read"]);
    assert!(
        listed
            .cells()
            .iter()
            .any(|r| *r == [user.as_str(), "amq.topic", "^a\\.", "^b\\."]),
        "{listed:?}"
    );
    let of_user = ctl(&b, &["-f", "json", "list_user_topic_permissions", &user])
        .await
        .ok()
        .json();
    assert_eq!(
        of_user,
        json!([
            {"vhost": "/", "exchange": "amq.topic", "write": "^a\\.", "read": "^b\\."},
            {"vhost": "/", "exchange": "logs", "write": ".*", "read": "^$"},
        ])
    );
    ctl(&b, &["clear_topic_permissions", &user, "logs"]).await.ok();
    let left = api
        .get_ok(&format!("/api/users/{}/topic-permissions", enc(&user)))
        .await;
    assert_eq!(left.as_array().map(Vec::len), Some(1), "{left}");
    ctl(&b, &["clear_topic_permissions", &user]).await.ok();
    let left = api
        .get_ok(&format!("/api/users/{}/topic-permissions", enc(&user)))
        .await;
    assert_eq!(left, json!([]));

    ctl(&b, &["change_password", &user, "n3w"]).await.ok();
    assert!(try_connect(&b.url_for(&user, "s3cret", "%2f")).await.is_err());
    b.connect_url(&b.url_for(&user, "n3w", "%2f")).await;
    let shown = api.get_ok(&format!("/api/users/{}", enc(&user))).await;
    assert_eq!(shown["tags"], json!(["monitoring", "policymaker"]), "tags kept");

    // User limits: set from JSON, cleared one by one or all at once.
    let limits_path = format!("/api/user-limits/{}", enc(&user));
    ctl(
        &b,
        &["set_user_limits", &user, r#"{"max-connections": 4, "max-channels": 9}"#],
    )
    .await
    .ok();
    let limits = api.get_ok(&limits_path).await;
    assert_eq!(
        limits[0]["value"],
        json!({"max-connections": 4, "max-channels": 9}),
        "{limits}"
    );
    ctl(&b, &["clear_user_limits", &user, "max-channels"]).await.ok();
    assert_eq!(
        api.get_ok(&limits_path).await[0]["value"],
        json!({"max-connections": 4})
    );
    ctl(&b, &["clear_user_limits", &user, "all"]).await.ok();
    assert_eq!(api.get_ok(&limits_path).await, json!([]));
    let unknown = ctl(&b, &["set_user_limits", &user, r#"{"max-queues": 1}"#])
        .await
        .fails_with(2);
    assert!(unknown.stderr.contains("unknown limit 'max-queues'"), "{unknown:?}");
    let empty = ctl(&b, &["set_user_limits", &user, "{}"]).await.fails_with(2);
    assert!(
        empty.stderr.contains("max-connections or max-channels required"),
        "{empty:?}"
    );

    // Clearing tags: no tags given.
    ctl(&b, &["set_user_tags", &user]).await.ok();
    let shown = api.get_ok(&format!("/api/users/{}", enc(&user))).await;
    assert_eq!(shown["tags"], json!([]));

    ctl(&b, &["delete_user", &user]).await.ok();
    assert_eq!(
        api.get(&format!("/api/users/{}", enc(&user))).await.0,
        StatusCode::NOT_FOUND
    );
    let again = ctl(&b, &["delete_user", &user]).await.fails_with(1);
    assert!(again.stderr.contains("404"), "{again:?}");
}

#[tokio::test]
async fn hash_password_gives_a_hash_the_broker_accepts() {
    let b = start().await;
    let api = Api::new(&b);
    let hash = ctl(&b, &["hash_password", "pa55"]).await.ok().stdout.trim().to_string();
    // base64 of a 4-byte salt and a 32-byte SHA-256 digest.
    assert_eq!(hash.len(), 48, "{hash}");
    let quoted = ctl(&b, &["-f", "json", "hash_password", "pa55"]).await.ok().json();
    assert!(quoted.is_string(), "{quoted}");

    let user = uniq("hashed");
    let body = json!({"password_hash": hash, "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ""});
    assert_eq!(
        api.put(&format!("/api/users/{}", enc(&user)), body).await,
        StatusCode::CREATED
    );
    ctl(&b, &["set_permissions", &user, ".*", ".*", ".*"]).await.ok();
    b.connect_url(&b.url_for(&user, "pa55", "%2f")).await;

    // No broker is needed to hash.
    run_with(
        &["--control-unix-path", "/nonexistent/ctl.sock", "hash_password", "x"],
        &[],
        None,
    )
    .await
    .ok();
}

#[tokio::test]
async fn vhosts_are_added_listed_limited_and_deleted() {
    let b = start().await;
    let api = Api::new(&b);
    let vhost = format!("{}/with slash", uniq("vh"));

    ctl(&b, &["add_vhost", &vhost]).await.ok();
    api.get_ok(&format!("/api/vhosts/{}", enc(&vhost))).await;

    let text = ctl(&b, &["list_vhosts"]).await.ok();
    assert_eq!(text.stdout.lines().next(), Some("Listing vhosts ..."));
    assert!(text.stdout.lines().any(|l| l == vhost), "{text:?}");
    let listed = ctl(&b, &["list_vhosts", "--format", "json"]).await.ok().json();
    assert!(listed.as_array().expect("array").contains(&json!({"name": vhost})));
    let with_columns = ctl(&b, &["-f", "json", "list_vhosts", "name", "messages"])
        .await
        .ok()
        .json();
    assert!(
        with_columns
            .as_array()
            .expect("array")
            .contains(&json!({"name": vhost, "messages": 0}))
    );

    ctl(
        &b,
        &[
            "-p",
            &vhost,
            "set_vhost_limits",
            r#"{"max-queues": 1, "max-connections": 7}"#,
        ],
    )
    .await
    .ok();
    let limits = api.get_ok(&format!("/api/vhost-limits/{}", enc(&vhost))).await;
    assert_eq!(
        limits[0]["value"],
        json!({"max-queues": 1, "max-connections": 7}),
        "{limits}"
    );
    // The limit holds for queues created through lavinmqctl too.
    ctl(&b, &["-p", &vhost, "create_queue", "first"]).await.ok();
    let refused = ctl(&b, &["-p", &vhost, "create_queue", "second"]).await.fails_with(1);
    assert!(
        refused.stderr.contains("max-queues") || refused.stderr.contains("limit"),
        "{refused:?}"
    );

    let bad = ctl(&b, &["set_vhost_limits", "{not json"]).await.fails_with(2);
    assert!(bad.stderr.contains("invalid JSON"), "{bad:?}");
    let empty = ctl(&b, &["set_vhost_limits", "{}"]).await.fails_with(2);
    assert!(
        empty.stderr.contains("max-queues or max-connections required"),
        "{empty:?}"
    );

    ctl(&b, &["delete_vhost", &vhost]).await.ok();
    assert_eq!(
        api.get(&format!("/api/vhosts/{}", enc(&vhost))).await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn queues_are_created_listed_purged_paused_resumed_and_deleted() {
    let b = start().await;
    let api = Api::new(&b);
    let q = uniq("ctl-q");

    ctl(
        &b,
        &[
            "create_queue",
            &q,
            "--durable",
            "--max-length",
            "10",
            "--message-ttl",
            "60000",
            "--expires",
            "3600000",
            "--delivery-limit",
            "5",
            "--reject-on-overflow",
            "--dead-letter-exchange",
            "dlx",
            "--dead-letter-routing-key",
            "dead",
        ],
    )
    .await
    .ok();
    let shown = api.get_ok(&format!("/api/queues/%2F/{}", enc(&q))).await;
    assert_eq!(shown["durable"], true);
    assert_eq!(shown["auto_delete"], false);
    assert_eq!(
        shown["arguments"],
        json!({"x-max-length": 10, "x-message-ttl": 60000, "x-expires": 3600000, "x-delivery-limit": 5,
               "x-overflow": "reject-publish", "x-dead-letter-exchange": "dlx",
               "x-dead-letter-routing-key": "dead"})
    );

    let transient = uniq("ctl-transient");
    ctl(&b, &["create_queue", &transient, "--auto-delete"]).await.ok();
    let shown = api.get_ok(&format!("/api/queues/%2F/{}", enc(&transient))).await;
    assert_eq!(
        (shown["durable"].as_bool(), shown["auto_delete"].as_bool()),
        (Some(false), Some(true))
    );

    let stream = uniq("ctl-stream");
    ctl(&b, &["create_queue", &stream, "--durable", "--stream-queue"])
        .await
        .ok();
    let shown = api.get_ok(&format!("/api/queues/%2F/{}", enc(&stream))).await;
    assert_eq!(shown["arguments"]["x-queue-type"], "stream");

    let (_conn, ch) = b.channel().await;
    for body in [b"a", b"b", b"c"] {
        publish(&ch, "", &q, body).await;
    }
    eventually("3 messages in the queue", || async {
        api.get_ok(&format!("/api/queues/%2F/{}", enc(&q))).await["messages"] == 3
    })
    .await;

    let text = ctl(&b, &["list_queues"]).await.ok();
    assert_eq!(text.stdout.lines().next(), Some("Listing queues for vhost / ..."));
    assert_eq!(text.cells()[1], ["name", "messages"]);
    assert!(text.cells().contains(&vec![q.clone(), "3".to_string()]), "{text:?}");
    let listed = ctl(&b, &["-f", "json", "list_queues"]).await.ok().json();
    assert!(
        listed
            .as_array()
            .expect("array")
            .contains(&json!({"name": q, "messages": 3}))
    );

    // Columns chosen on the command line, dotted ones reaching into objects.
    let cols = ctl(
        &b,
        &["-f", "json", "list_queues", "name", "durable", "arguments.x-max-length"],
    )
    .await
    .ok()
    .json();
    assert!(
        cols.as_array()
            .expect("array")
            .contains(&json!({"name": q, "durable": true, "arguments.x-max-length": 10})),
        "{cols}"
    );

    ctl(&b, &["pause_queue", &q]).await.ok();
    assert_eq!(
        api.get_ok(&format!("/api/queues/%2F/{}", enc(&q))).await["state"],
        "paused"
    );
    let mut consumer = consume(&ch, &q).await;
    assert_no_delivery(&mut consumer).await;
    ctl(&b, &["resume_queue", &q]).await.ok();
    assert_eq!(
        api.get_ok(&format!("/api/queues/%2F/{}", enc(&q))).await["state"],
        "running"
    );
    let got = deliveries(&mut consumer, 3).await;
    assert_eq!(got[0].data, b"a");
    drop(consumer);

    let (_conn2, ch2) = b.channel().await;
    publish(&ch2, "", &transient, b"x").await;
    eventually("a message in the transient queue", || async {
        api.get_ok(&format!("/api/queues/%2F/{}", enc(&transient))).await["messages"] == 1
    })
    .await;
    ctl(&b, &["purge_queue", &transient]).await.ok();
    assert_eq!(
        api.get_ok(&format!("/api/queues/%2F/{}", enc(&transient))).await["messages"],
        0
    );

    ctl(&b, &["delete_queue", &stream]).await.ok();
    assert_eq!(
        api.get(&format!("/api/queues/%2F/{}", enc(&stream))).await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn queue_commands_in_another_vhost_and_with_delete_conditions() {
    let b = start().await;
    let api = Api::new(&b);
    let vhost = uniq("qvh");
    ctl(&b, &["add_vhost", &vhost]).await.ok();
    // -p after the command works as well as before it.
    ctl(&b, &["create_queue", "q1", "-p", &vhost, "--durable"]).await.ok();
    api.get_ok(&format!("/api/queues/{}/q1", enc(&vhost))).await;
    let listed = ctl(&b, &["--vhost", &vhost, "-f", "json", "list_queues"])
        .await
        .ok()
        .json();
    assert_eq!(listed, json!([{"name": "q1", "messages": 0}]));
    let info = ctl(&b, &["-p", &vhost, "list_queues"]).await.ok();
    assert_eq!(
        info.stdout.lines().next(),
        Some(format!("Listing queues for vhost {vhost} ...").as_str())
    );

    ctl(&b, &["set_permissions", "guest", ".*", ".*", ".*", "-p", &vhost])
        .await
        .ok();
    let conn = b.connect_url(&b.url_for("guest", "guest", &enc(&vhost))).await;
    let ch = within("channel.open", conn.create_channel()).await.expect("channel");
    publish(&ch, "", "q1", b"keep").await;
    eventually("a message in q1", || async {
        api.get_ok(&format!("/api/queues/{}/q1", enc(&vhost))).await["messages"] == 1
    })
    .await;
    let refused = ctl(&b, &["-p", &vhost, "delete_queue", "q1", "--if-empty"])
        .await
        .fails_with(1);
    assert!(
        refused.stderr.contains("400") || refused.stderr.contains("not empty"),
        "{refused:?}"
    );
    api.get_ok(&format!("/api/queues/{}/q1", enc(&vhost))).await;
    ctl(&b, &["-p", &vhost, "delete_queue", "q1", "--if-unused"]).await.ok();
    assert_eq!(
        api.get(&format!("/api/queues/{}/q1", enc(&vhost))).await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn exchanges_are_created_listed_and_deleted() {
    let b = start().await;
    let api = Api::new(&b);
    let e = uniq("ctl-ex");

    ctl(
        &b,
        &[
            "create_exchange",
            "topic",
            &e,
            "--durable",
            "--alternate-exchange",
            "amq.fanout",
        ],
    )
    .await
    .ok();
    let shown = api.get_ok(&format!("/api/exchanges/%2F/{}", enc(&e))).await;
    assert_eq!(shown["type"], "topic");
    assert_eq!(shown["durable"], true);
    assert_eq!(shown["internal"], false);
    assert_eq!(shown["arguments"], json!({"x-alternate-exchange": "amq.fanout"}));

    let internal = uniq("ctl-internal");
    ctl(
        &b,
        &["create_exchange", "fanout", &internal, "--internal", "--auto-delete"],
    )
    .await
    .ok();
    let shown = api.get_ok(&format!("/api/exchanges/%2F/{}", enc(&internal))).await;
    assert_eq!(
        (shown["internal"].as_bool(), shown["durable"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(shown["auto_delete"], true);

    let delayed = uniq("ctl-delayed");
    ctl(&b, &["create_exchange", "direct", &delayed, "--delayed"])
        .await
        .ok();
    let shown = api.get_ok(&format!("/api/exchanges/%2F/{}", enc(&delayed))).await;
    assert_eq!(shown["arguments"]["x-delayed-exchange"], true);

    let text = ctl(&b, &["list_exchanges"]).await.ok();
    assert_eq!(text.stdout.lines().next(), Some("Listing exchanges for vhost / ..."));
    assert_eq!(text.cells()[1], ["name", "type"]);
    assert!(text.cells().contains(&vec![e.clone(), "topic".to_string()]), "{text:?}");
    assert!(
        text.cells()
            .contains(&vec!["amq.fanout".to_string(), "fanout".to_string()])
    );
    let listed = ctl(&b, &["-f", "json", "list_exchanges"]).await.ok().json();
    assert!(
        listed
            .as_array()
            .expect("array")
            .contains(&json!({"name": e, "type": "topic"}))
    );

    let bad = ctl(&b, &["create_exchange", "no-such-type", &uniq("bad")])
        .await
        .fails_with(1);
    assert!(bad.stderr.starts_with("Error: "), "{bad:?}");

    ctl(&b, &["delete_exchange", &e]).await.ok();
    assert_eq!(
        api.get(&format!("/api/exchanges/%2F/{}", enc(&e))).await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn super_streams_are_added_and_deleted() {
    let b = start().await;
    let api = Api::new(&b);
    let name = uniq("ctl-super");
    ctl(&b, &["add_super_stream", &name, "--max-age", "1h"]).await.ok();
    let vhost = b.server().broker.vhost("/").unwrap();
    for i in 0..3 {
        let q = vhost.queue(&format!("{name}-{i}")).expect("partition");
        assert!(q.is_stream());
        assert_eq!(
            q.arguments()
                .get("x-max-age")
                .and_then(|v| v.as_str().map(str::to_owned)),
            Some("1h".to_owned())
        );
    }
    let bindings = api
        .get_ok(&format!("/api/exchanges/%2F/{}/bindings/source", enc(&name)))
        .await;
    let keys: Vec<&str> = bindings
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["routing_key"].as_str())
        .collect();
    assert_eq!(keys, ["0", "1", "2"]);
    // It exists: refused with the broker's reason.
    ctl(&b, &["add_super_stream", &name]).await.fails_with(1);

    let keyed = uniq("ctl-regions");
    ctl(&b, &["add_super_stream", &keyed, "--routing-keys", "eu,us"])
        .await
        .ok();
    assert!(vhost.queue(&format!("{keyed}-eu")).is_some_and(|q| q.is_stream()));
    assert!(vhost.queue(&format!("{keyed}-us")).is_some());

    ctl(&b, &["delete_super_stream", &name]).await.ok();
    assert!(vhost.exchange(&name).is_none());
    assert!((0..3).all(|i| vhost.queue(&format!("{name}-{i}")).is_none()));
    // Only a super stream is deleted so.
    ctl(&b, &["delete_super_stream", "amq.direct"]).await.fails_with(1);
    assert!(vhost.exchange("amq.direct").is_some());
    ctl(&b, &["delete_super_stream", &keyed]).await.ok();
    assert!(vhost.queue(&format!("{keyed}-eu")).is_none());
}

#[tokio::test]
async fn policies_are_set_listed_and_cleared() {
    let b = start().await;
    let api = Api::new(&b);
    let name = uniq("ctl-pol");

    ctl(
        &b,
        &[
            "set_policy",
            &name,
            "^ctl-",
            r#"{"max-length": 3}"#,
            "--priority",
            "4",
            "--apply-to",
            "queues",
        ],
    )
    .await
    .ok();
    let shown = api.get_ok(&format!("/api/policies/%2F/{}", enc(&name))).await;
    assert_eq!(shown["pattern"], "^ctl-");
    assert_eq!(shown["definition"], json!({"max-length": 3}));
    assert_eq!(shown["priority"], 4);
    assert_eq!(shown["apply-to"], "queues");

    let text = ctl(&b, &["list_policies"]).await.ok();
    assert_eq!(text.stdout.lines().next(), Some("Listing policies for vhost / ..."));
    assert_eq!(
        text.cells()[1],
        ["vhost", "name", "pattern", "apply-to", "definition", "priority"]
    );
    assert!(
        text.cells().contains(&vec![
            "/".into(),
            name.clone(),
            "^ctl-".into(),
            "queues".into(),
            r#"{"max-length":3}"#.into(),
            "4".into()
        ]),
        "{text:?}"
    );
    let listed = ctl(&b, &["-f", "json", "list_policies", "name", "definition"])
        .await
        .ok()
        .json();
    assert_eq!(listed, json!([{"name": name, "definition": {"max-length": 3}}]));

    let bad = ctl(&b, &["set_policy", "p", ".*", "{oops"]).await.fails_with(2);
    assert!(bad.stderr.contains("not valid JSON"), "{bad:?}");
    let not_object = ctl(&b, &["set_policy", "p", ".*", "[1]"]).await.fails_with(2);
    assert!(not_object.stderr.contains("JSON object"), "{not_object:?}");

    ctl(&b, &["clear_policy", &name]).await.ok();
    assert_eq!(
        api.get(&format!("/api/policies/%2F/{}", enc(&name))).await.0,
        StatusCode::NOT_FOUND
    );
    ctl(&b, &["clear_policy", &name]).await.fails_with(1);
}

#[tokio::test]
async fn connections_are_listed_and_closed_with_a_reason() {
    let b = start().await;
    let api = Api::new(&b);
    let conn = b.connect().await;
    let mut conn_events = events(&conn);
    let name = within("connection listed", async {
        loop {
            let list = api.get_ok("/api/connections").await;
            if let Some(n) = list.get(0).and_then(|c| c["name"].as_str()) {
                return n.to_string();
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;

    let text = ctl(&b, &["list_connections"]).await.ok();
    assert_eq!(text.stdout.lines().next(), Some("Listing connections ..."));
    assert_eq!(text.cells()[1], ["user", "peer_host", "peer_port", "state"]);
    assert_eq!(text.cells()[2][0], "guest");
    assert_eq!(text.cells()[2][1], "127.0.0.1");
    assert_eq!(text.cells()[2][3], "running");
    let listed = ctl(&b, &["-f", "json", "list_connections", "name", "user", "vhost"])
        .await
        .ok()
        .json();
    assert_eq!(listed, json!([{"name": name, "user": "guest", "vhost": "/"}]));
    let other_vhost = ctl(&b, &["-p", "no-such-vhost", "-f", "json", "list_connections"]).await;
    assert_eq!(other_vhost.code, Some(1), "{other_vhost:?}");

    let closing = ctl(&b, &["close_connection", &name, "maintenance now"]).await.ok();
    assert!(closing.stdout.contains(&format!("Closing connection {name} ...")));
    let text = expect_error(&mut conn_events, 320).await;
    assert!(text.contains("maintenance now"), "{text}");
    wait_connection_closed(&conn).await;
    // The client sees its socket close a moment before the broker drops the
    // connection from its registry; wait for that before asking again.
    eventually("closed connection unlisted", || async {
        api.get_ok("/api/connections").await.as_array().map(Vec::len) == Some(0)
    })
    .await;

    let missing = ctl(&b, &["close_connection", &name]).await.fails_with(1);
    assert!(missing.stderr.contains("404"), "{missing:?}");

    let c1 = b.connect().await;
    let c2 = b.connect().await;
    eventually("two connections", || async {
        api.get_ok("/api/connections").await.as_array().map(Vec::len) == Some(2)
    })
    .await;
    let closed = ctl(&b, &["-f", "json", "close_all_connections", "shutting down"])
        .await
        .ok()
        .json();
    assert_eq!(closed.as_array().map(Vec::len), Some(2), "{closed}");
    wait_connection_closed(&c1).await;
    wait_connection_closed(&c2).await;
    eventually("closed connections unlisted", || async {
        api.get_ok("/api/connections").await.as_array().map(Vec::len) == Some(0)
    })
    .await;
    let none = ctl(&b, &["-q", "close_all_connections"]).await.ok();
    assert_eq!(none.stdout.trim(), "name");
}

#[tokio::test]
async fn definitions_are_exported_and_imported() {
    let b = start().await;
    let api = Api::new(&b);
    ctl(&b, &["create_queue", "exported", "--durable"]).await.ok();

    let defs = ctl(&b, &["export_definitions"]).await.ok().json();
    assert!(
        defs["queues"]
            .as_array()
            .expect("queues")
            .iter()
            .any(|q| q["name"] == "exported"),
        "{defs}"
    );
    // Text is indented JSON, JSON format a single line.
    let pretty = ctl(&b, &["export_definitions"]).await.ok();
    assert!(pretty.stdout.lines().count() > 3);
    let compact = ctl(&b, &["-f", "json", "export_definitions"]).await.ok();
    assert_eq!(compact.stdout.lines().count(), 1);

    // Import into another broker from a file.
    let other = start().await;
    let other_api = Api::new(&other);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("defs.json");
    std::fs::write(&file, defs.to_string()).expect("write definitions");
    ctl(&other, &["import_definitions", &file.display().to_string()])
        .await
        .ok();
    other_api.get_ok("/api/queues/%2F/exported").await;

    // From standard input.
    let stdin_defs = json!({"queues": [{"name": "from-stdin", "vhost": "/", "durable": true,
                                        "auto_delete": false, "arguments": {}}]});
    let path = socket(&other);
    run_with(
        &["--control-unix-path", &path, "import_definitions", "-"],
        &[],
        Some(&stdin_defs.to_string()),
    )
    .await
    .ok();
    other_api.get_ok("/api/queues/%2F/from-stdin").await;

    // One vhost's definitions.
    ctl(&b, &["add_vhost", "only"]).await.ok();
    ctl(&b, &["-p", "only", "create_queue", "inside", "--durable"])
        .await
        .ok();
    let vhost_defs = ctl(&b, &["-p", "only", "export_definitions"]).await.ok().json();
    let names: Vec<&str> = vhost_defs["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .filter_map(|q| q["name"].as_str())
        .collect();
    assert_eq!(names, ["inside"]);

    let missing = ctl(&b, &["import_definitions", "/nonexistent/defs.json"])
        .await
        .fails_with(1);
    assert!(
        missing.stderr.contains("cannot read /nonexistent/defs.json"),
        "{missing:?}"
    );
    std::fs::write(&file, "not json").expect("write");
    ctl(&b, &["import_definitions", &file.display().to_string()])
        .await
        .fails_with(2);
    let _ = api;
}

#[tokio::test]
async fn status_and_cluster_status() {
    let b = start().await;
    ctl(&b, &["create_queue", "counted"]).await.ok();

    let text = ctl(&b, &["status"]).await.ok();
    let fields: Vec<(&str, &str)> = text.stdout.lines().filter_map(|l| l.split_once(": ")).collect();
    let keys: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        keys,
        [
            "Version",
            "Node",
            "Uptime",
            "Connections",
            "Channels",
            "Consumers",
            "Exchanges",
            "Queues",
            "Bindings",
            "Messages",
            "Messages_ready",
            "Messages_unacked"
        ]
    );
    assert!(fields.contains(&("Queues", "1")), "{text:?}");
    assert!(fields.contains(&("Version", env!("CARGO_PKG_VERSION"))), "{text:?}");

    let json = ctl(&b, &["status", "-f", "json"]).await.ok().json();
    assert_eq!(json["Queues"], 1);
    assert_eq!(json["Bindings"], 1, "the queue's binding to the default exchange");
    assert_eq!(json["Messages"], 0);
    assert!(json["Uptime"].is_u64(), "{json}");

    let cluster = ctl(&b, &["-f", "json", "cluster_status"]).await.ok().json();
    assert!(cluster["this_node"].is_string(), "{cluster}");
    assert_eq!(cluster["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(cluster["followers"], json!([]));
    // Alone, the one node is "standalone": in sync, no lag, no cluster id.
    let this_node = cluster["this_node"].clone();
    assert_eq!(
        cluster["nodes"],
        json!([{"name": this_node, "role": "standalone", "node_id": null, "in_sync": true,
                "lag_bytes": 0, "running": true, "address": null}])
    );
    let text = ctl(&b, &["cluster_status"]).await.ok();
    assert!(text.stdout.starts_with("this_node: "), "{text:?}");
    let cells = text.cells();
    assert_eq!(
        cells[2],
        ["name", "role", "node_id", "in_sync", "lag_bytes", "running", "address"],
        "{text:?}"
    );
    // The empty node_id and address cells leave four values after the name.
    assert_eq!(
        cells[3],
        [this_node.as_str().expect("name"), "standalone", "true", "0", "true"],
        "{text:?}"
    );
    assert_eq!(cells.len(), 4, "{text:?}");

    // Accepted and harmless, as in LavinMQ.
    ctl(&b, &["stop_app"]).await.ok();
    ctl(&b, &["start_app"]).await.ok();
    ctl(&b, &["status"]).await.ok();
}

#[tokio::test]
async fn quiet_and_silent_output() {
    let b = start().await;
    ctl(&b, &["create_queue", "a-rather-long-name"]).await.ok();
    ctl(&b, &["create_queue", "q"]).await.ok();

    let quiet = ctl(&b, &["-q", "list_queues"]).await.ok();
    assert_eq!(
        quiet.stdout,
        "name                messages\na-rather-long-name  0\nq                   0\n"
    );
    let silent = ctl(&b, &["--silent", "list_queues"]).await.ok();
    assert_eq!(silent.stdout, "a-rather-long-name\t0\nq\t0\n");
    let json = ctl(&b, &["--quiet", "--format", "json", "list_queues"]).await.ok();
    assert!(json.stdout.starts_with('['), "{json:?}");
}

#[tokio::test]
async fn failures_report_the_broker_reason_and_exit_non_zero() {
    let b = start().await;
    for args in [
        &["purge_queue", "no-such-queue"][..],
        &["pause_queue", "no-such-queue"],
        &["resume_queue", "no-such-queue"],
        &["delete_queue", "no-such-queue"],
        &["delete_exchange", "no-such-exchange"],
        &["delete_vhost", "no-such-vhost"],
        &["-p", "no-such-vhost", "list_queues"],
    ] {
        let run = ctl(&b, args).await.fails_with(1);
        assert!(run.stderr.starts_with("Error: 404 Not Found"), "{args:?}: {run:?}");
        assert!(run.stdout.is_empty() || run.stdout.starts_with("Listing"), "{run:?}");
    }
    // A 400 carries the broker's own words.
    let run = ctl(&b, &["set_permissions", "no-such-user", ".*", ".*", ".*"])
        .await
        .fails_with(1);
    assert!(run.stderr.contains("user 'no-such-user' does not exist"), "{run:?}");
}

#[tokio::test]
async fn bad_arguments_are_usage_errors() {
    let b = start().await;
    for args in [
        &["create_queue"][..],
        &["add_user", "only-name"],
        &["set_permissions", "u", ".*"],
        &["no_such_command"],
        &["-f", "yaml", "list_queues"],
        &["create_queue", "q", "--max-length", "many"],
        &[],
    ] {
        let run = ctl(&b, args).await.fails_with(2);
        assert!(!run.stderr.is_empty(), "{args:?}: {run:?}");
    }
    let conflict = run_with(&["--uri", "http://127.0.0.1:1", "--hostname", "x", "status"], &[], None)
        .await
        .fails_with(2);
    assert!(
        conflict.stderr.contains("invalid args when using uri: hostname"),
        "{conflict:?}"
    );
    let help = ctl(&b, &["--help"]).await.ok();
    assert!(help.stdout.contains("list_queues"));
    let version = ctl(&b, &["-v"]).await.ok();
    assert!(version.stdout.contains(env!("CARGO_PKG_VERSION")));
}

#[tokio::test]
async fn no_broker_on_the_socket_path_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nothing.sock");
    let run = run_with(
        &["--control-unix-path", &missing.display().to_string(), "list_queues"],
        &[],
        None,
    )
    .await
    .fails_with(1);
    assert!(
        run.stderr
            .contains(&format!("{} not found. Is LavinMQ running?", missing.display())),
        "{run:?}"
    );

    // A socket file nobody listens on (a broker that died).
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).expect("bind"));
    assert!(Path::new(&stale).exists());
    let run = run_with(
        &["--control-unix-path", &stale.display().to_string(), "status"],
        &[],
        None,
    )
    .await
    .fails_with(1);
    assert!(run.stderr.contains("Can't connect to LavinMQ"), "{run:?}");
    assert!(run.stderr.contains("Is LavinMQ running?"), "{run:?}");
}

#[tokio::test]
async fn the_control_socket_path_comes_from_the_environment() {
    let b = start().await;
    let path = socket(&b);
    let run = run_with(
        &["-f", "json", "list_vhosts"],
        &[("LAVINMQCTL_CONTROL_UNIX_PATH", &path)],
        None,
    )
    .await
    .ok();
    assert_eq!(run.json(), json!([{"name": "/"}]));
    // The flag wins over the environment.
    run_with(
        &["--control-unix-path", &path, "status"],
        &[("LAVINMQCTL_CONTROL_UNIX_PATH", "/nonexistent/ctl.sock")],
        None,
    )
    .await
    .ok();
}

#[tokio::test]
async fn remote_broker_over_http_with_basic_auth() {
    let b = start().await;
    let api = Api::new(&b);
    let uri = http_uri(&b, "guest", "guest");

    run_with(&["--uri", &uri, "create_queue", "remote-q", "--durable"], &[], None)
        .await
        .ok();
    api.get_ok("/api/queues/%2F/remote-q").await;
    let listed = run_with(&["-U", &uri, "-f", "json", "list_queues"], &[], None)
        .await
        .ok()
        .json();
    assert_eq!(listed, json!([{"name": "remote-q", "messages": 0}]));

    // Credentials from --user/--password instead of the URI.
    let bare = format!("http://{}", b.server().http_addr());
    run_with(
        &["--uri", &bare, "--user", "guest", "--password", "guest", "list_users"],
        &[],
        None,
    )
    .await
    .ok();
    // --hostname and --port build the URI.
    let addr = b.server().http_addr();
    run_with(
        &[
            "--hostname",
            &addr.ip().to_string(),
            "--port",
            &addr.port().to_string(),
            "--user",
            "guest",
            "--password",
            "guest",
            "status",
        ],
        &[],
        None,
    )
    .await
    .ok();
    // LAVINMQCTL_HOST, LavinMQ's environment variable for the URI.
    run_with(&["list_vhosts"], &[("LAVINMQCTL_HOST", &uri)], None)
        .await
        .ok();

    let wrong = run_with(&["--uri", &http_uri(&b, "guest", "nope"), "list_queues"], &[], None)
        .await
        .fails_with(1);
    assert!(wrong.stderr.contains("401"), "{wrong:?}");
    let anonymous = run_with(&["--uri", &bare, "list_queues"], &[], None)
        .await
        .fails_with(1);
    assert!(anonymous.stderr.contains("401"), "{anonymous:?}");

    let unreachable = run_with(&["--uri", "http://127.0.0.1:1", "status"], &[], None)
        .await
        .fails_with(1);
    assert!(
        unreachable.stderr.contains("Can't connect to LavinMQ at 127.0.0.1:1"),
        "{unreachable:?}"
    );
}

/// Every file under `dir` with its contents, to show that nothing changed.
fn files_of(dir: &Path) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read file");
                out.insert(path, bytes);
            }
        }
    }
    out
}

#[tokio::test]
async fn definitions_of_a_data_dir_without_the_broker() {
    let mut b = start().await;
    let api = Api::new(&b);
    let defs = json!({
        "vhosts": [{"name": "/"}, {"name": "other", "description": "second", "tags": ["t"]}],
        "users": [{"name": "alice", "password_hash": "", "tags": ["management"]}],
        "permissions": [{"user": "alice", "vhost": "other", "configure": ".*", "write": "", "read": ".*"}],
        "exchanges": [
            {"name": "logs", "vhost": "/", "type": "topic", "durable": true, "auto_delete": false,
             "internal": false, "arguments": {}},
            {"name": "later", "vhost": "other", "type": "x-delayed-message", "durable": true,
             "auto_delete": false, "internal": false, "arguments": {"x-delayed-type": "direct"}},
            {"name": "fan", "vhost": "other", "type": "fanout", "durable": true, "auto_delete": false,
             "internal": true, "arguments": {}}
        ],
        "queues": [
            {"name": "errors", "vhost": "/", "durable": true, "auto_delete": false,
             "arguments": {"x-max-length": 10}},
            {"name": "events", "vhost": "/", "durable": true, "auto_delete": false,
             "arguments": {"x-queue-type": "stream"}},
            {"name": "gone", "vhost": "/", "durable": true, "auto_delete": false, "arguments": {}},
            {"name": "q", "vhost": "other", "durable": true, "auto_delete": false, "arguments": {}}
        ],
        "bindings": [
            {"source": "logs", "vhost": "/", "destination": "errors", "destination_type": "queue",
             "routing_key": "*.error", "arguments": {}},
            {"source": "logs", "vhost": "/", "destination": "gone", "destination_type": "queue",
             "routing_key": "#", "arguments": {}},
            {"source": "amq.topic", "vhost": "/", "destination": "logs", "destination_type": "exchange",
             "routing_key": "logs.#", "arguments": {}},
            {"source": "fan", "vhost": "other", "destination": "q", "destination_type": "queue",
             "routing_key": "", "arguments": {"x-match": "any"}}
        ],
        "policies": [{"name": "cap", "vhost": "/", "pattern": "^err", "apply-to": "queues",
                      "definition": {"max-length": 5}, "priority": 1}],
        "operator_policies": [{"name": "ttl", "vhost": "other", "pattern": ".*", "apply-to": "queues",
                               "definition": {"message-ttl": 60000}, "priority": 0}]
    });
    let path = socket(&b);
    run_with(
        &["--control-unix-path", &path, "import_definitions", "-"],
        &[],
        Some(&defs.to_string()),
    )
    .await
    .ok();
    ctl(&b, &["delete_queue", "gone"]).await.ok();
    ctl(&b, &["-p", "other", "set_vhost_limits", r#"{"max-queues": 7}"#])
        .await
        .ok();
    let live = api.get_ok("/api/definitions").await;
    let dir = b.data_dir().display().to_string();

    // The broker runs on the dir: refused, rather than read while written.
    let refused = run_with(&["definitions", &dir], &[], None).await.fails_with(1);
    assert!(refused.stderr.contains("in use by a running broker"), "{refused:?}");

    b.stop_keeping_data().await;
    let before = files_of(b.data_dir());
    let offline = run_with(&["definitions", &dir], &[], None).await.ok();
    assert!(offline.stdout.lines().count() > 3, "indented JSON");
    assert_eq!(offline.json(), live);
    assert!(files_of(b.data_dir()) == before, "the data dir was modified");
    let queues: Vec<&str> = live["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .filter_map(|q| q["name"].as_str())
        .collect();
    assert_eq!(queues, ["errors", "events", "q"]);
    let compact = run_with(&["-f", "json", "definitions", &dir], &[], None).await.ok();
    assert_eq!(compact.stdout.lines().count(), 1);

    // Not a data dir (LavinMQ's message), or no dir at all.
    let empty = tempfile::tempdir().expect("tempdir");
    let not_data = run_with(&["definitions", &empty.path().display().to_string()], &[], None)
        .await
        .fails_with(1);
    assert!(
        not_data.stderr.contains("vhosts.json not found. Is") && not_data.stderr.contains("a data directory?"),
        "{not_data:?}"
    );
    run_with(&["definitions", "/nonexistent/data"], &[], None)
        .await
        .fails_with(1);
    run_with(&["definitions"], &[], None).await.fails_with(2);
}

/// `restart_queue` (LavinMQ's flags: `<queue>` and `--vhost`) reopens a queue
/// closed at start because its files could not be opened, once they are fixed;
/// while they are still broken it fails with the broker's reason.
#[tokio::test]
async fn restart_queue_reopens_a_closed_queue_once_its_files_are_fixed() {
    let mut b = start().await;
    let q = uniq("ctl-closed");
    ctl(&b, &["create_queue", &q, "--durable"]).await.ok();
    {
        let (_conn, ch) = b.channel().await;
        confirm_select(&ch).await;
        for body in ["a", "b"] {
            let props = lapin::BasicProperties::default().with_delivery_mode(2);
            publish_props(&ch, "", &q, body.as_bytes(), props).await;
        }
        ch.wait_for_confirms().await.expect("confirms");
    }
    let dir = b.queue_dir(&q);
    let mut saved = None;
    b.restart_changing(|| saved = Some(break_segments(&dir).0)).await;
    let api = Api::new(&b);
    let path = format!("/api/queues/%2F/{q}");
    assert_eq!(api.get_ok(&path).await["state"], "closed");

    let refused = ctl(&b, &["restart_queue", &q, "--vhost=/"]).await.fails_with(1);
    assert!(refused.stderr.contains("not restarted"), "{refused:?}");
    assert_eq!(api.get_ok(&path).await["state"], "closed");

    saved.expect("segments damaged").restore();
    ctl(&b, &["restart_queue", &q, "--vhost=/"]).await.ok();
    assert_eq!(api.get_ok(&path).await["state"], "running");
    let (_conn, ch) = b.channel().await;
    assert_eq!(drain(&ch, &q).await, [b"a".to_vec(), b"b".to_vec()]);
    let again = ctl(&b, &["restart_queue", &q]).await.fails_with(1);
    assert!(again.stderr.contains("not restarted"), "{again:?}");
}

#[tokio::test]
async fn shovels_are_added_listed_restarted_and_deleted() {
    let b = start().await;
    let api = Api::new(&b);
    let definition = r#"{"src-uri":"amqp://","src-queue":"ctl-in","dest-uri":"amqp://","dest-queue":"ctl-out"}"#;
    ctl(&b, &["add_shovel", "mover", definition]).await.ok();
    // The shovel declares both queues once it has connected, after the
    // command returned.
    for queue in ["ctl-in", "ctl-out"] {
        let path = format!("/api/queues/%2F/{queue}");
        eventually(&format!("the shovel declared {queue}"), || async {
            api.get(&path).await.0.is_success()
        })
        .await;
    }
    let (_conn, ch) = b.channel().await;
    publish(&ch, "", "ctl-in", b"moved by the shovel").await;
    let mut consumer = consume(&ch, "ctl-out").await;
    assert_eq!(next_delivery(&mut consumer).await.data, b"moved by the shovel");
    let listed = ctl(&b, &["-f", "json", "list_shovels", "name", "state", "src_queue"])
        .await
        .ok()
        .json();
    assert_eq!(
        listed,
        json!([{"name": "mover", "state": "running", "src_queue": "ctl-in"}])
    );
    ctl(&b, &["restart_shovel", "mover"]).await.ok();
    let bad = ctl(&b, &["add_shovel", "bad", r#"{"src-uri":"amqp://"}"#])
        .await
        .fails_with(1);
    assert!(bad.stderr.contains("'dest-uri' is required"), "{bad:?}");
    ctl(&b, &["add_shovel", "bad", "[1]"]).await.fails_with(2);
    ctl(&b, &["delete_shovel", "mover"]).await.ok();
    assert_eq!(
        api.get("/api/parameters/shovel/%2F/mover").await.0,
        StatusCode::NOT_FOUND
    );
    ctl(&b, &["delete_shovel", "mover"]).await.fails_with(1);
}

#[tokio::test]
async fn federation_upstreams_are_added_listed_and_deleted() {
    let (b, upstream) = (start().await, start().await);
    let api = Api::new(&b);
    let uri = upstream.url();
    let add = [
        "add_federation",
        "up",
        "--uri",
        &uri,
        "--max-hops=2",
        "--expires=60",
        "--ack-mode=on-publish",
    ];
    ctl(&b, &add).await.ok();
    let (_, value) = api.get("/api/parameters/federation-upstream/%2F/up").await;
    assert_eq!(value["value"]["max-hops"], 2, "{value}");
    assert_eq!(value["value"]["expires"], 60_000, "seconds become ms: {value}");
    let listed = ctl(&b, &["-f", "json", "list_federations", "name", "max-hops", "ack-mode"])
        .await
        .ok()
        .json();
    assert_eq!(listed, json!([{"name": "up", "max-hops": 2, "ack-mode": "on-publish"}]));
    ctl(
        &b,
        &[
            "set_policy",
            "fed",
            "^fq$",
            r#"{"federation-upstream":"up"}"#,
            "--apply-to",
            "queues",
        ],
    )
    .await
    .ok();
    let (_conn, ch) = b.channel().await;
    declare_queue(&ch, "fq").await;
    eventually("the link is listed running", || async {
        let out = ctl(
            &b,
            &["-f", "json", "federation_status", "upstream", "resource", "status"],
        )
        .await;
        out.ok().json() == json!([{"upstream": "up", "resource": "fq", "status": "running"}])
    })
    .await;
    let bad = ctl(&b, &["add_federation", "bad", "--upstream-uri", "nope://x"])
        .await
        .fails_with(1);
    assert!(bad.stderr.contains("uri"), "{bad:?}");
    ctl(&b, &["add_federation", "bad"]).await.fails_with(2);
    ctl(&b, &["delete_federation", "up"]).await.ok();
    ctl(&b, &["delete_federation", "up"]).await.fails_with(1);
    eventually("the link is gone", || async {
        api.get("/api/federation-links").await.1 == json!([])
    })
    .await;
}
