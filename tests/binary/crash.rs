//! Crash safety of the real binary: publishers with confirms, a consumer with manual
//! acks and a task changing definitions all run against the broker, which is killed
//! with SIGKILL at a random moment and restarted on the same data directory. What
//! the clients learned before the kill must hold afterwards:
//!
//! * every confirmed message is there exactly once, unless the consumer acked it;
//! * no message whose ack the broker processed comes back;
//! * messages the consumer saw and did not ack come back with `redelivered=true`;
//!   the others come back with `redelivered=false`, except those the broker had
//!   already sent but the client had not yet read: so the flagged messages form a
//!   prefix of the queue, no longer than the prefetch, seen ones first;
//! * messages are in publish order per publisher, and what is stored is a prefix
//!   of what each publisher sent;
//! * definitions whose `*-ok` arrived survive, deleted ones stay deleted.
//!
//! An ack counts as processed only once the reply to a later synchronous method on
//! the same channel has arrived: lapin's `basic_ack` returns when the frame is
//! queued, and the broker may die before reading it (those acks may or may not
//! have happened). Half of the seeds also kill the restarting broker a few
//! milliseconds in, while it recovers, before the restart that is checked.
//! `kill -9` leaves the page cache intact, so this does not prove that confirms
//! wait for the sync to disk; it proves what the broker keeps across a crash of
//! the process.
//!
//! Each seed drives a deterministic PRNG (timing still varies from run to run).
//! `CRASH_SEEDS=N` runs N seeds (default 8); `CRASH_SEED=S` runs only seed S.
//!
//! The same workload then runs with the data directory on a filesystem that
//! loses power ([`power_loss_fs`]): each kill also drops everything the broker
//! did not sync. That proves that confirms and `-ok` replies wait for the sync:
//! every confirmed message and every definition whose `-ok` arrived must be
//! there. What a power loss may undo is relaxed in the checks: an ack (the
//! message comes back), the redelivered flag, and a message delivered before
//! its confirm. `POWER_LOSS_SEEDS=N` runs N seeds (default 4),
//! `POWER_LOSS_SEED=S` only seed S.
//!
//! [`shovel`] kills a broker in the middle of a shovel, [`amqp1`] under AMQP 1.0
//! publishers, [`stream_dedup`] right after a named stream publisher's
//! confirms.

use crate::process;
mod amqp1;
mod power_loss_fs;
mod shovel;
mod slow_disk;
mod stream_dedup;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use power_loss_fs::{Mounted, PowerLossDisk};
use process::*;

const Q1: &str = "crash-q1";
const Q2: &str = "crash-q2";
const X: &str = "crash-x";
const PREFETCH: u16 = 50;
const PUBLISHERS: usize = 3;
const SEGMENT_SIZE: u64 = 64 * 1024;

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        ..Default::default()
    }
}

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

fn churn_name(i: u64) -> String {
    format!("churn-{i}")
}

/// `p{publisher}-{n}` → (publisher, n)
fn parse_id(id: &str) -> (usize, u64) {
    let rest = id.strip_prefix('p').unwrap_or_else(|| panic!("bad id {id:?}"));
    let (p, n) = rest.split_once('-').unwrap_or_else(|| panic!("bad id {id:?}"));
    (p.parse().expect("publisher"), n.parse().expect("sequence number"))
}

/// Where a churn queue got to before the kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Churn {
    /// queue.declare sent, no declare-ok.
    Declaring,
    /// declare-ok received.
    Declared,
    /// bind-ok received.
    Bound,
    /// queue.delete sent, no delete-ok.
    Deleting,
    /// delete-ok received.
    Deleted,
}

