//! Figures of the broker process and its host, read from `/proc` and `/sys`
//! (Linux), for the metrics and the nodes endpoint. Each is `None` where it is
//! not available, and is then left out.

use std::fs;
use std::sync::OnceLock;
use std::time::Instant;

use crate::core::memory::kib_field;

/// When the broker started, for `uptime`; set by [`mark_started`].
static STARTED: OnceLock<Instant> = OnceLock::new();

/// Records the broker's start time for the `uptime` metric. Called when the
/// server starts; later calls (a restarted server in the same process) keep
/// the first time, so uptime is the process's, as in LavinMQ.
pub fn mark_started() {
    STARTED.get_or_init(Instant::now);
}

/// Whole seconds since [`mark_started`] (or since the first call, when the
/// router is served without a [`crate::server::Server`]).
pub fn uptime_secs() -> u64 {
    STARTED.get_or_init(Instant::now).elapsed().as_secs()
}

/// Milliseconds since [`mark_started`], as RabbitMQ reports a node's `uptime`.
pub fn uptime_ms() -> u64 {
    u64::try_from(STARTED.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Clock ticks per second of the CPU times in `/proc/<pid>/stat`
/// (`USER_HZ`, fixed at 100 in the kernel's user-space ABI).
const USER_HZ: f64 = 100.0;

/// Open file descriptors of this process.
pub fn open_fds() -> Option<u64> {
    Some(fs::read_dir("/proc/self/fd").ok()?.count() as u64)
}

/// The soft limit on open file descriptors.
pub fn max_fds() -> Option<u64> {
    let limits = fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Resident set size in bytes.
pub fn resident_memory_bytes() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    kib_field(&status, "VmRSS:")
}

/// User and system CPU time of this process, in seconds.
pub fn cpu_times() -> Option<(f64, f64)> {
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    // The command name may contain spaces and parentheses: fields resume
    // after the last ')'; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some((user as f64 / USER_HZ, system as f64 / USER_HZ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process() {
        assert!(open_fds().is_some_and(|n| n > 0));
        assert!(resident_memory_bytes().is_some_and(|n| n > 0));
        assert!(max_fds().is_some());
        assert!(cpu_times().is_some());
    }
}
