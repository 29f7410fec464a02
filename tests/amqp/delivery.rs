//! Delivery to consumers and basic.get: acks, prefetch, requeue order, consumer
//! priorities and exclusivity, cancellation, flow, ordering and large bodies.

use crate::common;

use common::*;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, BasicRecoverOptions,
    BasicRejectOptions, ChannelFlowOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

async fn qos(ch: &Channel, count: u16, global: bool) {
    ch.basic_qos(count, BasicQosOptions { global })
        .await
        .expect("basic.qos");
}

fn no_ack() -> BasicConsumeOptions {
    BasicConsumeOptions {
        no_ack: true,
        ..Default::default()
    }
}

fn priority(p: i32) -> FieldTable {
    let mut t = FieldTable::default();
    t.insert("x-priority".into(), AMQPValue::LongInt(p));
    t
}

/// Publishes `n` numbered messages ("0", "1", ...) to `queue` and waits for the
/// broker to confirm them all (on a separate confirm-mode channel).
async fn fill(conn: &lapin::Connection, queue: &str, range: std::ops::Range<usize>) {
    let ch = conn.create_channel().await.expect("channel");
    confirm_select(&ch).await;
    for i in range {
        publish(&ch, "", queue, i.to_string().as_bytes()).await;
    }
    let returned = within("publisher confirms", ch.wait_for_confirms())
        .await
        .expect("confirms");
    assert!(returned.is_empty());
    ch.close(200, "OK".into()).await.expect("close");
}

