//! Definition changes on a disk whose every sync is slow: each `-ok` still
//! waits for the sync that covers its change, but changes made at the same
//! time on many channels share syncs (the data directory's group commit), so
//! their rate is not bound by one sync per change.
//!
//! A commit that only replies wait for syncs the definitions log alone (with
//! `sync_method = fsync` a full commit syncs every file and directory of the
//! data directory); the lone channel, whose every change needs a commit of
//! its own, gives the number of file syncs per commit.
//!
//! `--ignored` (`make bench`): the same changes against Debian's RabbitMQ
//! with its data directory on the same kind of slow disk, beside ours.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use lapin::options::{QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection};

use super::power_loss_fs::{Mounted, PowerLossDisk};
use crate::process::*;

/// How long each sync of the disk takes.
const SYNC_DELAY: Duration = Duration::from_millis(4);
/// Channels changing definitions at once.
const CHANNELS: usize = 100;
/// Bind + unbind pairs per channel while they all run.
const PAIRS_EACH: usize = 5;
/// Bind + unbind pairs on the lone channel.
const SERIAL_PAIRS: usize = 25;

/// Binds `queue` to `amq.direct` with a new key and unbinds it, `pairs` times,
/// waiting for each `-ok`.
async fn bind_and_unbind(ch: Channel, queue: &'static str, tag: usize, pairs: usize) {
    for i in 0..pairs {
        let key = format!("k-{tag}-{i}");
        ch.queue_bind(
            queue.into(),
            "amq.direct".into(),
            key.as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");
        ch.queue_unbind(
            queue.into(),
            "amq.direct".into(),
            key.as_str().into(),
            FieldTable::default(),
        )
        .await
        .expect("unbind");
    }
}

async fn channels(conns: &[Connection], n: usize) -> Vec<Channel> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(conns[i % conns.len()].create_channel().await.expect("channel"));
    }
    out
}

/// What one broker did on the slow disk: changes a second and the disk's
/// syncs, on one channel and on [`CHANNELS`] at once.
struct Rates {
    serial_rate: f64,
    serial_syncs: u64,
    parallel_rate: f64,
    parallel_syncs: u64,
}

/// Bind + unbind pairs on a lone channel of `conns[0]`, then on
/// [`CHANNELS`] channels at once, counting `disk`'s syncs for each.
async fn measure(conns: &[Connection], disk: &PowerLossDisk) -> Rates {
    let setup = conns[0].create_channel().await.expect("channel");
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    setup
        .queue_declare("defs".into(), durable, FieldTable::default())
        .await
        .expect("declare");
    let rate = |changes: usize, took: Duration| changes as f64 / took.as_secs_f64();

    // One channel: every change waits for a sync of its own.
    let (syncs, started) = (disk.syncs(), Instant::now());
    within("serial changes", bind_and_unbind(setup, "defs", 0, SERIAL_PAIRS)).await;
    let serial_rate = rate(2 * SERIAL_PAIRS, started.elapsed());
    let serial_syncs = disk.syncs() - syncs;

    // Many channels at once: the changes share syncs.
    let chans = channels(conns, CHANNELS).await;
    let (syncs, started) = (disk.syncs(), Instant::now());
    let tasks: Vec<_> = chans
        .into_iter()
        .enumerate()
        .map(|(tag, ch)| tokio::spawn(bind_and_unbind(ch, "defs", tag + 1, PAIRS_EACH)))
        .collect();
    within("parallel changes", async {
        for t in tasks {
            t.await.expect("channel task");
        }
    })
    .await;
    Rates {
        serial_rate,
        serial_syncs,
        parallel_rate: rate(2 * CHANNELS * PAIRS_EACH, started.elapsed()),
        parallel_syncs: disk.syncs() - syncs,
    }
}

/// Mounts a new slow disk in `tmp`, with a `data` directory on it.
fn slow_disk(tmp: &Path, name: &str) -> (PowerLossDisk, Mounted, std::path::PathBuf) {
    let mount_point = tmp.join(name);
    std::fs::create_dir(&mount_point).expect("mount point");
    let disk = PowerLossDisk::new(SYNC_DELAY);
    let mounted = disk.mount(&mount_point);
    let data = mount_point.join("data");
    std::fs::create_dir(&data).expect("data dir");
    (disk, mounted, data)
}

