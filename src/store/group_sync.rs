//! Group commit: one thread syncs the data directory (one `syncfs` of its
//! filesystem, or an fsync of each file: see [`super::sync_method`]) and then
//! tells everyone who waited for it. Requests that arrive while a sync runs
//! ride on the next one, so under load thousands of confirms share one sync, and
//! a lone publisher waits for exactly one sync, never for a timer.
//!
//! Clustered, "on disk" also means "held by every in-sync follower": after the
//! sync, the thread waits for the replication sink (see
//! [`super::replication`]) before it tells anyone.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::SyncMethod;

/// Someone waiting for data to be on disk: told once it is (or that it failed).
pub trait SyncWaiter: Send + Sync {
    /// Everything this waiter registered up to `token` is durable (`ok`), or the
    /// sync failed (`!ok`).
    fn synced(&self, token: u64, ok: bool);
}

/// Syncs run so far in the process, so that writers can tell whether the pages
/// they dirty are about to be cleaned again (see [`syncs_so_far`]).
static SYNCS: AtomicU64 = AtomicU64::new(0);

/// How many syncs have run in this process. A writer that sees this move
/// between two of its steps knows that what it dirtied was written back and
/// write-protected meanwhile, as happens under a steady flow of confirms.
pub fn syncs_so_far() -> u64 {
    SYNCS.load(Ordering::Relaxed)
}

/// How often the data is synced when nobody waits but something that must
/// survive a power loss was written (see [`note_durable_write`]), bounding
/// what a power loss can take of unconfirmed persistent messages.
const BACKGROUND_INTERVAL: Duration = Duration::from_secs(1);

/// Set when [`note_durable_write`] was called since the last sync started.
static UNSYNCED: AtomicBool = AtomicBool::new(false);

/// Notes that data which must reach the disk though nobody waits for it was
/// written: a persistent message in a durable queue, published without
/// confirms. The background sync covers it within [`BACKGROUND_INTERVAL`].
///
/// Transient messages do not call it. A sync every second regardless would
/// write back a busy queue's whole traffic (hundreds of megabytes a second of
/// messages consumed moments later), spending disk bandwidth and the CPU the
/// clients need, for data that no one asked to keep. Acknowledgements do not
/// call it either: one lost to a power loss means a redelivery, which
/// at-least-once delivery allows.
pub fn note_durable_write() {
    if !UNSYNCED.load(Ordering::Relaxed) {
        UNSYNCED.store(true, Ordering::Relaxed);
    }
}

struct Inner {
    dir: File,
    path: PathBuf,
    /// `None` with `sync = false`: waiters are then told without a sync (but,
    /// clustered, still only once the followers hold the data).
    method: Option<SyncMethod>,
    pending: Mutex<Vec<(Arc<dyn SyncWaiter>, u64)>>,
    wake: Condvar,
    stop: AtomicBool,
}

