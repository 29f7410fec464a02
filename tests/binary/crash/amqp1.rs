//! AMQP 1.0 publishing survives `kill -9`: several `fe2o3-amqp` senders, each
//! with many unsettled durable transfers in flight, publish to a durable
//! queue; the broker is killed with SIGKILL while they publish and restarted
//! on the same data directory. Every message whose `accepted` disposition
//! arrived before the kill must be in the queue, exactly once, and what each
//! sender got stored must be in order and a prefix of what it sent (nothing
//! is republished, so nothing may be there twice).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::{Header, Message, Outcome};
use fe2o3_amqp::{Connection, Sender, Session};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::process::*;

const QUEUE: &str = "amqp1-crash";
/// Concurrent senders, each on a connection of its own.
const SENDERS: usize = 4;
/// Unsettled transfers each sender keeps in flight.
const IN_FLIGHT: usize = 300;
/// Size of each message body.
const BODY_SIZE: usize = 1024;
/// How long the senders publish before the kill.
const PUBLISH_FOR: Duration = Duration::from_millis(1500);
/// Small segments: the messages span hundreds of them, and the kill may land
/// on a switch to the next.
const SEGMENT_SIZE: u64 = 256 * 1024;
/// How long a sender waits for the outcomes still awaited once its
/// connection died.
const GRACE: Duration = Duration::from_secs(2);
/// Accepted messages needed for the test to mean something.
const MIN_ACCEPTED: usize = 500;

/// What the senders learned before the kill.
#[derive(Debug, Default)]
struct Tally {
    /// Every id handed to the sender.
    sent: HashSet<String>,
    /// Ids settled with `accepted`.
    accepted: HashSet<String>,
    /// Ids settled with another outcome (there should be none).
    other: Vec<(String, String)>,
    /// Transfers whose outcome future still had not resolved [`GRACE`] after
    /// the connection died.
    unresolved: usize,
}

type Shared = Arc<Mutex<Tally>>;

/// An AMQP 1.0 connection, session and sender, kept together so that the
/// connection lives as long as the sender.
struct Link {
    sender: Sender,
    _session: SessionHandle<()>,
    _conn: ConnectionHandle<()>,
}

/// Opens a connection to vhost `/` as guest (SASL PLAIN) and attaches a
/// sender to the queue.
async fn attach(port: u16, s: usize) -> Link {
    let url = format!("amqp://guest:guest@127.0.0.1:{port}");
    let mut conn = within(
        "AMQP 1.0 open",
        Connection::builder()
            .container_id(format!("amqp1-crash-{s}"))
            .hostname("vhost:/")
            .open(url.as_str()),
    )
    .await
    .unwrap_or_else(|e| panic!("AMQP 1.0 connection opens: {e:?}"));
    let mut session = within("AMQP 1.0 begin", Session::begin(&mut conn))
        .await
        .unwrap_or_else(|e| panic!("session begins: {e:?}"));
    let sender = within(
        "sender attach",
        Sender::attach(&mut session, format!("crash-sender-{s}"), format!("/queues/{QUEUE}")),
    )
    .await
    .unwrap_or_else(|e| panic!("sender attaches: {e:?}"));
    Link {
        sender,
        _session: session,
        _conn: conn,
    }
}

