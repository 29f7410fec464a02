//! Damaged data directories: the real binary fills two durable queues, is stopped
//! cleanly, the files of one queue (or definitions.log) are damaged, and the broker
//! is started again. It must start, log what it skipped (naming the queue and the
//! segment), keep every intact record of the damaged queue, serve the other queue
//! untouched, and keep working on the damaged queue: new messages are published,
//! consumed, and survive one more restart.
//!
//! Segments are 64 KiB and messages about 1 KiB, so 300 messages fill five
//! segments: four sealed ones (with a meta file) and the one written last.

use crate::process;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};
use process::*;
use tempfile::TempDir;

/// The queue whose files are damaged.
const DAMAGED: &str = "dmg-queue";
/// The queue left alone.
const INTACT: &str = "ok-queue";
/// Messages published to each queue.
const N: usize = 300;
/// Filler bytes per message body.
const PAD: usize = 1000;

/// A data directory and the ini file (64 KiB segments) every run uses.
struct Env {
    _tmp: TempDir,
    data: PathBuf,
    ini: PathBuf,
}

impl Env {
    fn new() -> Env {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = tmp.path().join("data");
        let ini = segment_size_ini(tmp.path(), 64 * 1024);
        Env { _tmp: tmp, data, ini }
    }

    fn spawn(&self) -> BrokerProcess {
        BrokerProcess::spawn(&self.data, Some(&self.ini))
    }

    fn qdir(&self, queue: &str) -> PathBuf {
        queue_dir(&self.data, queue)
    }
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

fn ids(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}{i}")).collect()
}

async fn channel(conn: &Connection) -> Channel {
    within("channel.open", conn.create_channel())
        .await
        .expect("channel.open")
}

async fn declare(ch: &Channel, queue: &str) -> u32 {
    within(
        "queue.declare",
        ch.queue_declare(queue.into(), durable(), FieldTable::default()),
    )
    .await
    .expect("queue.declare")
    .message_count()
}

/// Publishes persistent messages `ids` (bodies `ID|padding`) and waits for every confirm.
async fn publish(conn: &Connection, exchange: &str, key: &str, ids: &[String]) {
    let ch = channel(conn).await;
    within("confirm.select", ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .expect("confirm.select");
    let mut confirms = Vec::new();
    for id in ids {
        let c = within(
            "basic.publish",
            ch.basic_publish(
                exchange.into(),
                key.into(),
                BasicPublishOptions::default(),
                &make_body(id, PAD),
                BasicProperties::default().with_delivery_mode(2),
            ),
        )
        .await
        .expect("basic.publish");
        confirms.push(c);
    }
    for c in confirms {
        let c = within("publisher confirm", c).await.expect("publisher confirm");
        assert!(c.is_ack(), "a publish to {exchange}/{key} was nacked");
    }
    let _ = ch.close(200, "OK".into()).await;
}

/// Takes every message of `queue` with basic.get (no-ack): ids and redelivered flags.
async fn get_all(conn: &Connection, queue: &str) -> Vec<(String, bool)> {
    let ch = channel(conn).await;
    let mut out = Vec::new();
    while let Some(m) = within(
        "basic.get",
        ch.basic_get(queue.into(), BasicGetOptions { no_ack: true }),
    )
    .await
    .expect("basic.get")
    {
        out.push((body_id(&m.delivery.data), m.delivery.redelivered));
        assert!(out.len() <= 10 * N, "{queue} does not end");
    }
    let _ = ch.close(200, "OK".into()).await;
    out
}

/// Takes `n` messages with basic.get and acks those for which `ack` is true; the
/// others go back to the queue when the channel closes. Returns the acked ids.
async fn ack_some(conn: &Connection, queue: &str, n: usize, ack: impl Fn(&str) -> bool) -> Vec<String> {
    let ch = channel(conn).await;
    let mut acked = Vec::new();
    for _ in 0..n {
        let m = within(
            "basic.get",
            ch.basic_get(queue.into(), BasicGetOptions { no_ack: false }),
        )
        .await
        .expect("basic.get")
        .expect("a message");
        let id = body_id(&m.delivery.data);
        if ack(&id) {
            within(
                "basic.ack",
                ch.basic_ack(m.delivery.delivery_tag, BasicAckOptions::default()),
            )
            .await
            .expect("basic.ack");
            acked.push(id);
        }
    }
    // A synchronous round trip: the acks above are processed.
    within("basic.qos", ch.basic_qos(10, Default::default()))
        .await
        .expect("basic.qos");
    let _ = within("channel.close", ch.close(200, "OK".into())).await;
    acked
}

/// The records of every segment of a queue, by segment number.
fn layout(dir: &Path) -> BTreeMap<u32, Vec<Record>> {
    segment_ids(dir)
        .into_iter()
        .map(|id| (id, read_records(&msgs_path(dir, id))))
        .collect()
}

fn seg_ids(records: &[Record]) -> Vec<String> {
    records.iter().map(|r| body_id(&r.body)).collect()
}

/// First run: both queues get `m0..m{N}`; `extra` may do more before the stop.
/// Returns the ids and the damaged queue's segments after the clean stop.
async fn create(env: &Env) -> (Vec<String>, BTreeMap<u32, Vec<Record>>) {
    create_then(env, |_| async {}).await
}

async fn create_then<F, Fut>(env: &Env, extra: F) -> (Vec<String>, BTreeMap<u32, Vec<Record>>)
where
    F: FnOnce(Connection) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut broker = env.spawn();
    let conn = broker.connect().await;
    let ch = channel(&conn).await;
    declare(&ch, DAMAGED).await;
    declare(&ch, INTACT).await;
    let all = ids("m", 0..N);
    publish(&conn, "", DAMAGED, &all).await;
    publish(&conn, "", INTACT, &all).await;
    extra(conn).await;
    broker.stop();
    let segs = layout(&env.qdir(DAMAGED));
    assert!(
        segs.len() >= 4,
        "expected several segments, got {:?}",
        segs.keys().collect::<Vec<_>>()
    );
    (all, segs)
}

