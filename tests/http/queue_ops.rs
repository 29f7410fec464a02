//! LavinMQ's queue operations in the management API: pause and resume
//! deliveries (kept across a restart) and the list of unacknowledged deliveries.

use crate::common::api::*;
use crate::common::*;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn a_paused_queue_delivers_nothing_until_resumed() {
    let mut b = start().await;
    let (_conn, ch) = b.channel().await;
    let q = uniq("paused");
    ch.queue_declare(q.as_str().into(), durable(), Default::default())
        .await
        .expect("declare");
    let api = Api::new(&b);
    let path = format!("/api/queues/%2F/{q}");
    assert_eq!(
        api.put(&format!("{path}/pause"), json!({})).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(api.get_ok(&path).await["state"], "paused");
    publish(&ch, "", &q, b"held").await;
    assert!(get(&ch, &q, true).await.is_none(), "basic.get on a paused queue");
    let mut consumer = consume(&ch, &q).await;
    assert_no_delivery(&mut consumer).await;
    drop(consumer);
    drop(ch);
    drop(_conn);

    b.restart().await;
    let api = Api::new(&b);
    assert_eq!(api.get_ok(&path).await["state"], "paused", "pause survives a restart");
    let (_conn, ch) = b.channel().await;
    let mut consumer = consume(&ch, &q).await;
    assert_no_delivery(&mut consumer).await;
    assert_eq!(
        api.put(&format!("{path}/resume"), json!({})).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(next_delivery(&mut consumer).await.data, b"held");
    assert_eq!(api.get_ok(&path).await["state"], "running");
    assert_eq!(
        api.put("/api/queues/%2F/missing/pause", json!({})).await,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn unacked_deliveries_are_listed_per_queue() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("unacked");
    declare_queue(&ch, &q).await;
    for body in [b"a", b"b", b"c"] {
        publish(&ch, "", &q, body).await;
    }
    let fetched = get(&ch, &q, false).await.expect("a message");
    let mut consumer = consume(&ch, &q).await;
    deliveries(&mut consumer, 2).await;
    let path = format!("/api/queues/%2F/{q}/unacked");
    eventually("three unacked deliveries", || async {
        api.get_ok(&path).await.as_array().map(Vec::len) == Some(3)
    })
    .await;
    let list = api.get_ok(&path).await;
    assert_eq!(list[0]["consumer_tag"], "Basic get", "{list}");
    assert_eq!(list[0]["delivery_tag"], fetched.delivery.delivery_tag, "{list}");
    assert_eq!(list[1]["consumer_tag"], consumer.tag().as_str(), "{list}");
    assert!(list[2]["unacked_for_seconds"].is_u64(), "{list}");
    assert!(
        list[2]["channel_name"].as_str().is_some_and(|n| n.ends_with("(1)")),
        "{list}"
    );
    let (status, _) = api.get("/api/queues/%2F/missing/unacked").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Publishes `n` persistent messages `m0`.. to `queue` and waits for the confirms.
async fn fill_durable(ch: &lapin::Channel, queue: &str, n: usize) {
    confirm_select(ch).await;
    for i in 0..n {
        let props = lapin::BasicProperties::default().with_delivery_mode(2);
        publish_props(ch, "", queue, format!("m{i}").as_bytes(), props).await;
    }
    ch.wait_for_confirms().await.expect("confirms");
}

/// A durable queue whose segment cannot be opened at start is listed as
/// closed with the reason (LavinMQ's state "closed"), keeps its definition,
/// bindings and files, refuses publish, get and consume, and is reopened by
/// `PUT /api/queues/{vhost}/{name}/restart` once its files are fixed.
#[tokio::test]
async fn a_queue_whose_files_cannot_be_opened_is_closed_until_restarted() {
    let mut b = start().await;
    let (broken, healthy) = (uniq("broken"), uniq("healthy"));
    {
        let (_conn, ch) = b.channel().await;
        let args = table(&[("x-max-length", lapin::types::AMQPValue::LongInt(100))]);
        ch.queue_declare(broken.as_str().into(), durable(), args)
            .await
            .expect("declare");
        ch.queue_declare(healthy.as_str().into(), durable(), Default::default())
            .await
            .expect("declare");
        ch.queue_bind(
            broken.as_str().into(),
            "amq.direct".into(),
            "bk".into(),
            Default::default(),
            Default::default(),
        )
        .await
        .expect("bind");
        fill_durable(&ch, &broken, 3).await;
        fill_durable(&ch, &healthy, 2).await;
    }
    let dir = b.queue_dir(&broken);
    let mut saved = None;
    b.restart_changing(|| saved = Some(break_segments(&dir))).await;
    let (saved, damaged) = saved.expect("segments damaged");

    let api = Api::new(&b);
    let path = format!("/api/queues/%2F/{broken}");
    let shown = api.get_ok(&path).await;
    assert_eq!(shown["state"], "closed", "{shown}");
    let reason = shown["closed_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("unknown segment format version"), "{shown}");
    assert_eq!(shown["arguments"]["x-max-length"], 100, "{shown}");
    let listed = api.get_ok("/api/queues/%2F").await;
    let state_of = |name: &str| {
        listed
            .as_array()
            .and_then(|all| all.iter().find(|q| q["name"] == name))
            .map(|q| (q["state"].clone(), q["messages"].clone()))
    };
    assert_eq!(state_of(&broken), Some((json!("closed"), json!(0))), "{listed}");
    assert_eq!(state_of(&healthy), Some((json!("running"), json!(2))), "{listed}");
    let bindings = api.get_ok(&format!("{path}/bindings")).await;
    assert!(
        bindings.as_array().is_some_and(|bs| bs
            .iter()
            .any(|x| x["source"] == "amq.direct" && x["routing_key"] == "bk")),
        "binding kept: {bindings}"
    );

    let conn = b.connect().await;
    let ch = conn.create_channel().await.expect("channel");
    confirm_select(&ch).await;
    let confirm = ch
        .basic_publish(
            "amq.direct".into(),
            "bk".into(),
            Default::default(),
            b"refused",
            Default::default(),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_nack(), "publish to a closed queue: {confirm:?}");
    let err = ch
        .basic_get(broken.as_str().into(), Default::default())
        .await
        .expect_err("basic.get on a closed queue");
    assert_eq!(reply_code(&err), Some(404), "{err}");
    assert!(err.to_string().contains("closed"), "{err}");
    let ch = conn.create_channel().await.expect("channel");
    let err = ch
        .basic_consume(
            broken.as_str().into(),
            "".into(),
            Default::default(),
            Default::default(),
        )
        .await
        .expect_err("basic.consume on a closed queue");
    assert_eq!(reply_code(&err), Some(404), "{err}");

    let restart = format!("{path}/restart");
    assert_eq!(
        api.put(&restart, json!({})).await,
        StatusCode::BAD_REQUEST,
        "still broken"
    );
    assert_eq!(api.get_ok(&path).await["state"], "closed");
    for (file, bytes) in &damaged {
        assert_eq!(
            &std::fs::read(file).expect("segment kept"),
            bytes,
            "files left untouched"
        );
    }

    saved.restore();
    assert_eq!(api.put(&restart, json!({})).await, StatusCode::NO_CONTENT);
    let shown = api.get_ok(&path).await;
    assert_eq!(shown["state"], "running", "{shown}");
    assert!(shown.get("closed_reason").is_none(), "{shown}");
    assert_eq!(
        api.put(&restart, json!({})).await,
        StatusCode::BAD_REQUEST,
        "not closed"
    );
    let ch = conn.create_channel().await.expect("channel");
    assert_eq!(
        drain(&ch, &broken).await,
        [b"m0".to_vec(), b"m1".to_vec(), b"m2".to_vec()]
    );
    assert_eq!(drain(&ch, &healthy).await, [b"m0".to_vec(), b"m1".to_vec()]);
}
