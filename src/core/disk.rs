//! The free-disk-space alarm. As in LavinMQ, publishers are blocked when free
//! space in the data directory falls below max(3 × `segment_size`,
//! `free_disk_min`), before the disk is full so that nothing is lost, and
//! unblocked once space returns; a warning is logged below max(6 ×
//! `segment_size`, `free_disk_warn`). The segment-size floor makes the alarm
//! work with no configuration at all: a new segment file must always fit.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::alarms::ResourceAlarms;

/// Segments' worth of free space below which publishers are blocked.
const BLOCK_SEGMENTS: u64 = 3;

/// Segments' worth of free space below which a warning is logged.
const WARN_SEGMENTS: u64 = 6;

/// Watches free space in the data directory.
pub struct DiskMonitor {
    dir: PathBuf,
    /// Size of a segment file, which the built-in thresholds are counted in.
    segment_size: u64,
    /// `free_disk_min` as configured (0 = only the floor).
    min_free: AtomicU64,
    /// `free_disk_warn` as configured (0 = only the floor).
    warn: AtomicU64,
    /// True while free space is under the warning threshold (logged once).
    warned: AtomicBool,
    /// Where the disk alarm is raised and cleared.
    alarms: Arc<ResourceAlarms>,
}

impl DiskMonitor {
    /// A monitor of `dir` for a broker writing `segment_size`-byte segments,
    /// blocking below max(3 × `segment_size`, `min_free`) and warning below
    /// max(6 × `segment_size`, `warn`), raising the disk alarm in `alarms`.
    pub fn new(dir: &Path, segment_size: u64, min_free: u64, warn: u64, alarms: Arc<ResourceAlarms>) -> Self {
        DiskMonitor {
            dir: dir.to_path_buf(),
            segment_size,
            min_free: AtomicU64::new(min_free),
            warn: AtomicU64::new(warn),
            warned: AtomicBool::new(false),
            alarms,
        }
    }

    /// True while the disk alarm is on.
    pub fn is_blocked(&self) -> bool {
        self.alarms.current().disk
    }

    /// The free-space threshold in bytes under which publishers are blocked:
    /// `free_disk_min` or the built-in floor, whichever is larger.
    pub fn min_free(&self) -> u64 {
        self.min_free
            .load(Ordering::Acquire)
            .max(self.segment_size.saturating_mul(BLOCK_SEGMENTS))
    }

    /// The free-space threshold in bytes under which a warning is logged.
    pub fn warn_below(&self) -> u64 {
        self.warn
            .load(Ordering::Acquire)
            .max(self.segment_size.saturating_mul(WARN_SEGMENTS))
    }

    /// Changes `free_disk_min` (tests) and re-checks at once; the built-in
    /// floor still applies.
    pub fn set_min_free(&self, bytes: u64) {
        self.min_free.store(bytes, Ordering::Release);
        self.check();
    }

    /// Applies reloaded `free_disk_min` and `free_disk_warn` and re-checks at
    /// once.
    pub fn set_limits(&self, min_free: u64, warn: u64) {
        self.min_free.store(min_free, Ordering::Release);
        self.warn.store(warn, Ordering::Release);
        self.check();
    }

    /// Free bytes available to the broker in the data directory.
    pub fn free_bytes(&self) -> Option<u64> {
        let s = rustix::fs::statvfs(&self.dir).ok()?;
        Some(s.f_bavail.saturating_mul(s.f_frsize))
    }

    /// Measures free space and updates the blocked state, logging changes.
    pub fn check(&self) {
        let Some(free) = self.free_bytes() else {
            return;
        };
        let min = self.min_free();
        let warn = self.warn_below();
        let low = free < warn;
        if self.warned.swap(low, Ordering::AcqRel) != low {
            if low {
                tracing::warn!("low on disk space: {free} bytes free, below the warning level of {warn} bytes");
            } else {
                tracing::info!("free disk space is back above the warning level of {warn} bytes");
            }
        }
        let blocked = free < min;
        if self.alarms.set(|a| &mut a.disk, blocked) {
            if blocked {
                tracing::warn!("free disk space {free} bytes is below {min} bytes: blocking publishers");
            } else {
                tracing::info!("free disk space is back above {min} bytes: unblocking publishers");
            }
        }
    }
}
