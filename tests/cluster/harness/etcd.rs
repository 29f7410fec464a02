//! A private single-member etcd server (the Debian `etcd-server` 3.4 binary).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustix::process::Signal;

use super::{
    Output, TAIL_LINES, TIMEOUT, capture, drain, free_port, http_request, signal, stop_process, unique_suffix,
    wait_child,
};

/// How long etcd gets to exit on SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The etcd binary: `$ETCD_BIN`, else `etcd` on `PATH`, else `/usr/bin/etcd`.
pub fn etcd_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("ETCD_BIN").filter(|b| !b.is_empty()) {
        return PathBuf::from(bin);
    }
    super::which("etcd").unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"))
}

/// etcd 3.4 refuses to run on architectures other than amd64 and ppc64le unless
/// `ETCD_UNSUPPORTED_ARCH` names the (Go) architecture.
fn unsupported_arch() -> Option<&'static str> {
    match std::env::consts::ARCH {
        "x86_64" | "powerpc64" => None,
        "aarch64" => Some("arm64"),
        "x86" => Some("386"),
        "arm" => Some("arm"),
        "riscv64" => Some("riscv64"),
        "s390x" => Some("s390x"),
        "loongarch64" => Some("loong64"),
        other => Some(other),
    }
}

struct Proc {
    child: Option<Child>,
    exit: Option<ExitStatus>,
    paused: bool,
}

/// A single-member etcd server on 127.0.0.1 with its own temporary data
/// directory and client and peer ports, for one test. Its output (etcd's zap JSON
/// log) is captured. Dropping it kills it (SIGKILL) and reaps it.
pub struct Etcd {
    name: String,
    root: Option<tempfile::TempDir>,
    data_dir: PathBuf,
    client_port: u16,
    peer_port: u16,
    proc: Mutex<Proc>,
    out: Output,
    pumps: Arc<AtomicUsize>,
}

impl Etcd {
    /// Starts etcd and waits (at most [`TIMEOUT`]) until `/health` reports it
    /// healthy; panics with its output otherwise.
    pub fn start() -> Etcd {
        let name = format!("etcd-{}", unique_suffix());
        let root = tempfile::Builder::new()
            .prefix("lavinmq-etcd-")
            .tempdir()
            .expect("create etcd temp dir");
        let data_dir = root.path().join("data");
        let etcd = Etcd {
            name,
            data_dir,
            root: Some(root),
            client_port: free_port(),
            peer_port: free_port(),
            proc: Mutex::new(Proc {
                child: None,
                exit: None,
                paused: false,
            }),
            out: Output::default(),
            pumps: Arc::new(AtomicUsize::new(0)),
        };
        etcd.spawn();
        etcd.wait_healthy(TIMEOUT);
        etcd
    }