/// A sealed segment (with a meta file) in the middle of the run.
fn middle_sealed(env: &Env, segs: &BTreeMap<u32, Vec<Record>>) -> u32 {
    let keys: Vec<u32> = segs.keys().copied().collect();
    let id = keys[keys.len() / 2];
    assert!(id != *keys.last().unwrap() && id != keys[0]);
    assert!(
        meta_path(&env.qdir(DAMAGED), id).exists(),
        "segment {id} has no meta file"
    );
    id
}

/// Asserts that some log line names `queue` and segment `seg`.
#[track_caller]
fn assert_logged(log: &str, queue: &str, seg: u32) {
    let names_seg = |l: &str| {
        l.contains(&format!("segment={seg}"))
            || l.contains(&format!("segment {seg}"))
            || l.contains(&format!("msgs.{seg:010}"))
    };
    assert!(
        log.lines().any(|l| l.contains(queue) && names_seg(l)),
        "no log line names queue {queue} and segment {seg}; the log:\n{log}"
    );
}

/// What the damaged queue must hold after the damage.
struct Expect {
    /// Ids that must all be there, in this order.
    required: Vec<String>,
    /// Ids that may be there too (at most once, in publish order).
    allowed: HashSet<String>,
}

impl Expect {
    fn exactly(required: Vec<String>) -> Expect {
        Expect {
            required,
            allowed: HashSet::new(),
        }
    }
}

fn index_of(id: &str) -> usize {
    id.trim_start_matches(|c: char| c.is_ascii_alphabetic())
        .parse()
        .unwrap_or_else(|_| panic!("bad id {id:?}"))
}

#[track_caller]
fn check_damaged(got: &[(String, bool)], expect: &Expect) {
    let ids: Vec<&str> = got.iter().map(|(id, _)| id.as_str()).collect();
    for w in ids.windows(2) {
        assert!(
            index_of(w[0]) < index_of(w[1]),
            "{DAMAGED}: out of order or twice: {w:?}"
        );
    }
    let required: HashSet<&str> = expect.required.iter().map(String::as_str).collect();
    let unexpected: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| !required.contains(id) && !expect.allowed.contains(*id))
        .collect();
    assert!(unexpected.is_empty(), "{DAMAGED}: unexpected messages {unexpected:?}");
    let kept: Vec<&str> = ids.iter().copied().filter(|id| required.contains(id)).collect();
    let lost: Vec<&String> = expect
        .required
        .iter()
        .filter(|id| !kept.contains(&id.as_str()))
        .collect();
    assert!(lost.is_empty(), "{DAMAGED}: intact messages lost: {lost:?}");
}

