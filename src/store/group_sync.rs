//! Group commit: one thread syncs the data directory (one `syncfs` of its
//! filesystem, or an fsync of each file: see [`super::sync_method`]) and then
//! tells everyone who waited for it. Requests that arrive while a sync runs
//! ride on the next one, so under load thousands of confirms share one sync, and
//! a lone publisher waits for exactly one sync, never for a timer.
//!
//! Replies to definition changes wait only for the definitions log: when
//! nothing else is pending, a sync covers just the files noted with
//! [`note_durable_file`], one `fdatasync` each, rather than the whole data
//! directory.
//!
//! Clustered, "on disk" also means "held by every in-sync follower": after the
//! sync, the thread waits for the replication sink (see
//! [`super::replication`]) before it tells anyone.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// How long a files-only commit (see [`GroupSync::register_for_files`]) may
/// be held to gather more waiters, when the last one had several: a file
/// being synced often takes no writes meanwhile (FUSE holds its inode lock),
/// so the changes of many channels would otherwise reach the sync one or
/// two at a time.
const GATHER_LIMIT: Duration = Duration::from_millis(1);

/// How often the gathering looks whether more waiters came; it stops when
/// none did.
const GATHER_STEP: Duration = Duration::from_micros(100);

/// Set when [`note_durable_write`] was called since the last sync started.
static UNSYNCED: AtomicBool = AtomicBool::new(false);

/// Files written since the last sync started whose writes must reach the
/// disk though nobody may wait for them (see [`note_durable_file`]).
static DIRTY_FILES: Mutex<Vec<Arc<File>>> = Mutex::new(Vec::new());

/// Notes that `file` was written and must be synced, as
/// [`note_durable_write`] does for the whole data directory: the background
/// sync covers it within [`BACKGROUND_INTERVAL`], and a waiter registered
/// with [`GroupSync::register_for_files`] after this call is told only once
/// it is synced. The definitions log notes its appends this way, so that a
/// definition change's reply waits for a sync of that one file rather than
/// of the whole data directory (with `sync_method = fsync`, every file and
/// directory in it).
pub fn note_durable_file(file: &Arc<File>) {
    let mut dirty = DIRTY_FILES.lock();
    if !dirty.iter().any(|f| Arc::ptr_eq(f, file)) {
        dirty.push(file.clone());
    }
}

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

/// A waiter, the newest token it registered, and whether the files noted
/// with [`note_durable_file`] are all it waits for.
struct Pending {
    waiter: Arc<dyn SyncWaiter>,
    token: u64,
    files_only: bool,
}

