//! LavinMQ's queue operations in the management API: pause and resume
//! deliveries (kept across a restart) and the list of unacknowledged deliveries.

mod common;

use common::api::*;
use common::*;
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
