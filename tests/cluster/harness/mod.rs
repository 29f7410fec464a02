//! Multi-process harness for the clustering tests: a private `etcd` server
//! ([`Etcd`]), `lavinmq` nodes as child processes ([`Node`], [`NodeConfig`]) and a
//! group of nodes sharing one etcd prefix ([`Cluster`]).
//!
//! Every child runs with its own temporary directory and with ports from
//! [`free_port`], its stdout and stderr are captured line by line (ANSI colours
//! stripped), and it is killed with SIGKILL and reaped when its handle is dropped.
//! Everything that waits is bounded; a failed wait panics naming what it waited
//! for, with the tail of the output of the processes involved. When a test panics
//! while handles are alive, their drop prints each process's output tail (the
//! test harness shows it with the failure); `CLUSTER_TEST_KEEP_DIRS=1` keeps the
//! temporary directories of a failed test and prints where they are.
#![allow(dead_code)]

mod cluster;
mod etcd;
mod node;
mod ports;

#[allow(unused_imports)]
pub use cluster::Cluster;
pub use etcd::Etcd;
#[allow(unused_imports)]
pub use node::{Node, NodeConfig, NodePorts, port_open};
#[allow(unused_imports)]
pub use ports::free_port;

use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Log line of a node that has become the cluster leader.
pub const LOG_LEADER: &str = "cluster: elected leader";
/// Log line of a node that follows (replicates from) a leader.
pub const LOG_FOLLOWING: &str = "cluster: following leader";
/// Log line of a follower that has caught up with the leader (it is in the
/// in-sync replica set).
pub const LOG_IN_SYNC: &str = "cluster: in sync with leader";
/// Log line of a leader that is no longer the leader (lease lost, fenced).
pub const LOG_LEADER_LOST: &str = "cluster: leadership lost";

/// Default bound for a single wait (a process to start, to exit, a log line).
pub const TIMEOUT: Duration = Duration::from_secs(15);

/// How many output lines the panics and drop reports show per process.
pub const TAIL_LINES: usize = 80;

/// How often the polling waits look again.
const POLL: Duration = Duration::from_millis(20);

/// Awaits `fut`, panicking with `what` if it takes longer than `dur`.
pub async fn within<T>(what: &str, dur: Duration, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(dur, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {dur:?} waiting for {what}"),
    }
}

/// Polls `cond` until it is true, for at most `timeout`; panics naming `what`
/// otherwise. Blocks the thread: in an async test, call it only where nothing
/// else on the runtime has to make progress meanwhile (or use [`within`]).
pub fn wait_until(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    if !eventually(timeout, cond) {
        panic!("timed out after {timeout:?} waiting for {what}");
    }
}

/// Polls `cond` until it is true, for at most `timeout`; whether it became true.
pub fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Removes ANSI escape sequences (`ESC [ ... letter`) from `s`.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// A random-enough lowercase hex string (12 digits) for etcd prefixes and names.
pub fn unique_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    format!("{:012x}", h.finish() & 0xffff_ffff_ffff)
}

