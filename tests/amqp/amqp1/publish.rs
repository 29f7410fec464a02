//! Publishing over AMQP 1.0: unsettled transfers settled `accepted` once
//! stored, `released` when nothing routes them, batchable transfers, and
//! pre-settled transfers (stored all the same).

use fe2o3_amqp::Sendable;
use fe2o3_amqp::types::definitions::SenderSettleMode;

use super::*;
use crate::common::{declare_queue, drain, start, uniq, within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsettled_transfers_are_accepted_once_stored() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-pub");
    declare_queue(&ch, &q).await;
    let mut c = Client::new(&b).await;
    let mut s = c.sender(&queue_address(&q)).await;
    for i in 0..3 {
        send_accepted(&mut s, format!("m{i}").as_bytes()).await;
    }
    // Accepted means stored: all three are in the queue.
    wait_counts(&api, &q, 3, 0).await;
    assert_eq!(
        drain(&ch, &q).await,
        vec![b"m0".to_vec(), b"m1".to_vec(), b"m2".to_vec()]
    );
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batchable_transfers_each_get_an_outcome() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-batch");
    declare_queue(&ch, &q).await;
    let mut c = Client::new(&b).await;
    let mut s = c.sender(&queue_address(&q)).await;
    // Transfers with batchable=true, sent before any outcome is awaited.
    let mut pending = Vec::new();
    for i in 0..5 {
        let fut = within(
            "batchable send",
            s.send_batchable(data_message(format!("b{i}").as_bytes())),
        )
        .await
        .expect("send_batchable");
        pending.push(fut);
    }
    for (i, fut) in pending.into_iter().enumerate() {
        let outcome = within("the outcome of a batchable transfer", fut)
            .await
            .expect("outcome");
        assert!(matches!(outcome, Outcome::Accepted(_)), "b{i}: {outcome:?}");
    }
    let expected: Vec<Vec<u8>> = (0..5).map(|i| format!("b{i}").into_bytes()).collect();
    assert_eq!(drain(&ch, &q).await, expected);
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unroutable_messages_are_released() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let ex = uniq("a1-nowhere");
    let q = uniq("a1-bound");
    declare_exchange(&ch, &ex, ExchangeKind::Direct).await;
    declare_queue(&ch, &q).await;
    bind(&ch, &q, &ex, "bound").await;
    let mut c = Client::new(&b).await;
    let mut s = c.sender(&exchange_key_address(&ex, "unbound")).await;
    let outcome = send_outcome(&mut s, data_message(b"lost")).await;
    assert!(
        matches!(outcome, Outcome::Released(_)),
        "expected released, got {outcome:?}"
    );
    // The link stays usable, and a routable message is accepted.
    let outcome = send_outcome(&mut s, data_message(b"lost again")).await;
    assert!(
        matches!(outcome, Outcome::Released(_)),
        "expected released, got {outcome:?}"
    );
    let mut routed = c.sender(&exchange_key_address(&ex, "bound")).await;
    send_accepted(&mut routed, b"found").await;
    assert_eq!(drain(&ch, &q).await, vec![b"found".to_vec()]);
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presettled_transfers_are_stored() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-settled");
    declare_queue(&ch, &q).await;
    let mut c = Client::new(&b).await;
    let mut s = c.sender(&queue_address(&q)).await;
    for i in 0..3 {
        // settled=true on the transfer: fe2o3 answers Accepted locally,
        // without waiting for (or expecting) a disposition.
        let sendable = Sendable::builder()
            .message(data_message(format!("s{i}").as_bytes()))
            .settled(true)
            .build();
        let outcome = within("a pre-settled send", s.send(sendable)).await.expect("send");
        assert!(matches!(outcome, Outcome::Accepted(_)));
    }
    wait_counts(&api, &q, 3, 0).await;
    assert_eq!(
        drain(&ch, &q).await,
        vec![b"s0".to_vec(), b"s1".to_vec(), b"s2".to_vec()]
    );
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_sender_link_stores_every_message() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-settled-link");
    declare_queue(&ch, &q).await;
    let mut c = Client::new(&b).await;
    // snd-settle-mode settled on the attach: every transfer is pre-settled.
    let attach = Sender::builder()
        .name(uniq("settled-sender"))
        .target(queue_address(&q))
        .sender_settle_mode(SenderSettleMode::Settled)
        .attach(&mut c.session);
    let mut s = within("sender attach", attach)
        .await
        .expect("a sender with snd-settle-mode settled attaches");
    for i in 0..10 {
        let outcome = send_outcome(&mut s, data_message(format!("f{i}").as_bytes())).await;
        assert!(matches!(outcome, Outcome::Accepted(_)));
    }
    wait_counts(&api, &q, 10, 0).await;
    let expected: Vec<Vec<u8>> = (0..10).map(|i| format!("f{i}").into_bytes()).collect();
    assert_eq!(drain(&ch, &q).await, expected);
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_alarm_withholds_credit_until_it_clears() {
    // One byte: the alarm is on from the start.
    let b = crate::common::start_with(|c| {
        c.main.vm_memory_high_watermark = lavinmq::core::memory::Watermark::Bytes(1);
    })
    .await;
    let api = Api::new(&b);
    let (observer, ch) = b.channel().await;
    let q = uniq("a1-alarm");
    declare_queue(&ch, &q).await;
    let mut c = Client::new(&b).await;
    let mut s = c.sender(&queue_address(&q)).await;
    // Without credit the client cannot send: the transfer waits.
    let sending = tokio::spawn(async move {
        let outcome = s.send(data_message(b"held")).await;
        (s, outcome)
    });
    tokio::time::sleep(QUIET).await;
    assert!(!sending.is_finished(), "a publisher got credit during an alarm");
    assert_eq!(crate::common::message_count(&observer, &q).await, 0);
    // The alarm clears: credit arrives and the message is accepted.
    let mut config = b.config.clone();
    config.main.vm_memory_high_watermark = lavinmq::core::memory::Watermark::default();
    b.server().reload(&config).expect("reload");
    let (_s, outcome) = within("the held transfer", sending).await.expect("send task");
    assert!(matches!(outcome, Ok(Outcome::Accepted(_))), "{outcome:?}");
    wait_counts(&api, &q, 1, 0).await;
    c.close().await;
}
