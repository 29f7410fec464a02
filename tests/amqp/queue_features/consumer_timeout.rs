//! Consumer timeout: a delivery left unacknowledged longer than the broker's
//! `consumer_timeout` (or the queue's `x-consumer-timeout`) closes its channel with
//! 406 PRECONDITION_FAILED, and the message goes back to the queue.

use crate::common::*;
use lapin::options::{BasicConsumeOptions, BasicGetOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};

async fn consume_and_hold(b: &TestBroker, q: &str, args: FieldTable) -> (lapin::Connection, lapin::Channel) {
    let (conn, ch) = b.channel().await;
    ch.queue_declare(q.into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
    publish(&ch, "", q, b"held").await;
    let mut consumer = ch
        .basic_consume(
            q.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let d = next_delivery(&mut consumer).await;
    assert_eq!(d.data, b"held");
    (conn, ch)
}

#[tokio::test]
async fn unacked_delivery_past_the_broker_timeout_closes_the_channel() {
    let b = start_with(|c| {
        c.main.consumer_timeout = Some(100);
        c.main.consumer_timeout_loop_interval = 1;
    })
    .await;
    let q = uniq("timeout");
    let (conn, ch) = consume_and_hold(&b, &q, FieldTable::default()).await;
    let mut ev = events(&conn);
    let text = expect_error(&mut ev, 406).await;
    assert!(text.contains("delivery acknowledgement on channel"), "{text}");
    assert!(text.contains("Timeout value used: 100 ms"), "{text}");
    wait_channel_closed(&ch).await;
    // The connection stays, and the message is back in the queue, redelivered.
    let ch2 = conn.create_channel().await.unwrap();
    let got = ch2
        .basic_get(q.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap();
    let got = got.expect("message requeued");
    assert!(got.delivery.redelivered);
}

#[tokio::test]
async fn queue_argument_sets_the_timeout() {
    let b = start_with(|c| c.main.consumer_timeout_loop_interval = 1).await;
    let q = uniq("qtimeout");
    let mut args = FieldTable::default();
    args.insert("x-consumer-timeout".into(), AMQPValue::LongInt(100));
    let (conn, _ch) = consume_and_hold(&b, &q, args).await;
    let mut ev = events(&conn);
    let text = expect_error(&mut ev, 406).await;
    assert!(text.contains("Timeout value used: 100 ms"), "{text}");
}

#[tokio::test]
async fn acked_deliveries_never_time_out() {
    let b = start_with(|c| {
        c.main.consumer_timeout = Some(100);
        c.main.consumer_timeout_loop_interval = 1;
    })
    .await;
    let (_conn, ch) = b.channel().await;
    let q = uniq("acked");
    declare_queue(&ch, &q).await;
    publish(&ch, "", &q, b"x").await;
    let mut consumer = ch
        .basic_consume(
            q.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let d = next_delivery(&mut consumer).await;
    d.acker.ack(Default::default()).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1300)).await;
    assert!(ch.status().connected(), "channel closed although everything was acked");
}
