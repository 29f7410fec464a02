//! Consumed segment files kept for reuse, so that a busy queue's next segment
//! takes over pages and disk blocks the previous one already had.
//!
//! A new segment file costs the kernel a zero-filled page and a block
//! reservation for every page written, and deleting a consumed one costs as much
//! again to give them back. A queue whose consumers keep up writes and deletes a
//! segment every few megabytes, and at small message sizes that costs more than
//! the messages themselves. A consumed segment's file is therefore renamed to a
//! spare (`spare-*.tmp`, which replication and recovery ignore) and the next
//! segment of the same folder is created by renaming it back.
//!
//! The stale records a reused file still holds cannot be mistaken for new ones:
//! record checksums are seeded by the segment number (see [`super::record`]),
//! segment numbers only grow within a folder while its store is open, and the
//! store deletes the folder's spares whenever it opens. A spare is only ever
//! reused in its own folder.
//!
//! The pool is bounded ([`MAX_SPARES`] files in the process), so idle queues do
//! not hold disk space they no longer need: when it is full, the oldest spare is
//! deleted. A spare older than [`MAX_AGE`] is deleted rather than reused: its
//! pages may have left the page cache, and reusing it would then read stale
//! data from disk only to overwrite it.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::file_reaper::delete_later;

/// Spare files kept in the whole process.
pub const MAX_SPARES: usize = 8;
/// How long a spare is kept for reuse.
pub const MAX_AGE: Duration = Duration::from_secs(30);

/// Prefix and suffix of a spare's file name.
const PREFIX: &str = "spare-";
const SUFFIX: &str = ".tmp";

/// Spares, oldest first, with when each was kept.
static POOL: Mutex<VecDeque<(PathBuf, Instant)>> = Mutex::new(VecDeque::new());
static NEXT_NAME: AtomicU64 = AtomicU64::new(0);

/// A spare's name in `dir` that no file had in this process or an earlier
/// one: also what [`super::file_reaper`] renames a file to before deleting it.
/// The run's token keeps it apart from the spares an earlier process left
/// (a broker in a container has the same pid every time), which may still
/// be waiting for the reaper.
pub fn fresh_name(dir: &Path) -> PathBuf {
    static RUN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let run = RUN.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        nanos ^ u64::from(std::process::id())
    });
    let n = NEXT_NAME.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("{PREFIX}{run:x}-{n}{SUFFIX}"))
}

/// True for the file name of a spare.
pub fn is_spare_name(name: &str) -> bool {
    name.starts_with(PREFIX) && name.ends_with(SUFFIX)
}

/// Renames the consumed segment file `msgs` (in `dir`) to a spare and keeps it,
/// deleting the oldest spare if the pool is full. On failure the file is left
/// where it is, for the caller to delete.
pub fn keep(dir: &Path, msgs: &Path) -> io::Result<()> {
    let spare = fresh_name(dir);
    std::fs::rename(msgs, &spare)?;
    let dropped = {
        let mut pool = POOL.lock();
        pool.push_back((spare, Instant::now()));
        let mut dropped = expired(&mut pool, Instant::now());
        if pool.len() > MAX_SPARES
            && let Some((oldest, _)) = pool.pop_front()
        {
            dropped.push(oldest);
        }
        dropped
    };
    for path in dropped {
        delete_later(path);
    }
    Ok(())
}

/// Renames a spare of `dir` to `target`; false when the folder has none (or the
/// one it had is gone, with its queue).
pub fn take(dir: &Path, target: &Path) -> bool {
    loop {
        let (spare, dropped) = {
            let mut pool = POOL.lock();
            let dropped = expired(&mut pool, Instant::now());
            let spare = pool
                .iter()
                .position(|(p, _)| p.parent() == Some(dir))
                .and_then(|i| pool.remove(i));
            (spare, dropped)
        };
        for path in dropped {
            delete_later(path);
        }
        let Some((spare, _)) = spare else { return false };
        match std::fs::rename(&spare, target) {
            Ok(()) => return true,
            Err(e) => {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(spare = %spare.display(), "cannot reuse a spare segment file: {e}");
                    delete_later(spare);
                }
            }
        }
    }
}

/// Takes the spares kept longer than [`MAX_AGE`] out of the pool.
fn expired(pool: &mut VecDeque<(PathBuf, Instant)>, now: Instant) -> Vec<PathBuf> {
    let mut out = Vec::new();
    while pool
        .front()
        .is_some_and(|(_, kept)| now.duration_since(*kept) > MAX_AGE)
    {
        if let Some((path, _)) = pool.pop_front() {
            out.push(path);
        }
    }
    out
}

/// Forgets the spares of `dir` kept in the pool: called when a store opens,
/// which deletes the spare files it finds there (see [`is_spare_name`]) before
/// it numbers new segments.
pub fn forget(dir: &Path) {
    POOL.lock().retain(|(p, _)| p.parent() != Some(dir));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spares_past_their_age_leave_the_pool_oldest_first() {
        let now = Instant::now();
        let at = |secs: u64| now.checked_sub(Duration::from_secs(secs)).unwrap_or(now);
        let mut pool: VecDeque<(PathBuf, Instant)> = [(61, "a"), (31, "b"), (29, "c"), (1, "d")]
            .into_iter()
            .map(|(age, name)| (PathBuf::from(name), at(age)))
            .collect();
        let gone = expired(&mut pool, now);
        if now.checked_sub(Duration::from_secs(61)).is_some() {
            assert_eq!(gone, vec![PathBuf::from("a"), PathBuf::from("b")]);
            assert_eq!(pool.len(), 2);
        }
        assert!(expired(&mut pool, now).is_empty());
        assert!(is_spare_name("spare-12.tmp") && !is_spare_name("msgs.0000000012"));
    }
}