/// What the clients learned before the kill.
#[derive(Debug, Default)]
struct State {
    /// Every id handed to basic.publish, with whether it was routed to Q2 too.
    published: HashMap<String, bool>,
    /// Ids whose publisher confirm (ack) arrived.
    confirmed: HashSet<String>,
    /// Ids the broker nacked (there should be none).
    nacked: Vec<String>,
    /// Ids delivered to the consumer.
    seen: HashSet<String>,
    /// Ids delivered with redelivered=true before the kill (there should be none).
    redelivered_before_kill: Vec<String>,
    /// Ids whose basic.ack may be on its way (the call has not returned).
    ack_sent: HashSet<String>,
    /// Ids whose basic.ack call returned, but whose processing by the broker is
    /// not known yet: lapin returns once the frame is queued for the socket, so
    /// the broker may die before reading it.
    ack_returned: HashSet<String>,
    /// Ids whose basic.ack the broker processed (a later reply on the channel came).
    acked: HashSet<String>,
    /// Churn queue number → how far it got.
    churn: BTreeMap<u64, Churn>,
}

impl State {
    /// True when the id's ack may or may not have reached the broker.
    fn unsure(&self, id: &str) -> bool {
        self.ack_sent.contains(id) || self.ack_returned.contains(id)
    }
}

type Shared = Arc<Mutex<State>>;

async fn connect(url: &str) -> Option<(Connection, Channel)> {
    let conn = Connection::connect(url, ConnectionProperties::default()).await.ok()?;
    let ch = conn.create_channel().await.ok()?;
    Some((conn, ch))
}

/// Publishes `p{p}-{n}` with confirms, in batches, until the connection dies.
async fn publisher(url: String, p: usize, mut rng: Rng, state: Shared) {
    let Some((_conn, ch)) = connect(&url).await else { return };
    if ch.confirm_select(ConfirmSelectOptions::default()).await.is_err() {
        return;
    }
    let mut n = 0u64;
    loop {
        let batch = rng.range(1, 40);
        let mut pending = Vec::new();
        for _ in 0..batch {
            let id = format!("p{p}-{n}");
            n += 1;
            let route = rng.range(0, 2);
            let (exchange, key) = match route {
                0 => ("", Q1.to_string()),
                1 => (X, format!("one.{p}")),
                _ => (X, format!("all.{p}")),
            };
            let body = make_body(&id, rng.range(0, 1500) as usize);
            state.lock().unwrap().published.insert(id.clone(), route == 2);
            match ch
                .basic_publish(
                    exchange.into(),
                    key.as_str().into(),
                    BasicPublishOptions::default(),
                    &body,
                    persistent(),
                )
                .await
            {
                Ok(confirm) => pending.push((id, confirm)),
                Err(_) => return,
            }
        }
        for (id, confirm) in pending {
            match confirm.await {
                Ok(c) if c.is_ack() => {
                    state.lock().unwrap().confirmed.insert(id);
                }
                Ok(_) => state.lock().unwrap().nacked.push(id),
                Err(_) => return,
            }
        }
    }
}

