//! Two LavinMQ extensions of the management API the browser UI uses: the live
//! log (`GET /api/livelog` as server-sent events, `GET /api/logs` as a
//! download) and reading a stream queue from an offset
//! (`POST /api/queues/{vhost}/{name}/stream`).
//!
//! The in-process brokers log through whatever subscriber the test process
//! has, so this module installs the log tail layer for the whole test binary
//! (the `lavinmq` binary does so in `main`).

use crate::common;

use std::sync::Once;

use common::api::*;
use common::*;
use lapin::Channel;
use lapin::types::{AMQPValue, FieldTable};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// Feeds the process's log tail from this test binary's log, once.
fn install_log_tail() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        tracing_subscriber::registry()
            .with(tracing_subscriber::filter::LevelFilter::INFO)
            .with(lavinmq::log_tail::layer())
            .try_init()
            .expect("no other subscriber is installed");
    });
}

/// One server-sent event.
#[derive(Debug)]
struct SseEvent {
    id: Option<u64>,
    data: String,
}

impl SseEvent {
    /// The `[severity, source, message]` of a log line event.
    fn line(&self) -> (String, String, String) {
        let v: Value = serde_json::from_str(&self.data).expect("event data is JSON");
        let field = |i: usize| v[i].as_str().expect("a string").to_string();
        (field(0), field(1), field(2))
    }
}

/// Reads server-sent events off a streaming response.
struct SseReader {
    resp: reqwest::Response,
    buf: String,
}

impl SseReader {
    /// Opens `GET /api/livelog` as `auth`, resuming after `last_id` if given.
    async fn open(api: &Api, last_id: Option<u64>) -> SseReader {
        let mut req = reqwest::Client::new()
            .get(format!("{}/api/livelog", api.base))
            .basic_auth("guest", Some("guest"));
        if let Some(id) = last_id {
            req = req.header("Last-Event-Id", id.to_string());
        }
        let resp = within("GET /api/livelog", req.send()).await.expect("request");
        assert_eq!(resp.status(), StatusCode::OK);
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(content_type.starts_with("text/event-stream"), "{content_type}");
        SseReader {
            resp,
            buf: String::new(),
        }
    }

    /// The next event with data (comments and keep-alives are skipped).
    async fn next(&mut self) -> SseEvent {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut event = SseEvent {
                    id: None,
                    data: String::new(),
                };
                let mut has_data = false;
                for line in block.lines() {
                    if let Some(id) = line.strip_prefix("id:") {
                        event.id = Some(id.trim().parse().expect("numeric id"));
                    } else if let Some(data) = line.strip_prefix("data:") {
                        has_data = true;
                        event.data.push_str(data.strip_prefix(' ').unwrap_or(data));
                    }
                }
                if has_data {
                    return event;
                }
                continue;
            }
            let chunk = within("an event", self.resp.chunk())
                .await
                .expect("read the stream")
                .expect("the stream stays open");
            self.buf.push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
    }

    /// Reads events until one whose message contains `marker`; returns it and
    /// the events before it.
    async fn until(&mut self, marker: &str) -> (SseEvent, Vec<SseEvent>) {
        let mut before = Vec::new();
        loop {
            let e = self.next().await;
            if e.line().2.contains(marker) {
                return (e, before);
            }
            before.push(e);
        }
    }
}

/// Makes the broker log a warning naming `user`: a login with wrong credentials.
async fn failed_login(b: &TestBroker, user: &str) {
    let refused = try_connect(&b.url_for(user, "wrong", "%2f")).await;
    assert!(refused.is_err(), "the login of {user} was accepted");
}

