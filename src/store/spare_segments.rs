//! Consumed segment files kept for reuse, so that a busy queue's next segment
//! takes over pages and disk blocks the previous one already had.
//!
//! A new segment file costs the kernel a zero-filled page and a block
//! reservation for every page written, and deleting a consumed one costs as much
//! again to give them back. A queue whose consumers keep up writes and deletes a
//! segment every few megabytes, and at small message sizes that costs more than
//! the messages themselves. A consumed segment's file is therefore renamed to a
//! spare (`spare-N.tmp`, which replication and recovery ignore) and the next
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
//! deleted.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Spare files kept in the whole process.
pub const MAX_SPARES: usize = 8;

/// Prefix and suffix of a spare's file name.
const PREFIX: &str = "spare-";
const SUFFIX: &str = ".tmp";

static POOL: Mutex<VecDeque<PathBuf>> = Mutex::new(VecDeque::new());
static NEXT_NAME: AtomicU64 = AtomicU64::new(0);

/// True for the file name of a spare.
pub fn is_spare_name(name: &str) -> bool {
    name.starts_with(PREFIX) && name.ends_with(SUFFIX)
}

/// Renames the consumed segment file `msgs` (in `dir`) to a spare and keeps it,
/// deleting the oldest spare if the pool is full. On failure the file is left
/// where it is, for the caller to delete.
pub fn keep(dir: &Path, msgs: &Path) -> io::Result<()> {
    let n = NEXT_NAME.fetch_add(1, Ordering::Relaxed);
    let spare = dir.join(format!("{PREFIX}{n}{SUFFIX}"));
    std::fs::rename(msgs, &spare)?;
    let evicted = {
        let mut pool = POOL.lock();
        pool.push_back(spare);
        if pool.len() > MAX_SPARES {
            pool.pop_front()
        } else {
            None
        }
    };
    if let Some(old) = evicted {
        discard(&old);
    }
    Ok(())
}

/// Renames a spare of `dir` to `target`; false when the folder has none (or the
/// one it had is gone, with its queue).
pub fn take(dir: &Path, target: &Path) -> bool {
    loop {
        let spare = {
            let mut pool = POOL.lock();
            let Some(i) = pool.iter().position(|p| p.parent() == Some(dir)) else {
                return false;
            };
            pool.remove(i)
        };
        let Some(spare) = spare else { return false };
        match std::fs::rename(&spare, target) {
            Ok(()) => return true,
            Err(e) => {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(spare = %spare.display(), "cannot reuse a spare segment file: {e}");
                    discard(&spare);
                }
            }
        }
    }
}

/// Deletes the spares of `dir`, in the pool and on disk (those an earlier run
/// left): called when a store opens, before it numbers new segments.
pub fn clear(dir: &Path) -> io::Result<()> {
    POOL.lock().retain(|p| p.parent() != Some(dir));
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_name().to_str().is_some_and(is_spare_name) {
            match std::fs::remove_file(entry.path()) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

fn discard(path: &Path) {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            tracing::warn!(spare = %path.display(), "cannot delete a spare segment file: {e}");
        }
        _ => {}
    }
}