/// Whether `CLUSTER_TEST_KEEP_DIRS` asks to keep the directories of failed tests.
fn keep_dirs_requested() -> bool {
    std::env::var_os("CLUSTER_TEST_KEEP_DIRS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Takes `dir` out of automatic cleanup when the thread is panicking and
/// `CLUSTER_TEST_KEEP_DIRS` is set; returns where it is kept.
fn keep_dir_on_failure(dir: &mut Option<tempfile::TempDir>) -> Option<PathBuf> {
    if std::thread::panicking() && keep_dirs_requested() {
        dir.take().map(|d| d.keep())
    } else {
        None
    }
}

/// Sequence shared by every captured line of every process, so that lines of
/// different processes can be ordered.
static LINE_SEQ: AtomicU64 = AtomicU64::new(0);

/// The captured output of one process (across its restarts): its lines in
/// order, each with a global sequence number.
#[derive(Clone, Default)]
pub struct Output(Arc<Mutex<OutputInner>>);

#[derive(Default)]
struct OutputInner {
    lines: Vec<String>,
    seqs: Vec<u64>,
    /// A panic message already carried the tail (so drop does not repeat it).
    reported: bool,
}

impl Output {
    fn lock(&self) -> MutexGuard<'_, OutputInner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `line` (as a pump thread or the harness does).
    pub fn push(&self, line: String) {
        let mut inner = self.lock();
        // Taken under the lock so that sequence numbers grow with the index.
        let seq = LINE_SEQ.fetch_add(1, Ordering::SeqCst);
        inner.lines.push(line);
        inner.seqs.push(seq);
    }

    /// Appends a `[harness] ...` line marking what the harness did to the process.
    pub fn mark(&self, what: &str) {
        self.push(format!("[harness] {what}"));
    }

    /// How many lines were captured so far.
    pub fn len(&self) -> usize {
        self.lock().lines.len()
    }

    /// Whether nothing was captured yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the lines captured so far.
    pub fn lines(&self) -> Vec<String> {
        self.lock().lines.clone()
    }

    /// The lines captured so far joined with newlines.
    pub fn text(&self) -> String {
        self.lock().lines.join("\n")
    }

    /// The last `n` lines joined with newlines.
    pub fn tail(&self, n: usize) -> String {
        let inner = self.lock();
        let from = inner.lines.len().saturating_sub(n);
        inner.lines[from..].join("\n")
    }

    /// [`Output::tail`] for a panic message: the drop of the process's handle
    /// then does not print the tail again.
    pub fn tail_for_panic(&self, n: usize) -> String {
        self.lock().reported = true;
        self.tail(n)
    }

    /// Whether [`Output::tail_for_panic`] was called.
    pub fn was_reported(&self) -> bool {
        self.lock().reported
    }

    /// Index of the first line at or after `from` containing `needle`.
    pub fn find_from(&self, from: usize, needle: &str) -> Option<usize> {
        let inner = self.lock();
        inner
            .lines
            .iter()
            .skip(from)
            .position(|l| l.contains(needle))
            .map(|i| i + from)
    }

    /// Index and global sequence number of the last line at or after `from`
    /// containing `needle`.
    pub fn last_from(&self, from: usize, needle: &str) -> Option<(usize, u64)> {
        let inner = self.lock();
        (from..inner.lines.len())
            .rev()
            .find(|&i| inner.lines[i].contains(needle))
            .map(|i| (i, inner.seqs[i]))
    }

    /// How many lines at or after `from` contain `needle`.
    pub fn count_from(&self, from: usize, needle: &str) -> usize {
        self.lock()
            .lines
            .iter()
            .skip(from)
            .filter(|l| l.contains(needle))
            .count()
    }
}

/// Starts threads copying `child`'s stdout and stderr into `out`, line by line
/// with ANSI sequences removed. `pumps` counts the threads still reading.
fn capture(child: &mut Child, out: &Output, pumps: &Arc<AtomicUsize>) {
    let stdout = child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>);
    let stderr = child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>);
    for stream in [stdout, stderr].into_iter().flatten() {
        let out = out.clone();
        let pumps = pumps.clone();
        pumps.fetch_add(1, Ordering::SeqCst);
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stream);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf);
                        out.push(strip_ansi(line.trim_end_matches(['\n', '\r'])));
                    }
                }
            }
            pumps.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// Waits (at most a second) for the pump threads of a dead process to read the
/// rest of its output.
fn drain(pumps: &AtomicUsize) {
    eventually(Duration::from_secs(1), || pumps.load(Ordering::SeqCst) == 0);
}

/// Sends `signal` to process `pid`; false if there is no such process.
fn signal(pid: u32, signal: rustix::process::Signal) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else {
        return false;
    };
    rustix::process::kill_process(pid, signal).is_ok()
}

/// Sends SIGSTOP to `pid` and waits until every thread of it is stopped.
///
/// `kill` only queues the signal: a thread running on another core goes on
/// for a moment, long enough to answer one more request. A test that expects a
/// frozen process to be silent needs the freeze to have happened.
fn stop_process(pid: u32) -> bool {
    if !signal(pid, rustix::process::Signal::STOP) {
        return false;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if all_threads_stopped(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

/// Whether `/proc/PID/task/*/stat` shows every thread stopped (`T`) or traced (`t`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses and may hold spaces.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        matches!(state, Some('T' | 't'))
    })
}

/// Polls `child` until it exits, for at most `timeout`.
fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// The first file called `name` in a directory of `PATH`.
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// A response of [`http_request`].
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The body, as (lossy) UTF-8.
    pub body: String,
}

/// A blocking HTTP/1.0 request to `addr` ("host:port") without any client
/// library, for the polling waits (which run outside of any async runtime):
/// `Connection: close`, the body read to the end. `auth` adds basic
/// authentication, `body` is sent as `application/json`. Every socket operation
/// is bounded by `timeout`.
pub fn http_request(
    method: &str,
    addr: &str,
    path: &str,
    auth: Option<(&str, &str)>,
    body: Option<&str>,
    timeout: Duration,
) -> std::io::Result<HttpResponse> {
    use base64::Engine;
    use std::net::ToSocketAddrs;
    let sock = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address"))?;
    let mut stream = TcpStream::connect_timeout(&sock, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some((user, pass)) = auth {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        req.push_str(&format!("Authorization: Basic {token}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() || matches!(method, "POST" | "PUT") {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body);
    stream.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let raw = String::from_utf8_lossy(&raw);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad response: {head:?}")))?;
    Ok(HttpResponse {
        status,
        body: body.to_owned(),
    })
}