/// Second and third runs after the damage: the broker starts, the intact queue is
/// whole, the damaged one holds what `expect` says, and the log names the damaged
/// queue and `warn_segment`. Then the damaged queue takes 20 new messages, 10 are
/// consumed, and the other 10 must survive a restart.
async fn verify(env: &Env, all: &[String], expect: Expect, warn_segment: Option<u32>) {
    let mut broker = env.spawn();
    let conn = broker.connect().await;
    let intact = get_all(&conn, INTACT).await;
    let want: Vec<(String, bool)> = all.iter().map(|id| (id.clone(), false)).collect();
    assert!(
        intact == want,
        "{INTACT} changed: {:?}",
        intact.iter().take(20).collect::<Vec<_>>()
    );
    let damaged = get_all(&conn, DAMAGED).await;
    check_damaged(&damaged, &expect);
    if let Some(seg) = warn_segment {
        assert_logged(&broker.log_text(), DAMAGED, seg);
    }

    let fresh = ids("n", 0..20);
    publish(&conn, "", DAMAGED, &fresh).await;
    let ch = channel(&conn).await;
    for id in &fresh[..10] {
        let m = within(
            "basic.get",
            ch.basic_get(DAMAGED.into(), BasicGetOptions { no_ack: true }),
        )
        .await
        .expect("basic.get")
        .unwrap_or_else(|| panic!("{DAMAGED}: new message {id} missing"));
        assert_eq!(&body_id(&m.delivery.data), id, "{DAMAGED}: new messages out of order");
    }
    let _ = within("close", conn.close(200, "OK".into())).await;
    broker.stop();

    let mut again = env.spawn();
    let conn = again.connect().await;
    let left: Vec<String> = get_all(&conn, DAMAGED).await.into_iter().map(|(id, _)| id).collect();
    assert_eq!(
        left,
        fresh[10..].to_vec(),
        "{DAMAGED}: messages published after the damage did not survive a restart"
    );
    assert!(
        get_all(&conn, INTACT).await.is_empty(),
        "{INTACT}: consumed messages came back"
    );
    let _ = within("close", conn.close(200, "OK".into())).await;
    again.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_tail_of_the_last_segment_keeps_the_records_before_the_cut() {
    let env = Env::new();
    let (all, segs) = create(&env).await;
    let (&last, records) = segs.last_key_value().unwrap();
    let cut = records.last().expect("the last segment holds records");
    truncate(&msgs_path(&env.qdir(DAMAGED), last), (cut.offset + cut.len / 2) as u64);
    let lost = body_id(&cut.body);
    let kept: Vec<String> = all.iter().filter(|id| **id != lost).cloned().collect();
    assert_eq!(kept.len(), N - 1);
    verify(&env, &all, Expect::exactly(kept), Some(last)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_tail_of_a_sealed_segment_loses_only_its_last_record() {
    let env = Env::new();
    let (all, segs) = create(&env).await;
    let seg = middle_sealed(&env, &segs);
    let cut = segs[&seg].last().expect("records");
    truncate(&msgs_path(&env.qdir(DAMAGED), seg), (cut.offset + cut.len / 2) as u64);
    let lost = body_id(&cut.body);
    let kept: Vec<String> = all.iter().filter(|id| **id != lost).cloned().collect();
    verify(&env, &all, Expect::exactly(kept), Some(seg)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_byte_in_a_sealed_segment_loses_exactly_that_message() {
    let env = Env::new();
    let (all, segs) = create(&env).await;
    let seg = middle_sealed(&env, &segs);
    let rec = &segs[&seg][segs[&seg].len() / 2];
    flip_byte(
        &msgs_path(&env.qdir(DAMAGED), seg),
        rec.body_offset + rec.body.len() / 2,
    );
    let lost = body_id(&rec.body);
    let kept: Vec<String> = all.iter().filter(|id| **id != lost).cloned().collect();
    verify(&env, &all, Expect::exactly(kept), Some(seg)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_length_field_in_a_sealed_segment_loses_exactly_that_message() {
    let env = Env::new();
    let (all, segs) = create(&env).await;
    let seg = middle_sealed(&env, &segs);
    let rec = &segs[&seg][1];
    // The low byte of the record's length: the reader must resynchronise on the
    // next whole record.
    flip_byte(&msgs_path(&env.qdir(DAMAGED), seg), rec.offset);
    let lost = body_id(&rec.body);
    let kept: Vec<String> = all.iter().filter(|id| **id != lost).cloned().collect();
    verify(&env, &all, Expect::exactly(kept), Some(seg)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_byte_in_the_last_segment_loses_exactly_that_message() {
    let env = Env::new();
    let (all, segs) = create(&env).await;
    let (&last, records) = segs.last_key_value().unwrap();
    assert!(records.len() >= 3, "the last segment holds too few records");
    let rec = &records[records.len() / 2];
    flip_byte(
        &msgs_path(&env.qdir(DAMAGED), last),
        rec.body_offset + rec.body.len() / 2,
    );
    let lost = body_id(&rec.body);
    let kept: Vec<String> = all.iter().filter(|id| **id != lost).cloned().collect();
    verify(&env, &all, Expect::exactly(kept), Some(last)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_length_msgs_file_loses_only_that_segment() {
    let env = Env::new();
    let (all, segs) = create(&env).await;
    let seg = middle_sealed(&env, &segs);
    truncate(&msgs_path(&env.qdir(DAMAGED), seg), 0);
    let gone: HashSet<String> = seg_ids(&segs[&seg]).into_iter().collect();
    let kept: Vec<String> = all.iter().filter(|id| !gone.contains(*id)).cloned().collect();
    verify(&env, &all, Expect::exactly(kept), Some(seg)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_msgs_file_in_the_middle_loses_only_that_segment() {
    let env = Env::new();
    let (all, segs) = create(&env).await;
    let seg = middle_sealed(&env, &segs);
    std::fs::remove_file(msgs_path(&env.qdir(DAMAGED), seg)).expect("remove msgs file");
    let gone: HashSet<String> = seg_ids(&segs[&seg]).into_iter().collect();
    let kept: Vec<String> = all.iter().filter(|id| !gone.contains(*id)).cloned().collect();
    verify(&env, &all, Expect::exactly(kept), Some(seg)).await;
}

/// Every third of the first 200 messages of the damaged queue is acked (so that
/// several segments have an ack log); the rest of them go back to the queue.
async fn ack_every_third(conn: Connection) -> Vec<String> {
    ack_some(&conn, DAMAGED, 200, |id| index_of(id).is_multiple_of(3)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_acks_file_keeps_every_unacked_message() {
    let env = Env::new();
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let a = acked.clone();
    let (all, segs) = create_then(&env, |conn| async move {
        *a.lock().unwrap() = ack_every_third(conn).await;
    })
    .await;
    let acked: HashSet<String> = acked.lock().unwrap().iter().cloned().collect();
    let dir = env.qdir(DAMAGED);
    let seg = middle_sealed(&env, &segs);
    assert!(acks_path(&dir, seg).exists(), "segment {seg} has no ack log");
    std::fs::remove_file(acks_path(&dir, seg)).expect("remove acks file");
    // Acked messages of that segment may come back; no other acked message may.
    let allowed: HashSet<String> = seg_ids(&segs[&seg])
        .into_iter()
        .filter(|id| acked.contains(id))
        .collect();
    assert!(!allowed.is_empty());
    let required: Vec<String> = all.iter().filter(|id| !acked.contains(*id)).cloned().collect();
    verify(&env, &all, Expect { required, allowed }, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_or_garbled_meta_file_is_rebuilt_by_a_rescan() {
    let env = Env::new();
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let a = acked.clone();
    let (all, segs) = create_then(&env, |conn| async move {
        *a.lock().unwrap() = ack_every_third(conn).await;
    })
    .await;
    let acked: HashSet<String> = acked.lock().unwrap().iter().cloned().collect();
    let dir = env.qdir(DAMAGED);
    let keys: Vec<u32> = segs.keys().copied().collect();
    let (deleted, garbled) = (keys[1], keys[2]);
    for id in [deleted, garbled] {
        assert!(meta_path(&dir, id).exists(), "segment {id} has no meta file");
    }
    std::fs::remove_file(meta_path(&dir, deleted)).expect("remove meta file");
    flip_byte(&meta_path(&dir, garbled), 5);
    let required: Vec<String> = all.iter().filter(|id| !acked.contains(*id)).cloned().collect();
    verify(&env, &all, Expect::exactly(required), None).await;
}

/// The newest segment file goes missing while its ack log stays behind (as after
/// a crash in the middle of deleting a fully acked segment). The broker must not
/// apply those stale acks to new messages written into a new segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_newest_msgs_file_leaves_no_stale_acks_for_new_messages() {
    let env = Env::new();
    let dir = env.qdir(DAMAGED);
    let d = dir.clone();
    let (all, segs) = create_then(&env, |conn| async move {
        // Ack every message of the segment written last.
        let last = layout(&d).into_values().next_back().unwrap_or_default();
        let newest: HashSet<String> = seg_ids(&last).into_iter().collect();
        assert!(!newest.is_empty());
        let acked = ack_some(&conn, DAMAGED, N, |id| newest.contains(id)).await;
        assert_eq!(acked.len(), newest.len());
    })
    .await;
    let (&last, records) = segs.last_key_value().unwrap();
    assert!(acks_path(&dir, last).exists(), "segment {last} has no ack log");
    std::fs::remove_file(msgs_path(&dir, last)).expect("remove msgs file");
    let gone: HashSet<String> = seg_ids(records).into_iter().collect();
    let kept: Vec<String> = all.iter().filter(|id| !gone.contains(*id)).cloned().collect();
    verify(&env, &all, Expect::exactly(kept), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_torn_lines_in_definitions_log_are_skipped() {
    let env = Env::new();
    let x = "defs-x";
    let (qa, qb, qc, qd) = ("defs-a", "defs-b", "defs-c", "defs-d");
    {
        let mut broker = env.spawn();
        let conn = broker.connect().await;
        let ch = channel(&conn).await;
        within(
            "exchange.declare",
            ch.exchange_declare(
                x.into(),
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
        for q in [qa, qb, qc] {
            declare(&ch, q).await;
        }
        for (q, key) in [(qa, "a.#"), (qb, "b.#"), (qc, "c.#")] {
            within(
                "queue.bind",
                ch.queue_bind(
                    q.into(),
                    x.into(),
                    key.into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                ),
            )
            .await
            .expect("queue.bind");
        }
        within(
            "queue.delete",
            ch.queue_delete(qc.into(), QueueDeleteOptions::default()),
        )
        .await
        .expect("queue.delete");
        declare(&ch, qd).await;
        publish(&conn, x, "a.1", &ids("a", 0..5)).await;
        publish(&conn, x, "b.1", &ids("b", 0..5)).await;
        publish(&conn, "", qd, &ids("d", 0..5)).await;
        let _ = within("close", conn.close(200, "OK".into())).await;
        broker.stop();
    }
    let path = vhost_dir(&env.data).join("definitions.log");
    let text = std::fs::read_to_string(&path).expect("read definitions.log");
    let mut lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 8, "definitions.log:\n{text}");
    lines.insert(2, "this line is \u{0}not JSON at all }{");
    let torn_line = lines.len() + 1;
    let mut damaged = lines.join("\n");
    damaged.push('\n');
    damaged.push_str(r#"{"queue": {"name": "defs-torn", "durable": tr"#);
    std::fs::write(&path, damaged).expect("write definitions.log");

    for run in 0..2 {
        let mut broker = env.spawn();
        let conn = broker.connect().await;
        if run == 0 {
            let log = broker.log_text();
            for n in [3, torn_line] {
                assert!(
                    log.lines().any(|l| l.contains("definitions.log")
                        && (l.contains(&format!("line={n}")) || l.contains(&format!("line {n}")))),
                    "no warning names line {n} of definitions.log; the log:\n{log}"
                );
            }
        }
        for (q, should) in [(qa, true), (qb, true), (qc, false), (qd, true), ("defs-torn", false)] {
            let ch = channel(&conn).await;
            let r = within(
                "passive declare",
                ch.queue_declare(
                    q.into(),
                    QueueDeclareOptions {
                        passive: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                ),
            )
            .await;
            assert_eq!(r.is_ok(), should, "run {run}: queue {q} exists: {r:?}");
        }
        let want_a = if run == 0 { ids("a", 0..5) } else { ids("a", 5..6) };
        let want_b = if run == 0 { ids("b", 0..5) } else { ids("b", 5..6) };
        let want_d = if run == 0 { ids("d", 0..5) } else { Vec::new() };
        let got = |v: Vec<(String, bool)>| v.into_iter().map(|(id, _)| id).collect::<Vec<_>>();
        assert_eq!(got(get_all(&conn, qa).await), want_a, "run {run}: {qa}");
        assert_eq!(got(get_all(&conn, qb).await), want_b, "run {run}: {qb}");
        assert_eq!(got(get_all(&conn, qd).await), want_d, "run {run}: {qd}");
        if run == 0 {
            // The bindings survived: these reach the queues on the next run.
            publish(&conn, x, "a.2", &ids("a", 5..6)).await;
            publish(&conn, x, "b.2", &ids("b", 5..6)).await;
        }
        let _ = within("close", conn.close(200, "OK".into())).await;
        broker.stop();
        if run == 1 {
            let log = broker.log_text();
            assert!(
                !log.contains("skipping"),
                "the compacted definitions.log still has bad lines:\n{log}"
            );
        }
    }
}