async fn add_user(api: &Api, name: &str, tags: &str) {
    let status = api
        .put(&format!("/api/users/{name}"), json!({"password": "pw", "tags": tags}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let status = api
        .put(
            &format!("/api/permissions/%2F/{name}"),
            json!({"configure": ".*", "write": ".*", "read": ".*"}),
        )
        .await;
    assert!(status.is_success(), "{status}");
}

#[tokio::test]
async fn livelog_streams_new_lines_and_resumes_after_the_last_event_id() {
    install_log_tail();
    let b = start().await;
    let api = Api::new(&b);
    let mut live = SseReader::open(&api, None).await;
    let first = uniq("livelog-first");
    failed_login(&b, &first).await;
    let (event, _) = live.until(&first).await;
    let (severity, _source, message) = event.line();
    assert_eq!(severity, "warn");
    assert!(message.contains("authentication failed"), "{message}");
    let first_id = event.id.expect("events carry an id");
    drop(live);

    // Reconnecting with the last id seen gets only newer lines: not the first
    // failed login again, and the next one.
    let second = uniq("livelog-second");
    failed_login(&b, &second).await;
    let mut resumed = SseReader::open(&api, Some(first_id)).await;
    let (event, before) = resumed.until(&second).await;
    assert!(event.id.is_some_and(|id| id > first_id));
    for e in &before {
        assert!(
            e.id.is_some_and(|id| id > first_id),
            "{e:?} is not newer than {first_id}"
        );
        assert!(!e.line().2.contains(&first), "the first line came again: {e:?}");
    }

    // Without an id the kept lines come first, the first login among them.
    let mut fresh = SseReader::open(&api, None).await;
    let (event, _) = fresh.until(&first).await;
    assert_eq!(event.id, Some(first_id));
    let (_, after) = fresh.until(&second).await;
    assert!(after.iter().all(|e| e.id.is_some_and(|id| id > first_id)));
}

#[tokio::test]
async fn the_log_download_holds_the_kept_lines() {
    install_log_tail();
    let b = start().await;
    let api = Api::new(&b);
    let marker = uniq("logs-download");
    failed_login(&b, &marker).await;
    let resp = within(
        "GET /api/logs",
        reqwest::Client::new()
            .get(format!("{}/api/logs", api.base))
            .basic_auth("guest", Some("guest"))
            .send(),
    )
    .await
    .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    assert!(header("content-type").starts_with("text/plain"));
    assert!(header("content-disposition").contains("logs.txt"));
    let text = within("the log text", resp.text()).await.expect("body");
    let line = text
        .lines()
        .find(|l| l.contains(&marker))
        .unwrap_or_else(|| panic!("no line about {marker} in:\n{text}"));
    assert!(line.contains(" [WARN] "), "{line}");
    assert!(line.contains("authentication failed"), "{line}");
}

#[tokio::test]
async fn only_administrators_read_the_log() {
    install_log_tail();
    let b = start().await;
    let api = Api::new(&b);
    let user = uniq("logs-monitor");
    add_user(&api, &user, "monitoring").await;
    for path in ["/api/livelog", "/api/logs"] {
        let (status, body) = api.call(Method::GET, path, Some((&user, "pw")), None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "GET {path}: {body}");
        assert_eq!(body["error"], "not_authorised");
        let (status, _) = api.call(Method::GET, path, None, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "GET {path} without credentials");
    }
}

async fn declare_stream(ch: &Channel, name: &str) {
    let args = table(&[("x-queue-type", long_str("stream"))]);
    ch.queue_declare(name.into(), durable(), args)
        .await
        .expect("declare stream");
}

/// A stream queue holding `m0` … `m9`, with a header on each.
async fn stream_of_ten(b: &TestBroker) -> String {
    let (_conn, ch) = b.channel().await;
    let q = uniq("stream-read");
    declare_stream(&ch, &q).await;
    confirm_select(&ch).await;
    for i in 0..10 {
        let mut headers = FieldTable::default();
        headers.insert("n".into(), AMQPValue::LongInt(i));
        let props = lapin::BasicProperties::default().with_headers(headers);
        publish_props(&ch, "", &q, format!("m{i}").as_bytes(), props).await;
    }
    within("confirms", ch.wait_for_confirms()).await.expect("confirms");
    q
}

/// Reads the stream `q` as `auth` with `body`.
async fn read(api: &Api, q: &str, auth: Option<(&str, &str)>, body: Value) -> (StatusCode, Value) {
    api.call(Method::POST, &format!("/api/queues/%2F/{q}/stream"), auth, Some(body))
        .await
}

/// The payloads and offsets of a successful read.
async fn read_ok(api: &Api, q: &str, body: Value) -> Vec<(String, i64)> {
    let (status, out) = read(api, q, GUEST, body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}: {out}");
    out.as_array()
        .expect("an array")
        .iter()
        .map(|m| {
            let offset = m["properties"]["headers"]["x-stream-offset"]
                .as_i64()
                .unwrap_or_else(|| panic!("no x-stream-offset in {m}"));
            (m["payload"].as_str().expect("payload").to_string(), offset)
        })
        .collect()
}

#[tokio::test]
async fn stream_reads_from_an_offset_without_consuming() {
    let b = start().await;
    let api = Api::new(&b);
    let q = stream_of_ten(&b).await;

    let (status, all) = read(&api, &q, GUEST, json!({"offset": 0, "count": 100})).await;
    assert_eq!(status, StatusCode::OK, "{all}");
    let all = all.as_array().expect("an array").clone();
    assert_eq!(all.len(), 10);
    let m3 = &all[3];
    assert_eq!(m3["payload"], "m3");
    assert_eq!(m3["payload_encoding"], "string");
    assert_eq!(m3["payload_bytes"], 2);
    assert_eq!(m3["redelivered"], false);
    assert_eq!(m3["exchange"], "");
    assert_eq!(m3["routing_key"], q.as_str());
    assert_eq!(m3["message_count"], 10);
    assert_eq!(m3["properties"]["headers"]["n"], 3);
    assert_eq!(m3["properties"]["headers"]["x-stream-offset"], 3);

    let expect = |range: std::ops::Range<i64>| range.map(|i| (format!("m{i}"), i)).collect::<Vec<_>>();
    assert_eq!(
        read_ok(&api, &q, json!({"offset": 5, "count": 100})).await,
        expect(5..10)
    );
    assert_eq!(
        read_ok(&api, &q, json!({"offset": "5", "count": 2})).await,
        expect(5..7)
    );
    assert_eq!(
        read_ok(&api, &q, json!({"offset": "last", "count": 5})).await,
        expect(9..10)
    );
    assert_eq!(
        read_ok(&api, &q, json!({"offset": "first", "count": "3"})).await,
        expect(0..3)
    );
    // Defaults: from the first message, one message.
    assert_eq!(read_ok(&api, &q, json!({})).await, expect(0..1));
    assert_eq!(
        read_ok(&api, &q, json!({"offset": "next", "count": 5})).await,
        expect(0..0)
    );
    assert_eq!(read_ok(&api, &q, json!({"offset": 10, "count": 5})).await, expect(0..0));
    assert_eq!(read_ok(&api, &q, json!({"offset": 2, "count": -1})).await, expect(0..0));

    // Base64 and truncation as for a get.
    let (status, out) = read(
        &api,
        &q,
        GUEST,
        json!({"offset": 4, "encoding": "base64", "truncate": 1}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out[0]["payload"], "bQ==");
    assert_eq!(out[0]["payload_encoding"], "base64");
    assert_eq!(out[0]["payload_bytes"], 2);

    // Nothing was consumed: the stream still holds every message.
    let (_conn, ch) = b.channel().await;
    assert_eq!(queue_count(&ch, &q).await, 10);
    assert_eq!(
        read_ok(&api, &q, json!({"offset": 0, "count": 100})).await,
        expect(0..10)
    );
}

#[tokio::test]
async fn stream_read_refuses_what_is_not_a_readable_stream() {
    let b = start().await;
    let api = Api::new(&b);
    let q = stream_of_ten(&b).await;
    let (_conn, ch) = b.channel().await;
    let classic = uniq("classic");
    declare_queue(&ch, &classic).await;

    let (status, body) = read(&api, &classic, GUEST, json!({"offset": 0})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body["reason"].as_str().is_some_and(|r| r.contains("not a stream")),
        "{body}"
    );
    let (status, _) = read(&api, "no-such-queue", GUEST, json!({"offset": 0})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = api
        .call(
            Method::POST,
            &format!("/api/queues/no-such-vhost/{q}/stream"),
            GUEST,
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    for bad in [
        json!({"offset": -1}),
        json!({"offset": "soon"}),
        json!({"offset": [1]}),
        json!({"count": "many"}),
        json!({"encoding": "hex"}),
        json!({"truncate": -1}),
    ] {
        let (status, body) = read(&api, &q, GUEST, bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(body["error"], "bad_request");
    }

    // Read permission on the queue is needed, as for a get.
    let reader = uniq("no-read");
    let status = api
        .put(
            &format!("/api/users/{reader}"),
            json!({"password": "pw", "tags": "management"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let status = api
        .put(
            &format!("/api/permissions/%2F/{reader}"),
            json!({"configure": ".*", "write": ".*", "read": "^$"}),
        )
        .await;
    assert!(status.is_success(), "{status}");
    let (status, body) = read(&api, &q, Some((&reader, "pw")), json!({"offset": 0})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
}
