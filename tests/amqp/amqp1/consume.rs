//! Consuming over AMQP 1.0: link credit bounds what the broker sends,
//! deliveries are unsettled until the receiver's disposition, and each
//! outcome does what RabbitMQ does with it (accept removes, release and
//! modify requeue, reject and modify with undeliverable-here dead-letter).
//! Unsettled messages go back to the queue when the receiver detaches or the
//! connection closes. A settled receiver out of credit paces its queue's
//! publishers; an unsettled one, like a prefetch limit, does not.

use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::Modified;
use lapin::options::QueueDeclareOptions;
use lapin::{Channel, ExchangeKind};

use super::*;
use crate::common::{declare_queue, drain, eventually, long_str, publish, start, table, uniq, within};

/// Publishes `n` messages `prefix0..` to `queue` through 0-9-1.
async fn publish_n(ch: &Channel, queue: &str, prefix: &str, n: usize) {
    for i in 0..n {
        publish(ch, "", queue, format!("{prefix}{i}").as_bytes()).await;
    }
}

/// Expected bodies `prefix{from}..prefix{to - 1}`.
fn names(prefix: &str, from: usize, to: usize) -> Vec<String> {
    (from..to).map(|i| format!("{prefix}{i}")).collect()
}

/// Attaches a receiver to `address` with `mode`.
async fn receiver_with(c: &mut Client, address: &str, mode: CreditMode) -> Receiver {
    let attach = Receiver::builder()
        .name(uniq("receiver"))
        .source(address)
        .credit_mode(mode)
        .attach(&mut c.session);
    within("receiver attach", attach)
        .await
        .unwrap_or_else(|e| panic!("receiver attach to {address}: {e:?}"))
}

