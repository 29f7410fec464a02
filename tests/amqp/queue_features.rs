//! Queue arguments where a restart or a classic queue matters: priority order,
//! message TTL, per-message expiration, `x-expires` and `x-max-length-bytes` after a
//! restart, dead-lettered messages surviving a restart, `x-delivery-limit` on a
//! classic queue and single-active-consumer failover. (The plain behaviour of each
//! argument is covered against a live broker by tests/compat/python.) Policies
//! and the consumer timeout are modules of this binary, in `queue_features/`.

use crate::common;
mod consumer_timeout;
mod policies;

use std::time::{Duration, Instant};

use common::*;
use lapin::options::{
    BasicAckOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions,
    ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ExchangeKind};

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

async fn declare_durable_queue(ch: &Channel, name: &str, arguments: FieldTable) {
    ch.queue_declare(name.into(), durable(), arguments)
        .await
        .expect("queue.declare");
}

/// A durable fanout exchange `dlx` with a durable queue `dlq` bound to it.
async fn declare_dead_letter_target(ch: &Channel, dlx: &str, dlq: &str) {
    ch.exchange_declare(
        dlx.into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("exchange.declare");
    declare_durable_queue(ch, dlq, FieldTable::default()).await;
    ch.queue_bind(
        dlq.into(),
        dlx.into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("queue.bind");
}

/// Publishes on a confirm-mode channel and returns the broker's confirm.
async fn publish_confirm(ch: &Channel, exchange: &str, key: &str, body: &[u8], props: BasicProperties) -> Confirmation {
    let confirm = ch
        .basic_publish(exchange.into(), key.into(), BasicPublishOptions::default(), body, props)
        .await
        .expect("basic.publish");
    within("publisher confirm", confirm).await.expect("publisher confirm")
}

/// Publishes each message on a fresh confirm-mode channel and waits for every ack.
async fn publish_all(conn: &Connection, key: &str, msgs: &[(&str, BasicProperties)]) {
    let ch = conn.create_channel().await.expect("channel.open");
    confirm_select(&ch).await;
    for (body, props) in msgs {
        let c = publish_confirm(&ch, "", key, body.as_bytes(), props.clone()).await;
        assert!(c.is_ack(), "expected an ack for {body:?}, got {c:?}");
    }
    ch.close(200, "OK".into()).await.expect("channel.close");
}

/// Waits until the queue holds exactly `n` ready messages.
async fn wait_count(conn: &Connection, queue: &str, n: u32) {
    eventually(&format!("{queue} to hold {n} messages"), || async {
        message_count(conn, queue).await == n
    })
    .await;
}

fn header<'a>(props: &'a BasicProperties, key: &str) -> Option<&'a AMQPValue> {
    props.headers().as_ref()?.inner().get(key)
}

/// A header value as an integer, whatever integer type it was sent as.
fn int(v: &AMQPValue) -> Option<i64> {
    match v {
        AMQPValue::ShortShortInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortShortUInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortUInt(n) => Some(i64::from(*n)),
        AMQPValue::LongInt(n) => Some(i64::from(*n)),
        AMQPValue::LongUInt(n) => Some(i64::from(*n)),
        AMQPValue::LongLongInt(n) => Some(*n),
        _ => None,
    }
}