/// Consumes Q1 with manual acks, holding a random number of deliveries before
/// acking a random prefix of them (one by one or with `multiple`).
async fn consumer(url: String, mut rng: Rng, state: Shared) {
    let Some((_conn, ch)) = connect(&url).await else { return };
    if ch.basic_qos(PREFETCH, BasicQosOptions::default()).await.is_err() {
        return;
    }
    let Ok(mut deliveries) = ch
        .basic_consume(
            Q1.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
    else {
        return;
    };
    let mut held: VecDeque<(String, u64)> = VecDeque::new();
    let mut threshold = rng.range(1, 45) as usize;
    loop {
        let idle = match tokio::time::timeout(Duration::from_millis(20), deliveries.next()).await {
            Ok(Some(Ok(d))) => {
                let id = body_id(&d.data);
                let mut st = state.lock().unwrap();
                if d.redelivered {
                    st.redelivered_before_kill.push(id.clone());
                }
                st.seen.insert(id.clone());
                held.push_back((id, d.delivery_tag));
                false
            }
            Ok(_) => return,
            Err(_) => true,
        };
        if held.len() >= threshold || (idle && !held.is_empty() && rng.one_in(2)) {
            let k = rng.range(1, held.len() as u64) as usize;
            let batch: Vec<(String, u64)> = held.drain(..k).collect();
            state
                .lock()
                .unwrap()
                .ack_sent
                .extend(batch.iter().map(|(id, _)| id.clone()));
            let returned = |ids: &[(String, u64)]| {
                let mut st = state.lock().unwrap();
                for (id, _) in ids {
                    st.ack_sent.remove(id);
                    st.ack_returned.insert(id.clone());
                }
            };
            if rng.one_in(2) {
                let last = batch.last().map(|(_, t)| *t).unwrap_or_default();
                if ch.basic_ack(last, BasicAckOptions { multiple: true }).await.is_err() {
                    return;
                }
                returned(&batch);
            } else {
                for (i, (_, tag)) in batch.iter().enumerate() {
                    if ch.basic_ack(*tag, BasicAckOptions::default()).await.is_err() {
                        return;
                    }
                    returned(&batch[i..=i]);
                }
            }
            // A channel's methods are handled in order, so the reply to a later
            // synchronous method proves that the broker has processed the acks.
            if ch.basic_qos(PREFETCH, BasicQosOptions::default()).await.is_err() {
                return;
            }
            let mut st = state.lock().unwrap();
            for (id, _) in batch {
                st.ack_returned.remove(&id);
                st.acked.insert(id);
            }
            threshold = rng.range(1, 45) as usize;
        }
    }
}

/// Declares durable queues and binds them to X, deleting the oldest so that at
/// most four live at a time: a stream of definitions.log changes.
async fn churn(url: String, mut rng: Rng, state: Shared) {
    let Some((_conn, ch)) = connect(&url).await else { return };
    let set = |i: u64, c: Churn| {
        state.lock().unwrap().churn.insert(i, c);
    };
    let mut live = VecDeque::new();
    for i in 0.. {
        let name = churn_name(i);
        set(i, Churn::Declaring);
        if ch
            .queue_declare(name.as_str().into(), durable(), FieldTable::default())
            .await
            .is_err()
        {
            return;
        }
        set(i, Churn::Declared);
        if ch
            .queue_bind(
                name.as_str().into(),
                X.into(),
                format!("churn.{i}").as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .is_err()
        {
            return;
        }
        set(i, Churn::Bound);
        live.push_back(i);
        if live.len() > 3 {
            let old = live.pop_front().unwrap_or_default();
            set(old, Churn::Deleting);
            if ch
                .queue_delete(churn_name(old).as_str().into(), QueueDeleteOptions::default())
                .await
                .is_err()
            {
                return;
            }
            set(old, Churn::Deleted);
        }
        if rng.one_in(2) {
            tokio::time::sleep(Duration::from_millis(rng.range(0, 5))).await;
        }
    }
}

async fn setup(broker: &BrokerProcess) {
    let conn = broker.connect().await;
    let ch = within("channel", conn.create_channel()).await.expect("channel");
    within(
        "exchange.declare",
        ch.exchange_declare(
            X.into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        ),
    )
    .await
    .expect("exchange.declare");
    for q in [Q1, Q2] {
        within(
            "queue.declare",
            ch.queue_declare(q.into(), durable(), FieldTable::default()),
        )
        .await
        .expect("queue.declare");
    }
    for (q, key) in [(Q1, "all.#"), (Q1, "one.#"), (Q2, "all.#")] {
        within(
            "queue.bind",
            ch.queue_bind(
                q.into(),
                X.into(),
                key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            ),
        )
        .await
        .expect("queue.bind");
    }
    let _ = within("close", conn.close(200, "OK".into())).await;
}

/// Takes every message of `queue` (no-ack consumer), in queue order, with the
/// redelivered flag; checks that the count matches the declared one and that
/// nothing is left.
async fn drain(conn: &Connection, queue: &str) -> Vec<(String, bool)> {
    let ch = within("channel", conn.create_channel()).await.expect("channel");
    let count = within(
        "passive declare",
        ch.queue_declare(queue.into(), passive(), FieldTable::default()),
    )
    .await
    .expect("passive declare")
    .message_count() as usize;
    let mut c = within(
        "basic.consume",
        ch.basic_consume(
            queue.into(),
            "drain".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        ),
    )
    .await
    .expect("basic.consume");
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let d = within(&format!("message {} of {count} in {queue}", out.len() + 1), c.next())
            .await
            .expect("consumer stream ended")
            .expect("delivery");
        out.push((body_id(&d.data), d.redelivered));
    }
    if let Ok(Some(extra)) = tokio::time::timeout(Duration::from_millis(200), c.next()).await {
        let d = extra.expect("delivery");
        panic!(
            "{queue}: more messages than the declared {count}: {:?}",
            body_id(&d.data)
        );
    }
    within(
        "basic.cancel",
        ch.basic_cancel("drain".into(), BasicCancelOptions::default()),
    )
    .await
    .expect("basic.cancel");
    let left = within(
        "basic.get",
        ch.basic_get(queue.into(), BasicGetOptions { no_ack: true }),
    )
    .await
    .expect("basic.get");
    assert!(
        left.is_none(),
        "{queue}: a message is left after draining the declared {count}"
    );
    let _ = ch.close(200, "OK".into()).await;
    out
}

async fn exists(conn: &Connection, queue: &str) -> bool {
    let ch = within("channel", conn.create_channel()).await.expect("channel");
    match within(
        "passive declare",
        ch.queue_declare(queue.into(), passive(), FieldTable::default()),
    )
    .await
    {
        Ok(_) => {
            let _ = ch.close(200, "OK".into()).await;
            true
        }
        Err(_) => false,
    }
}

async fn publish_confirmed(ch: &Channel, exchange: &str, key: &str, body: &[u8]) {
    let confirm = within(
        "basic.publish",
        ch.basic_publish(
            exchange.into(),
            key.into(),
            BasicPublishOptions::default(),
            body,
            persistent(),
        ),
    )
    .await
    .expect("basic.publish");
    let c = within("confirm", confirm).await.expect("confirm");
    assert!(c.is_ack(), "publish to {exchange}/{key} was nacked");
}

async fn get_body(ch: &Channel, queue: &str) -> Option<Vec<u8>> {
    within(
        "basic.get",
        ch.basic_get(queue.into(), BasicGetOptions { no_ack: true }),
    )
    .await
    .expect("basic.get")
    .map(|m| m.delivery.data)
}

fn check_q1(st: &State, got: &[(String, bool)], power_loss: bool) {
    let mut index = HashMap::new();
    for (i, (id, _)) in got.iter().enumerate() {
        assert!(index.insert(id.as_str(), i).is_none(), "{Q1}: {id} is there twice");
        assert!(st.published.contains_key(id), "{Q1}: {id} was never published");
        if power_loss {
            continue;
        }
        assert!(
            !st.acked.contains(id),
            "{Q1}: {id} came back although its ack was processed before the kill"
        );
        let redelivered = got[i].1;
        if st.seen.contains(id) {
            assert!(
                redelivered,
                "{Q1}: {id} was delivered before the kill and not acked, but came back with redelivered=false"
            );
        }
    }
    for id in &st.confirmed {
        if !st.acked.contains(id) && !st.unsure(id) {
            assert!(index.contains_key(id.as_str()), "{Q1}: confirmed {id} is lost");
        }
    }
    if power_loss {
        check_publisher_order(st, got);
        return;
    }
    for id in &st.seen {
        if !st.acked.contains(id) && !st.unsure(id) {
            assert!(
                index.contains_key(id.as_str()),
                "{Q1}: {id} was delivered and never acked, but is lost"
            );
        }
    }
    // Redelivered messages are those before the broker's read cursor: a prefix of
    // the queue, at most a prefetch's worth (one consumer, no requeues). Within it,
    // the ones the client saw come before those still in flight at the kill.
    let flagged = got.iter().take_while(|(_, r)| *r).count();
    assert!(
        got[flagged..].iter().all(|(_, r)| !r),
        "{Q1}: redelivered messages are not a prefix of the queue: {:?}",
        got.iter()
            .map(|(id, r)| format!("{id}:{r}"))
            .take(80)
            .collect::<Vec<_>>()
    );
    assert!(
        flagged <= PREFETCH as usize,
        "{Q1}: {flagged} redelivered messages, more than the prefetch {PREFETCH}"
    );
    if let Some(first_unseen) = got[..flagged].iter().position(|(id, _)| !st.seen.contains(id)) {
        assert!(
            got[first_unseen..flagged].iter().all(|(id, _)| !st.seen.contains(id)),
            "{Q1}: a message the client saw comes after one it never saw among the redelivered"
        );
    }
    check_publisher_order(st, got);
}

fn check_publisher_order(st: &State, got: &[(String, bool)]) {
    // Per publisher: increasing order, and what was stored (now present, or
    // delivered before the kill) is a prefix of what the publisher sent.
    let mut last: HashMap<usize, u64> = HashMap::new();
    for (id, _) in got {
        let (p, n) = parse_id(id);
        if let Some(prev) = last.insert(p, n) {
            assert!(prev < n, "{Q1}: p{p}-{n} comes after p{p}-{prev}");
        }
    }
    let mut stored: HashMap<usize, Vec<u64>> = HashMap::new();
    for id in got.iter().map(|(id, _)| id).chain(st.seen.iter()) {
        let (p, n) = parse_id(id);
        stored.entry(p).or_default().push(n);
    }
    for (p, mut ns) in stored {
        ns.sort_unstable();
        ns.dedup();
        let holes: Vec<u64> = (0..ns.len() as u64)
            .filter(|n| ns.binary_search(n).is_err())
            .take(10)
            .collect();
        assert!(
            holes.is_empty(),
            "{Q1}: publisher p{p} has holes (stored up to p{p}-{}, missing e.g. {holes:?})",
            ns.last().unwrap_or(&0)
        );
    }
}

fn check_q2(st: &State, got: &[(String, bool)]) {
    let mut seen = HashSet::new();
    let mut present: HashMap<usize, Vec<u64>> = HashMap::new();
    for (id, redelivered) in got {
        assert!(seen.insert(id.as_str()), "{Q2}: {id} is there twice");
        assert_eq!(st.published.get(id), Some(&true), "{Q2}: {id} was never routed here");
        assert!(!redelivered, "{Q2}: {id} has redelivered=true but was never delivered");
        let (p, n) = parse_id(id);
        let v = present.entry(p).or_default();
        if let Some(prev) = v.last() {
            assert!(*prev < n, "{Q2}: p{p}-{n} comes after p{p}-{prev}");
        }
        v.push(n);
    }
    for id in &st.confirmed {
        if st.published.get(id) == Some(&true) {
            assert!(seen.contains(id.as_str()), "{Q2}: confirmed {id} is lost");
        }
    }
    let mut routed: HashMap<usize, Vec<u64>> = HashMap::new();
    for (id, to_q2) in &st.published {
        if *to_q2 {
            let (p, n) = parse_id(id);
            routed.entry(p).or_default().push(n);
        }
    }
    for (p, ns) in present {
        let mut all = routed.remove(&p).unwrap_or_default();
        all.sort_unstable();
        assert_eq!(
            &all[..ns.len().min(all.len())],
            &ns[..],
            "{Q2}: what is stored of publisher p{p} is not a prefix of what it sent"
        );
    }
}

async fn check_churn(conn: &Connection, st: &State) {
    let ch = within("channel", conn.create_channel()).await.expect("channel");
    within("confirm.select", ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .expect("confirm.select");
    for (&i, &c) in &st.churn {
        let name = churn_name(i);
        match c {
            Churn::Declared | Churn::Bound => {
                assert!(exists(conn, &name).await, "{name} was declared ({c:?}) but is gone");
            }
            Churn::Deleted => {
                assert!(!exists(conn, &name).await, "{name} was deleted but came back");
            }
            Churn::Declaring | Churn::Deleting => {}
        }
        if c == Churn::Bound {
            let marker = format!("marker-{i}");
            publish_confirmed(&ch, X, &format!("churn.{i}"), marker.as_bytes()).await;
            assert_eq!(
                get_body(&ch, &name).await.as_deref(),
                Some(marker.as_bytes()),
                "the binding of {name} to {X} is lost"
            );
        }
    }
    let _ = ch.close(200, "OK".into()).await;
}

/// Where a seed's data directory lives: a plain directory, which a `kill -9`
/// leaves as it was, or a [`PowerLossDisk`] that loses all unsynced writes.
struct DataDisk {
    power_loss: Option<(PowerLossDisk, Option<Mounted>)>,
}

impl DataDisk {
    /// Ends `broker` with `kill -9`; on a power-loss disk the power goes too
    /// and comes back with only what was synced, mounted again.
    fn crash(&mut self, broker: &mut BrokerProcess) {
        broker.kill9();
        if let Some((disk, mounted)) = &mut self.power_loss {
            disk.cut_power();
            let path = mounted.as_ref().map(|m| m.path().to_path_buf()).expect("mounted");
            drop(mounted.take());
            disk.restore_power();
            *mounted = Some(disk.mount(&path));
        }
    }
}

async fn run_seed(seed: u64, power_loss: bool) {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let ini = segment_size_ini(tmp.path(), SEGMENT_SIZE);
    let (data, mut disk) = if power_loss {
        let mount_point = tmp.path().join("disk");
        std::fs::create_dir(&mount_point).expect("mount point");
        let disk = PowerLossDisk::new(Duration::from_micros(Rng::new(seed ^ 0x5eed).range(0, 2000)));
        let mounted = disk.mount(&mount_point);
        // syncfs does not reach a FUSE daemon: sync each file instead.
        let mut text = std::fs::read_to_string(&ini).expect("ini");
        text.push_str("sync_method = fsync\n");
        std::fs::write(&ini, text).expect("ini");
        // The data directory exists before the broker starts, as an
        // operator's would: its own name is not the broker's to sync.
        let data = mount_point.join("data");
        std::fs::create_dir(&data).expect("data dir");
        std::fs::File::open(&mount_point)
            .and_then(|d| d.sync_all())
            .expect("sync the mount point");
        let power_loss = Some((disk, Some(mounted)));
        (data, DataDisk { power_loss })
    } else {
        (tmp.path().join("data"), DataDisk { power_loss: None })
    };
    let mut rng = Rng::new(seed);
    let mut broker = BrokerProcess::spawn(&data, Some(&ini));
    setup(&broker).await;

    let state: Shared = Arc::default();
    let url = broker.url();
    let mut tasks = Vec::new();
    for p in 0..PUBLISHERS {
        let rng = Rng::new(seed.wrapping_mul(1000) + p as u64 + 1);
        tasks.push(tokio::spawn(publisher(url.clone(), p, rng, state.clone())));
    }
    tasks.push(tokio::spawn(consumer(
        url.clone(),
        Rng::new(seed.wrapping_mul(1000) + 100),
        state.clone(),
    )));
    let with_churn = !rng.one_in(3);
    if with_churn {
        tasks.push(tokio::spawn(churn(
            url.clone(),
            Rng::new(seed.wrapping_mul(1000) + 200),
            state.clone(),
        )));
    }
    let delay = rng.range(50, 800);
    tokio::time::sleep(Duration::from_millis(delay)).await;
    disk.crash(&mut broker);
    // Whatever the broker sent before it died may still be read by the clients;
    // then every client sees the connection go.
    for t in &mut tasks {
        if tokio::time::timeout(Duration::from_secs(5), &mut *t).await.is_err() {
            t.abort();
        }
    }
    let st = std::mem::take(&mut *state.lock().unwrap());
    assert!(st.nacked.is_empty(), "seed {seed}: the broker nacked {:?}", st.nacked);
    assert!(
        st.redelivered_before_kill.is_empty(),
        "seed {seed}: redelivered=true before any crash: {:?}",
        &st.redelivered_before_kill[..st.redelivered_before_kill.len().min(20)]
    );
    // (On a power-loss disk that lost everything the queue's directory is
    // gone: the checks below then name what was lost.)
    let q1_dir = queue_dir(&data, Q1);
    let segments = if q1_dir.exists() { segment_ids(&q1_dir).len() } else { 0 };

    // Sometimes a second kill -9 hits the broker while it recovers (rewriting ack
    // logs and definitions.log, rescanning segments): recovery must be restartable.
    let mut recovery_kill = None;
    if rng.one_in(2) {
        let ms = rng.range(1, 12);
        let mut starting = BrokerProcess::start(&data, Some(&ini));
        tokio::time::sleep(Duration::from_millis(ms)).await;
        disk.crash(&mut starting);
        let log = starting.log_text();
        let stage = if log.contains("AMQP listening") {
            "after start"
        } else if log.contains("starting") {
            "during recovery"
        } else {
            "before recovery"
        };
        recovery_kill = Some(format!("{ms} ms, {stage}"));
    }

    let mut broker = BrokerProcess::spawn(&data, Some(&ini));
    let conn = broker.connect().await;
    let got1 = drain(&conn, Q1).await;
    let got2 = drain(&conn, Q2).await;
    let summary = format!(
        "seed {seed}: kill after {delay} ms, churn {with_churn}, recovery kill {recovery_kill:?}, {} published, {} confirmed, {} delivered, \
         {} acked; {} acks in flight ({} came back), {} acks returned by lapin but not known processed ({} came back); \
         {} Q1 segments; recovered {} in {Q1} ({} redelivered), {} in {Q2}; \
         {} churn queues",
        st.published.len(),
        st.confirmed.len(),
        st.seen.len(),
        st.acked.len(),
        st.ack_sent.len(),
        got1.iter().filter(|(id, _)| st.ack_sent.contains(id)).count(),
        st.ack_returned.len(),
        got1.iter().filter(|(id, _)| st.ack_returned.contains(id)).count(),
        segments,
        got1.len(),
        got1.iter().filter(|(_, r)| *r).count(),
        got2.len(),
        st.churn.len(),
    );
    eprintln!("{summary}");
    check_q1(&st, &got1, power_loss);
    check_q2(&st, &got2);
    check_churn(&conn, &st).await;

    // The durable topology still routes, and the queues take new messages.
    let ch = within("channel", conn.create_channel()).await.expect("channel");
    within("confirm.select", ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .expect("confirm.select");
    publish_confirmed(&ch, X, "all.after", b"after").await;
    assert_eq!(
        get_body(&ch, Q1).await.as_deref(),
        Some(&b"after"[..]),
        "{Q1} after restart"
    );
    assert_eq!(
        get_body(&ch, Q2).await.as_deref(),
        Some(&b"after"[..]),
        "{Q2} after restart"
    );
    let _ = within("close", conn.close(200, "OK".into())).await;

    broker.stop();
    let log = broker.log_text();
    for bad in [
        "cannot open segment",
        "cannot restore",
        "unreadable message",
        "cannot record ack",
    ] {
        assert!(
            !log.contains(bad),
            "seed {seed}: the restarted broker logged {bad:?}:\n{log}"
        );
    }
    if log.contains("damaged") {
        eprintln!("seed {seed}: the restarted broker reported damage after kill -9:\n{log}");
    }
    if let Some((disk, mounted)) = disk.power_loss {
        eprintln!("seed {seed}: {} syncs reached the disk", disk.syncs());
        drop(mounted);
    }
    eprintln!("seed {seed}: done in {:?}", started.elapsed());
}

/// The seeds to run: `{prefix}_SEED=S` alone, or 1..=`{prefix}_SEEDS` (default `n`).
fn seeds(prefix: &str, n: u64) -> Vec<u64> {
    let var = |name: &str| std::env::var(format!("{prefix}_{name}")).ok()?.parse().ok();
    if let Some(s) = var("SEED") {
        return vec![s];
    }
    (1..=var("SEEDS").unwrap_or(n)).collect()
}

async fn run_seeds(prefix: &str, n: u64, power_loss: bool) {
    for seed in seeds(prefix, n) {
        // A panic names the seed, so that it can be rerun alone.
        let run = tokio::spawn(run_seed(seed, power_loss));
        match tokio::time::timeout(Duration::from_secs(120), run).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("seed {seed} failed (rerun with {prefix}_SEED={seed}): {e}"),
            Err(_) => panic!("seed {seed} hung (rerun with {prefix}_SEED={seed})"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_loses_no_confirmed_message_and_resurrects_no_acked_one() {
    run_seeds("CRASH", 8, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn power_loss_loses_no_confirmed_message_and_no_declared_queue() {
    if !PowerLossDisk::available() {
        eprintln!("SKIPPED: no /dev/fuse on this machine, so no power-loss filesystem");
        return;
    }
    run_seeds("POWER_LOSS", 4, true).await;
}
