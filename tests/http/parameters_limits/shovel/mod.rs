//! Shovels between two brokers of ours in one process: defined as `shovel`
//! parameters, moving messages with each ack mode, queue to queue and
//! exchange to exchange, listed in `/api/shovels`, paused and resumed,
//! finishing after `src-delete-after`, surviving a restart of the
//! destination, and refusing bad parameters.

use std::collections::BTreeSet;

use lapin::options::{BasicAckOptions, QueueBindOptions};
use lapin::types::AMQPValue;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::api::*;
use crate::common::*;

mod rabbitmq;

/// Creates shovel `name` in vhost `/` of `api`'s broker.
async fn add_shovel(api: &Api, name: &str, value: Value) {
    let status = api
        .put(&format!("/api/parameters/shovel/%2F/{name}"), json!({ "value": value }))
        .await;
    assert_eq!(status, StatusCode::CREATED, "creating shovel {name}");
}

/// Waits until shovel `name` is in `state`; returns its status.
async fn shovel_in_state(api: &Api, name: &str, state: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..200 {
        let (code, body) = api.get(&format!("/api/shovels/%2F/{name}")).await;
        if code == StatusCode::OK && body["state"] == state {
            return body;
        }
        last = body;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("shovel {name} never reached {state}: {last}");
}

/// Publishes `n` persistent messages numbered from `from` to queue `queue`.
async fn fill(ch: &lapin::Channel, queue: &str, from: usize, n: usize) {
    confirm_select(ch).await;
    for i in from..from + n {
        publish_confirmed(ch, "", queue, format!("m{i}").as_bytes()).await;
    }
}

/// Waits for `n` messages on `queue` of `broker`, and returns their bodies.
async fn receive(broker: &TestBroker, queue: &str, n: usize) -> Vec<String> {
    receive_at(&broker.url(), queue, n).await
}

/// Waits for `n` messages on `queue` at `url` (once the queue exists) and
/// returns their bodies, acknowledged.
async fn receive_at(url: &str, queue: &str, n: usize) -> Vec<String> {
    let conn = try_connect(url).await.expect("connect");
    eventually(&format!("{queue} declared"), || queue_exists(&conn, queue)).await;
    let ch = conn.create_channel().await.expect("channel");
    let mut consumer = consume(&ch, queue).await;
    let mut out = Vec::new();
    for d in deliveries(&mut consumer, n).await {
        out.push(String::from_utf8_lossy(&d.data).into_owned());
        d.ack(BasicAckOptions::default()).await.expect("ack");
    }
    out
}

#[tokio::test]
async fn queue_to_queue_in_each_ack_mode_moves_every_message_in_order() {
    let (source, dest) = (start().await, start().await);
    let api = Api::new(&source);
    let (_c, ch) = source.channel().await;
    for mode in ["on-confirm", "on-publish", "no-ack"] {
        let (from, to) = (format!("from-{mode}"), format!("to-{mode}"));
        declare_queue(&ch, &from).await;
        fill(&ch, &from, 0, 300).await;
        add_shovel(
            &api,
            &format!("s-{mode}"),
            json!({"src-uri": "amqp://", "src-queue": from, "dest-uri": dest.url(),
                   "dest-queue": to, "ack-mode": mode, "src-prefetch-count": 50}),
        )
        .await;
        let got = receive(&dest, &to, 300).await;
        let want: Vec<String> = (0..300).map(|i| format!("m{i}")).collect();
        assert_eq!(got, want, "{mode}: every message, once, in order");
        eventually(&format!("{mode}: source queue emptied"), || {
            let conn = &_c;
            let from = from.clone();
            async move { message_count(conn, &from).await == 0 }
        })
        .await;
        let status = shovel_in_state(&api, &format!("s-{mode}"), "running").await;
        assert_eq!(status["type"], "dynamic");
        assert_eq!(status["vhost"], "/");
        assert_eq!(status["src_queue"], json!(from));
        assert_eq!(status["dest_queue"], json!(to));
        assert_eq!(status["ack_mode"], mode);
        assert_eq!(status["message_count"], 300);
        assert!(
            !status["dest_uri"].as_str().unwrap_or_default().contains("guest:guest"),
            "the password is hidden: {status}"
        );
    }
    let all = api.get_ok("/api/shovels").await;
    assert_eq!(all.as_array().map(Vec::len), Some(3), "{all}");
    let names: BTreeSet<_> = all
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert!(names.contains("s-no-ack"));
    // Deleting the parameter stops the shovel.
    assert_eq!(
        api.delete("/api/parameters/shovel/%2F/s-on-confirm").await,
        StatusCode::NO_CONTENT
    );
    publish(&ch, "", "from-on-confirm", b"stays").await;
    eventually("the deleted shovel is gone", || async {
        api.get("/api/shovels/%2F/s-on-confirm").await.0 == StatusCode::NOT_FOUND
    })
    .await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(message_count(&_c, "from-on-confirm").await, 1);
}

#[tokio::test]
async fn exchange_to_exchange_adds_forward_headers() {
    let (source, dest) = (start().await, start().await);
    let (_dc, dch) = dest.channel().await;
    declare_queue(&dch, "landed").await;
    dch.queue_bind(
        "landed".into(),
        "amq.direct".into(),
        "moved".into(),
        QueueBindOptions::default(),
        Default::default(),
    )
    .await
    .expect("bind");
    add_shovel(
        &Api::new(&source),
        "x2x",
        json!({"src-uri": "amqp://", "src-exchange": "amq.topic", "src-exchange-key": "orders.#",
               "dest-uri": [dest.url()], "dest-exchange": "amq.direct", "dest-exchange-key": "moved",
               "dest-add-forward-headers": true, "dest-add-timestamp-header": true}),
    )
    .await;
    shovel_in_state(&Api::new(&source), "x2x", "running").await;
    let (_sc, sch) = source.channel().await;
    publish(&sch, "amq.topic", "orders.new", b"o1").await;
    publish(&sch, "amq.topic", "invoices.new", b"not matched").await;
    publish(&sch, "amq.topic", "orders.paid", b"o2").await;
    let (_c, ch) = dest.channel().await;
    let mut consumer = consume(&ch, "landed").await;
    let got = deliveries(&mut consumer, 2).await;
    assert_eq!(got[0].data, b"o1");
    assert_eq!(got[1].data, b"o2");
    assert_no_delivery(&mut consumer).await;
    let headers = got[0].properties.headers().clone().unwrap_or_default();
    let headers = headers.inner();
    let Some(AMQPValue::FieldArray(list)) = headers.get("x-shovelled") else {
        panic!("no x-shovelled header: {headers:?}");
    };
    let Some(AMQPValue::FieldTable(entry)) = list.as_slice().first() else {
        panic!("x-shovelled is not a list of tables: {list:?}");
    };
    let text = |k: &str| match entry.inner().get(k) {
        Some(AMQPValue::LongString(s)) => s.to_string(),
        other => panic!("{k}: {other:?}"),
    };
    assert_eq!(text("shovel-name"), "x2x");
    assert_eq!(text("src-exchange"), "amq.topic");
    assert_eq!(text("dest-exchange"), "amq.direct");
    assert!(matches!(
        headers.get("x-shovelled-timestamp"),
        Some(AMQPValue::Timestamp(_))
    ));
}

#[tokio::test]
async fn delete_after_queue_length_moves_the_backlog_then_deletes_itself() {
    let (source, dest) = (start().await, start().await);
    let api = Api::new(&source);
    let (conn, ch) = source.channel().await;
    declare_queue(&ch, "backlog").await;
    fill(&ch, "backlog", 0, 120).await;
    add_shovel(
        &api,
        "move",
        json!({"src-uri": "amqp://", "src-queue": "backlog", "dest-uri": dest.url(),
               "dest-queue": "moved", "src-delete-after": "queue-length", "src-prefetch-count": 16}),
    )
    .await;
    eventually("the finished shovel deleted itself", || async {
        api.get("/api/parameters/shovel/%2F/move").await.0 == StatusCode::NOT_FOUND
    })
    .await;
    let got = receive(&dest, "moved", 120).await;
    assert_eq!(got.first().map(String::as_str), Some("m0"));
    assert_eq!(got.last().map(String::as_str), Some("m119"));
    // Published after the shovel finished: stays where it is.
    publish(&ch, "", "backlog", b"later").await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(message_count(&conn, "backlog").await, 1);
    eventually("the shovel left /api/shovels", || async {
        api.get("/api/shovels/%2F/move").await.0 == StatusCode::NOT_FOUND
    })
    .await;
}

#[tokio::test]
async fn pause_and_resume_stop_and_restart_the_flow_also_across_a_restart() {
    let (mut source, dest) = (start().await, start().await);
    let api = Api::new(&source);
    add_shovel(
        &api,
        "p",
        json!({"src-uri": "amqp://", "src-queue": "in", "dest-uri": dest.url(), "dest-queue": "out"}),
    )
    .await;
    shovel_in_state(&api, "p", "running").await;
    assert_eq!(
        api.put("/api/shovels/%2F/p/resume", json!({})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "only a paused shovel can be resumed"
    );
    assert_eq!(
        api.put("/api/shovels/%2F/p/pause", json!({})).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        api.put("/api/shovels/%2F/nope/pause", json!({})).await,
        StatusCode::NOT_FOUND
    );
    shovel_in_state(&api, "p", "paused").await;
    source.restart().await;
    let api = Api::new(&source);
    shovel_in_state(&api, "p", "paused").await;
    let (conn, ch) = source.channel().await;
    fill(&ch, "in", 0, 10).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(message_count(&conn, "in").await, 10, "a paused shovel moves nothing");
    assert_eq!(
        api.put("/api/shovels/%2F/p/resume", json!({})).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(receive(&dest, "out", 10).await.len(), 10);
    // RabbitMQ's restart and delete paths.
    assert_eq!(
        api.delete("/api/shovels/vhost/%2F/p/restart").await,
        StatusCode::NO_CONTENT
    );
    shovel_in_state(&api, "p", "running").await;
    assert_eq!(api.delete("/api/shovels/vhost/%2F/p").await, StatusCode::NO_CONTENT);
    assert_eq!(api.get("/api/parameters/shovel/%2F/p").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn on_confirm_loses_nothing_when_the_destination_restarts() {
    let (source, mut dest) = (start().await, start().await);
    // The destination keeps its port across the restart so that the URI holds.
    let port = dest.addr().port();
    dest.config.amqp.port = port;
    let api = Api::new(&source);
    let (_c, ch) = source.channel().await;
    declare_queue(&ch, "work").await;
    fill(&ch, "work", 0, 200).await;
    add_shovel(
        &api,
        "r",
        json!({"src-uri": "amqp://", "src-queue": "work", "dest-uri": dest.url(),
               "dest-queue": "done", "reconnect-delay": 0.2}),
    )
    .await;
    shovel_in_state(&api, "r", "running").await;
    dest.restart().await;
    fill(&ch, "work", 200, 200).await;
    let got = receive(&dest, "done", 400).await;
    let unique: BTreeSet<_> = got.iter().collect();
    assert_eq!(unique.len(), 400, "every message arrived (duplicates allowed)");
    shovel_in_state(&api, "r", "running").await;
}

#[tokio::test]
async fn bad_shovel_parameters_are_refused_with_a_reason() {
    let broker = start().await;
    let api = Api::new(&broker);
    let base = json!({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"});
    let cases = [
        ("srcqueue", json!("a"), "unknown parameter key"),
        ("src-uri", json!("amqp://host:port"), "src-uri"),
        ("dest-uri", json!("ftp://x"), "dest-uri"),
        ("ack-mode", json!("sometimes"), "ack-mode"),
        ("src-delete-after", json!("later"), "src-delete-after"),
    ];
    for (key, value, reason) in cases {
        let mut v = base.clone();
        v[key] = value;
        let (status, body) = api
            .call(
                Method::PUT,
                "/api/parameters/shovel/%2F/bad",
                GUEST,
                Some(json!({ "value": v })),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key}: {body}");
        assert!(
            body["reason"].as_str().unwrap_or_default().contains(reason),
            "{key}: {body}"
        );
    }
    let mut no_queue = base.clone();
    no_queue.as_object_mut().map(|o| o.remove("src-queue"));
    let (status, body) = api
        .call(
            Method::PUT,
            "/api/parameters/shovel/%2F/bad",
            GUEST,
            Some(json!({ "value": no_queue })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(api.get("/api/shovels").await.1, json!([]));
}

#[tokio::test]
async fn a_host_less_uri_acts_as_the_user_who_created_the_shovel() {
    let broker = start().await;
    let api = Api::new(&broker);
    // A policymaker with access to `/` only, creating a shovel into a vhost it cannot use.
    assert_eq!(api.put("/api/vhosts/secret", json!({})).await, StatusCode::CREATED);
    assert_eq!(
        api.put("/api/users/pm", json!({"password": "pw", "tags": "policymaker"}))
            .await,
        StatusCode::CREATED
    );
    let all = json!({"configure": ".*", "write": ".*", "read": ".*"});
    assert!(api.put("/api/permissions/%2F/pm", all).await.is_success());
    let value = json!({"src-uri": "amqp://", "src-queue": "q", "dest-uri": "amqp:///secret", "dest-queue": "q"});
    let (status, _) = api
        .call(
            Method::PUT,
            "/api/parameters/shovel/%2F/sneaky",
            Some(("pm", "pw")),
            Some(json!({ "value": value })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let status = shovel_in_state(&api, "sneaky", "terminated").await;
    assert!(
        status["reason"].as_str().unwrap_or_default().contains("destination"),
        "refused at the destination: {status}"
    );
}

/// What the test webhook received: path, headers and body of each accepted POST.
type Posts = std::sync::Arc<std::sync::Mutex<Vec<(String, axum::http::HeaderMap, String)>>>;

/// Serves a webhook that answers 500 to the first `failures` requests and
/// records the rest; returns its address and the record.
async fn webhook(failures: usize) -> (std::net::SocketAddr, Posts) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let posts: Posts = Default::default();
    let seen = std::sync::Arc::new(AtomicUsize::new(0));
    let record = posts.clone();
    let app = axum::Router::new().fallback(
        move |uri: axum::http::Uri, headers: axum::http::HeaderMap, body: String| {
            let (record, seen) = (record.clone(), seen.clone());
            async move {
                if seen.fetch_add(1, Ordering::SeqCst) < failures {
                    return axum::http::StatusCode::INTERNAL_SERVER_ERROR;
                }
                record
                    .lock()
                    .expect("lock")
                    .push((uri.path().to_owned(), headers, body));
                axum::http::StatusCode::NO_CONTENT
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, posts)
}

#[tokio::test]
async fn a_webhook_destination_gets_each_message_posted_retrying_failures() {
    let broker = start().await;
    let (addr, posts) = webhook(2).await;
    let (conn, ch) = broker.channel().await;
    declare_queue(&ch, "hooks").await;
    for i in 0..5 {
        let mut headers = lapin::types::FieldTable::default();
        headers.insert("tenant".into(), long_str("acme"));
        let props = lapin::BasicProperties::default()
            .with_content_type("text/plain".into())
            .with_message_id(format!("id{i}").into())
            .with_headers(headers);
        publish_props(&ch, "", "hooks", format!("event {i}").as_bytes(), props).await;
    }
    add_shovel(
        &Api::new(&broker),
        "hook",
        json!({"src-uri": "amqp://", "src-queue": "hooks",
               "dest-uri": format!("http://user:pw@{addr}/events"), "reconnect-delay": 0.1}),
    )
    .await;
    eventually("five messages posted", || async {
        posts.lock().expect("lock").len() >= 5
    })
    .await;
    eventually("the queue is empty", || async {
        message_count(&conn, "hooks").await == 0
    })
    .await;
    let posts = posts.lock().expect("lock").clone();
    let bodies: Vec<_> = posts.iter().map(|(_, _, b)| b.as_str()).collect();
    assert_eq!(
        bodies,
        ["event 0", "event 1", "event 2", "event 3", "event 4"],
        "in order, after the failures"
    );
    let (path, headers, _) = &posts[0];
    assert_eq!(path, "/events");
    let h = |k: &str| {
        headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(h("content-type"), "text/plain");
    assert_eq!(h("x-message-id"), "id0");
    assert_eq!(h("x-tenant"), "acme");
    assert_eq!(h("x-shovel"), "hook");
    assert_eq!(h("authorization"), "Basic dXNlcjpwdw==");
}

/// A peer that opens an AMQP connection and a channel with a 1 s heartbeat,
/// then never sends another byte (a broker behind a dead network); it keeps
/// reading, so the socket stays open. Returns its address and whether the
/// client's heartbeats reached it.
async fn silent_peer() -> (std::net::SocketAddr, std::sync::Arc<std::sync::atomic::AtomicBool>) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let beat_seen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = beat_seen.clone();
    tokio::spawn(async move {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let mut c = RawConn { stream };
        let mut header = [0u8; 8];
        let _ = c.stream.read_exact(&mut header).await;
        let mut start = vec![0, 9];
        start.extend(0u32.to_be_bytes());
        start.extend(longstr(b"PLAIN"));
        start.extend(longstr(b"en_US"));
        c.send(&method_frame(0, 10, 10, &start)).await;
        c.read_method().await;
        let mut tune = 0u16.to_be_bytes().to_vec();
        tune.extend(131_072u32.to_be_bytes());
        tune.extend(1u16.to_be_bytes());
        c.send(&method_frame(0, 10, 30, &tune)).await;
        c.read_method().await;
        c.read_method().await;
        c.send(&method_frame(0, 10, 41, &shortstr(""))).await;
        c.read_method().await;
        c.send(&method_frame(1, 20, 11, &longstr(b""))).await;
        while let Some(f) = c.read_frame().await {
            if f.kind == 8 {
                seen.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
    });
    (addr, beat_seen)
}

#[tokio::test]
async fn a_silent_destination_is_given_up_on_after_missed_heartbeats() {
    let broker = start().await;
    let api = Api::new(&broker);
    let (addr, beat_seen) = silent_peer().await;
    add_shovel(
        &api,
        "silent",
        json!({"src-uri": "amqp://", "src-queue": "q", "dest-uri": format!("amqp://guest:guest@{addr}/%2f?heartbeat=1"),
               "dest-exchange": "amq.direct", "ack-mode": "on-publish", "reconnect-delay": 30}),
    )
    .await;
    shovel_in_state(&api, "silent", "running").await;
    let status = shovel_in_state(&api, "silent", "terminated").await;
    assert!(
        status["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("missed heartbeats"),
        "{status}"
    );
    assert!(
        beat_seen.load(std::sync::atomic::Ordering::SeqCst),
        "the shovel sent heartbeats"
    );
}
