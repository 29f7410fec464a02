//! The store's one hook for replication. Every durable change the store makes to
//! a file in the data dir is reported here as a file operation: bytes written at
//! an offset, a length set, a whole file replaced, a file or folder removed.
//! A clustered leader installs a [`ChangeSink`] that streams these operations to
//! its followers; without clustering nothing is installed and each hook is one
//! atomic load and a branch.
//!
//! The operations are positional and idempotent (a write names its offset, not
//! "append"), so a follower that copied a file while it was being written can
//! replay every change made since it started copying and end up with the same
//! bytes as the leader.
//!
//! The store also asks the sink, through the group commit, to wait until what
//! was written so far is held by the in-sync followers: see [`ChangeSink::mark`]
//! and [`ChangeSink::wait_replicated`].

use std::path::Path;
use std::sync::{Arc, OnceLock};

/// A file registered with the sink once, so that writes to it (one per message)
/// name it by a number instead of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileRef(pub u32);

/// Receives the store's file operations (a clustered leader's replication log).
pub trait ChangeSink: Send + Sync {
    /// Gives `path` a number for [`ChangeSink::write_at`]; `None` when the file is
    /// not replicated (non-durable data).
    fn register(&self, path: &Path) -> Option<FileRef>;
    /// `parts`, concatenated, were written at `offset` of the file (which may be
    /// new; missing folders are created).
    fn write_at(&self, file: FileRef, offset: u64, parts: &[&[u8]]);
    /// The file at `path` was truncated or extended to `len` bytes.
    fn set_len(&self, path: &Path, len: u64);
    /// The file at `path` now holds exactly `contents`.
    fn replace(&self, path: &Path, contents: &[u8]);
    /// The file or folder (with everything in it) at `path` was removed.
    fn remove(&self, path: &Path);
    /// A position covering every operation reported so far.
    fn mark(&self) -> u64;
    /// Blocks until every in-sync follower holds everything up to `mark`, or the
    /// followers that do not were dropped from the in-sync set. False when that
    /// cannot be ensured (leadership lost): nothing may then be confirmed.
    fn wait_replicated(&self, mark: u64) -> bool;
}

static SINK: OnceLock<Arc<dyn ChangeSink>> = OnceLock::new();

/// Installs the process's sink (once; clustering is one broker per process).
/// Returns false if one was installed already.
pub fn install(sink: Arc<dyn ChangeSink>) -> bool {
    SINK.set(sink).is_ok()
}

/// The installed sink, if clustering is on.
#[inline]
pub fn sink() -> Option<&'static Arc<dyn ChangeSink>> {
    SINK.get()
}

/// Registers `path` for positional writes (see [`ChangeSink::register`]).
pub fn register(path: &Path) -> Option<FileRef> {
    sink().and_then(|s| s.register(path))
}

/// Reports bytes written at `offset` of a registered file.
#[inline]
pub fn wrote(file: Option<FileRef>, offset: u64, parts: &[&[u8]]) {
    // The file is checked first: unclustered, it is always `None`.
    if let Some(f) = file
        && let Some(s) = sink()
    {
        s.write_at(f, offset, parts);
    }
}

/// Reports a file's new length.
pub fn len_set(path: &Path, len: u64) {
    if let Some(s) = sink() {
        s.set_len(path, len);
    }
}

/// Reports a file's new contents.
pub fn replaced(path: &Path, contents: &[u8]) {
    if let Some(s) = sink() {
        s.replace(path, contents);
    }
}

/// Reports a removed file or folder.
pub fn removed(path: &Path) {
    if let Some(s) = sink() {
        s.remove(path);
    }
}
