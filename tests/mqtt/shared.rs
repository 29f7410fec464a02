//! Shared subscription groups whose members have stored sessions: the group
//! keeps its messages while every member is away, for whichever member comes
//! back first, and ends (its queue and what it holds) with the last session
//! of the group.

use std::sync::Arc;

use lavinmq::core::queue::Queue;
use rumqttc::QoS;
use rumqttc::v5::mqttbytes::QoS as QoS5;
use rumqttc::v5::mqttbytes::v5::{Packet, PubAckReason};

use super::common::mqtt::{connect, options, persistent};
use super::common::{TestBroker, eventually, start};
use super::v5::V5;

/// The shared subscription every test's members take.
const FILTER: &str = "$share/g/jobs";
/// The topic it matches.
const TOPIC: &str = "jobs";
/// The name of the group's queue.
const GROUP_QUEUE: &str = "mqtt-shared-g-jobs";

/// The group's queue, while it exists.
fn group_queue(b: &TestBroker) -> Option<Arc<Queue>> {
    b.server().broker.vhost("/")?.queue(GROUP_QUEUE)
}

/// Waits until no member consumes from the group's queue (the members'
/// connections have ended on the broker's side too).
async fn wait_members_gone(b: &TestBroker) {
    eventually("the members to leave the group's queue", || {
        let consumers = group_queue(b).map(|q| q.counts().1);
        async move { consumers == Some(0) }
    })
    .await;
}

/// Members with stored sessions (client id, session expiry in seconds): each
/// connects and joins the group, then all disconnect, and this returns once
/// the broker has seen them leave.
async fn stored_members(b: &TestBroker, members: &[(&str, u32)]) {
    let mut clients = Vec::new();
    for &(id, expiry) in members {
        let (mut c, _) = V5::connect(b, id, expiry).await;
        c.subscribe(FILTER).await;
        clients.push(c);
    }
    for c in clients {
        c.disconnect().await;
    }
    wait_members_gone(b).await;
}

/// Waits until the group's queue is deleted.
async fn wait_group_gone(b: &TestBroker) {
    eventually("the group's queue to be deleted", || {
        let gone = group_queue(b).is_none();
        async move { gone }
    })
    .await;
}

/// Publishes `n` QoS 1 messages `m0`, `m1`, ... to [`TOPIC`] (each
/// acknowledged, so routed) and returns their payloads.
async fn publish_jobs(b: &TestBroker, n: usize) -> Vec<String> {
    let mut publisher = connect(options(b, "jobs-publisher")).await;
    let mut sent = Vec::new();
    for i in 0..n {
        let body = format!("m{i}");
        publisher.publish(TOPIC, QoS::AtLeastOnce, false, body.as_bytes()).await;
        sent.push(body);
    }
    publisher.disconnect().await;
    sent
}

/// The payloads of the next `n` PUBLISHes to `c`.
async fn receive(c: &mut V5, n: usize) -> Vec<String> {
    let mut got = Vec::new();
    for _ in 0..n {
        let p = c.next_publish().await;
        got.push(String::from_utf8_lossy(&p.payload).into_owned());
    }
    got
}

/// The reason of the PUBACK a QoS 1 publish of an MQTT 5 client gets.
async fn publish_reason(c: &mut V5, payload: &str) -> PubAckReason {
    c.client
        .publish(TOPIC, QoS5::AtLeastOnce, false, payload.as_bytes().to_vec())
        .await
        .expect("PUBLISH sent");
    c.expect("PUBACK", |p| match p {
        Packet::PubAck(a) => Some(a.reason),
        _ => None,
    })
    .await
}

/// Both members' sessions are stored and neither is connected: the messages
/// wait in the group, the member that returns first (B) gets them all, and
/// the other (A) gets none of them again when it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_group_keeps_messages_for_the_first_member_back() {
    let b = start().await;
    stored_members(&b, &[("member-a", 300), ("member-b", 300)]).await;

    let sent = publish_jobs(&b, 5).await;
    let queue = group_queue(&b).expect("the group's queue outlives its members' connections");
    assert!(queue.durable, "a group of stored sessions is kept on disk");
    assert_eq!(queue.counts().0, 5, "the group holds the messages");
    drop(queue);

    let (mut m, ack) = V5::connect(&b, "member-b", 300).await;
    assert!(ack.session_present);
    assert_eq!(
        receive(&mut m, 5).await,
        sent,
        "the first member back gets every message"
    );
    m.assert_no_publish().await;

    let (mut a, ack) = V5::connect(&b, "member-a", 300).await;
    assert!(ack.session_present);
    a.assert_no_publish().await;
    m.assert_no_publish().await;
    // Both connected, the group shares again.
    let sent = publish_jobs(&b, 4).await;
    let mut got = receive_any(&mut a, &mut m, sent.len()).await;
    got.sort();
    assert_eq!(got, sent, "each message reaches one member");
    a.assert_no_publish().await;
    m.assert_no_publish().await;
}

/// The payloads of the next `n` PUBLISHes to either client.
async fn receive_any(a: &mut V5, m: &mut V5, n: usize) -> Vec<String> {
    let mut got = Vec::new();
    while got.len() < n {
        let p = tokio::select! {
            p = a.next_publish() => p,
            p = m.next_publish() => p,
        };
        got.push(String::from_utf8_lossy(&p.payload).into_owned());
    }
    got
}

