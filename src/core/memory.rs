//! The memory alarm, as RabbitMQ's `vm_memory_high_watermark`: when the
//! broker's memory use rises above a share of the memory it may use (or
//! above an absolute size), publishers are blocked until it falls again, so
//! that a burst of publishing cannot take the process to the OOM killer.
//!
//! "Memory use" is the process's anonymous resident memory (`RssAnon`): the
//! heap, buffers and queues' in-memory state. Message segments are mapped
//! files whose pages the kernel can write back and drop at will, so they are
//! left out; counting them would raise the alarm on any large backlog.

use std::fs;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::alarms::ResourceAlarms;

/// Where the memory alarm goes off: a share of the memory the process may
/// use ([`available_memory_bytes`]) or an absolute size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watermark {
    /// A fraction of the available memory, in millionths (0.6 = 600,000);
    /// 0 keeps the alarm on, as in RabbitMQ, to stop all publishing.
    Fraction(u32),
    /// A size in bytes.
    Bytes(u64),
}

impl Default for Watermark {
    /// RabbitMQ's default since 4.0: 60 % of the available memory.
    fn default() -> Self {
        Watermark::Fraction(600_000)
    }
}

/// What [`Watermark::parse_fraction`] accepts, for error messages.
pub const FRACTION_EXPECTED: &str = "a fraction of the available memory, such as 0.6";

/// What [`Watermark::parse_bytes`] accepts, for error messages.
pub const BYTES_EXPECTED: &str = "a size in bytes, optionally with a unit (KiB, MiB, GiB, KB, MB, GB)";

impl Watermark {
    /// `vm_memory_high_watermark.relative`: a fraction such as `0.6`.
    pub fn parse_fraction(value: &str) -> Option<Watermark> {
        let f: f64 = value.trim().parse().ok()?;
        (f.is_finite() && f >= 0.0).then(|| Watermark::Fraction((f * 1e6).round().min(f64::from(u32::MAX)) as u32))
    }

    /// `vm_memory_high_watermark.absolute`: bytes, or a number with one of
    /// RabbitMQ's units (`k`/`KiB`, `M`/`MiB`, `G`/`GiB` are powers of 1024;
    /// `KB`, `MB`, `GB` powers of 1000).
    pub fn parse_bytes(value: &str) -> Option<Watermark> {
        let value = value.trim();
        let split = value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len());
        let (number, unit) = value.split_at(split);
        let number: u64 = number.parse().ok()?;
        let scale: u64 = match unit.trim() {
            "" => 1,
            "k" | "K" | "KiB" | "kiB" => 1 << 10,
            "M" | "MiB" => 1 << 20,
            "G" | "GiB" => 1 << 30,
            "T" | "TiB" => 1 << 40,
            "KB" | "kB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            "TB" => 1_000_000_000_000,
            _ => return None,
        };
        number.checked_mul(scale).map(Watermark::Bytes)
    }

    /// The threshold in bytes for a process that may use `available` bytes.
    pub fn threshold(self, available: u64) -> u64 {
        match self {
            Watermark::Fraction(millionths) => {
                (u128::from(available) * u128::from(millionths) / 1_000_000).min(u128::from(u64::MAX)) as u64
            }
            Watermark::Bytes(n) => n,
        }
    }
}

/// Watches the broker's memory use against the high watermark.
pub struct MemoryMonitor {
    /// The memory the process may use, read once at start.
    available: u64,
    /// The threshold the configured watermark gives, in bytes.
    limit: AtomicU64,
    alarms: Arc<ResourceAlarms>,
}

impl MemoryMonitor {
    /// A monitor raising the memory alarm in `alarms` above the default
    /// watermark (until [`MemoryMonitor::set_watermark`] changes it).
    pub fn new(alarms: Arc<ResourceAlarms>) -> Self {
        let available = available_memory_bytes().unwrap_or(u64::MAX);
        MemoryMonitor {
            available,
            limit: AtomicU64::new(Watermark::default().threshold(available)),
            alarms,
        }
    }

    /// The threshold in bytes above which publishers are blocked (the
    /// `mem_limit` RabbitMQ reports).
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// True while the memory alarm is on.
    pub fn is_alarmed(&self) -> bool {
        self.alarms.current().memory
    }