/// The group-commit syncer of one data directory.
pub struct GroupSync {
    inner: Option<Arc<Inner>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl GroupSync {
    /// Starts the sync thread for `data_dir`, syncing with `method`; with
    /// `None` (`sync = false`) nothing is ever synced and waiters are told at
    /// once.
    pub fn start(data_dir: &Path, method: Option<SyncMethod>) -> std::io::Result<Self> {
        let replicated = super::replication::sink().is_some();
        if method.is_none() && !replicated {
            return Ok(GroupSync {
                inner: None,
                thread: Mutex::new(None),
            });
        }
        let inner = Arc::new(Inner {
            dir: File::open(data_dir)?,
            path: data_dir.to_path_buf(),
            method,
            pending: Mutex::new(Vec::new()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let worker = inner.clone();
        let thread = std::thread::Builder::new()
            .name("lavinmq-sync".into())
            .spawn(move || run(&worker))?;
        Ok(GroupSync {
            inner: Some(inner),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// True when syncing is on (`sync = true`).
    pub fn enabled(&self) -> bool {
        self.inner.as_ref().is_some_and(|i| i.method.is_some())
    }

    /// Asks to be told once everything written so far is on disk. Successive
    /// registrations of the same waiter collapse into the newest token.
    pub fn register(&self, waiter: &Arc<dyn SyncWaiter>, token: u64) {
        let Some(inner) = &self.inner else {
            waiter.synced(token, true);
            return;
        };
        let mut pending = inner.pending.lock();
        match pending.last_mut() {
            Some((w, t)) if Arc::ptr_eq(w, waiter) => *t = token,
            _ => pending.push((waiter.clone(), token)),
        }
        drop(pending);
        inner.wake.notify_one();
    }

    /// Syncs now, on the calling thread (shutdown, transaction commits).
    pub fn sync_now(&self) -> std::io::Result<()> {
        match &self.inner {
            Some(inner) => {
                if sync_and_replicate(inner) {
                    Ok(())
                } else {
                    Err(std::io::Error::other("the data could not be synced or replicated"))
                }
            }
            None => Ok(()),
        }
    }

    /// Stops the thread after a last sync that answers every waiter.
    pub fn stop(&self) {
        if let Some(inner) = &self.inner {
            inner.stop.store(true, Ordering::Release);
            inner.wake.notify_one();
        }
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

impl Drop for GroupSync {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Syncs the data directory and, clustered, waits until the in-sync followers
/// hold everything written before the sync. False if either failed.
fn sync_and_replicate(inner: &Inner) -> bool {
    let sink = super::replication::sink();
    let mark = sink.map(|s| s.mark());
    let synced = match inner.method {
        Some(method) => match method.sync(&inner.dir, &inner.path) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!("syncing the data directory failed: {e}");
                false
            }
        },
        None => true,
    };
    match (sink, mark) {
        (Some(sink), Some(mark)) => synced && sink.wait_replicated(mark),
        _ => synced,
    }
}

fn run(inner: &Inner) {
    let mut batch: Vec<(Arc<dyn SyncWaiter>, u64)> = Vec::new();
    loop {
        {
            let mut pending = inner.pending.lock();
            if pending.is_empty() && !inner.stop.load(Ordering::Acquire) {
                inner.wake.wait_for(&mut pending, BACKGROUND_INTERVAL);
            }
            std::mem::swap(&mut *pending, &mut batch);
        }
        // Cleared before the sync starts: what is noted from here on waits for the next.
        let unsynced = UNSYNCED.swap(false, Ordering::Relaxed);
        if batch.is_empty() && !unsynced && !inner.stop.load(Ordering::Acquire) {
            continue;
        }
        let ok = sync_and_replicate(inner);
        SYNCS.fetch_add(1, Ordering::Relaxed);
        // Answer each waiter once, with its newest token (the last one
        // registered), in the order of those last registrations: a reply held
        // for a definition change goes out before a confirm registered after it.
        for i in 0..batch.len() {
            let (w, token) = &batch[i];
            if !batch[i + 1..].iter().any(|(other, _)| Arc::ptr_eq(other, w)) {
                w.synced(*token, ok);
            }
        }
        batch.clear();
        if inner.stop.load(Ordering::Acquire) && inner.pending.lock().is_empty() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    struct Recorder(AtomicU64);

    impl SyncWaiter for Recorder {
        fn synced(&self, token: u64, ok: bool) {
            assert!(ok);
            self.0.fetch_max(token, Ordering::AcqRel);
        }
    }

    #[test]
    fn waiters_are_told_after_a_sync() {
        let dir = tempfile::tempdir().unwrap();
        let sync = GroupSync::start(dir.path(), Some(SyncMethod::Filesystem)).unwrap();
        let r = Arc::new(Recorder(AtomicU64::new(0)));
        let w: Arc<dyn SyncWaiter> = r.clone();
        for t in 1..=100 {
            sync.register(&w, t);
        }
        sync.stop();
        assert_eq!(r.0.load(Ordering::Acquire), 100);
    }
}