struct Inner {
    dir: File,
    path: PathBuf,
    /// `None` with `sync = false`: waiters are then told without a sync (but,
    /// clustered, still only once the followers hold the data).
    method: Option<SyncMethod>,
    pending: Mutex<Vec<Pending>>,
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
        self.enqueue(waiter, token, false);
    }

    /// As [`GroupSync::register`], for a waiter whose data is all in files
    /// noted with [`note_durable_file`] before this call (a definition
    /// change's reply): unless something else needs the whole data
    /// directory synced, the next sync covers just those files.
    pub fn register_for_files(&self, waiter: &Arc<dyn SyncWaiter>, token: u64) {
        self.enqueue(waiter, token, true);
    }

    fn enqueue(&self, waiter: &Arc<dyn SyncWaiter>, token: u64, files_only: bool) {
        let Some(inner) = &self.inner else {
            waiter.synced(token, true);
            return;
        };
        let mut pending = inner.pending.lock();
        match pending.last_mut() {
            Some(p) if Arc::ptr_eq(&p.waiter, waiter) => {
                p.token = token;
                p.files_only &= files_only;
            }
            _ => pending.push(Pending {
                waiter: waiter.clone(),
                token,
                files_only,
            }),
        }
        drop(pending);
        inner.wake.notify_one();
    }

    /// Syncs now, on the calling thread (shutdown, transaction commits).
    pub fn sync_now(&self) -> std::io::Result<()> {
        match &self.inner {
            Some(inner) => {
                if sync_and_replicate(inner, Scope::All) {
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

/// What one sync covers.
enum Scope {
    /// The whole data directory (which covers the noted files too).
    All,
    /// Only these files, noted with [`note_durable_file`].
    Files(Vec<Arc<File>>),
}

/// Syncs what `scope` says and, clustered, waits until the in-sync followers
/// hold everything written before the sync. False if either failed.
fn sync_and_replicate(inner: &Inner, scope: Scope) -> bool {
    let sink = super::replication::sink();
    let mark = sink.map(|s| s.mark());
    let synced = match (inner.method, scope) {
        (Some(method), Scope::All) => match method.sync(&inner.dir, &inner.path) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!("syncing the data directory failed: {e}");
                false
            }
        },
        (Some(_), Scope::Files(files)) => files.iter().all(|f| match f.sync_data() {
            Ok(()) => true,
            Err(e) => {
                tracing::error!("syncing a file of the data directory failed: {e}");
                false
            }
        }),
        (None, _) => true,
    };
    match (sink, mark) {
        (Some(sink), Some(mark)) => synced && sink.wait_replicated(mark),
        _ => synced,
    }
}

fn run(inner: &Inner) {
    let mut batch: Vec<Pending> = Vec::new();
    let mut last_batch = 0;
    loop {
        {
            let mut pending = inner.pending.lock();
            if pending.is_empty() && !inner.stop.load(Ordering::Acquire) {
                inner.wake.wait_for(&mut pending, BACKGROUND_INTERVAL);
            }
            std::mem::swap(&mut *pending, &mut batch);
        }
        if last_batch > 1 && !batch.is_empty() && batch.iter().all(|p| p.files_only) {
            gather(inner, &mut batch);
        }
        last_batch = batch.len();
        // Cleared before the sync starts: what is noted from here on waits for the next.
        let unsynced = UNSYNCED.swap(false, Ordering::Relaxed);
        let dirty = std::mem::take(&mut *DIRTY_FILES.lock());
        let stopping = inner.stop.load(Ordering::Acquire);
        if batch.is_empty() && !unsynced && dirty.is_empty() && !stopping {
            continue;
        }
        let scope = if unsynced || stopping || batch.iter().any(|p| !p.files_only) {
            Scope::All
        } else {
            Scope::Files(dirty)
        };
        let ok = sync_and_replicate(inner, scope);
        SYNCS.fetch_add(1, Ordering::Relaxed);
        // Answer each waiter once, with its newest token (the last one
        // registered), in the order of those last registrations: a reply held
        // for a definition change goes out before a confirm registered after it.
        for i in 0..batch.len() {
            let p = &batch[i];
            if !batch[i + 1..].iter().any(|other| Arc::ptr_eq(&other.waiter, &p.waiter)) {
                p.waiter.synced(p.token, ok);
            }
        }
        batch.clear();
        if inner.stop.load(Ordering::Acquire) && inner.pending.lock().is_empty() {
            return;
        }
    }
}

/// Adds to `batch` the waiters that keep coming, for at most
/// [`GATHER_LIMIT`]; stops at the first [`GATHER_STEP`] that brings none.
fn gather(inner: &Inner, batch: &mut Vec<Pending>) {
    let deadline = Instant::now() + GATHER_LIMIT;
    while Instant::now() < deadline {
        std::thread::sleep(GATHER_STEP);
        let mut pending = inner.pending.lock();
        if pending.is_empty() {
            return;
        }
        batch.append(&mut pending);
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

    #[test]
    fn waiters_for_noted_files_are_told_once_they_are_synced() {
        let dir = tempfile::tempdir().unwrap();
        let sync = GroupSync::start(dir.path(), Some(SyncMethod::EachFile)).unwrap();
        let file = Arc::new(File::create(dir.path().join("definitions.log")).unwrap());
        let files_only = Arc::new(Recorder(AtomicU64::new(0)));
        let general = Arc::new(Recorder(AtomicU64::new(0)));
        let (f, g): (Arc<dyn SyncWaiter>, Arc<dyn SyncWaiter>) = (files_only.clone(), general.clone());
        for t in 1..=50 {
            std::io::Write::write_all(&mut &*file, b"{}\n").unwrap();
            note_durable_file(&file);
            sync.register_for_files(&f, t);
            if t % 10 == 0 {
                sync.register(&g, t);
            }
        }
        sync.stop();
        assert_eq!(files_only.0.load(Ordering::Acquire), 50);
        assert_eq!(general.0.load(Ordering::Acquire), 50);
    }
}
