//! RabbitMQ 4 "v2" addresses: `/queues/NAME`, `/exchanges/EX/KEY`,
//! `/exchanges/EX` (routing key from the subject), a null target (address
//! from each message's `to`), and refused attaches to nodes that do not exist.

use fe2o3_amqp::types::messaging::{Data, Properties, Target};

use super::*;
use crate::common::{declare_queue, get, start, uniq, within};

/// A Data message with `properties`.
fn message_with(body: &[u8], properties: Properties) -> Message<Data> {
    Message::builder().properties(properties).data(body.to_vec()).build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_address_publishes_into_the_queue() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-q");
    let other = uniq("a1-other");
    declare_queue(&ch, &q).await;
    declare_queue(&ch, &other).await;
    let mut c = Client::new(&b).await;
    let mut s = c.sender(&queue_address(&q)).await;
    send_accepted(&mut s, b"to the queue").await;
    let m = get(&ch, &q, true).await.expect("the message");
    assert_eq!(m.delivery.data, b"to the queue");
    // Through the default exchange, with the queue's name as routing key.
    assert_eq!(m.delivery.exchange.as_str(), "");
    assert_eq!(m.delivery.routing_key.as_str(), q);
    assert!(get(&ch, &other, true).await.is_none(), "the other queue got a message");
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_and_key_address_routes_with_the_key() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let ex = uniq("a1-ex");
    let (q_a, q_b) = (uniq("a1-qa"), uniq("a1-qb"));
    declare_exchange(&ch, &ex, ExchangeKind::Direct).await;
    declare_queue(&ch, &q_a).await;
    declare_queue(&ch, &q_b).await;
    bind(&ch, &q_a, &ex, "key.a").await;
    bind(&ch, &q_b, &ex, "key.b").await;
    let mut c = Client::new(&b).await;
    let mut s = c.sender(&exchange_key_address(&ex, "key.a")).await;
    send_accepted(&mut s, b"for a").await;
    let m = get(&ch, &q_a, true)
        .await
        .expect("the message in the queue bound with key.a");
    assert_eq!(m.delivery.data, b"for a");
    assert_eq!(m.delivery.exchange.as_str(), ex);
    assert_eq!(m.delivery.routing_key.as_str(), "key.a");
    assert!(
        get(&ch, &q_b, true).await.is_none(),
        "the queue bound with key.b got a message"
    );
    // A subject does not override the key of the address.
    let msg = message_with(b"still a", Properties::builder().subject("key.b").build());
    let outcome = send_outcome(&mut s, msg).await;
    assert!(matches!(outcome, Outcome::Accepted(_)), "outcome {outcome:?}");
    let m = get(&ch, &q_a, true).await.expect("routed with the address's key");
    assert_eq!(m.delivery.data, b"still a");
    assert!(
        get(&ch, &q_b, true).await.is_none(),
        "the subject overrode the address's key"
    );
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_address_routes_with_the_subject() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let ex = uniq("a1-ex");
    let (q_a, q_b) = (uniq("a1-qa"), uniq("a1-qb"));
    declare_exchange(&ch, &ex, ExchangeKind::Direct).await;
    declare_queue(&ch, &q_a).await;
    declare_queue(&ch, &q_b).await;
    bind(&ch, &q_a, &ex, "key.a").await;
    bind(&ch, &q_b, &ex, "key.b").await;
    let mut c = Client::new(&b).await;
    let mut s = c.sender(&exchange_address(&ex)).await;
    for (body, subject) in [(&b"one"[..], "key.a"), (b"two", "key.b"), (b"three", "key.a")] {
        let msg = message_with(body, Properties::builder().subject(subject).build());
        let outcome = send_outcome(&mut s, msg).await;
        assert!(
            matches!(outcome, Outcome::Accepted(_)),
            "{subject}: outcome {outcome:?}"
        );
    }
    let a = crate::common::drain(&ch, &q_a).await;
    let b_msgs = crate::common::drain(&ch, &q_b).await;
    assert_eq!(a, vec![b"one".to_vec(), b"three".to_vec()]);
    assert_eq!(b_msgs, vec![b"two".to_vec()]);
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_target_sends_each_message_to_its_to_address() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let ex = uniq("a1-ex");
    let (q1, q2) = (uniq("a1-q1"), uniq("a1-q2"));
    declare_exchange(&ch, &ex, ExchangeKind::Direct).await;
    declare_queue(&ch, &q1).await;
    declare_queue(&ch, &q2).await;
    bind(&ch, &q2, &ex, "k2").await;
    let mut c = Client::new(&b).await;
    // A target without an address (the attach carries target {address: null}).
    let attach = Sender::builder()
        .name(uniq("anonymous-sender"))
        .target(Target::builder().build())
        .attach(&mut c.session);
    let mut s = within("sender attach", attach)
        .await
        .expect("a sender with a null target address attaches");
    let to_queue = message_with(b"via to: queue", Properties::builder().to(queue_address(&q1)).build());
    let outcome = send_outcome(&mut s, to_queue).await;
    assert!(matches!(outcome, Outcome::Accepted(_)), "to {q1}: {outcome:?}");
    let to_exchange = message_with(
        b"via to: exchange",
        Properties::builder().to(exchange_key_address(&ex, "k2")).build(),
    );
    let outcome = send_outcome(&mut s, to_exchange).await;
    assert!(matches!(outcome, Outcome::Accepted(_)), "to {ex}/k2: {outcome:?}");
    assert_eq!(crate::common::drain(&ch, &q1).await, vec![b"via to: queue".to_vec()]);
    assert_eq!(crate::common::drain(&ch, &q2).await, vec![b"via to: exchange".to_vec()]);
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receiver_consumes_from_a_queue_address() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-q");
    declare_queue(&ch, &q).await;
    for body in [&b"first"[..], b"second"] {
        crate::common::publish(&ch, "", &q, body).await;
    }
    let mut c = Client::new(&b).await;
    let mut r = c.receiver(&queue_address(&q)).await;
    let ds = recv_n(&mut r, 2).await;
    assert_eq!(bodies(&ds), ["first", "second"]);
    within("accept", r.accept_all(&ds)).await.expect("accept");
    // Published after the attach: delivered too.
    crate::common::publish(&ch, "", &q, b"third").await;
    let d = recv(&mut r).await;
    assert_eq!(body_bytes(&d), b"third");
    within("accept", r.accept(&d)).await.expect("accept");
    assert_no_delivery(&mut r).await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attaching_to_missing_nodes_is_refused_with_not_found() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-q");
    declare_queue(&ch, &q).await;
    let mut c = Client::new(&b).await;
    // Each refusal on a session of its own: fe2o3 answers a refused attach
    // with two detaches (one for the null terminus, one answering ours),
    // and a link it attaches at once on the same session can meet the
    // second one's clean-up under the same handle.
    for address in [
        queue_address("no-such-queue"),
        exchange_key_address("no-such-exchange", "k"),
        exchange_address("no-such-exchange"),
    ] {
        let mut session = begin(&mut c.conn).await;
        let res = within(
            "sender attach",
            Sender::attach(&mut session, uniq("s"), address.as_str()),
        )
        .await;
        let Err(err) = res else {
            panic!("a sender attached to {address}");
        };
        assert_not_found(&address, sender_attach_error(&err), &err);
        // Ended before the connection closes, so that the close never meets
        // a session still winding down (the client then reports IllegalState).
        let _ = within("session end", session.end()).await;
    }
    let address = queue_address("no-such-queue");
    let mut session = begin(&mut c.conn).await;
    let res = within(
        "receiver attach",
        Receiver::attach(&mut session, uniq("r"), address.as_str()),
    )
    .await;
    let err = res.expect_err("a receiver attached to a missing queue");
    assert_not_found(&address, receiver_attach_error(&err), &err);
    let _ = within("session end", session.end()).await;
    // Only the links were refused: the session still works.
    let mut s = c.sender(&queue_address(&q)).await;
    send_accepted(&mut s, b"after the refusals").await;
    let m = get(&ch, &q, true).await.expect("the message");
    assert_eq!(m.delivery.data, b"after the refusals");
    c.close().await;
}
