//! Many links on one connection: senders and receivers sharing a session,
//! and a second session beside it, each link reaching its own queue.

use super::*;
use crate::common::{declare_queue, start, uniq, within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_senders_and_two_receivers_on_one_session_and_a_second_session() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let (q1, q2, q3) = (uniq("a1-l1"), uniq("a1-l2"), uniq("a1-l3"));
    for q in [&q1, &q2, &q3] {
        declare_queue(&ch, q).await;
    }
    let mut c = Client::new(&b).await;
    // Session 1: handles 0..3 for two senders and two receivers.
    let mut s1 = c.sender(&queue_address(&q1)).await;
    let mut s2 = c.sender(&queue_address(&q2)).await;
    let mut r1 = c.receiver(&queue_address(&q1)).await;
    let mut r2 = c.receiver(&queue_address(&q2)).await;
    // Session 2 on the same connection, with its own sender and receiver.
    let mut session2 = begin(&mut c.conn).await;
    let mut s3 = sender(&mut session2, &queue_address(&q3)).await;
    let mut r3 = receiver(&mut session2, &queue_address(&q3)).await;

    // Interleaved sends on all three senders.
    for i in 0..3 {
        send_accepted(&mut s1, format!("one-{i}").as_bytes()).await;
        send_accepted(&mut s2, format!("two-{i}").as_bytes()).await;
        send_accepted(&mut s3, format!("three-{i}").as_bytes()).await;
    }
    // Each receiver gets its own queue's messages, in order, and nothing else.
    for (r, prefix) in [(&mut r1, "one"), (&mut r2, "two"), (&mut r3, "three")] {
        let ds = recv_n(r, 3).await;
        let expected: Vec<String> = (0..3).map(|i| format!("{prefix}-{i}")).collect();
        assert_eq!(bodies(&ds), expected);
        within("accept", r.accept_all(&ds)).await.expect("accept");
        assert_no_delivery(r).await;
    }
    for q in [&q1, &q2, &q3] {
        wait_counts(&api, q, 0, 0).await;
    }

    // Closing one link leaves the others of its session working.
    within("sender close", s1.close()).await.expect("sender closes");
    within("receiver close", r1.close()).await.expect("receiver closes");
    send_accepted(&mut s2, b"two-after").await;
    let d = recv(&mut r2).await;
    assert_eq!(body_bytes(&d), b"two-after");
    within("accept", r2.accept(&d)).await.expect("accept");
    // Ending one session leaves the other working.
    within("session end", session2.end())
        .await
        .expect("second session ends");
    send_accepted(&mut s2, b"two-last").await;
    let d = recv(&mut r2).await;
    assert_eq!(body_bytes(&d), b"two-last");
    within("accept", r2.accept(&d)).await.expect("accept");
    wait_counts(&api, &q2, 0, 0).await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_receivers_on_one_queue_share_its_messages() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-shared");
    declare_queue(&ch, &q).await;
    let mut c = Client::new(&b).await;
    let mut r1 = c.receiver(&queue_address(&q)).await;
    let mut r2 = c.receiver(&queue_address(&q)).await;
    let mut s = c.sender(&queue_address(&q)).await;
    for i in 0..10 {
        send_accepted(&mut s, format!("m{i}").as_bytes()).await;
    }
    // Both are consumers of the queue; every message goes to exactly one.
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + crate::common::TIMEOUT;
    while got.len() < 10 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of 10 delivered: {got:?}",
            got.len()
        );
        let next = tokio::select! {
            d = r1.recv::<Body<Value>>() => (1, d),
            d = r2.recv::<Body<Value>>() => (2, d),
            _ = tokio::time::sleep(crate::common::TIMEOUT) => panic!("no delivery on either receiver: {got:?}"),
        };
        let (which, d) = next;
        let d = d.unwrap_or_else(|e| panic!("receiver {which} failed: {e:?}"));
        let r = if which == 1 { &r1 } else { &r2 };
        within("accept", r.accept(&d)).await.expect("accept");
        got.push(String::from_utf8_lossy(&body_bytes(&d)).into_owned());
    }
    got.sort_by_key(|m| m[1..].parse::<u32>().expect("numbered"));
    let expected: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    assert_eq!(got, expected, "each message exactly once");
    assert_no_delivery(&mut r1).await;
    assert_no_delivery(&mut r2).await;
    wait_counts(&api, &q, 0, 0).await;
    c.close().await;
}

/// A transaction controller is refused with `amqp:not-implemented` (RabbitMQ
/// 4 has no AMQP 1.0 transactions either); the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_controller_is_refused_as_not_implemented() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-txn");
    declare_queue(&ch, &q).await;
    let mut c = Client::new(&b).await;
    let refused = within(
        "controller attach",
        fe2o3_amqp::transaction::Controller::attach(&mut c.session, "controller"),
    )
    .await;
    match refused {
        Ok(_) => panic!("a transaction controller was attached"),
        Err(e) => match sender_attach_error(&e) {
            Some(err) => assert_eq!(
                err.condition,
                ErrorCondition::AmqpError(AmqpError::NotImplemented),
                "{err:?}"
            ),
            None => panic!("expected a detach with amqp:not-implemented, got {e:?}"),
        },
    }
    // The broker keeps the session: a sender attaches on it. The client
    // frees the refused link in its session's own task; an attach racing
    // that now and then fails inside the client (IllegalState), or the
    // client ends its own session and closes the connection with
    // amqp:not-found. A few tries are allowed, and after the client's own
    // teardown the message goes through a new connection.
    let mut tries = 0;
    let mut s = loop {
        tries += 1;
        match within(
            "sender attach",
            Sender::attach(&mut c.session, uniq("sender"), queue_address(&q)),
        )
        .await
        {
            Ok(s) => break s,
            Err(SenderAttachError::IllegalState) if tries < 5 => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(SenderAttachError::SessionStopped(_)) if tries < 5 => {
                c = Client::new(&b).await;
            }
            Err(e) => panic!("sender attach after the refused controller: {e:?}"),
        }
    };
    send_accepted(&mut s, b"after").await;
    c.close().await;
}
