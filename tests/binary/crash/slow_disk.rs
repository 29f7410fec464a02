//! Definition changes on a disk whose every sync is slow: each `-ok` still
//! waits for the sync that covers its change, but changes made at the same
//! time on many channels share syncs (the data directory's group commit), so
//! their rate is not bound by one sync per change.
//!
//! With `sync_method = fsync` one group commit fsyncs every file and directory
//! of the data directory, so the disk counts several syncs per commit: the
//! lone channel, whose every change needs a commit of its own, gives that
//! number.

use std::time::{Duration, Instant};

use lapin::options::{QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection};

use super::power_loss_fs::PowerLossDisk;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definition_changes_on_many_channels_share_syncs() {
    if !PowerLossDisk::available() {
        eprintln!("SKIPPED: no /dev/fuse on this machine, so no slow filesystem");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let mount_point = tmp.path().join("disk");
    std::fs::create_dir(&mount_point).expect("mount point");
    let disk = PowerLossDisk::new(SYNC_DELAY);
    let _mounted = disk.mount(&mount_point);
    let ini = tmp.path().join("lavinmq.ini");
    // syncfs does not reach a FUSE daemon: sync each file instead.
    std::fs::write(&ini, "[main]\nsync_method = fsync\n").expect("ini");
    let data = mount_point.join("data");
    std::fs::create_dir(&data).expect("data dir");
    let mut broker = BrokerProcess::spawn(&data, Some(&ini));

    let conns = vec![broker.connect().await, broker.connect().await, broker.connect().await];
    let setup = conns[0].create_channel().await.expect("channel");
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    setup
        .queue_declare("defs".into(), durable, FieldTable::default())
        .await
        .expect("declare");

    // One channel: every change waits for a sync of its own.
    let (syncs, started) = (disk.syncs(), Instant::now());
    within("serial changes", bind_and_unbind(setup, "defs", 0, SERIAL_PAIRS)).await;
    let serial_time = started.elapsed();
    let serial_syncs = disk.syncs() - syncs;
    let serial_changes = 2 * SERIAL_PAIRS as u64;
    assert!(
        serial_syncs >= serial_changes,
        "{serial_changes} changes one after another were answered after only {serial_syncs} syncs"
    );

    // Many channels at once: the changes share syncs.
    let chans = channels(&conns, CHANNELS).await;
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
    let parallel_time = started.elapsed();
    let parallel_syncs = disk.syncs() - syncs;
    let parallel_changes = (2 * CHANNELS * PAIRS_EACH) as u64;
    let rate = |changes: u64, took: Duration| changes as f64 / took.as_secs_f64();
    eprintln!(
        "{} ms per file sync: 1 channel {:.0} changes/s ({serial_syncs} syncs for {serial_changes} changes); \
         {CHANNELS} channels {:.0} changes/s ({parallel_syncs} syncs for {parallel_changes} changes)",
        SYNC_DELAY.as_millis(),
        rate(serial_changes, serial_time),
        rate(parallel_changes, parallel_time),
    );
    let per_commit = serial_syncs / serial_changes;
    let commits = parallel_syncs.div_ceil(per_commit);
    assert!(
        commits * 10 <= parallel_changes,
        "{parallel_changes} changes on {CHANNELS} channels took {parallel_syncs} syncs, {commits} commits of \
         {per_commit} file syncs: they do not share them"
    );
    broker.stop();
}
