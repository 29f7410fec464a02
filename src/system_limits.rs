//! Start-up checks of the operating system's limits that a broker with many
//! queues runs into: every segment file is a memory map (`vm.max_map_count`)
//! and an open file (`RLIMIT_NOFILE`). The open-file limit's soft value is
//! raised to its hard value, as servers commonly do; what is still too low is
//! reported as a warning with the command that fixes it, instead of failing
//! later on a busy broker with "too many open files".

use std::path::Path;

/// `vm.max_map_count` below this is reported (LavinMQ's threshold).
const MIN_MAX_MAP_COUNT: u64 = 100_000;

/// Open files wanted beyond the data dir's: room for ten thousand client
/// connections and the broker's own files.
const SPARE_FILES: u64 = 10_000;

/// Raises the open-file limit as far as allowed and returns a warning for
/// each limit that is too low for a data dir holding `data_dir`'s files.
pub fn check(data_dir: &Path) -> Vec<String> {
    let mut warnings = Vec::new();
    let segments = count_files(data_dir, 4);
    if let Some(max) = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        && (max < MIN_MAX_MAP_COUNT || max < segments * 2)
    {
        warnings.push(format!(
            "vm.max_map_count is {max}: each segment file is a memory map, so many queues or \
             a long backlog can exhaust it; raise it with 'sysctl -w vm.max_map_count=1000000'"
        ));
    }
    if let Some(limit) = raise_nofile() {
        let wanted = segments + SPARE_FILES;
        if limit < wanted {
            warnings.push(format!(
                "the open-file limit is {limit} ({segments} files in the data dir): raise it to at \
                 least {wanted} (LimitNOFILE= in the systemd unit, or 'ulimit -n')"
            ));
        }
    }
    warnings
}

/// Raises the soft open-file limit to the hard one; returns the soft limit
/// now in force (`None` when unlimited or unknown).
fn raise_nofile() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if setrlimit(Resource::Nofile, limit).is_err() {
            limit = getrlimit(Resource::Nofile);
        }
    }
    limit.current
}

/// Files under `dir`, `depth` levels deep at most (queue directories hold
/// the segments).
fn count_files(dir: &Path, depth: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() && depth > 0 => count_files(&e.path(), depth - 1),
            Ok(t) if t.is_file() => 1,
            _ => 0,
        })
        .sum()
}
