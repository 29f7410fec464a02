//! A shovel survives `kill -9` of its own broker: broker A moves a queue to
//! broker B with `on-confirm`; A is killed mid-shovel and restarted on its
//! data dir, and every message A confirmed to the publisher arrives at B
//! (duplicates allowed: a message in flight when A died may arrive twice).

use std::collections::BTreeSet;
use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection};

use crate::process::*;

/// Messages published to A.
const MESSAGES: usize = 20_000;

/// Ready messages in `queue` (declared durable if missing).
async fn count(conn: &Connection, queue: &str) -> u32 {
    let ch = within("channel", conn.create_channel()).await.expect("channel");
    let opts = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    let q = within("declare", ch.queue_declare(queue.into(), opts, FieldTable::default()))
        .await
        .expect("declare");
    let _ = ch.close(200, "bye".into()).await;
    q.message_count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shovel_killed_mid_transfer_loses_no_confirmed_message() {
    let dest_dir = tempfile::tempdir().expect("tempdir");
    let dest = BrokerProcess::spawn(dest_dir.path(), None);
    let src_dir = tempfile::tempdir().expect("tempdir");
    let definitions = src_dir.path().join("definitions.json");
    let shovel = serde_json::json!({
        "parameters": [{"component": "shovel", "vhost": "/", "name": "to-b", "value": {
            "src-uri": "amqp://", "src-queue": "outbox", "dest-uri": dest.url(), "dest-queue": "inbox",
            "ack-mode": "on-confirm", "src-prefetch-count": 100, "reconnect-delay": 0.2}}]
    });
    std::fs::write(&definitions, shovel.to_string()).expect("write definitions");
    let ini = src_dir.path().join("lavinmq.ini");
    std::fs::write(&ini, format!("[main]\nload_definitions = {}\n", definitions.display())).expect("ini");
    let data = src_dir.path().join("data");
    // The backlog is published first, with no shovel yet.
    let mut source = BrokerProcess::spawn(&data, None);
    let conn = source.connect().await;
    count(&conn, "outbox").await;
    let ch = within("channel", conn.create_channel()).await.expect("channel");
    within("confirm.select", ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .expect("confirm.select");
    let persistent = BasicProperties::default().with_delivery_mode(2);
    for i in 0..MESSAGES {
        let confirm = within(
            "publish",
            ch.basic_publish(
                "".into(),
                "outbox".into(),
                BasicPublishOptions::default(),
                &make_body(&format!("m{i}"), 64),
                persistent.clone(),
            ),
        )
        .await
        .expect("publish");
        if i % 100 == 99 || i + 1 == MESSAGES {
            within("confirm", confirm).await.expect("confirm");
        }
    }
    drop(conn);
    source.stop();
    // Restarted with the shovel defined, the source starts moving the backlog.
    let mut source = BrokerProcess::spawn(&data, Some(&ini));
    let dest_conn = dest.connect().await;
    // Kill the source once part of the backlog has moved.
    let mut moved = 0;
    for _ in 0..2500 {
        moved = count(&dest_conn, "inbox").await;
        if moved > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(
        moved > 0 && (moved as usize) < MESSAGES,
        "killed mid-transfer: {moved} moved"
    );
    source.kill9();
    let source = BrokerProcess::spawn(&data, Some(&ini));
    let src_conn = source.connect().await;
    // Everything ends up at B, and A's queue empties.
    let mut left = u32::MAX;
    for _ in 0..300 {
        left = count(&src_conn, "outbox").await;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(left, 0, "the restarted shovel emptied the source queue");
    let ch = within("channel", dest_conn.create_channel()).await.expect("channel");
    let mut ids = BTreeSet::new();
    let mut total = 0;
    while let Some(m) = within(
        "basic.get",
        ch.basic_get("inbox".into(), lapin::options::BasicGetOptions { no_ack: true }),
    )
    .await
    .expect("basic.get")
    {
        ids.insert(body_id(&m.delivery.data));
        total += 1;
    }
    let want: BTreeSet<String> = (0..MESSAGES).map(|i| format!("m{i}")).collect();
    let missing: Vec<_> = want.difference(&ids).take(5).collect();
    assert!(
        missing.is_empty(),
        "lost messages (first few): {missing:?}; {moved} had moved at the kill"
    );
    assert!(total >= MESSAGES, "{total} delivered");
}