/// Declares `queue` dead-lettering into a fanout exchange that routes to a
/// fresh queue, whose name is returned.
async fn declare_with_dlx(ch: &Channel, queue: &str) -> String {
    let dlx = uniq("a1-dlx");
    let dlq = uniq("a1-dlq");
    declare_exchange(ch, &dlx, ExchangeKind::Fanout).await;
    declare_queue(ch, &dlq).await;
    bind(ch, &dlq, &dlx, "").await;
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions::default(),
        table(&[("x-dead-letter-exchange", long_str(&dlx))]),
    )
    .await
    .expect("queue.declare with a dead-letter exchange");
    dlq
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_credit_bounds_deliveries() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-credit");
    declare_queue(&ch, &q).await;
    publish_n(&ch, &q, "c", 5).await;
    wait_counts(&api, &q, 5, 0).await;
    let mut c = Client::new(&b).await;
    // Manual: the attach grants no credit at all.
    let mut r = receiver_with(&mut c, &queue_address(&q), CreditMode::Manual).await;
    assert_no_delivery(&mut r).await;
    wait_counts(&api, &q, 5, 0).await;
    // flow link-credit=2.
    within("flow", r.set_credit(2)).await.expect("set_credit");
    let first = recv_n(&mut r, 2).await;
    assert_eq!(bodies(&first), names("c", 0, 2));
    assert_no_delivery(&mut r).await;
    wait_counts(&api, &q, 3, 2).await;
    // Settling does not give credit back in manual mode.
    within("accept", r.accept_all(&first)).await.expect("accept");
    assert_no_delivery(&mut r).await;
    wait_counts(&api, &q, 3, 0).await;
    // flow link-credit=3 (delivery-count 2).
    within("flow", r.set_credit(3)).await.expect("set_credit");
    let rest = recv_n(&mut r, 3).await;
    assert_eq!(bodies(&rest), names("c", 2, 5));
    within("accept", r.accept_all(&rest)).await.expect("accept");
    wait_counts(&api, &q, 0, 0).await;
    // No credit left: a new message waits in the queue.
    publish(&ch, "", &q, b"later").await;
    assert_no_delivery(&mut r).await;
    wait_counts(&api, &q, 1, 0).await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_credit_is_topped_up_as_deliveries_are_settled() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-auto");
    declare_queue(&ch, &q).await;
    publish_n(&ch, &q, "a", 10).await;
    let mut c = Client::new(&b).await;
    // Auto(4): credit 4 at attach; after every 2 dispositions fe2o3 sends a
    // flow that sets link-credit back to 4 from its current delivery-count.
    let mut r = receiver_with(&mut c, &queue_address(&q), CreditMode::Auto(4)).await;
    let batch1 = recv_n(&mut r, 4).await;
    assert_eq!(bodies(&batch1), names("a", 0, 4));
    assert_no_delivery(&mut r).await;
    wait_counts(&api, &q, 6, 4).await;
    within("accept", r.accept(&batch1[0])).await.expect("accept");
    within("accept", r.accept(&batch1[1])).await.expect("accept");
    let batch2 = recv_n(&mut r, 4).await;
    assert_eq!(bodies(&batch2), names("a", 4, 8));
    assert_no_delivery(&mut r).await;
    wait_counts(&api, &q, 2, 6).await;
    within("accept", r.accept_all(&batch1[2..])).await.expect("accept");
    let batch3 = recv_n(&mut r, 2).await;
    assert_eq!(bodies(&batch3), names("a", 8, 10));
    within("accept", r.accept_all(batch2.iter().chain(&batch3)))
        .await
        .expect("accept");
    wait_counts(&api, &q, 0, 0).await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_receiver_gets_at_most_its_200_credits() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-default-credit");
    declare_queue(&ch, &q).await;
    publish_n(&ch, &q, "d", 250).await;
    wait_counts(&api, &q, 250, 0).await;
    let mut c = Client::new(&b).await;
    // fe2o3's default: CreditMode::Auto(200).
    let mut r = c.receiver(&queue_address(&q)).await;
    let first = recv_n(&mut r, 200).await;
    assert_eq!(bodies(&first), names("d", 0, 200));
    assert_no_delivery(&mut r).await;
    wait_counts(&api, &q, 50, 200).await;
    // One disposition for the 200: fe2o3 then tops the credit up to 200.
    within("accept", r.accept_all(&first)).await.expect("accept");
    let rest = recv_n(&mut r, 50).await;
    assert_eq!(bodies(&rest), names("d", 200, 250));
    within("accept", r.accept_all(&rest)).await.expect("accept");
    wait_counts(&api, &q, 0, 0).await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_are_unsettled_until_accepted() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-accept");
    declare_queue(&ch, &q).await;
    publish_n(&ch, &q, "u", 2).await;
    let mut c = Client::new(&b).await;
    let mut r = c.receiver(&queue_address(&q)).await;
    let ds = recv_n(&mut r, 2).await;
    // Sent unsettled: the broker still holds both, as unacknowledged.
    wait_counts(&api, &q, 0, 2).await;
    within("accept", r.accept(&ds[0])).await.expect("accept");
    wait_counts(&api, &q, 0, 1).await;
    within("accept", r.accept(&ds[1])).await.expect("accept");
    wait_counts(&api, &q, 0, 0).await;
    assert_no_delivery(&mut r).await;
    c.close().await;
    assert!(drain(&ch, &q).await.is_empty(), "accepted messages came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_requeues_to_the_same_receiver() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-release");
    declare_queue(&ch, &q).await;
    publish(&ch, "", &q, b"again").await;
    let mut c = Client::new(&b).await;
    let mut r = c.receiver(&queue_address(&q)).await;
    let d = recv(&mut r).await;
    assert_eq!(body_bytes(&d), b"again");
    within("release", r.release(&d)).await.expect("release");
    let again = recv(&mut r).await;
    assert_eq!(body_bytes(&again), b"again", "the released message, redelivered");
    wait_counts(&api, &q, 0, 1).await;
    within("accept", r.accept(&again)).await.expect("accept");
    wait_counts(&api, &q, 0, 0).await;
    assert_no_delivery(&mut r).await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_dead_letters() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-reject");
    let dlq = declare_with_dlx(&ch, &q).await;
    publish(&ch, "", &q, b"bad").await;
    let mut c = Client::new(&b).await;
    let mut r = c.receiver(&queue_address(&q)).await;
    let d = recv(&mut r).await;
    within("reject", r.reject(&d, None)).await.expect("reject");
    wait_counts(&api, &q, 0, 0).await;
    wait_counts(&api, &dlq, 1, 0).await;
    assert_eq!(drain(&ch, &dlq).await, vec![b"bad".to_vec()]);
    assert_no_delivery(&mut r).await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_without_a_dead_letter_exchange_drops() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-reject-drop");
    declare_queue(&ch, &q).await;
    publish_n(&ch, &q, "r", 2).await;
    let mut c = Client::new(&b).await;
    let mut r = c.receiver(&queue_address(&q)).await;
    let ds = recv_n(&mut r, 2).await;
    within("reject", r.reject(&ds[0], None)).await.expect("reject");
    wait_counts(&api, &q, 0, 1).await;
    assert_no_delivery(&mut r).await;
    within("accept", r.accept(&ds[1])).await.expect("accept");
    wait_counts(&api, &q, 0, 0).await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modify_undeliverable_here_dead_letters() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-modify-dl");
    let dlq = declare_with_dlx(&ch, &q).await;
    publish(&ch, "", &q, b"not here").await;
    let mut c = Client::new(&b).await;
    let mut r = c.receiver(&queue_address(&q)).await;
    let d = recv(&mut r).await;
    let modified = Modified {
        delivery_failed: Some(true),
        undeliverable_here: Some(true),
        message_annotations: None,
    };
    within("modify", r.modify(&d, modified)).await.expect("modify");
    wait_counts(&api, &q, 0, 0).await;
    wait_counts(&api, &dlq, 1, 0).await;
    assert_eq!(drain(&ch, &dlq).await, vec![b"not here".to_vec()]);
    assert_no_delivery(&mut r).await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modify_without_undeliverable_here_requeues() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-modify-requeue");
    // A dead-letter exchange that must not be used.
    let dlq = declare_with_dlx(&ch, &q).await;
    publish(&ch, "", &q, b"try again").await;
    let mut c = Client::new(&b).await;
    let mut r = c.receiver(&queue_address(&q)).await;
    let d = recv(&mut r).await;
    let failed = Modified {
        delivery_failed: Some(true),
        undeliverable_here: Some(false),
        message_annotations: None,
    };
    within("modify", r.modify(&d, failed)).await.expect("modify");
    let again = recv(&mut r).await;
    assert_eq!(body_bytes(&again), b"try again", "requeued after delivery-failed");
    // All fields absent: requeued too.
    let plain = Modified {
        delivery_failed: None,
        undeliverable_here: None,
        message_annotations: None,
    };
    within("modify", r.modify(&again, plain)).await.expect("modify");
    let third = recv(&mut r).await;
    assert_eq!(body_bytes(&third), b"try again", "requeued after a bare modified");
    wait_counts(&api, &q, 0, 1).await;
    wait_counts(&api, &dlq, 0, 0).await;
    within("accept", r.accept(&third)).await.expect("accept");
    wait_counts(&api, &q, 0, 0).await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_receiver_returns_its_unsettled_messages() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-detach");
    declare_queue(&ch, &q).await;
    publish_n(&ch, &q, "x", 3).await;
    let mut c = Client::new(&b).await;
    let mut r = c.receiver(&queue_address(&q)).await;
    let ds = recv_n(&mut r, 3).await;
    within("accept", r.accept(&ds[0])).await.expect("accept");
    wait_counts(&api, &q, 0, 2).await;
    // A non-closing detach (closed=false).
    within("detach", r.detach())
        .await
        .map_err(|(_, e)| e)
        .expect("receiver detaches");
    wait_counts(&api, &q, 2, 0).await;
    // A new receiver on the same session gets exactly the two unsettled ones.
    let mut r2 = c.receiver(&queue_address(&q)).await;
    let back = recv_n(&mut r2, 2).await;
    assert_eq!(bodies(&back), names("x", 1, 3));
    within("accept", r2.accept_all(&back)).await.expect("accept");
    wait_counts(&api, &q, 0, 0).await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_receiver_returns_its_unsettled_messages() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-close-link");
    declare_queue(&ch, &q).await;
    publish_n(&ch, &q, "y", 3).await;
    let mut c = Client::new(&b).await;
    let mut r = c.receiver(&queue_address(&q)).await;
    let _ds = recv_n(&mut r, 3).await;
    wait_counts(&api, &q, 0, 3).await;
    // A closing detach (closed=true).
    within("close", r.close()).await.expect("receiver closes");
    wait_counts(&api, &q, 3, 0).await;
    c.close().await;
    let back: Vec<String> = drain(&ch, &q)
        .await
        .iter()
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .collect();
    assert_eq!(back, names("y", 0, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_connection_returns_unsettled_messages() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-close-conn");
    declare_queue(&ch, &q).await;
    publish_n(&ch, &q, "z", 2).await;
    let mut c = Client::new(&b).await;
    let mut r = c.receiver(&queue_address(&q)).await;
    let _ds = recv_n(&mut r, 2).await;
    wait_counts(&api, &q, 0, 2).await;
    within("connection close", c.conn.close())
        .await
        .expect("connection closes");
    wait_counts(&api, &q, 2, 0).await;
}

/// A receiver taking pre-settled deliveries that grants no more credit is a
/// consumer whose client has stopped reading (a no-ack 0-9-1 consumer with a
/// full socket): its queue's publishers are slowed (`flow`), never stopped,
/// and every message gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_receiver_out_of_credit_slows_its_publishers_without_stopping_them() {
    const MESSAGES: usize = 20_000;
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-paced");
    declare_queue(&ch, &q).await;
    let mut rc = Client::new(&b).await;
    let attach = Receiver::builder()
        .name(uniq("settled-receiver"))
        .source(queue_address(&q))
        .sender_settle_mode(SenderSettleMode::Settled)
        .credit_mode(CreditMode::Manual)
        .attach(&mut rc.session);
    let mut r = within("receiver attach", attach).await.expect("receiver attach");
    within("flow", r.set_credit(10)).await.expect("set_credit");

    let mut sc = Client::new(&b).await;
    let attach = Sender::builder()
        .name(uniq("settled-sender"))
        .target(queue_address(&q))
        .sender_settle_mode(SenderSettleMode::Settled)
        .attach(&mut sc.session);
    let mut s = within("sender attach", attach).await.expect("sender attach");
    let publisher = tokio::spawn(async move {
        let body = vec![b'x'; 1024];
        for _ in 0..MESSAGES {
            s.send(data_message(&body)).await.expect("send");
        }
        (s, sc)
    });
    let states = || async {
        let conns = api.get_ok("/api/connections").await;
        let all = conns.as_array().cloned().unwrap_or_default();
        all.iter()
            .map(|c| c["state"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    eventually("the publisher in flow", || async {
        states().await.iter().any(|s| s == "flow")
    })
    .await;
    let (s, sc) = within("every send", publisher).await.expect("publisher");
    wait_counts(&api, &q, (MESSAGES - 10) as u64, 0).await;
    assert_eq!(recv_n(&mut r, 10).await.len(), 10);
    eventually("the publisher running again", || async {
        states().await.iter().all(|s| s == "running")
    })
    .await;
    drop(s);
    sc.close().await;
    rc.close().await;
}

/// An unsettled receiver out of credit waits for its own settlements, as a
/// prefetch limit does: it paces no one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsettled_receiver_out_of_credit_paces_no_one() {
    const MESSAGES: usize = 10_000;
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-unpaced");
    declare_queue(&ch, &q).await;
    let mut rc = Client::new(&b).await;
    let mut r = receiver_with(&mut rc, &queue_address(&q), CreditMode::Manual).await;
    within("flow", r.set_credit(10)).await.expect("set_credit");
    let mut sc = Client::new(&b).await;
    let attach = Sender::builder()
        .name(uniq("settled-sender"))
        .target(queue_address(&q))
        .sender_settle_mode(SenderSettleMode::Settled)
        .attach(&mut sc.session);
    let mut s = within("sender attach", attach).await.expect("sender attach");
    let body = vec![b'x'; 1024];
    for _ in 0..MESSAGES {
        within("send", s.send(data_message(&body))).await.expect("send");
    }
    wait_counts(&api, &q, (MESSAGES - 10) as u64, 10).await;
    let conns = api.get_ok("/api/connections").await;
    let states: Vec<&str> = conns
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|c| c["state"].as_str())
        .collect();
    assert!(states.iter().all(|s| *s == "running"), "{states:?}");
    drop(s);
    sc.close().await;
    rc.close().await;
}
