//! Publishers paced by consumers that cannot keep up: while more than a few
//! thousand messages wait in a queue whose every consumer could take more but
//! waits for its client to read, the queue's publishers are slowed (RabbitMQ's
//! `flow` connection state) but never stopped. A consumer held back by its
//! prefetch limit paces no one: a backlog is then what a queue is for.

use crate::common::api::Api;
use crate::common::*;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;

/// Messages published by each test, of [`BODY`] bytes: far more than the
/// socket buffers between a consumer and its client hold.
const MESSAGES: usize = 30_000;
const BODY: usize = 1024;

/// `basic.consume` of `queue` on `channel` without acknowledgements.
fn basic_consume_no_ack(channel: u16, queue: &str) -> Vec<u8> {
    let mut a = 0u16.to_be_bytes().to_vec();
    a.extend(shortstr(queue));
    a.extend(shortstr("stalled"));
    a.push(0b10); // no-ack
    a.extend_from_slice(&0u32.to_be_bytes()); // no arguments
    method_frame(channel, 60, 20, &a)
}

/// The `state` of every connection the API lists.
async fn states(api: &Api) -> Vec<String> {
    let conns = api.get_ok("/api/connections").await;
    conns
        .as_array()
        .expect("a list")
        .iter()
        .map(|c| c["state"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A broker, its API, a publisher's connection and channel, and a queue
/// named after `prefix`.
async fn with_queue(prefix: &str) -> (TestBroker, Api, lapin::Connection, lapin::Channel, String) {
    let broker = start().await;
    let api = Api::new(&broker);
    let (conn, ch) = broker.channel().await;
    let q = uniq(prefix);
    declare_queue(&ch, &q).await;
    (broker, api, conn, ch, q)
}

async fn publish_all(ch: lapin::Channel, queue: String) {
    let body = vec![b'x'; BODY];
    for _ in 0..MESSAGES {
        publish(&ch, "", &queue, &body).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_whose_client_stops_reading_slows_its_publishers_without_stopping_them() {
    let (broker, api, _conn, ch, q) = with_queue("paced").await;
    // A no-ack consumer whose client reads nothing after consume-ok.
    let mut stalled = RawConn::open(broker.addr()).await;
    stalled.send(&channel_open(1)).await;
    assert_eq!(stalled.read_method().await.method_ids(), Some((20, 11)));
    stalled.send(&basic_consume_no_ack(1, &q)).await;
    assert_eq!(stalled.read_method().await.method_ids(), Some((60, 21)));

    let publisher = tokio::spawn(publish_all(ch.clone(), q.clone()));
    eventually("the publisher in flow", || async {
        states(&api).await.iter().any(|s| s == "flow")
    })
    .await;
    // Slowed, not stopped: every message gets in, and those the stalled
    // consumer could not take wait in the queue.
    within("every publish", publisher).await.expect("publisher");
    let (observer, _och) = broker.channel().await;
    let ready = message_count(&observer, &q).await as usize;
    assert!(ready > 0 && ready < MESSAGES, "{ready} ready");
    eventually("the publisher running again", || async {
        states(&api).await.iter().all(|s| s == "running")
    })
    .await;
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_held_back_by_its_prefetch_paces_no_one() {
    let (broker, api, _conn, ch, q) = with_queue("unpaced").await;
    let (_cconn, cch) = broker.channel().await;
    cch.basic_qos(10, BasicQosOptions::default()).await.expect("qos");
    // Never acknowledges: it holds 10 messages and takes no more.
    let _consumer = consume_with(&cch, &q, BasicConsumeOptions::default(), FieldTable::default()).await;
    publish_all(ch.clone(), q.clone()).await;
    let (observer, _och) = broker.channel().await;
    eventually("every message stored", || async {
        message_count(&observer, &q).await as usize == MESSAGES - 10
    })
    .await;
    assert!(
        states(&api).await.iter().all(|s| s == "running"),
        "{:?}",
        states(&api).await
    );
}