/// Sends `p{s}-{n}` (durable, unsettled, batchable) until the connection
/// dies or `killed` turns true, with up to [`IN_FLIGHT`] transfers awaiting
/// their outcome.
async fn publish(mut link: Link, s: usize, tally: Shared, mut killed: watch::Receiver<bool>) {
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut outcomes = JoinSet::new();
    for n in 0u64.. {
        // fe2o3 resolves no outcome while the link lives once the connection
        // is gone, so a sender waiting for a free slot must hear of the kill.
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("semaphore open"),
            _ = killed.wait_for(|k| *k) => break,
        };
        let id = format!("p{s}-{n}");
        let body = make_body(&id, BODY_SIZE - id.len() - 1);
        let message = Message::builder()
            .header(Header::builder().durable(true).build())
            .data(body)
            .build();
        tally.lock().unwrap().sent.insert(id.clone());
        let fut = tokio::select! {
            r = tokio::time::timeout(TIMEOUT, link.sender.send_batchable(message)) => match r {
                Ok(Ok(fut)) => fut,
                Ok(Err(_)) => break,
                Err(_) => panic!("sender {s}: no link credit for {TIMEOUT:?}"),
            },
            _ = killed.wait_for(|k| *k) => break,
        };
        let tally = tally.clone();
        outcomes.spawn(async move {
            let outcome = fut.await;
            drop(permit);
            match outcome {
                Ok(Outcome::Accepted(_)) => {
                    tally.lock().unwrap().accepted.insert(id);
                }
                Ok(other) => tally.lock().unwrap().other.push((id, format!("{other:?}"))),
                // Cut off by the kill: unknown.
                Err(_) => {}
            }
        });
        while outcomes.try_join_next().is_some() {}
    }
    // The link holds the settlement of each unsettled transfer: the outcomes
    // still awaited fail only once it is gone (a few may never resolve:
    // their outcome is unknown, and dropping the set aborts them).
    drop(link);
    let _ = tokio::time::timeout(GRACE, async { while outcomes.join_next().await.is_some() {} }).await;
    tally.lock().unwrap().unresolved += outcomes.len();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn amqp1_kill_9_loses_no_accepted_message() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let ini = segment_size_ini(tmp.path(), SEGMENT_SIZE);
    let data = tmp.path().join("data");
    let mut broker = BrokerProcess::spawn(&data, Some(&ini));
    {
        let conn = broker.connect().await;
        let ch = within("channel", conn.create_channel()).await.expect("channel");
        let durable = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        within(
            "queue.declare",
            ch.queue_declare(QUEUE.into(), durable, FieldTable::default()),
        )
        .await
        .expect("queue.declare");
        let _ = within("close", conn.close(200, "OK".into())).await;
    }

    let tally: Shared = Arc::default();
    let mut links = Vec::new();
    for s in 0..SENDERS {
        links.push(attach(broker.port, s).await);
    }
    let (kill_tx, killed) = watch::channel(false);
    let tasks: Vec<_> = links
        .into_iter()
        .enumerate()
        .map(|(s, link)| tokio::spawn(publish(link, s, tally.clone(), killed.clone())))
        .collect();
    tokio::time::sleep(PUBLISH_FOR).await;
    let accepted_before = tally.lock().unwrap().accepted.len();
    broker.kill9();
    kill_tx.send_replace(true);
    let killed_at = started.elapsed();
    for t in tasks {
        let abort = t.abort_handle();
        match tokio::time::timeout(TIMEOUT, t).await {
            Ok(r) => r.expect("sender task"),
            Err(_) => {
                abort.abort();
                panic!("a sender did not stop within {TIMEOUT:?} of the kill");
            }
        }
    }
    let tally = std::mem::take(&mut *tally.lock().unwrap());
    println!(
        "amqp1 crash: {} sent, {} accepted ({accepted_before} when the kill was sent) after {PUBLISH_FOR:?}, \
         {} outcomes never resolved",
        tally.sent.len(),
        tally.accepted.len(),
        tally.unresolved
    );
    assert!(
        tally.other.is_empty(),
        "the broker settled transfers with another outcome than accepted: {:?}",
        &tally.other[..tally.other.len().min(10)]
    );
    assert!(
        tally.accepted.len() >= MIN_ACCEPTED,
        "only {} messages were accepted in {PUBLISH_FOR:?}: the kill proves little",
        tally.accepted.len()
    );

    let broker = BrokerProcess::spawn(&data, Some(&ini));
    let restarted_at = started.elapsed();
    let conn = broker.connect().await;
    let got = super::drain(&conn, QUEUE).await;
    let _ = within("close", conn.close(200, "OK".into())).await;

    let mut present = HashSet::with_capacity(got.len());
    for (id, _) in &got {
        assert!(present.insert(id.as_str()), "{id} is in the queue twice");
        assert!(tally.sent.contains(id), "{id} was never sent");
    }
    let mut lost: Vec<&String> = tally
        .accepted
        .iter()
        .filter(|id| !present.contains(id.as_str()))
        .collect();
    lost.sort();
    assert!(
        lost.is_empty(),
        "{} accepted messages are lost (of {} accepted, {} in the queue), e.g. {:?}",
        lost.len(),
        tally.accepted.len(),
        got.len(),
        &lost[..lost.len().min(10)]
    );
    // Per sender: in the order sent, and a prefix of what was sent.
    let mut stored: HashMap<usize, Vec<u64>> = HashMap::new();
    for (id, _) in &got {
        let (s, n) = super::parse_id(id);
        let ns = stored.entry(s).or_default();
        if let Some(&prev) = ns.last() {
            assert!(prev < n, "p{s}-{n} comes after p{s}-{prev}");
        }
        ns.push(n);
    }
    for (s, ns) in &stored {
        let holes: Vec<u64> = (0..ns.len() as u64)
            .filter(|n| ns.binary_search(n).is_err())
            .take(10)
            .collect();
        assert!(
            holes.is_empty(),
            "sender {s} has holes (stored up to p{s}-{}, missing e.g. {holes:?})",
            ns.last().unwrap_or(&0)
        );
    }
    println!(
        "amqp1 crash: {} in the queue after the restart, all {} accepted among them \
         (killed at {killed_at:?}, listening again at {restarted_at:?}, done at {:?})",
        got.len(),
        tally.accepted.len(),
        started.elapsed()
    );
}