/// A clean start discards a member's stored session and with it its
/// membership: the group lasts while the other stored member does, then its
/// queue, with what it held, is deleted, and later messages are not kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_ends_with_the_clean_start_of_its_last_session() {
    let b = start().await;
    stored_members(&b, &[("clean-a", 300), ("clean-b", 300)]).await;
    publish_jobs(&b, 2).await;
    let dir = b.queue_dir(GROUP_QUEUE);
    assert!(dir.exists());

    let (a, ack) = V5::connect_clean(&b, "clean-a", 300).await;
    assert!(!ack.session_present);
    a.disconnect().await;
    let queue = group_queue(&b).expect("member B's stored session keeps the group");
    assert_eq!(queue.counts().0, 2);
    drop(queue);

    let (mut m, ack) = V5::connect_clean(&b, "clean-b", 0).await;
    assert!(!ack.session_present);
    wait_group_gone(&b).await;
    assert!(!dir.exists(), "the group's messages are deleted with its queue");
    assert_eq!(
        publish_reason(&mut m, "after").await,
        PubAckReason::NoMatchingSubscribers,
        "nothing keeps messages for the ended group"
    );
    assert!(group_queue(&b).is_none());
    m.disconnect().await;
    let (mut a, ack) = V5::connect(&b, "clean-a", 300).await;
    assert!(ack.session_present, "A's new session, without the group");
    a.assert_no_publish().await;
}

/// When the stored sessions of every member expire, the group's queue goes
/// with the last of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_ends_when_its_last_session_expires() {
    let b = start().await;
    stored_members(&b, &[("expiring-a", 1), ("expiring-b", 300)]).await;
    publish_jobs(&b, 1).await;
    let vhost = b.server().broker.vhost("/").expect("vhost /");
    eventually("member A's session to expire", || {
        let gone = vhost.queue("mqtt-subscription-expiring-aqos1").is_none();
        async move { gone }
    })
    .await;
    assert!(
        group_queue(&b).is_some_and(|q| q.counts().0 == 1),
        "member B's stored session keeps the group and its message"
    );

    // B comes back to shorten its session, which then expires too.
    let (mut m, _) = V5::connect(&b, "expiring-b", 1).await;
    assert_eq!(receive(&mut m, 1).await, ["m0"]);
    m.disconnect().await;
    wait_group_gone(&b).await;
    assert!(vhost.queue("mqtt-subscription-expiring-bqos1").is_none());

    let (mut p, _) = V5::connect_clean(&b, "expired-publisher", 0).await;
    assert_eq!(
        publish_reason(&mut p, "after").await,
        PubAckReason::NoMatchingSubscribers
    );
    assert!(group_queue(&b).is_none(), "no queue is made for the ended group");
}

/// MQTT 3.1.1 members with clean session off are stored sessions too: their
/// group keeps the messages across a restart for the first member back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v311_stored_members_keep_the_group_across_a_restart() {
    let mut b = start().await;
    for id in ["old-a", "old-b"] {
        let mut c = connect(persistent(&b, id)).await;
        c.subscribe_ok(FILTER, QoS::AtLeastOnce).await;
        c.disconnect().await;
    }
    wait_members_gone(&b).await;
    let sent = publish_jobs(&b, 3).await;
    b.restart().await;

    let mut m = connect(persistent(&b, "old-b")).await;
    assert!(m.session_present());
    let mut got = Vec::new();
    for _ in 0..sent.len() {
        got.push(String::from_utf8_lossy(&m.next_publish().await.payload).into_owned());
    }
    assert_eq!(got, sent);
    m.assert_no_publish().await;
    let mut a = connect(persistent(&b, "old-a")).await;
    assert!(a.session_present());
    a.assert_no_publish().await;
    m.assert_no_publish().await;
}

/// A group first joined by a session that ends with its connection has a
/// transient queue; a stored member joining it later still finds the group
/// (and its messages) after a restart, and the group of sessions that all end
/// with their connections goes with the last of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_member_of_a_transient_group_gets_it_back_after_a_restart() {
    let mut b = start().await;
    let mut clean = connect(options(&b, "transient-member")).await;
    clean.subscribe_ok(FILTER, QoS::AtLeastOnce).await;
    assert!(group_queue(&b).is_some_and(|q| !q.durable));
    clean.disconnect().await;
    wait_group_gone(&b).await;

    let mut clean = connect(options(&b, "transient-member")).await;
    clean.subscribe_ok(FILTER, QoS::AtLeastOnce).await;
    let mut stored = connect(persistent(&b, "stored-member")).await;
    stored.subscribe_ok(FILTER, QoS::AtLeastOnce).await;
    clean.disconnect().await;
    stored.disconnect().await;
    wait_members_gone(&b).await;
    b.restart().await;

    let sent = publish_jobs(&b, 2).await;
    assert!(
        group_queue(&b).is_some_and(|q| q.durable),
        "the stored member's group is back, on disk"
    );
    let mut stored = connect(persistent(&b, "stored-member")).await;
    assert!(stored.session_present());
    for body in sent {
        assert_eq!(String::from_utf8_lossy(&stored.next_publish().await.payload), body);
    }
    stored.assert_no_publish().await;
}