    /// Applies a configured (or reloaded) watermark and re-checks at once.
    pub fn set_watermark(&self, watermark: Watermark) {
        self.limit.store(watermark.threshold(self.available), Ordering::Relaxed);
        self.check();
    }

    /// Measures memory use and raises or clears the alarm, logging changes.
    pub fn check(&self) {
        let Some(used) = anonymous_memory_bytes() else {
            return;
        };
        self.update(used);
    }

    /// Raises or clears the alarm for `used` bytes in use.
    fn update(&self, used: u64) {
        let limit = self.limit();
        let over = used > limit || limit == 0;
        if self.alarms.set(|a| &mut a.memory, over) {
            if over {
                tracing::warn!(
                    "memory resource limit alarm set: {used} bytes in use, above the high watermark of {limit} bytes; publishers are blocked"
                );
            } else {
                tracing::info!(
                    "memory resource limit alarm cleared: {used} bytes in use, below the high watermark of {limit} bytes"
                );
            }
        }
    }
}

/// The memory the process may use: its cgroup's limit when it has one,
/// else the host's physical memory.
pub fn available_memory_bytes() -> Option<u64> {
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|p| fs::read_to_string(p).ok()?.trim().parse::<u64>().ok());
    let total = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| kib_field(&m, "MemTotal:"));
    match (cgroup, total) {
        // cgroup v1 reports "no limit" as a huge number.
        (Some(limit), Some(total)) => Some(limit.min(total)),
        (limit, total) => limit.or(total),
    }
}

/// The process's anonymous resident memory in bytes (`RssAnon`).
pub fn anonymous_memory_bytes() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    kib_field(&status, "RssAnon:")
}

/// The value of a `Key:   123 kB` line of a `/proc` file, in bytes.
pub fn kib_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fractions_and_sizes_as_rabbitmq_does() {
        assert_eq!(Watermark::parse_fraction("0.4"), Some(Watermark::Fraction(400_000)));
        assert_eq!(Watermark::parse_fraction(" 1 "), Some(Watermark::Fraction(1_000_000)));
        assert_eq!(Watermark::parse_fraction("-0.1"), None);
        assert_eq!(Watermark::parse_fraction("lots"), None);
        assert_eq!(Watermark::parse_bytes("1073741824"), Some(Watermark::Bytes(1 << 30)));
        assert_eq!(Watermark::parse_bytes("2GB"), Some(Watermark::Bytes(2_000_000_000)));
        assert_eq!(Watermark::parse_bytes("512MiB"), Some(Watermark::Bytes(512 << 20)));
        assert_eq!(Watermark::parse_bytes("3k"), Some(Watermark::Bytes(3072)));
        assert_eq!(Watermark::parse_bytes("2 GiB"), Some(Watermark::Bytes(2 << 30)));
        assert_eq!(Watermark::parse_bytes("2PB"), None);
        assert_eq!(Watermark::parse_bytes("GB"), None);
        assert_eq!(Watermark::parse_bytes("99999999999999999999"), None);
    }

    #[test]
    fn thresholds() {
        assert_eq!(Watermark::Fraction(600_000).threshold(1000), 600);
        assert_eq!(Watermark::Fraction(2_000_000).threshold(u64::MAX), u64::MAX);
        assert_eq!(Watermark::Bytes(5).threshold(1000), 5);
    }

    #[test]
    fn the_alarm_follows_use_against_the_watermark() {
        let alarms = Arc::new(ResourceAlarms::default());
        let monitor = MemoryMonitor::new(alarms.clone());
        monitor.limit.store(100, Ordering::Relaxed);
        monitor.update(100);
        assert!(!alarms.current().memory);
        monitor.update(101);
        assert!(monitor.is_alarmed());
        monitor.update(50);
        assert!(!monitor.is_alarmed());
        // A zero watermark keeps publishing stopped, as in RabbitMQ.
        monitor.limit.store(0, Ordering::Relaxed);
        monitor.update(0);
        assert!(monitor.is_alarmed());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process_and_host() {
        assert!(anonymous_memory_bytes().is_some_and(|n| n > 0));
        assert!(available_memory_bytes().is_some_and(|n| n > 0));
    }
}