    fn lock(&self) -> MutexGuard<'_, Proc> {
        self.proc.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn spawn(&self) {
        let mut proc = self.lock();
        assert!(proc.child.is_none(), "etcd {} is already running", self.name);
        let bin = etcd_bin();
        let peer_url = format!("http://127.0.0.1:{}", self.peer_port);
        let client_url = self.client_url();
        let mut cmd = Command::new(&bin);
        cmd.arg("--name")
            .arg(&self.name)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("{}={peer_url}", self.name)])
            .args(["--initial-cluster-token", &self.name])
            .args(["--initial-cluster-state", "new"])
            .args(["--logger", "zap", "--log-outputs", "stderr"]);
        // etcd reads every ETCD_* variable as a flag and refuses to start when one
        // conflicts with a flag given on the command line.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(&key);
            }
        }
        if let Some(arch) = unsupported_arch() {
            cmd.env("ETCD_UNSUPPORTED_ARCH", arch);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run etcd ({}): {e}; install Debian's etcd-server or set ETCD_BIN",
                    bin.display()
                )
            });
        capture(&mut child, &self.out, &self.pumps);
        self.out.mark(&format!("spawned etcd pid {}", child.id()));
        proc.child = Some(child);
        proc.exit = None;
        proc.paused = false;
    }

    /// Polls `/health` until it reports healthy, for at most `timeout`; panics
    /// with etcd's output otherwise (or at once if etcd exited).
    pub fn wait_healthy(&self, timeout: Duration) {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if self.is_healthy() {
                return;
            }
            if !self.is_running() {
                drain(&self.pumps);
                panic!(
                    "etcd exited ({:?}) before it was healthy; its output:\n{}",
                    self.lock().exit,
                    self.out.tail_for_panic(TAIL_LINES)
                );
            }
            if std::time::Instant::now() >= deadline {
                panic!(
                    "etcd on {} not healthy after {timeout:?}; its output:\n{}",
                    self.endpoint(),
                    self.out.tail_for_panic(TAIL_LINES)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether `GET /health` answers 200 with `"health":"true"` (within a second).
    pub fn is_healthy(&self) -> bool {
        http_request("GET", &self.endpoint(), "/health", None, None, Duration::from_secs(1))
            .is_ok_and(|r| r.status == 200 && r.body.contains(r#""health":"true""#))
    }

    /// `127.0.0.1:PORT`, the client endpoint (what `--clustering-etcd-endpoints` takes).
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// `http://127.0.0.1:PORT`, the client URL (the v3 HTTP/JSON gateway is under `/v3/`).
    pub fn client_url(&self) -> String {
        format!("http://{}", self.endpoint())
    }

    /// The client port.
    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    /// The peer (raft) port.
    pub fn peer_port(&self) -> u16 {
        self.peer_port
    }

    /// The member name (also its initial cluster token).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// etcd's data directory (kept across [`Etcd::restart`]).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.lock().child.as_ref().map(Child::id)
    }

    /// Whether the process is alive (paused counts as alive); reaps it if it exited.
    pub fn is_running(&self) -> bool {
        let mut proc = self.lock();
        let Some(child) = proc.child.as_mut() else { return false };
        match child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                proc.exit = Some(status);
                proc.child = None;
                proc.paused = false;
                false
            }
            Err(_) => false,
        }
    }

    /// Whether it was stopped with [`Etcd::pause`] and not resumed.
    pub fn is_paused(&self) -> bool {
        self.lock().paused
    }

    /// SIGTERM and wait (at most 10 s) for it to exit, then SIGKILL if it has not;
    /// reaps it. Nothing happens if it is not running.
    pub fn stop(&self) {
        let mut proc = self.lock();
        let Some(mut child) = proc.child.take() else { return };
        signal(child.id(), Signal::TERM);
        if proc.paused {
            signal(child.id(), Signal::CONT);
        }
        let status = match wait_child(&mut child, STOP_TIMEOUT) {
            Some(status) => status,
            None => {
                self.out.mark("etcd did not exit on SIGTERM: SIGKILL");
                let _ = child.kill();
                child.wait().expect("reap etcd")
            }
        };
        proc.exit = Some(status);
        proc.paused = false;
        self.out.mark(&format!("etcd stopped: {status}"));
        drop(proc);
        drain(&self.pumps);
    }

    /// SIGKILL (then SIGCONT if paused) and reap. Nothing happens if it is not running.
    pub fn kill9(&self) {
        let mut proc = self.lock();
        let Some(mut child) = proc.child.take() else { return };
        let _ = child.kill();
        if proc.paused {
            signal(child.id(), Signal::CONT);
        }
        let status = child.wait().expect("reap etcd");
        proc.exit = Some(status);
        proc.paused = false;
        self.out.mark("etcd killed with SIGKILL");
        drop(proc);
        drain(&self.pumps);
    }

    /// Stops it if it runs ([`Etcd::stop`]), starts it again on the same data
    /// directory and ports, and waits (at most [`TIMEOUT`]) until it is healthy.
    pub fn restart(&self) {
        self.stop();
        self.spawn();
        self.wait_healthy(TIMEOUT);
    }

    /// SIGSTOP: etcd freezes (clients time out, leases are not kept alive).
    pub fn pause(&self) {
        let mut proc = self.lock();
        let pid = proc.child.as_ref().map(Child::id).expect("etcd is not running");
        assert!(stop_process(pid), "SIGSTOP etcd {pid}");
        proc.paused = true;
        self.out.mark("etcd paused (SIGSTOP)");
    }

    /// SIGCONT after [`Etcd::pause`].
    pub fn resume(&self) {
        let mut proc = self.lock();
        let pid = proc.child.as_ref().map(Child::id).expect("etcd is not running");
        assert!(signal(pid, Signal::CONT), "SIGCONT etcd {pid}");
        proc.paused = false;
        self.out.mark("etcd resumed (SIGCONT)");
    }

    /// etcd's output so far (all of its runs), one line per line.
    pub fn log_text(&self) -> String {
        self.out.text()
    }

    /// The last `n` lines of etcd's output.
    pub fn log_tail(&self, n: usize) -> String {
        self.out.tail(n)
    }

    /// `PUT key value` through the v3 HTTP/JSON gateway; panics on failure.
    pub fn put(&self, key: &str, value: &str) {
        let body = serde_json::json!({ "key": b64(key.as_bytes()), "value": b64(value.as_bytes()) });
        self.v3("/v3/kv/put", &body);
    }

    /// The value of `key` (lossy UTF-8), if it exists; panics on failure.
    pub fn get(&self, key: &str) -> Option<String> {
        let body = serde_json::json!({ "key": b64(key.as_bytes()) });
        let resp = self.v3("/v3/kv/range", &body);
        kvs(&resp).into_iter().next().map(|(_, v)| v)
    }

    /// Every key under `prefix` with its value (lossy UTF-8), in key order;
    /// panics on failure.
    pub fn get_prefix(&self, prefix: &str) -> Vec<(String, String)> {
        let body = serde_json::json!({
            "key": b64(prefix.as_bytes()),
            "range_end": b64(&prefix_end(prefix.as_bytes())),
        });
        kvs(&self.v3("/v3/kv/range", &body))
    }

    /// Deletes every key under `prefix`; panics on failure.
    pub fn delete_prefix(&self, prefix: &str) {
        let body = serde_json::json!({
            "key": b64(prefix.as_bytes()),
            "range_end": b64(&prefix_end(prefix.as_bytes())),
        });
        self.v3("/v3/kv/deleterange", &body);
    }

    /// POSTs `body` to the v3 gateway at `path` and returns the parsed answer.
    fn v3(&self, path: &str, body: &serde_json::Value) -> serde_json::Value {
        let resp = http_request(
            "POST",
            &self.endpoint(),
            path,
            None,
            Some(&body.to_string()),
            Duration::from_secs(5),
        )
        .unwrap_or_else(|e| {
            panic!(
                "etcd {path}: {e}; etcd output:\n{}",
                self.out.tail_for_panic(TAIL_LINES)
            )
        });
        assert_eq!(resp.status, 200, "etcd {path}: {}", resp.body);
        serde_json::from_str(&resp.body).unwrap_or_else(|e| panic!("etcd {path}: {e}: {}", resp.body))
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let failing = std::thread::panicking();
        self.kill9();
        if failing && !self.out.was_reported() {
            eprintln!(
                "----- etcd {} (client {}) output tail -----\n{}",
                self.name,
                self.endpoint(),
                self.out.tail(TAIL_LINES / 2)
            );
            if let Some(dir) = super::keep_dir_on_failure(&mut self.root) {
                eprintln!("etcd directory kept: {}", dir.display());
            }
        }
    }
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(s: &str) -> String {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD.decode(s).unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The `range_end` that selects every key starting with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0] // every key
}

/// The `(key, value)` pairs of a range answer.
fn kvs(resp: &serde_json::Value) -> Vec<(String, String)> {
    let Some(kvs) = resp.get("kvs").and_then(|k| k.as_array()) else {
        return Vec::new();
    };
    kvs.iter()
        .map(|kv| {
            let field = |name: &str| kv.get(name).and_then(|v| v.as_str()).map(unb64).unwrap_or_default();
            (field("key"), field("value"))
        })
        .collect()
}