fn text(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

fn text_header(props: &BasicProperties, key: &str) -> Option<String> {
    header(props, key).and_then(text)
}

/// The only entry of the `x-death` header.
#[track_caller]
fn single_death(props: &BasicProperties) -> FieldTable {
    let deaths = header(props, "x-death")
        .and_then(AMQPValue::as_array)
        .unwrap_or_else(|| panic!("no x-death array in {:?}", props.headers()));
    assert_eq!(deaths.as_slice().len(), 1, "x-death entries: {deaths:?}");
    deaths.as_slice()[0]
        .as_field_table()
        .unwrap_or_else(|| panic!("x-death entry is not a table: {deaths:?}"))
        .clone()
}

fn death_text(death: &FieldTable, key: &str) -> Option<String> {
    death.inner().get(key).and_then(text)
}

fn body(d: &lapin::message::Delivery) -> String {
    String::from_utf8_lossy(&d.data).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_order_survives_restart() {
    let mut broker = start().await;
    let q = uniq("prio");
    let with_prio = |p: Option<u8>| match p {
        Some(p) => persistent().with_priority(p),
        None => persistent(),
    };
    {
        let (conn, ch) = broker.channel().await;
        declare_durable_queue(&ch, &q, table(&[("x-max-priority", AMQPValue::LongInt(10))])).await;
        // Above the maximum counts as the maximum; no priority counts as 0.
        let msgs = [
            ("a", with_prio(None)),
            ("b", with_prio(Some(5))),
            ("c", with_prio(Some(15))),
            ("d", with_prio(Some(10))),
            ("e", with_prio(Some(0))),
            ("f", with_prio(Some(5))),
            ("g", with_prio(None)),
            ("h", with_prio(Some(1))),
            ("i", with_prio(Some(255))),
        ];
        publish_all(&conn, &q, &msgs).await;
        // One acked and one left unacked (requeued when the connection goes).
        let first = get(&ch, &q, false).await.expect("first message");
        assert_eq!(first.delivery.data, b"c");
        first.delivery.ack(BasicAckOptions::default()).await.expect("ack");
        let second = get(&ch, &q, false).await.expect("second message");
        assert_eq!(second.delivery.data, b"d");
        conn.close(200, "OK".into()).await.expect("connection.close");
    }

    broker.restart().await;

    let (conn, ch) = broker.channel().await;
    assert_eq!(message_count(&conn, &q).await, 8, "messages after restart");
    // New arrivals queue behind the recovered messages of their level.
    publish_all(&conn, &q, &[("n10", with_prio(Some(10))), ("n7", with_prio(Some(7)))]).await;
    let mut got = Vec::new();
    while let Some(m) = get(&ch, &q, false).await {
        if m.delivery.data == b"i" {
            assert_eq!(m.delivery.properties.priority(), &Some(255), "priority property kept");
        }
        got.push(body(&m.delivery));
        m.delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    assert_eq!(got, ["d", "i", "n10", "n7", "b", "f", "h", "a", "e", "g"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_ttl_applies_after_restart() {
    let mut broker = start().await;
    let (q, dlx, dlq) = (uniq("ttl"), uniq("dlx"), uniq("dlq"));
    {
        let (conn, ch) = broker.channel().await;
        declare_dead_letter_target(&ch, &dlx, &dlq).await;
        declare_durable_queue(
            &ch,
            &q,
            table(&[
                ("x-message-ttl", AMQPValue::LongInt(1500)),
                ("x-dead-letter-exchange", long_str(&dlx)),
            ]),
        )
        .await;
        publish_all(
            &conn,
            &q,
            &[("m0", persistent()), ("m1", persistent()), ("m2", persistent())],
        )
        .await;
        conn.close(200, "OK".into()).await.expect("connection.close");
    }

    broker.restart().await;

    let (conn, ch) = broker.channel().await;
    // Nothing was lost in the restart (wherever the messages are by now)...
    let (left, dead) = (message_count(&conn, &q).await, message_count(&conn, &dlq).await);
    assert_eq!(left + dead, 3, "{left} in the queue, {dead} dead-lettered");
    // ...and the TTL still runs out, without anyone looking at the queue (a
    // passive declare or a get would expire its head on the spot).
    wait_count(&conn, &dlq, 3).await;
    assert_eq!(message_count(&conn, &q).await, 0);
    for expected in ["m0", "m1", "m2"] {
        let m = get(&ch, &dlq, true).await.expect("dead-lettered message");
        assert_eq!(body(&m.delivery), expected);
        let death = single_death(&m.delivery.properties);
        assert_eq!(death_text(&death, "reason").as_deref(), Some("expired"));
        assert_eq!(death_text(&death, "queue").as_deref(), Some(q.as_str()));
        assert_eq!(death.inner().get("count").and_then(int), Some(1));
        assert_eq!(m.delivery.properties.delivery_mode(), &Some(2));
    }
    assert!(get(&ch, &q, true).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_message_expiration_applies_after_restart() {
    let mut broker = start().await;
    let (q, dlx, dlq) = (uniq("exp"), uniq("dlx"), uniq("dlq"));
    {
        let (conn, ch) = broker.channel().await;
        declare_dead_letter_target(&ch, &dlx, &dlq).await;
        declare_durable_queue(&ch, &q, table(&[("x-dead-letter-exchange", long_str(&dlx))])).await;
        publish_all(
            &conn,
            &q,
            &[
                ("short-lived", persistent().with_expiration("300".into())),
                ("forever", persistent()),
            ],
        )
        .await;
        conn.close(200, "OK".into()).await.expect("connection.close");
    }

    broker.restart().await;

    let (conn, ch) = broker.channel().await;
    // Only the dead-letter queue is watched: looking at the queue itself would
    // expire its head on the spot.
    wait_count(&conn, &dlq, 1).await;
    assert_eq!(message_count(&conn, &q).await, 1);
    let kept = get(&ch, &q, true).await.expect("the message without expiration");
    assert_eq!(body(&kept.delivery), "forever");
    assert!(get(&ch, &q, true).await.is_none());
    let dead = get(&ch, &dlq, true).await.expect("dead-lettered message");
    assert_eq!(body(&dead.delivery), "short-lived");
    let death = single_death(&dead.delivery.properties);
    assert_eq!(death_text(&death, "reason").as_deref(), Some("expired"));
    assert_eq!(death_text(&death, "original-expiration").as_deref(), Some("300"));
    assert_eq!(dead.delivery.properties.expiration(), &None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_queue_expires_after_restart() {
    let mut broker = start().await;
    let q = uniq("expires");
    {
        let (conn, ch) = broker.channel().await;
        declare_durable_queue(&ch, &q, table(&[("x-expires", AMQPValue::LongInt(800))])).await;
        conn.close(200, "OK".into()).await.expect("connection.close");
    }

    // The queue's lease starts again when it is recovered, so it cannot be gone
    // less than 800 ms after this instant (less a little for the broker's
    // millisecond clock).
    let restarted = Instant::now();
    broker.restart().await;

    let (conn, ch) = broker.channel().await;
    confirm_select(&ch).await;
    // Probe with mandatory publishes: unlike a declare or a get, a publish does not
    // count as use, and an unroutable one comes back.
    let mandatory = BasicPublishOptions {
        mandatory: true,
        ..Default::default()
    };
    within("the queue to expire", async {
        loop {
            let confirm = ch
                .basic_publish(
                    "".into(),
                    q.as_str().into(),
                    mandatory,
                    b"probe",
                    BasicProperties::default(),
                )
                .await
                .expect("basic.publish");
            let c = confirm.await.expect("publisher confirm");
            assert!(c.is_ack(), "expected an ack, got {c:?}");
            if c.take_message().is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let gone_after = restarted.elapsed();
    assert!(
        gone_after >= Duration::from_millis(795),
        "queue deleted {gone_after:?} after the restart began, before its 800 ms x-expires"
    );
    let passive = conn
        .create_channel()
        .await
        .expect("channel.open")
        .queue_declare(
            q.as_str().into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await;
    assert_code(passive, 404);
    conn.close(200, "OK".into()).await.expect("connection.close");

    // The deletion is for good.
    broker.restart().await;
    let conn = broker.connect().await;
    assert!(
        !queue_exists(&conn, &q).await,
        "expired queue came back after a restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_length_bytes_counted_from_disk_after_restart() {
    let mut broker = start().await;
    let q = uniq("maxbytes");
    {
        let (conn, ch) = broker.channel().await;
        let limits = table(&[
            ("x-max-length-bytes", AMQPValue::LongInt(10)),
            ("x-overflow", long_str("reject-publish")),
        ]);
        declare_durable_queue(&ch, &q, limits).await;
        confirm_select(&ch).await;
        for b in [b"aaaaa", b"bbbbb"] {
            let c = publish_confirm(&ch, "", &q, b, persistent()).await;
            assert!(c.is_ack(), "expected an ack, got {c:?}");
        }
        let c = publish_confirm(&ch, "", &q, b"zzzzz", persistent()).await;
        assert!(
            matches!(c, Confirmation::Nack(_)),
            "over the limit: expected a nack, got {c:?}"
        );
        conn.close(200, "OK".into()).await.expect("connection.close");
    }

    broker.restart().await;

    let (conn, ch) = broker.channel().await;
    assert_eq!(message_count(&conn, &q).await, 2);
    confirm_select(&ch).await;
    let c = publish_confirm(&ch, "", &q, b"ccccc", persistent()).await;
    assert!(
        matches!(c, Confirmation::Nack(_)),
        "10 bytes recovered: expected a nack, got {c:?}"
    );
    // Taking one message out makes room for exactly one more.
    let m = get(&ch, &q, false).await.expect("a message");
    assert_eq!(m.delivery.data, b"aaaaa");
    m.delivery.ack(BasicAckOptions::default()).await.expect("ack");
    let c = publish_confirm(&ch, "", &q, b"ddddd", persistent()).await;
    assert!(c.is_ack(), "5 of 10 bytes used: expected an ack, got {c:?}");
    let c = publish_confirm(&ch, "", &q, b"e", persistent()).await;
    assert!(
        matches!(c, Confirmation::Nack(_)),
        "full again: expected a nack, got {c:?}"
    );
    assert_eq!(drain(&ch, &q).await, [b"bbbbb".to_vec(), b"ddddd".to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_limit_on_classic_queue_dead_letters() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let (q, dlx, dlq) = (uniq("limited"), uniq("dlx"), uniq("dlq"));
    declare_dead_letter_target(&ch, &dlx, &dlq).await;
    declare_durable_queue(
        &ch,
        &q,
        table(&[
            ("x-queue-type", long_str("classic")),
            ("x-delivery-limit", AMQPValue::LongInt(2)),
            ("x-dead-letter-exchange", long_str(&dlx)),
        ]),
    )
    .await;
    let mut own = FieldTable::default();
    own.insert("h".into(), AMQPValue::LongInt(1));
    publish_all(&conn, &q, &[("poison", persistent().with_headers(own))]).await;

    let mut consumer = consume(&ch, &q).await;
    // limit + 1 deliveries; each return counts.
    for i in 0..3 {
        let d = next_delivery(&mut consumer).await;
        assert_eq!(body(&d), "poison", "delivery {i}");
        let count = header(&d.properties, "x-delivery-count").and_then(int);
        if i == 0 {
            assert!(!d.redelivered, "first delivery flagged redelivered");
            // RabbitMQ 3.10 sends 0 on the first delivery, newer versions nothing.
            assert_eq!(count.unwrap_or(0), 0, "x-delivery-count on the first delivery");
        } else {
            assert!(d.redelivered, "delivery {i} not flagged redelivered");
            assert_eq!(count, Some(i), "x-delivery-count on delivery {i}");
        }
        assert_eq!(
            header(&d.properties, "h").and_then(int),
            Some(1),
            "own header on delivery {i}"
        );
        d.nack(BasicNackOptions {
            requeue: true,
            ..Default::default()
        })
        .await
        .expect("nack");
    }
    assert_no_delivery(&mut consumer).await;
    assert_eq!(message_count(&conn, &q).await, 0);

    wait_count(&conn, &dlq, 1).await;
    let dead = get(&ch, &dlq, true).await.expect("dead-lettered message");
    assert_eq!(body(&dead.delivery), "poison");
    let props = &dead.delivery.properties;
    let death = single_death(props);
    assert_eq!(death_text(&death, "reason").as_deref(), Some("delivery_limit"));
    assert_eq!(death_text(&death, "queue").as_deref(), Some(q.as_str()));
    assert_eq!(death.inner().get("count").and_then(int), Some(1));
    assert_eq!(
        text_header(props, "x-first-death-reason").as_deref(),
        Some("delivery_limit")
    );
    assert_eq!(header(props, "h").and_then(int), Some(1), "own header kept");
    assert!(
        header(props, "x-delivery-count").is_none(),
        "the delivery counter is not carried over to the dead-lettered copy"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_lettered_message_survives_restart() {
    let mut broker = start().await;
    let (q, dlx, dlq) = (uniq("src"), uniq("dlx"), uniq("dlq"));
    let before = {
        let (conn, ch) = broker.channel().await;
        declare_dead_letter_target(&ch, &dlx, &dlq).await;
        declare_durable_queue(&ch, &q, table(&[("x-dead-letter-exchange", long_str(&dlx))])).await;
        publish_all(&conn, &q, &[("rejected", persistent().with_message_id("id-1".into()))]).await;
        let m = get(&ch, &q, false).await.expect("message");
        m.delivery
            .reject(BasicRejectOptions { requeue: false })
            .await
            .expect("reject");
        wait_count(&conn, &dlq, 1).await;
        // Look at the dead-lettered copy and leave it in place.
        let seen = get(&ch, &dlq, false).await.expect("dead-lettered message");
        seen.delivery
            .nack(BasicNackOptions {
                requeue: true,
                ..Default::default()
            })
            .await
            .expect("nack");
        conn.close(200, "OK".into()).await.expect("connection.close");
        seen.delivery.properties
    };

    broker.restart().await;

    let (conn, ch) = broker.channel().await;
    assert_eq!(message_count(&conn, &q).await, 0, "rejected message back in its queue");
    assert_eq!(
        message_count(&conn, &dlq).await,
        1,
        "dead-lettered message after restart"
    );
    let m = get(&ch, &dlq, true).await.expect("dead-lettered message");
    assert_eq!(body(&m.delivery), "rejected");
    let props = &m.delivery.properties;
    assert_eq!(props, &before, "properties changed across the restart");
    assert_eq!(props.delivery_mode(), &Some(2));
    assert_eq!(props.message_id().as_ref().map(|s| s.as_str()), Some("id-1"));
    let death = single_death(props);
    assert_eq!(death.inner().get("count").and_then(int), Some(1));
    assert_eq!(death_text(&death, "reason").as_deref(), Some("rejected"));
    assert_eq!(death_text(&death, "queue").as_deref(), Some(q.as_str()));
    assert_eq!(death_text(&death, "exchange").as_deref(), Some(""));
    let keys = death
        .inner()
        .get("routing-keys")
        .and_then(AMQPValue::as_array)
        .map(|a| a.as_slice().iter().filter_map(text).collect::<Vec<_>>());
    assert_eq!(keys, Some(vec![q.clone()]));
    assert!(
        matches!(death.inner().get("time"), Some(AMQPValue::Timestamp(_))),
        "x-death time: {:?}",
        death.inner().get("time")
    );
    assert_eq!(text_header(props, "x-first-death-reason").as_deref(), Some("rejected"));
    assert_eq!(text_header(props, "x-first-death-queue").as_deref(), Some(q.as_str()));
    assert_eq!(text_header(props, "x-first-death-exchange").as_deref(), Some(""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_active_consumer_fails_over_to_next_connection_in_order() {
    let broker = start().await;
    let q = uniq("sac");
    let (pub_conn, pub_ch) = broker.channel().await;
    pub_ch
        .queue_declare(
            q.as_str().into(),
            QueueDeclareOptions::default(),
            table(&[("x-single-active-consumer", AMQPValue::Boolean(true))]),
        )
        .await
        .expect("queue.declare");
    let msgs: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
    let bodies: Vec<(&str, BasicProperties)> = msgs.iter().map(|m| (m.as_str(), BasicProperties::default())).collect();
    publish_all(&pub_conn, &q, &bodies).await;

    let (first_conn, first_ch) = broker.channel().await;
    first_ch
        .basic_qos(2, BasicQosOptions::default())
        .await
        .expect("basic.qos");
    let mut first = consume(&first_ch, &q).await;
    let (_second_conn, second_ch) = broker.channel().await;
    let mut second = consume(&second_ch, &q).await;

    let d0 = next_delivery(&mut first).await;
    assert_eq!(body(&d0), "m0");
    let d1 = next_delivery(&mut first).await;
    assert_eq!(body(&d1), "m1");
    d0.ack(BasicAckOptions::default()).await.expect("ack");
    let d2 = next_delivery(&mut first).await;
    assert_eq!(body(&d2), "m2");
    // The second consumer waits although it has capacity.
    assert_no_delivery(&mut second).await;
    assert_eq!(message_count(&pub_conn, &q).await, 2);

    // m1 and m2 are unacked when the active consumer's connection goes.
    first_conn.close(200, "OK".into()).await.expect("connection.close");
    let got = deliveries(&mut second, 4).await;
    assert_eq!(got.iter().map(body).collect::<Vec<_>>(), ["m1", "m2", "m3", "m4"]);
    assert_eq!(
        got.iter().map(|d| d.redelivered).collect::<Vec<_>>(),
        [true, true, false, false],
        "redelivered flags"
    );
    for d in &got {
        d.ack(BasicAckOptions::default()).await.expect("ack");
    }
    // It is the active consumer now.
    publish_all(&pub_conn, &q, &[("m5", BasicProperties::default())]).await;
    assert_eq!(body(&next_delivery(&mut second).await), "m5");
    assert_no_delivery(&mut second).await;
}

#[tokio::test]
async fn messages_expiring_while_the_broker_was_down_are_dead_lettered_at_start() {
    let mut b = start().await;
    let (q, dlx, dlq) = (uniq("ttl-down"), uniq("ttl-down-dlx"), uniq("ttl-down-dlq"));
    {
        let conn = b.connect().await;
        let ch = conn.create_channel().await.unwrap();
        declare_dead_letter_target(&ch, &dlx, &dlq).await;
        let a = table(&[
            ("x-message-ttl", AMQPValue::LongInt(200)),
            ("x-dead-letter-exchange", long_str(&dlx)),
        ]);
        declare_durable_queue(&ch, &q, a).await;
        let msgs: Vec<(&str, BasicProperties)> = ["a", "b", "c"].iter().map(|m| (*m, persistent())).collect();
        publish_all(&conn, &q, &msgs).await;
    }
    b.restart_after(std::time::Duration::from_millis(500)).await;
    let conn = b.connect().await;
    wait_count(&conn, &dlq, 3).await;
    wait_count(&conn, &q, 0).await;
}

#[tokio::test]
async fn a_dead_letter_routing_key_longer_than_255_bytes_is_refused() {
    let b = start().await;
    let conn = b.connect().await;
    let ch = conn.create_channel().await.unwrap();
    let mut ev = events(&conn);
    let long = "k".repeat(300);
    let a = table(&[
        ("x-dead-letter-exchange", long_str("")),
        ("x-dead-letter-routing-key", long_str(&long)),
    ]);
    let _ = ch.queue_declare(uniq("long-dlrk").as_str().into(), durable(), a).await;
    let text = expect_error(&mut ev, 406).await;
    assert!(text.contains("x-dead-letter-routing-key"), "{text}");
}

#[tokio::test]
async fn ttl_zero_behind_a_backlog_expires_at_once() {
    let b = start().await;
    let conn = b.connect().await;
    let q = uniq("ttl0-backlog");
    let ch = conn.create_channel().await.unwrap();
    declare_durable_queue(&ch, &q, FieldTable::default()).await;
    publish_all(&conn, &q, &[("first", BasicProperties::default())]).await;
    // A consumer with room exists, but the queue is not empty: the message
    // cannot be handed over at once, so it expires instead of waiting.
    let c = conn.create_channel().await.unwrap();
    c.basic_qos(1, Default::default()).await.unwrap();
    let mut consumer = c
        .basic_consume(q.as_str().into(), "".into(), Default::default(), FieldTable::default())
        .await
        .unwrap();
    let first = next_delivery(&mut consumer).await;
    assert_eq!(first.data, b"first");
    let zero = BasicProperties::default().with_expiration("0".into());
    publish_all(&conn, &q, &[("second", BasicProperties::default()), ("zero", zero)]).await;
    first.acker.ack(Default::default()).await.unwrap();
    let second = next_delivery(&mut consumer).await;
    assert_eq!(second.data, b"second");
    second.acker.ack(Default::default()).await.unwrap();
    assert_no_delivery(&mut consumer).await;
}

/// A durable direct exchange with a durable queue bound to it by `key`.
async fn declare_direct_target(ch: &Channel, exchange: &str, queue: &str, key: &str) {
    ch.exchange_declare(
        exchange.into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("exchange.declare");
    declare_durable_queue(ch, queue, FieldTable::default()).await;
    ch.queue_bind(
        queue.into(),
        exchange.into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("queue.bind");
}

/// The message's own dead-letter headers are gone from the dead-lettered copy,
/// which records why and where it died.
#[track_caller]
fn assert_own_dead_letter(props: &BasicProperties, reason: &str, queue: &str) {
    assert!(
        header(props, "x-dead-letter-exchange").is_none() && header(props, "x-dead-letter-routing-key").is_none(),
        "per-message dead-letter headers stripped: {:?}",
        props.headers()
    );
    let death = single_death(props);
    assert_eq!(death_text(&death, "reason").as_deref(), Some(reason));
    assert_eq!(death_text(&death, "queue").as_deref(), Some(queue));
}

/// LavinMQ's per-message dead-lettering: `x-dead-letter-exchange` and
/// `x-dead-letter-routing-key` headers override the queue's own target when the
/// message is rejected, and dead-letter messages of a queue without a DLX when
/// they expire or are pushed out by the length limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_message_dead_letter_headers() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let (own, own_q, fan, fan_q) = (uniq("own"), uniq("ownq"), uniq("fan"), uniq("fanq"));
    declare_direct_target(&ch, &own, &own_q, "own-rk").await;
    declare_dead_letter_target(&ch, &fan, &fan_q).await;

    // The queue's DLX is `own` with a key nothing is bound by.
    let src = uniq("src");
    let queue_dlx = [
        ("x-dead-letter-exchange", long_str(&own)),
        ("x-dead-letter-routing-key", long_str("nowhere")),
    ];
    declare_durable_queue(&ch, &src, table(&queue_dlx)).await;
    let own_key = table(&[("x-dead-letter-routing-key", long_str("own-rk"))]);
    let own_exchange = table(&[("x-dead-letter-exchange", long_str(&fan)), ("keep", long_str("me"))]);
    publish_all(
        &conn,
        &src,
        &[
            ("key-only", persistent().with_headers(own_key)),
            ("exchange-only", persistent().with_headers(own_exchange)),
            ("plain", persistent()),
        ],
    )
    .await;
    let mut consumer = consume(&ch, &src).await;
    for (i, d) in deliveries(&mut consumer, 3).await.into_iter().enumerate() {
        if i == 1 {
            d.reject(BasicRejectOptions { requeue: false }).await.expect("reject");
        } else {
            d.nack(BasicNackOptions {
                requeue: false,
                ..Default::default()
            })
            .await
            .expect("nack");
        }
    }
    wait_count(&conn, &own_q, 1).await;
    wait_count(&conn, &fan_q, 1).await;
    let m = get(&ch, &own_q, true).await.expect("routed by the message's key");
    assert_eq!(body(&m.delivery), "key-only");
    assert_own_dead_letter(&m.delivery.properties, "rejected", &src);
    let m = get(&ch, &fan_q, true).await.expect("routed to the message's exchange");
    assert_eq!(body(&m.delivery), "exchange-only");
    assert_own_dead_letter(&m.delivery.properties, "rejected", &src);
    assert_eq!(text_header(&m.delivery.properties, "keep").as_deref(), Some("me"));
    assert_eq!(
        message_count(&conn, &own_q).await,
        0,
        "plain message followed the queue's key"
    );

    // No DLX on the queue: only messages naming an exchange are dead-lettered.
    let bare = uniq("bare");
    declare_durable_queue(&ch, &bare, table(&[("x-max-length", AMQPValue::LongInt(1))])).await;
    let named = || {
        table(&[
            ("x-dead-letter-exchange", long_str(&own)),
            ("x-dead-letter-routing-key", long_str("own-rk")),
        ])
    };
    publish_all(
        &conn,
        &bare,
        &[
            ("pushed-out", persistent().with_headers(named())),
            ("unnamed", persistent()),
            (
                "expiring",
                persistent().with_headers(named()).with_expiration("1".into()),
            ),
        ],
    )
    .await;
    wait_count(&conn, &own_q, 2).await;
    let m = get(&ch, &own_q, true).await.expect("dropped by the length limit");
    assert_eq!(body(&m.delivery), "pushed-out");
    assert_own_dead_letter(&m.delivery.properties, "maxlen", &bare);
    let m = get(&ch, &own_q, true).await.expect("expired");
    assert_eq!(body(&m.delivery), "expiring");
    assert_own_dead_letter(&m.delivery.properties, "expired", &bare);
    assert_eq!(message_count(&conn, &bare).await, 0);
    assert_eq!(message_count(&conn, &fan_q).await, 0);
}