fn text(d: &lapin::message::Delivery) -> String {
    String::from_utf8(d.data.clone()).expect("utf-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_and_ack() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    fill(&conn, &q, 0..3).await;
    let mut c = consume(&ch, &q).await;
    let ds = deliveries(&mut c, 3).await;
    let mut last_tag = 0;
    for (i, d) in ds.iter().enumerate() {
        assert_eq!(text(d), i.to_string());
        assert!(!d.redelivered);
        assert_eq!(d.exchange.as_str(), "");
        assert_eq!(d.routing_key.as_str(), q);
        assert!(d.delivery_tag > last_tag, "delivery tags increase");
        last_tag = d.delivery_tag;
        d.ack(BasicAckOptions::default()).await.expect("ack");
    }
    assert_no_delivery(&mut c).await;
    // Later publishes reach the running consumer.
    fill(&conn, &q, 3..4).await;
    let d = next_delivery(&mut c).await;
    assert_eq!(text(&d), "3");
    d.ack(BasicAckOptions::default()).await.expect("ack");
    ch.close(200, "OK".into()).await.expect("close");
    // Acked means gone: nothing comes back when the channel closes.
    assert_eq!(message_count(&conn, &q).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_limits_unacked_deliveries() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    fill(&conn, &q, 0..5).await;
    qos(&ch, 2, false).await;
    let mut c = consume(&ch, &q).await;
    let first = deliveries(&mut c, 2).await;
    assert_eq!(first.iter().map(text).collect::<Vec<_>>(), ["0", "1"]);
    assert_no_delivery(&mut c).await;
    first[0].ack(BasicAckOptions::default()).await.expect("ack");
    let d = next_delivery(&mut c).await;
    assert_eq!(text(&d), "2");
    assert_no_delivery(&mut c).await;
    // Acking both outstanding ones lets two more through.
    ch.basic_ack(d.delivery_tag, BasicAckOptions { multiple: true })
        .await
        .expect("ack multiple");
    let more = deliveries(&mut c, 2).await;
    assert_eq!(more.iter().map(text).collect::<Vec<_>>(), ["3", "4"]);
    assert_eq!(message_count(&conn, &q).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_prefetch_is_shared_by_the_channels_consumers() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let (qa, qb) = (uniq("qa"), uniq("qb"));
    declare_queue(&ch, &qa).await;
    declare_queue(&ch, &qb).await;
    fill(&conn, &qa, 0..3).await;
    fill(&conn, &qb, 10..15).await;
    qos(&ch, 3, true).await;
    let mut ca = consume(&ch, &qa).await;
    let held = deliveries(&mut ca, 3).await;
    // The channel is at its limit: the second consumer gets nothing.
    let mut cb = consume(&ch, &qb).await;
    assert_no_delivery(&mut cb).await;
    assert_eq!(message_count(&conn, &qb).await, 5);
    // Each ack frees exactly one slot, whoever uses it.
    held[0].ack(BasicAckOptions::default()).await.expect("ack");
    let d = next_delivery(&mut cb).await;
    assert_eq!(text(&d), "10");
    assert_no_delivery(&mut cb).await;
    held[1].ack(BasicAckOptions::default()).await.expect("ack");
    held[2].ack(BasicAckOptions::default()).await.expect("ack");
    let ds = deliveries(&mut cb, 2).await;
    assert_eq!(ds.iter().map(text).collect::<Vec<_>>(), ["11", "12"]);
    assert_no_delivery(&mut cb).await;
    assert_no_delivery(&mut ca).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_requeue_redelivers_in_original_order() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    fill(&conn, &q, 0..5).await;
    let mut c = consume(&ch, &q).await;
    let ds = deliveries(&mut c, 5).await;
    // Requeue all five at once...
    ch.basic_nack(
        ds[4].delivery_tag,
        BasicNackOptions {
            multiple: true,
            requeue: true,
        },
    )
    .await
    .expect("nack multiple");
    let again = deliveries(&mut c, 5).await;
    assert_eq!(again.iter().map(text).collect::<Vec<_>>(), ["0", "1", "2", "3", "4"]);
    assert!(again.iter().all(|d| d.redelivered), "redelivered flag");
    // ...then out of order: they still come back in queue order. The consumer is
    // cancelled first so that nothing is redelivered between the requeues.
    ch.basic_cancel(c.tag(), BasicCancelOptions::default())
        .await
        .expect("cancel");
    assert_consumer_ends(&mut c).await;
    again[0].ack(BasicAckOptions::default()).await.expect("ack");
    again[3]
        .nack(BasicNackOptions {
            requeue: true,
            ..Default::default()
        })
        .await
        .expect("nack");
    again[1]
        .reject(BasicRejectOptions { requeue: true })
        .await
        .expect("reject");
    again[2].ack(BasicAckOptions::default()).await.expect("ack");
    again[4].ack(BasicAckOptions::default()).await.expect("ack");
    // A message published later comes after the requeued ones.
    fill(&conn, &q, 5..6).await;
    let mut c = consume(&ch, &q).await;
    let last = deliveries(&mut c, 3).await;
    assert_eq!(last.iter().map(text).collect::<Vec<_>>(), ["1", "3", "5"]);
    assert!(last[0].redelivered && last[1].redelivered);
    assert!(!last[2].redelivered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_and_nack_without_requeue_drop() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    fill(&conn, &q, 0..3).await;
    let mut c = consume(&ch, &q).await;
    let ds = deliveries(&mut c, 3).await;
    ds[0]
        .reject(BasicRejectOptions { requeue: false })
        .await
        .expect("reject");
    ds[1]
        .nack(BasicNackOptions {
            requeue: false,
            ..Default::default()
        })
        .await
        .expect("nack");
    ds[2].ack(BasicAckOptions::default()).await.expect("ack");
    assert_no_delivery(&mut c).await;
    ch.close(200, "OK".into()).await.expect("close");
    assert_eq!(message_count(&conn, &q).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_multiple_covers_everything_up_to_the_tag() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    fill(&conn, &q, 0..5).await;
    let mut c = consume(&ch, &q).await;
    let ds = deliveries(&mut c, 5).await;
    ch.basic_ack(ds[3].delivery_tag, BasicAckOptions { multiple: true })
        .await
        .expect("ack multiple");
    ch.close(200, "OK".into()).await.expect("close");
    // Only the fifth was unacked, and closing the channel requeued it.
    let ch = conn.create_channel().await.expect("channel");
    let m = get(&ch, &q, false).await.expect("requeued message");
    assert_eq!(m.delivery.data, b"4");
    assert!(m.delivery.redelivered);
    assert_eq!(m.message_count, 0);
    // multiple=true with tag 0 acks everything outstanding.
    fill(&conn, &q, 5..8).await;
    let mut tags = vec![m.delivery.delivery_tag];
    for _ in 0..3 {
        tags.push(get(&ch, &q, false).await.expect("message").delivery.delivery_tag);
    }
    ch.basic_ack(0, BasicAckOptions { multiple: true })
        .await
        .expect("ack all");
    ch.close(200, "OK".into()).await.expect("close");
    assert_eq!(message_count(&conn, &q).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_of_unknown_tag_closes_channel_406() {
    let broker = start().await;
    let conn = broker.connect().await;
    let ch = conn.create_channel().await.expect("channel");
    let mut ev = events(&conn);
    ch.basic_ack(42, BasicAckOptions::default()).await.expect("ack sent");
    let text = expect_error(&mut ev, 406).await;
    assert!(text.contains("42"), "reply text names the tag: {text}");
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());

    // Acking the same delivery twice is an unknown tag too.
    let ch = conn.create_channel().await.expect("channel");
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    fill(&conn, &q, 0..1).await;
    let m = get(&ch, &q, false).await.expect("message");
    let tag = m.delivery.delivery_tag;
    ch.basic_ack(tag, BasicAckOptions::default()).await.expect("ack");
    let mut ev = events(&conn);
    ch.basic_ack(tag, BasicAckOptions::default())
        .await
        .expect("second ack sent");
    expect_error(&mut ev, 406).await;
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
    assert_eq!(message_count(&conn, &q).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_priority_consumer_served_while_it_has_capacity() {
    let broker = start().await;
    let conn = broker.connect().await;
    let setup = conn.create_channel().await.expect("channel");
    let q = uniq("q");
    declare_queue(&setup, &q).await;
    let hi_ch = conn.create_channel().await.expect("channel");
    let lo_ch = conn.create_channel().await.expect("channel");
    qos(&hi_ch, 3, false).await;
    qos(&lo_ch, 3, false).await;
    let mut lo = consume_with(&lo_ch, &q, Default::default(), priority(0)).await;
    let mut hi = consume_with(&hi_ch, &q, Default::default(), priority(10)).await;

    fill(&conn, &q, 0..3).await;
    let hi_got = deliveries(&mut hi, 3).await;
    assert_eq!(hi_got.iter().map(text).collect::<Vec<_>>(), ["0", "1", "2"]);
    assert_no_delivery(&mut lo).await;
    // The high-priority consumer is full: the low one takes the overflow.
    fill(&conn, &q, 3..5).await;
    let lo_got = deliveries(&mut lo, 2).await;
    assert_eq!(lo_got.iter().map(text).collect::<Vec<_>>(), ["3", "4"]);
    assert_no_delivery(&mut hi).await;
    // Capacity back on the high one: it is preferred again.
    hi_ch
        .basic_ack(hi_got[2].delivery_tag, BasicAckOptions { multiple: true })
        .await
        .expect("ack");
    fill(&conn, &q, 5..8).await;
    let hi_got = deliveries(&mut hi, 3).await;
    assert_eq!(hi_got.iter().map(text).collect::<Vec<_>>(), ["5", "6", "7"]);
    assert_no_delivery(&mut lo).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_consumer_refuses_others_403() {
    let broker = start().await;
    let conn = broker.connect().await;
    let ch = conn.create_channel().await.expect("channel");
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    let excl = BasicConsumeOptions {
        exclusive: true,
        ..Default::default()
    };
    let c = consume_with(&ch, &q, excl, FieldTable::default()).await;
    let other = conn.create_channel().await.expect("channel");
    let r = other
        .basic_consume(
            q.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_code(r.map(|_| ()), 403);
    // Once the exclusive consumer is gone the queue is free again.
    ch.basic_cancel(c.tag(), BasicCancelOptions::default())
        .await
        .expect("cancel");
    let _c2 = consume(&ch, &q).await;
    // An exclusive consumer cannot join a queue that already has consumers.
    let other = conn.create_channel().await.expect("channel");
    let r = other
        .basic_consume(q.as_str().into(), "".into(), excl, FieldTable::default())
        .await;
    assert_code(r.map(|_| ()), 403);
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_consumer_tag_closes_connection_530() {
    let broker = start().await;
    let conn = broker.connect().await;
    let ch = conn.create_channel().await.expect("channel");
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    let first = ch
        .basic_consume(
            q.as_str().into(),
            "my-tag".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    // Tags are per channel: another channel may reuse it.
    let ch2 = conn.create_channel().await.expect("channel");
    let _other = ch2
        .basic_consume(
            q.as_str().into(),
            "my-tag".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("same tag on another channel");
    let r = ch
        .basic_consume(
            q.as_str().into(),
            "my-tag".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_code(r.map(|_| ()), 530);
    wait_connection_closed(&conn).await;
    drop(first);
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_get_reports_remaining_count_and_empty() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    fill(&conn, &q, 0..3).await;
    let mut tags = Vec::new();
    for (i, remaining) in [(0, 2), (1, 1), (2, 0)] {
        let m = get(&ch, &q, false).await.expect("message");
        assert_eq!(m.delivery.data, i.to_string().as_bytes());
        assert_eq!(m.message_count, remaining, "message_count after get #{i}");
        assert!(!m.delivery.redelivered);
        assert_eq!(m.delivery.routing_key.as_str(), q);
        tags.push(m.delivery.delivery_tag);
    }
    assert!(tags.windows(2).all(|w| w[0] < w[1]), "tags increase: {tags:?}");
    assert!(get(&ch, &q, false).await.is_none(), "get-empty expected");
    // Unacked gets go back when the channel closes.
    ch.close(200, "OK".into()).await.expect("close");
    assert_eq!(message_count(&conn, &q).await, 3);
    // no_ack gets remove the message at once.
    let ch = conn.create_channel().await.expect("channel");
    let m = get(&ch, &q, true).await.expect("message");
    assert!(m.delivery.redelivered);
    ch.close(200, "OK".into()).await.expect("close");
    assert_eq!(message_count(&conn, &q).await, 2);
    // basic.get on a missing queue is 404.
    let ch = conn.create_channel().await.expect("channel");
    let r = ch.basic_get(uniq("missing").as_str().into(), Default::default()).await;
    assert_code(r.map(|m| m.is_some()), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ack_consumer_ignores_prefetch_and_needs_no_acks() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    fill(&conn, &q, 0..20).await;
    qos(&ch, 1, false).await;
    let mut c = consume_with(&ch, &q, no_ack(), FieldTable::default()).await;
    let ds = deliveries(&mut c, 20).await;
    for (i, d) in ds.iter().enumerate() {
        assert_eq!(text(d), i.to_string());
    }
    ch.close(200, "OK".into()).await.expect("close");
    assert_eq!(message_count(&conn, &q).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_messages_return_when_the_channel_closes() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    fill(&conn, &q, 0..3).await;
    let mut c = consume(&ch, &q).await;
    let _ds = deliveries(&mut c, 3).await;
    ch.close(200, "OK".into()).await.expect("close");
    let ch = conn.create_channel().await.expect("channel");
    let mut c = consume(&ch, &q).await;
    let ds = deliveries(&mut c, 3).await;
    assert_eq!(ds.iter().map(text).collect::<Vec<_>>(), ["0", "1", "2"]);
    assert!(ds.iter().all(|d| d.redelivered));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_consumer_can_still_ack_its_deliveries() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    fill(&conn, &q, 0..2).await;
    qos(&ch, 1, false).await;
    let mut c = consume(&ch, &q).await;
    let d = next_delivery(&mut c).await;
    ch.basic_cancel(c.tag(), BasicCancelOptions::default())
        .await
        .expect("cancel");
    assert_consumer_ends(&mut c).await;
    d.ack(BasicAckOptions::default()).await.expect("ack after cancel");
    // The ack was accepted (the channel is still open) and the other message is
    // still ready.
    assert_eq!(message_count(&conn, &q).await, 1);
    assert!(ch.status().connected());
    let m = get(&ch, &q, true).await.expect("message");
    assert_eq!(m.delivery.data, b"1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_recover_requeues_unacked() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    fill(&conn, &q, 0..2).await;
    let a = get(&ch, &q, false).await.expect("message");
    let b = get(&ch, &q, false).await.expect("message");
    assert_eq!((a.message_count, b.message_count), (1, 0));
    ch.basic_recover(BasicRecoverOptions { requeue: true })
        .await
        .expect("basic.recover");
    let a2 = get(&ch, &q, false).await.expect("recovered message");
    let b2 = get(&ch, &q, false).await.expect("recovered message");
    assert_eq!(
        (a2.delivery.data.as_slice(), b2.delivery.data.as_slice()),
        (&b"0"[..], &b"1"[..])
    );
    assert!(a2.delivery.redelivered && b2.delivery.redelivered);
    // The old tags are gone; the new ones work.
    ch.basic_ack(b2.delivery.delivery_tag, BasicAckOptions { multiple: true })
        .await
        .expect("ack");
    ch.close(200, "OK".into()).await.expect("close");
    assert_eq!(message_count(&conn, &q).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_queue_cancels_its_consumers() {
    let broker = start().await;
    let conn = broker.connect().await;
    let ch = conn.create_channel().await.expect("channel");
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    let mut c = consume(&ch, &q).await;
    let other = broker.connect().await;
    let och = other.create_channel().await.expect("channel");
    och.queue_delete(q.as_str().into(), QueueDeleteOptions::default())
        .await
        .expect("delete");
    // basic.cancel from the server ends the consumer stream...
    assert_consumer_ends(&mut c).await;
    // ...and leaves the channel open.
    assert!(ch.status().connected());
    declare_queue(&ch, &uniq("after")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_flow_pauses_and_resumes_deliveries() {
    // AMQP 0-9-1 channel.flow sent by the client: active=false stops content
    // delivery until active=true (LavinMQ implements this; RabbitMQ refuses
    // active=false with 540 NOT_IMPLEMENTED).
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    let mut c = consume(&ch, &q).await;
    let active = ch
        .channel_flow(ChannelFlowOptions { active: false })
        .await
        .expect("channel.flow");
    assert!(!active, "flow-ok must echo active=false");
    fill(&conn, &q, 0..2).await;
    assert_no_delivery(&mut c).await;
    assert_eq!(message_count(&conn, &q).await, 2);
    let active = ch
        .channel_flow(ChannelFlowOptions { active: true })
        .await
        .expect("channel.flow");
    assert!(active);
    let ds = deliveries(&mut c, 2).await;
    assert_eq!(ds.iter().map(text).collect::<Vec<_>>(), ["0", "1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_messages_keep_their_order() {
    const N: usize = 10_000;
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    fill(&conn, &q, 0..N).await;
    assert_eq!(message_count(&conn, &q).await, N as u32);
    qos(&ch, 500, false).await;
    let mut c = consume(&ch, &q).await;
    for i in 0..N {
        let d = next_delivery(&mut c).await;
        assert_eq!(text(&d), i.to_string(), "message #{i} out of order");
        if i % 100 == 99 {
            ch.basic_ack(d.delivery_tag, BasicAckOptions { multiple: true })
                .await
                .expect("ack");
        }
    }
    assert_no_delivery(&mut c).await;
    ch.close(200, "OK".into()).await.expect("close");
    assert_eq!(message_count(&conn, &q).await, 0);
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_frame_bodies_round_trip_byte_exact() {
    let broker = start().await;
    let conn = broker.connect().await;
    assert_eq!(conn.configuration().frame_max(), 131_072);
    let ch = conn.create_channel().await.expect("channel");
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    let max_payload = 131_072 - 8;
    let sizes = [
        1024 * 1024,
        max_payload,
        max_payload + 1,
        2 * max_payload,
        3 * max_payload - 1,
    ];
    let bodies: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| pattern(n, i as u32)).collect();
    confirm_select(&ch).await;
    for b in &bodies {
        publish_confirmed(&ch, "", &q, b).await;
    }
    // Through a consumer...
    let cch = conn.create_channel().await.expect("channel");
    let mut c = consume(&cch, &q).await;
    for (i, b) in bodies.iter().enumerate() {
        let d = next_delivery(&mut c).await;
        assert_eq!(d.data.len(), b.len(), "length of body #{i}");
        assert!(d.data == *b, "body #{i} ({} bytes) differs", b.len());
        d.nack(BasicNackOptions {
            requeue: true,
            ..Default::default()
        })
        .await
        .expect("nack");
        if i == bodies.len() - 1 {
            cch.basic_cancel(c.tag(), BasicCancelOptions::default())
                .await
                .expect("cancel");
        }
    }
    cch.close(200, "OK".into()).await.expect("close");
    // ...and through basic.get.
    for (i, b) in bodies.iter().enumerate() {
        let m = get(&ch, &q, true).await.expect("message");
        assert!(m.delivery.data == *b, "basic.get body #{i} differs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_body_round_trips() {
    let broker = start().await;
    let (_conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    let props = BasicProperties::default()
        .with_content_type("text/plain".into())
        .with_message_id("empty-1".into());
    confirm_select(&ch).await;
    let confirm = ch
        .basic_publish("".into(), q.as_str().into(), Default::default(), b"", props.clone())
        .await
        .expect("publish");
    assert!(within("confirm", confirm).await.expect("confirm").is_ack());
    publish_confirmed(&ch, "", &q, b"").await;
    let mut c = consume(&ch, &q).await;
    let d = next_delivery(&mut c).await;
    assert!(d.data.is_empty());
    assert_eq!(d.properties, props);
    let d2 = next_delivery(&mut c).await;
    assert!(d2.data.is_empty());
    ch.basic_ack(d2.delivery_tag, BasicAckOptions { multiple: true })
        .await
        .expect("ack");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_consumers_share_messages_round_robin() {
    // RabbitMQ hands each message to the next consumer in turn (tutorial 2,
    // "round-robin dispatching"), also without a prefetch limit. Exact alternation
    // is not required here, only a fair share for each of two consumers.
    const N: usize = 100;
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    let ch1 = conn.create_channel().await.expect("channel");
    let ch2 = conn.create_channel().await.expect("channel");
    let mut c1 = consume(&ch1, &q).await;
    let mut c2 = consume(&ch2, &q).await;
    fill(&conn, &q, 0..N).await;
    let (mut n1, mut n2) = (0usize, 0usize);
    within("all deliveries", async {
        while n1 + n2 < N {
            tokio::select! {
                d = next_delivery(&mut c1) => { n1 += 1; drop(d); }
                d = next_delivery(&mut c2) => { n2 += 1; drop(d); }
            }
        }
    })
    .await;
    assert_no_delivery(&mut c1).await;
    assert_no_delivery(&mut c2).await;
    assert!(
        (40..=60).contains(&n1) && (40..=60).contains(&n2),
        "unfair dispatch between two idle consumers: {n1} vs {n2}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_after_queue_deletion_keeps_channel_open() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    fill(&conn, &q, 0..1).await;
    let m = get(&ch, &q, false).await.expect("message");
    let other = conn.create_channel().await.expect("channel");
    other
        .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
        .await
        .expect("delete");
    ch.basic_ack(m.delivery.delivery_tag, BasicAckOptions::default())
        .await
        .expect("ack");
    // Still open: a synchronous method works.
    declare_queue(&ch, &uniq("after")).await;
    assert!(ch.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_prefetch_holds_when_two_queues_deliver_at_once() {
    use futures_lite::{FutureExt, StreamExt};
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let (qa, qb) = (uniq("qa"), uniq("qb"));
    declare_queue(&ch, &qa).await;
    declare_queue(&ch, &qb).await;
    fill(&conn, &qa, 0..150).await;
    fill(&conn, &qb, 0..150).await;
    qos(&ch, 1, true).await;
    let mut ca = consume(&ch, &qa).await;
    let mut cb = consume(&ch, &qb).await;
    // Each ack wakes both consumers; their queues deliver in parallel, and
    // exactly one of them may take the freed slot.
    for round in 0..150 {
        let d = within("a delivery", async {
            let a = async { ca.next().await };
            let b = async { cb.next().await };
            a.or(b).await
        })
        .await
        .expect("consumer open")
        .expect("delivery");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        let extra_a = futures_lite::future::poll_once(ca.next()).await;
        let extra_b = futures_lite::future::poll_once(cb.next()).await;
        assert!(
            extra_a.is_none() && extra_b.is_none(),
            "round {round}: a second delivery arrived while one was unacked"
        );
        d.ack(BasicAckOptions::default()).await.expect("ack");
    }
}

/// True when a file in `dir` (or below it) holds `needle`.
fn stored_anywhere(dir: &std::path::Path, needle: &[u8]) -> bool {
    std::fs::read_dir(dir).expect("queue directory").any(|entry| {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            return stored_anywhere(&path, needle);
        }
        let bytes = std::fs::read(&path).unwrap_or_default();
        bytes.windows(needle.len()).any(|w| w == needle)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_no_ack_consumer_takes_transient_messages_without_a_write() {
    let broker = start().await;
    let (_conn, ch) = broker.channel().await;
    let q = uniq("q");
    let durable = lapin::options::QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.queue_declare(q.as_str().into(), durable, FieldTable::default())
        .await
        .expect("queue.declare");
    let mut c = consume_with(&ch, &q, no_ack(), FieldTable::default()).await;
    publish(&ch, "", &q, b"handed-over-transient").await;
    let persistent = BasicProperties::default().with_delivery_mode(2);
    publish_props(&ch, "", &q, b"written-persistent", persistent).await;
    let ds = deliveries(&mut c, 2).await;
    assert_eq!(
        ds.iter().map(text).collect::<Vec<_>>(),
        ["handed-over-transient", "written-persistent"]
    );
    let dir = broker.queue_dir(&q);
    assert!(!stored_anywhere(&dir, b"handed-over-transient"));
    // Its confirm promises a persistent message in a durable queue was written.
    assert!(stored_anywhere(&dir, b"written-persistent"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ack_deliveries_keep_their_order_from_a_backlog_to_handing_over() {
    const BACKLOG: usize = 2_000;
    const N: usize = 6_000;
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    fill(&conn, &q, 0..BACKLOG).await;
    let mut c = consume_with(&ch, &q, no_ack(), FieldTable::default()).await;
    // Published while the backlog drains: the first ones are stored behind it,
    // the later ones find the queue empty and are handed over.
    let publisher = tokio::spawn({
        let conn = broker.connect().await;
        let q = q.clone();
        async move { fill(&conn, &q, BACKLOG..N).await }
    });
    for i in 0..N {
        let d = next_delivery(&mut c).await;
        assert_eq!(text(&d), i.to_string(), "message #{i} out of order");
    }
    publisher.await.expect("publisher");
    assert_no_delivery(&mut c).await;
    assert_eq!(message_count(&conn, &q).await, 0);
}

/// basic.consume-ok reaches the client before the consumer's first delivery,
/// even while another connection's publisher delivers from its own task (as
/// it does to a waiting consumer, acking or not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_ok_comes_before_the_first_delivery_while_publishing() {
    use lavinmq::amqp::codec::{BasicProperties as Props, Method, ShortStr, write_body, write_header, write_method};
    use lavinmq::client::connection::Connection as RawConnection;

    let broker = start().await;
    let (_conn, ch) = broker.channel().await;
    declare_queue(&ch, "busy").await;
    let uri = lavinmq::client::uri::parse(&broker.url()).expect("uri");
    // A publisher as fast as the broker takes it: 100 publishes per write.
    let mut publisher = RawConnection::connect(&uri, "publisher").await.expect("connect");
    publisher.open_channel(1).await.expect("channel.open");
    let mut batch = bytes::BytesMut::new();
    let publish = Method::BasicPublish {
        exchange: ShortStr::default(),
        routing_key: ShortStr::from("busy"),
        mandatory: false,
        immediate: false,
    };
    for _ in 0..100 {
        write_method(&mut batch, 1, &publish).expect("publish frame");
        write_header(&mut batch, 1, 1, &Props::default()).expect("header frame");
        write_body(&mut batch, 1, b"m", 4096);
    }
    let publishing = tokio::spawn(async move { while publisher.writer.send(&batch).await.is_ok() {} });
    let mut raw = RawConnection::connect(&uri, "consumer").await.expect("connect");
    for round in 0..200u16 {
        let channel = round + 1;
        raw.open_channel(channel).await.expect("channel.open");
        // `consume` fails when anything but consume-ok answers first.
        raw.consume(channel, "busy", round % 2 == 0, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let close = Method::ChannelClose {
            reply_code: 200,
            reply_text: ShortStr::from_static("done"),
            class_id: 0,
            method_id: 0,
        };
        raw.send(channel, &close).await.expect("channel.close");
        while !matches!(raw.expect(channel).await.expect("close-ok"), Method::ChannelCloseOk) {}
    }
    publishing.abort();
}