/// Our broker on a slow disk of its own, `sync_method = fsync` (syncfs does
/// not reach a FUSE daemon).
async fn measure_ours(tmp: &Path) -> Rates {
    let (disk, _mounted, data) = slow_disk(tmp, "ours");
    let ini = tmp.join("lavinmq.ini");
    std::fs::write(&ini, "[main]\nsync_method = fsync\n").expect("ini");
    let mut broker = BrokerProcess::spawn(&data, Some(&ini));
    let conns = vec![broker.connect().await, broker.connect().await, broker.connect().await];
    let rates = measure(&conns, &disk).await;
    for c in conns {
        let _ = c.close(200, "done".into()).await;
    }
    broker.stop();
    rates
}

fn report(who: &str, r: &Rates) {
    let serial_changes = 2 * SERIAL_PAIRS;
    let parallel_changes = 2 * CHANNELS * PAIRS_EACH;
    eprintln!(
        "{who}, {} ms per file sync: 1 channel {:.0} changes/s ({} syncs for {serial_changes} changes); \
         {CHANNELS} channels {:.0} changes/s ({} syncs for {parallel_changes} changes)",
        SYNC_DELAY.as_millis(),
        r.serial_rate,
        r.serial_syncs,
        r.parallel_rate,
        r.parallel_syncs,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definition_changes_on_many_channels_share_syncs() {
    if !PowerLossDisk::available() {
        eprintln!("SKIPPED: no /dev/fuse on this machine, so no slow filesystem");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let r = measure_ours(tmp.path()).await;
    report("lavinmq", &r);
    let serial_changes = 2 * SERIAL_PAIRS as u64;
    assert!(
        r.serial_syncs >= serial_changes,
        "{serial_changes} changes one after another were answered after only {} syncs",
        r.serial_syncs
    );
    // Only the definitions log waits: one file sync per change, not a sync
    // of every file in the data directory.
    assert!(
        r.serial_syncs < 2 * serial_changes,
        "{serial_changes} changes one after another took {} file syncs",
        r.serial_syncs
    );
    let per_commit = r.serial_syncs / serial_changes;
    let commits = r.parallel_syncs.div_ceil(per_commit);
    let parallel_changes = (2 * CHANNELS * PAIRS_EACH) as u64;
    assert!(
        commits * 10 <= parallel_changes,
        "{parallel_changes} changes on {CHANNELS} channels took {} syncs, {commits} commits of \
         {per_commit} file syncs: they do not share them",
        r.parallel_syncs
    );
}

/// Where Debian's RabbitMQ keeps its scripts.
const RABBITMQ_BIN: &str = "/usr/lib/rabbitmq/bin";

/// The same changes against RabbitMQ with its whole data directory on a
/// slow disk of the same kind, and against ours, one after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement beside RabbitMQ, run by make bench"]
async fn definition_changes_on_a_slow_disk_beside_rabbitmq() {
    if !PowerLossDisk::available() {
        eprintln!("SKIPPED: no /dev/fuse on this machine, so no slow filesystem");
        return;
    }
    if !Path::new(RABBITMQ_BIN).join("rabbitmq-server").exists() {
        eprintln!("SKIPPED: Debian's rabbitmq-server is not installed (scripts/start-rabbitmq.sh installs it)");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let ours = measure_ours(tmp.path()).await;

    let (disk, _mounted, data) = slow_disk(tmp.path(), "rabbitmq");
    let (port, dist_port) = (free_port(), free_port());
    let node = format!("slow-disk-{port}@localhost");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/start-rabbitmq.sh");
    let status = Command::new("bash")
        .arg(script)
        .env("RABBITMQ_COMPAT_BASE", &data)
        .env("RABBITMQ_COMPAT_NODENAME", &node)
        .env("RABBITMQ_COMPAT_PORT", port.to_string())
        .env("RABBITMQ_COMPAT_DIST_PORT", dist_port.to_string())
        .status()
        .expect("run scripts/start-rabbitmq.sh");
    assert!(status.success(), "RabbitMQ did not start on the slow disk");
    let url = format!("amqp://guest:guest@127.0.0.1:{port}/%2F");
    let mut conns = Vec::new();
    for _ in 0..3 {
        let c = Connection::connect(&url, lapin::ConnectionProperties::default())
            .await
            .expect("connect to RabbitMQ");
        conns.push(c);
    }
    let theirs = measure(&conns, &disk).await;
    for c in conns {
        let _ = c.close(200, "done".into()).await;
    }
    let _ = Command::new(Path::new(RABBITMQ_BIN).join("rabbitmqctl"))
        .args(["-n", &node, "stop"])
        .env("HOME", data.join("home"))
        .output();
    report("lavinmq", &ours);
    report("RabbitMQ", &theirs);
    eprintln!(
        "lavinmq / RabbitMQ: 1 channel {:.2}, {CHANNELS} channels {:.2}",
        ours.serial_rate / theirs.serial_rate,
        ours.parallel_rate / theirs.parallel_rate
    );
}
