//! The free-disk-space alarm: when free space in the data directory falls under
//! `free_disk_min`, publishers are blocked (before the disk is full, so nothing
//! is lost) and unblocked once space returns.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

/// Watches free space in the data directory.
pub struct DiskMonitor {
    dir: PathBuf,
    min_free: AtomicU64,
    blocked: watch::Sender<bool>,
}

impl DiskMonitor {
    /// A monitor of `dir` that blocks below `min_free` bytes (0 = never).
    pub fn new(dir: &Path, min_free: u64) -> Self {
        DiskMonitor {
            dir: dir.to_path_buf(),
            min_free: AtomicU64::new(min_free),
            blocked: watch::channel(false).0,
        }
    }

    /// Follows the blocked state (true = publishers must wait).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.blocked.subscribe()
    }

    /// True while publishing is blocked.
    pub fn is_blocked(&self) -> bool {
        *self.blocked.borrow()
    }

    /// The free-space threshold in bytes (0 = none).
    pub fn min_free(&self) -> u64 {
        self.min_free.load(Ordering::Acquire)
    }

    /// Changes the threshold (config reload, tests) and re-checks at once.
    pub fn set_min_free(&self, bytes: u64) {
        self.min_free.store(bytes, Ordering::Release);
        self.check();
    }

    /// Free bytes available to the broker in the data directory.
    pub fn free_bytes(&self) -> Option<u64> {
        let s = rustix::fs::statvfs(&self.dir).ok()?;
        Some(s.f_bavail.saturating_mul(s.f_frsize))
    }

    /// Measures free space and updates the blocked state, logging changes.
    pub fn check(&self) {
        let min = self.min_free.load(Ordering::Acquire);
        let free = self.free_bytes();
        let blocked = min > 0 && free.is_some_and(|f| f < min);
        self.blocked.send_if_modified(|b| {
            if *b == blocked {
                return false;
            }
            if blocked {
                tracing::warn!(
                    "free disk space {} bytes is below free_disk_min {min}: blocking publishers",
                    free.unwrap_or(0)
                );
            } else {
                tracing::info!("free disk space is back above free_disk_min {min}: unblocking publishers");
            }
            *b = blocked;
            true
        });
    }
}
