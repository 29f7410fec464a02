//! Queues: naming, passive declares, equivalence, exclusivity, auto-delete,
//! purge and delete.

use crate::common;

use common::*;
use lapin::options::{
    BasicCancelOptions, BasicConsumeOptions, BasicQosOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection};

fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        ..Default::default()
    }
}

fn ttl(ms: i32) -> FieldTable {
    let mut t = FieldTable::default();
    t.insert("x-message-ttl".into(), AMQPValue::LongInt(ms));
    t
}

async fn try_declare(
    conn: &Connection,
    name: &str,
    opts: QueueDeclareOptions,
    args: FieldTable,
) -> lapin::Result<lapin::Queue> {
    let ch = conn.create_channel().await.expect("channel");
    ch.queue_declare(name.into(), opts, args).await
}

async fn fresh(conn: &Connection) -> Channel {
    conn.create_channel().await.expect("channel")
}

/// `queue.declare` encoded by hand (for the raw-socket test).
fn raw_queue_declare(channel: u16, name: &str, exclusive: bool) -> Vec<u8> {
    let mut a = 0u16.to_be_bytes().to_vec();
    a.extend(shortstr(name));
    a.push(if exclusive { 0b100 } else { 0 });
    a.extend_from_slice(&0u32.to_be_bytes());
    method_frame(channel, 50, 10, &a)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_named_queues() {
    let broker = start().await;
    let (_conn, ch) = broker.channel().await;
    let q1 = ch
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                exclusive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare");
    let name = q1.name().to_string();
    assert!(name.starts_with("amq.gen-"), "generated name {name:?}");
    assert!(name.len() > "amq.gen-".len() + 8, "name too short: {name:?}");
    let q2 = ch
        .queue_declare("".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .expect("declare");
    assert!(q2.name().as_str().starts_with("amq.gen-"));
    assert_ne!(q1.name(), q2.name());
    // The generated name is usable like any other.
    publish(&ch, "", &name, b"to-generated").await;
    let m = get(&ch, &name, true).await.expect("message");
    assert_eq!(m.delivery.data, b"to-generated");
    // An empty queue name means the channel's last declared queue (q2).
    ch.queue_bind(
        "".into(),
        "amq.fanout".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("bind of the last declared queue");
    publish(&ch, "amq.fanout", "", b"via-fanout").await;
    let m = get(&ch, q2.name().as_str(), true).await.expect("message");
    assert_eq!(m.delivery.data, b"via-fanout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_may_not_use_amq_prefix() {
    let broker = start().await;
    let conn = broker.connect().await;
    let r = try_declare(&conn, "amq.mine", QueueDeclareOptions::default(), FieldTable::default()).await;
    assert_code(r, 403);
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_declare_reports_counts_or_404() {
    let broker = start().await;
    let conn = broker.connect().await;
    let ch = fresh(&conn).await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    for i in 0..3u8 {
        publish(&ch, "", &q, &[i]).await;
    }
    let d = ch
        .queue_declare(q.as_str().into(), passive(), FieldTable::default())
        .await
        .expect("passive declare");
    assert_eq!(d.name().as_str(), q);
    assert_eq!((d.message_count(), d.consumer_count()), (3, 0));
    // Passive declare ignores the other flags.
    let d = ch
        .queue_declare(
            q.as_str().into(),
            QueueDeclareOptions {
                passive: true,
                durable: true,
                auto_delete: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("passive declare with other flags");
    assert_eq!(d.message_count(), 3);

    let r = try_declare(&conn, &uniq("missing"), passive(), FieldTable::default()).await;
    assert_code(r, 404);
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declare_ok_counts_ready_messages_and_consumers() {
    let broker = start().await;
    let conn = broker.connect().await;
    let ch = fresh(&conn).await;
    let q = uniq("q");
    let d = declare_queue(&ch, &q).await;
    assert_eq!((d.message_count(), d.consumer_count()), (0, 0));
    for i in 0..3u8 {
        publish(&ch, "", &q, &[i]).await;
    }
    let d = declare_queue(&ch, &q).await;
    assert_eq!((d.message_count(), d.consumer_count()), (3, 0));

    // One consumer holding one unacked message: it counts as a consumer, and the
    // message it holds is no longer ready.
    let ch2 = fresh(&conn).await;
    ch2.basic_qos(1, BasicQosOptions::default()).await.expect("qos");
    let mut c = consume(&ch2, &q).await;
    let first = next_delivery(&mut c).await;
    assert_eq!(first.data, [0]);
    let d = declare_queue(&ch, &q).await;
    assert_eq!((d.message_count(), d.consumer_count()), (2, 1));
    let _ = (first, c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclare_with_different_properties_fails() {
    let broker = start().await;
    let conn = broker.connect().await;
    let q = uniq("q");
    let base = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    try_declare(&conn, &q, base, ttl(60_000)).await.expect("declare");
    try_declare(&conn, &q, base, ttl(60_000))
        .await
        .expect("equivalent redeclare");
    // Integer arguments are compared by value, whatever their wire type.
    let mut wide = FieldTable::default();
    wide.insert("x-message-ttl".into(), AMQPValue::LongLongInt(60_000));
    try_declare(&conn, &q, base, wide)
        .await
        .expect("equivalent redeclare with a 64-bit ttl");

    let cases = [
        ("durable", QueueDeclareOptions::default(), ttl(60_000)),
        (
            "auto_delete",
            QueueDeclareOptions {
                auto_delete: true,
                ..base
            },
            ttl(60_000),
        ),
        ("x-message-ttl", base, ttl(1_000)),
        ("missing x-message-ttl", base, FieldTable::default()),
    ];
    for (what, opts, args) in cases {
        match try_declare(&conn, &q, opts, args).await {
            Err(e) => assert_eq!(reply_code(&e), Some(406), "{what}: {e}"),
            Ok(_) => panic!("redeclare with different {what} succeeded"),
        }
    }
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclare_with_different_exclusive_flag_is_resource_locked() {
    // RabbitMQ checks exclusive access (strictly) before the other properties, so
    // a different exclusive flag is 405 RESOURCE_LOCKED even on the same connection.
    let broker = start().await;
    let conn = broker.connect().await;
    let shared = uniq("shared");
    try_declare(&conn, &shared, QueueDeclareOptions::default(), FieldTable::default())
        .await
        .expect("declare");
    let r = try_declare(
        &conn,
        &shared,
        QueueDeclareOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await;
    assert_code(r, 405);
    let mine = uniq("mine");
    let exclusive = QueueDeclareOptions {
        exclusive: true,
        ..Default::default()
    };
    try_declare(&conn, &mine, exclusive, FieldTable::default())
        .await
        .expect("declare exclusive");
    try_declare(&conn, &mine, exclusive, FieldTable::default())
        .await
        .expect("owner redeclares its exclusive queue");
    let r = try_declare(&conn, &mine, QueueDeclareOptions::default(), FieldTable::default()).await;
    assert_code(r, 405);
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_queue_is_locked_to_its_connection() {
    let broker = start().await;
    let owner = broker.connect().await;
    let other = broker.connect().await;
    let q = uniq("excl");
    let och = fresh(&owner).await;
    och.queue_declare(
        q.as_str().into(),
        QueueDeclareOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("declare exclusive");
    // The owner may use it from any of its channels.
    let och2 = fresh(&owner).await;
    och2.queue_declare(q.as_str().into(), passive(), FieldTable::default())
        .await
        .expect("owner passive declare on another channel");

    let r = try_declare(&other, &q, passive(), FieldTable::default()).await;
    assert_code(r, 405);
    let r = try_declare(
        &other,
        &q,
        QueueDeclareOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await;
    assert_code(r, 405);
    let r = fresh(&other)
        .await
        .basic_consume(
            q.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_code(r.map(|_| ()), 405);
    let r = fresh(&other)
        .await
        .basic_get(q.as_str().into(), Default::default())
        .await;
    assert_code(r.map(|m| m.is_some()), 405);
    let r = fresh(&other)
        .await
        .queue_purge(q.as_str().into(), QueuePurgeOptions::default())
        .await;
    assert_code(r, 405);
    let r = fresh(&other)
        .await
        .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
        .await;
    assert_code(r, 405);
    assert!(other.status().connected());

    // Anyone may publish to it.
    let pch = fresh(&other).await;
    confirm_select(&pch).await;
    publish_confirmed(&pch, "", &q, b"for-the-owner").await;
    let m = get(&och, &q, true).await.expect("message");
    assert_eq!(m.delivery.data, b"for-the-owner");

    // It goes when its owner closes.
    owner.close(200, "OK".into()).await.expect("close");
    eventually("exclusive queue deleted", || queue_exists_not(&other, &q)).await;
}

async fn queue_exists_not(conn: &Connection, q: &str) -> bool {
    !queue_exists(conn, q).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_queue_deleted_when_owner_socket_drops() {
    let broker = start().await;
    let q = uniq("excl-raw");
    let mut raw = RawConn::open(broker.addr()).await;
    raw.send(&channel_open(1)).await;
    assert_eq!(raw.read_method().await.method_ids(), Some((20, 11)));
    raw.send(&raw_queue_declare(1, &q, true)).await;
    assert_eq!(raw.read_method().await.method_ids(), Some((50, 11)));
    let conn = broker.connect().await;
    // Still owned: locked to others.
    let r = try_declare(&conn, &q, passive(), FieldTable::default()).await;
    assert_code(r, 405);
    // The owner vanishes without closing.
    drop(raw);
    eventually("exclusive queue deleted", || queue_exists_not(&conn, &q)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_delete_queue_goes_after_its_last_consumer() {
    let broker = start().await;
    let conn = broker.connect().await;
    let ch = fresh(&conn).await;
    let q = uniq("autodel");
    let opts = QueueDeclareOptions {
        auto_delete: true,
        ..Default::default()
    };
    ch.queue_declare(q.as_str().into(), opts, FieldTable::default())
        .await
        .expect("declare");
    // Without ever having had a consumer it stays.
    tokio::time::sleep(QUIET).await;
    assert!(queue_exists(&conn, &q).await);

    let c1 = consume(&ch, &q).await;
    let ch2 = fresh(&conn).await;
    let c2 = consume(&ch2, &q).await;
    ch.basic_cancel(c1.tag(), BasicCancelOptions::default())
        .await
        .expect("cancel");
    assert!(queue_exists(&conn, &q).await, "deleted with a consumer left");
    ch2.basic_cancel(c2.tag(), BasicCancelOptions::default())
        .await
        .expect("cancel");
    eventually("auto-delete queue deleted", || queue_exists_not(&conn, &q)).await;

    // Also when the last consumer's channel closes.
    let q2 = uniq("autodel2");
    ch.queue_declare(q2.as_str().into(), opts, FieldTable::default())
        .await
        .expect("declare");
    let ch3 = fresh(&conn).await;
    let _c3 = consume(&ch3, &q2).await;
    ch3.close(200, "OK".into()).await.expect("channel close");
    eventually("auto-delete queue deleted", || queue_exists_not(&conn, &q2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_returns_count_and_spares_unacked() {
    let broker = start().await;
    let conn = broker.connect().await;
    let ch = fresh(&conn).await;
    let q = uniq("purge");
    declare_queue(&ch, &q).await;
    for i in 0..5u8 {
        publish(&ch, "", &q, &[i]).await;
    }
    let n = ch
        .queue_purge(q.as_str().into(), QueuePurgeOptions::default())
        .await
        .expect("purge");
    assert_eq!(n, 5);
    assert_eq!(message_count(&conn, &q).await, 0);
    let n = ch
        .queue_purge(q.as_str().into(), QueuePurgeOptions::default())
        .await
        .expect("purge");
    assert_eq!(n, 0);

    // Unacked messages are not purged; they come back when their channel closes.
    for i in 0..3u8 {
        publish(&ch, "", &q, &[i]).await;
    }
    let holder = fresh(&conn).await;
    let held = get(&holder, &q, false).await.expect("message");
    assert_eq!(held.delivery.data, [0]);
    let n = ch
        .queue_purge(q.as_str().into(), QueuePurgeOptions::default())
        .await
        .expect("purge");
    assert_eq!(n, 2);
    holder.close(200, "OK".into()).await.expect("close");
    assert_eq!(drain(&ch, &q).await, vec![vec![0u8]]);

    // Purging a missing queue is 404.
    let r = fresh(&conn)
        .await
        .queue_purge(uniq("missing").as_str().into(), QueuePurgeOptions::default())
        .await;
    assert_code(r, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_conditions_and_missing_queue() {
    let broker = start().await;
    let conn = broker.connect().await;
    let ch = fresh(&conn).await;
    let q = uniq("del");
    declare_queue(&ch, &q).await;
    publish(&ch, "", &q, b"one").await;
    publish(&ch, "", &q, b"two").await;
    let r = ch
        .queue_delete(
            q.as_str().into(),
            QueueDeleteOptions {
                if_empty: true,
                ..Default::default()
            },
        )
        .await;
    assert_code(r, 406);
    assert!(queue_exists(&conn, &q).await);

    let cch = fresh(&conn).await;
    cch.basic_qos(1, BasicQosOptions::default()).await.expect("qos");
    let mut consumer = consume(&cch, &q).await;
    let _held = next_delivery(&mut consumer).await;
    let r = fresh(&conn)
        .await
        .queue_delete(
            q.as_str().into(),
            QueueDeleteOptions {
                if_unused: true,
                ..Default::default()
            },
        )
        .await;
    assert_code(r, 406);
    assert!(queue_exists(&conn, &q).await);

    // A plain delete reports the ready messages it dropped.
    let n = fresh(&conn)
        .await
        .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
        .await
        .expect("delete");
    assert_eq!(n, 1);
    assert!(!queue_exists(&conn, &q).await);

    // Deleting a queue that does not exist succeeds (RabbitMQ), with count 0.
    let n = fresh(&conn)
        .await
        .queue_delete(uniq("never").as_str().into(), QueueDeleteOptions::default())
        .await
        .expect("delete of a missing queue");
    assert_eq!(n, 0);

    // An empty, unused queue satisfies both conditions.
    let q2 = uniq("del2");
    let ch = fresh(&conn).await;
    declare_queue(&ch, &q2).await;
    ch.queue_delete(
        q2.as_str().into(),
        QueueDeleteOptions {
            if_unused: true,
            if_empty: true,
            ..Default::default()
        },
    )
    .await
    .expect("conditional delete");
    assert!(!queue_exists(&conn, &q2).await);
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclared_queue_after_delete_is_empty() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("reborn");
    declare_queue(&ch, &q).await;
    ch.queue_bind(
        q.as_str().into(),
        "amq.direct".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("bind");
    publish(&ch, "", &q, b"old").await;
    ch.queue_delete(q.as_str().into(), QueueDeleteOptions::default())
        .await
        .expect("delete");
    let d = declare_queue(&ch, &q).await;
    assert_eq!(d.message_count(), 0);
    // The old binding went with the old queue.
    publish(&ch, "amq.direct", "k", b"via-old-binding").await;
    assert_eq!(message_count(&conn, &q).await, 0);
}
