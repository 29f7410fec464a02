//! Start-up checks of the operating system's limits that a broker with many
//! queues runs into: every segment file is a memory map (`vm.max_map_count`)
//! and an open file (`RLIMIT_NOFILE`). Run once the data dir is open, they
//! compare the limits with the store's maps open then (see
//! [`crate::store::mmap`]) rather than walking the data dir again. The open-file limit's soft value is
//! raised to its hard value, as servers commonly do; what is still too low is
//! reported as a warning with the command that fixes it, instead of failing
//! later on a busy broker with "too many open files".

/// `vm.max_map_count` below this is reported (LavinMQ's threshold).
const MIN_MAX_MAP_COUNT: u64 = 100_000;

/// Open files wanted beyond the data dir's: room for ten thousand client
/// connections and the broker's own files.
const SPARE_FILES: u64 = 10_000;

/// Raises the open-file limit as far as allowed and returns a warning for
/// each limit that is too low for the store as opened.
pub fn check() -> Vec<String> {
    let mut warnings = Vec::new();
    let segments = crate::store::mmap::open_count();
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
                "the open-file limit is {limit} ({segments} store files open): raise it to at \
                 least {wanted} (LimitNOFILE= in the systemd unit, or 'ulimit -n')"
            ));
        }
    }
    warnings
}

/// Raises the soft open-file limit to the hard one; returns the soft limit
/// now in force (`None` when unlimited or unknown). Public for tools and
/// tests that open thousands of sockets.
pub fn raise_nofile() -> Option<u64> {
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
