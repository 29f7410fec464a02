//! One `lavinmq` broker node as a child process.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustix::process::Signal;

use super::{Output, POLL, TAIL_LINES, TIMEOUT, capture, drain, free_port, signal, stop_process, wait_child};

/// The broker binary cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_lavinmq");

/// How a [`Node`] is started. [`NodeConfig::new`] gives the defaults; the fields
/// can be changed before [`Node::spawn`].
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Name used in the harness's messages and reports ("node0", ...).
    pub name: String,
    /// Pass the clustering flags (default true). With false the node runs
    /// standalone and the etcd fields are not used.
    pub clustering: bool,
    /// `--clustering-etcd-endpoints` (comma-separated `host:port`).
    pub etcd_endpoints: String,
    /// `--clustering-etcd-prefix`.
    pub etcd_prefix: String,
    /// `--clustering-lease-ttl`, seconds as a decimal string (default "2").
    pub lease_ttl: String,
    /// `--clustering-ack-timeout`, seconds as a decimal string (default "1").
    pub ack_timeout: String,
    /// Contents of the ini file passed with `-c` (default empty, which also keeps
    /// a system-wide `/etc/lavinmq/lavinmq.ini` out). Use this rather than a
    /// `-c` in [`NodeConfig::extra_args`].
    pub ini: String,
    /// Bind AMQPS, MQTTS, HTTPS and the stream protocol's TLS port on ports of their own (default false: they
    /// are disabled with `-1`). They only listen when a certificate is
    /// configured too (through `ini` or `extra_args`).
    pub tls_listeners: bool,
    /// More command-line arguments, after all the others.
    pub extra_args: Vec<String>,
}

impl NodeConfig {
    /// A clustered node using etcd at `etcd_endpoints` under `etcd_prefix`, with
    /// lease TTL "2" and ack timeout "1".
    pub fn new(etcd_endpoints: &str, etcd_prefix: &str) -> NodeConfig {
        NodeConfig {
            name: "node".to_owned(),
            clustering: true,
            etcd_endpoints: etcd_endpoints.to_owned(),
            etcd_prefix: etcd_prefix.to_owned(),
            lease_ttl: "2".to_owned(),
            ack_timeout: "1".to_owned(),
            ini: String::new(),
            tls_listeners: false,
            extra_args: Vec::new(),
        }
    }

    /// A node without clustering (no etcd).
    pub fn standalone() -> NodeConfig {
        NodeConfig {
            clustering: false,
            ..NodeConfig::new("", "")
        }
    }

    /// Sets [`NodeConfig::name`].
    pub fn name(mut self, name: impl Into<String>) -> NodeConfig {
        self.name = name.into();
        self
    }

    /// Sets [`NodeConfig::lease_ttl`] (seconds, e.g. "2" or "1.5").
    pub fn lease_ttl(mut self, secs: impl Into<String>) -> NodeConfig {
        self.lease_ttl = secs.into();
        self
    }

    /// Sets [`NodeConfig::ack_timeout`] (seconds, e.g. "1" or "0.5").
    pub fn ack_timeout(mut self, secs: impl Into<String>) -> NodeConfig {
        self.ack_timeout = secs.into();
        self
    }

    /// Sets [`NodeConfig::ini`].
    pub fn ini(mut self, contents: impl Into<String>) -> NodeConfig {
        self.ini = contents.into();
        self
    }

    /// Sets [`NodeConfig::tls_listeners`].
    pub fn tls_listeners(mut self, on: bool) -> NodeConfig {
        self.tls_listeners = on;
        self
    }

    /// Appends `arg` to [`NodeConfig::extra_args`].
    pub fn arg(mut self, arg: impl Into<String>) -> NodeConfig {
        self.extra_args.push(arg.into());
        self
    }

    /// Appends `args` to [`NodeConfig::extra_args`].
    pub fn args<I, S>(mut self, args: I) -> NodeConfig
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.extra_args.extend(args.into_iter().map(Into::into));
        self
    }
}

/// The ports of a node, all fixed when it is created and kept across restarts
/// (a follower binds the client ports it will serve from as leader).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodePorts {
    /// `-p`
    pub amqp: u16,
    /// `--mqtt-port`
    pub mqtt: u16,
    /// `--stream-port`
    pub stream: u16,
    /// `--http-port` (management API and UI)
    pub http: u16,
    /// `--clustering-port` (replication)
    pub clustering: u16,
    /// `--amqps-port`, with [`NodeConfig::tls_listeners`]
    pub amqps: Option<u16>,
    /// `--mqtts-port`, with [`NodeConfig::tls_listeners`]
    pub mqtts: Option<u16>,
    /// `--https-port`, with [`NodeConfig::tls_listeners`]
    pub https: Option<u16>,
    /// `--stream-tls-port`, with [`NodeConfig::tls_listeners`]
    pub stream_tls: Option<u16>,
}

impl NodePorts {
    fn allocate(tls: bool) -> NodePorts {
        let tls_port = || tls.then(free_port);
        NodePorts {
            amqp: free_port(),
            mqtt: free_port(),
            stream: free_port(),
            http: free_port(),
            clustering: free_port(),
            amqps: tls_port(),
            mqtts: tls_port(),
            https: tls_port(),
            stream_tls: tls_port(),
        }
    }
}

struct Proc {
    child: Option<Child>,
    exit: Option<ExitStatus>,
    stopped: bool,
    /// Index in the output of the first line of the current (or last) run.
    run_start: usize,
    /// How many times the process was spawned.
    runs: u32,
}

/// A `lavinmq` node: a child process of the broker binary with its own temporary
/// data directory and ports. Its stdout and stderr (all runs, with
/// `[harness] ...` lines marking spawns, signals and exits) are captured.
/// Every method takes `&self`. Dropping it kills it (SIGKILL, after SIGCONT if
/// stopped) and reaps it; when the test is failing it also prints the output tail.
pub struct Node {
    cfg: NodeConfig,
    ports: NodePorts,
    root: Option<tempfile::TempDir>,
    root_path: PathBuf,
    data_dir: PathBuf,
    proc: Mutex<Proc>,
    out: Output,
    pumps: Arc<AtomicUsize>,
}

impl Node {
    /// Creates the node's directory, picks its ports and starts the process.
    /// Waits for nothing (see [`Node::wait_for_log`], [`Node::wait_amqp_port`]).
    pub fn spawn(cfg: NodeConfig) -> Node {
        let root = tempfile::Builder::new()
            .prefix("lavinmq-node-")
            .tempdir()
            .expect("create node temp dir");
        let root_path = root.path().to_path_buf();
        let data_dir = root_path.join("data");
        std::fs::create_dir_all(&data_dir).expect("create node data dir");
        let node = Node {
            ports: NodePorts::allocate(cfg.tls_listeners),
            cfg,
            root: Some(root),
            root_path,
            data_dir,
            proc: Mutex::new(Proc {
                child: None,
                exit: None,
                stopped: false,
                run_start: 0,
                runs: 0,
            }),
            out: Output::default(),
            pumps: Arc::new(AtomicUsize::new(0)),
        };
        node.launch();
        node
    }

    fn lock(&self) -> MutexGuard<'_, Proc> {
        self.proc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The full command line (without the binary).
    pub fn args(&self) -> Vec<String> {
        let cfg = &self.cfg;
        let p = &self.ports;
        let data = self.data_dir.display().to_string();
        let mut args: Vec<String> = vec![
            "-D".into(),
            data.clone(),
            "-c".into(),
            self.ini_path().display().to_string(),
            "-p".into(),
            p.amqp.to_string(),
            "--mqtt-port".into(),
            p.mqtt.to_string(),
            "--stream-port".into(),
            p.stream.to_string(),
            "--http-port".into(),
            p.http.to_string(),
            "--metrics-http-port".into(),
            "-1".into(),
            "--control-unix-path".into(),
            self.data_dir.join("ctl.sock").display().to_string(),
        ];
        let tls = |port: Option<u16>| port.map_or("-1".to_owned(), |p| p.to_string());
        args.extend([
            "--amqps-port".into(),
            tls(p.amqps),
            "--mqtts-port".into(),
            tls(p.mqtts),
            "--https-port".into(),
            tls(p.https),
            "--stream-tls-port".into(),
            tls(p.stream_tls),
        ]);
        if cfg.clustering {
            args.extend([
                "--clustering".into(),
                "--clustering-bind".into(),
                "127.0.0.1".into(),
                "--clustering-port".into(),
                p.clustering.to_string(),
                "--clustering-advertised-uri".into(),
                format!("tcp://127.0.0.1:{}", p.clustering),
                "--clustering-etcd-endpoints".into(),
                cfg.etcd_endpoints.clone(),
                "--clustering-etcd-prefix".into(),
                cfg.etcd_prefix.clone(),
                "--clustering-lease-ttl".into(),
                cfg.lease_ttl.clone(),
                "--clustering-ack-timeout".into(),
                cfg.ack_timeout.clone(),
            ]);
        }
        args.extend(cfg.extra_args.iter().cloned());
        args
    }

    fn ini_path(&self) -> PathBuf {
        self.root_path.join("lavinmq.ini")
    }

    fn launch(&self) {
        let mut proc = self.lock();
        assert!(proc.child.is_none(), "{} is already running", self.cfg.name);
        std::fs::write(self.ini_path(), &self.cfg.ini).expect("write node ini");
        let mut cmd = Command::new(BIN);
        cmd.args(self.args());
        // Nothing from the test's environment may configure the broker.
        for (key, _) in std::env::vars_os() {
            let key_str = key.to_string_lossy();
            if key_str.starts_with("LAVINMQ_")
                || matches!(&*key_str, "RUST_LOG" | "CONFIGURATION_DIRECTORY" | "STATE_DIRECTORY")
            {
                cmd.env_remove(&key);
            }
        }
        let mut child = cmd
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {BIN}: {e}"));
        proc.runs += 1;
        proc.run_start = self.out.len();
        self.out.mark(&format!(
            "{} run #{} spawned, pid {}",
            self.cfg.name,
            proc.runs,
            child.id()
        ));
        capture(&mut child, &self.out, &self.pumps);
        proc.child = Some(child);
        proc.exit = None;
        proc.stopped = false;
    }

    /// Spawns the process again, with the same directory, ports and config,
    /// after it exited (panics if it still runs). Waits for nothing.
    pub fn restart(&self) {
        assert!(
            !self.is_running(),
            "{}: restart() needs the process to have exited (kill9 or sigterm_and_wait first)",
            self.cfg.name
        );
        drain(&self.pumps);
        self.launch();
    }

    /// The config it was started with.
    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    /// [`NodeConfig::name`].
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// Process id of the current run; panics if it is not running.
    pub fn pid(&self) -> u32 {
        self.lock()
            .child
            .as_ref()
            .map(Child::id)
            .unwrap_or_else(|| panic!("{} is not running", self.cfg.name))
    }

    /// How many times the process was spawned (1 after [`Node::spawn`]).
    pub fn runs(&self) -> u32 {
        self.lock().runs
    }

    /// Whether the process is alive (stopped counts as alive); reaps it if it exited.
    pub fn is_running(&self) -> bool {
        let mut proc = self.lock();
        let Some(child) = proc.child.as_mut() else { return false };
        match child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                proc.child = None;
                proc.exit = Some(status);
                proc.stopped = false;
                self.out.mark(&format!("{} exited: {status}", self.cfg.name));
                false
            }
            Err(_) => false,
        }
    }

    /// Whether it is stopped by [`Node::sigstop`] (and not continued).
    pub fn is_stopped(&self) -> bool {
        self.is_running() && self.lock().stopped
    }

    /// How the last run ended, if the process is not running.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        if self.is_running() { None } else { self.lock().exit }
    }

    /// Waits (at most `timeout`) for the process to exit on its own; its status,
    /// or None if it still runs.
    pub fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        super::eventually(timeout, || !self.is_running());
        self.exit_status()
    }

    /// `kill -9`: the process dies at once, wherever it is (a stopped one too:
    /// SIGCONT follows the SIGKILL, so it cannot run another instruction); reaped.
    /// Nothing happens if it is not running.
    pub fn kill9(&self) {
        let mut proc = self.lock();
        let Some(mut child) = proc.child.take() else { return };
        let _ = child.kill();
        if proc.stopped {
            signal(child.id(), Signal::CONT);
        }
        let status = child.wait().expect("reap lavinmq");
        proc.exit = Some(status);
        proc.stopped = false;
        self.out.mark(&format!("{} killed with SIGKILL", self.cfg.name));
        drop(proc);
        drain(&self.pumps);
    }

    /// SIGSTOP: the process freezes (no lease keep-alives, no replication).
    pub fn sigstop(&self) {
        let mut proc = self.lock();
        let pid = proc.child.as_ref().map(Child::id);
        let pid = pid.unwrap_or_else(|| panic!("sigstop: {} is not running", self.cfg.name));
        assert!(stop_process(pid), "SIGSTOP {pid}");
        proc.stopped = true;
        self.out.mark(&format!("{} stopped (SIGSTOP)", self.cfg.name));
    }

    /// SIGCONT after [`Node::sigstop`].
    pub fn sigcont(&self) {
        let mut proc = self.lock();
        let pid = proc.child.as_ref().map(Child::id);
        let pid = pid.unwrap_or_else(|| panic!("sigcont: {} is not running", self.cfg.name));
        assert!(signal(pid, Signal::CONT), "SIGCONT {pid}");
        proc.stopped = false;
        self.out.mark(&format!("{} continued (SIGCONT)", self.cfg.name));
    }

    /// SIGTERM (and SIGCONT if stopped), then waits at most [`TIMEOUT`] for the
    /// process to exit. Its exit status; None if it had not exited in time (it
    /// then still runs: [`Node::kill9`] or drop ends it). If it was not running,
    /// the status of its last run.
    pub fn sigterm_and_wait(&self) -> Option<ExitStatus> {
        let mut proc = self.lock();
        let Some(pid) = proc.child.as_ref().map(Child::id) else {
            return proc.exit;
        };
        signal(pid, Signal::TERM);
        if proc.stopped {
            signal(pid, Signal::CONT);
            proc.stopped = false;
        }
        self.out.mark(&format!("{} sent SIGTERM", self.cfg.name));
        let status = wait_child(proc.child.as_mut().expect("running"), TIMEOUT)?;
        proc.child = None;
        proc.exit = Some(status);
        self.out.mark(&format!("{} exited: {status}", self.cfg.name));
        drop(proc);
        drain(&self.pumps);
        Some(status)
    }

    /// Everything captured so far (all runs), one line per line, without colours.
    pub fn log_text(&self) -> String {
        self.out.text()
    }

    /// The captured lines so far (all runs).
    pub fn log_lines(&self) -> Vec<String> {
        self.out.lines()
    }

    /// How many lines were captured so far: pass it to
    /// [`Node::wait_for_log_after`] to wait for the next occurrence of a line.
    pub fn log_len(&self) -> usize {
        self.out.len()
    }

    /// The last `n` captured lines.
    pub fn log_tail(&self, n: usize) -> String {
        self.out.tail(n)
    }

    /// Index of the first line of the current (or last) run in the captured output.
    pub fn run_start(&self) -> usize {
        self.lock().run_start
    }

    /// The node's captured output (shared with its pump threads).
    pub fn output(&self) -> &Output {
        &self.out
    }

    /// Whether any captured line (of any run) contains `needle`.
    pub fn log_contains(&self, needle: &str) -> bool {
        self.out.find_from(0, needle).is_some()
    }

    /// How many captured lines at or after index `from` contain `needle`.
    pub fn log_count_after(&self, from: usize, needle: &str) -> usize {
        self.out.count_from(from, needle)
    }

    /// Polls the captured output (all runs) for a line containing `needle`, for
    /// at most `timeout`; whether one appeared.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> bool {
        self.wait_for_log_after(0, needle, timeout)
    }

    /// Polls for a line containing `needle` at index `from` or later (from
    /// [`Node::log_len`] or [`Node::run_start`]), for at most `timeout`; whether
    /// one appeared.
    pub fn wait_for_log_after(&self, from: usize, needle: &str, timeout: Duration) -> bool {
        super::eventually(timeout, || self.out.find_from(from, needle).is_some())
    }

    /// [`Node::wait_for_log_after`], panicking with the output tail on timeout;
    /// the index of the matching line.
    pub fn expect_log_after(&self, from: usize, needle: &str, timeout: Duration) -> usize {
        if self.wait_for_log_after(from, needle, timeout) {
            return self.out.find_from(from, needle).expect("line found");
        }
        panic!(
            "{}: no log line containing {needle:?} (after line {from}) within {timeout:?}; output tail:\n{}",
            self.cfg.name,
            self.out.tail_for_panic(TAIL_LINES)
        );
    }

    /// [`Node::wait_for_log`], panicking with the output tail on timeout; the
    /// index of the matching line.
    pub fn expect_log(&self, needle: &str, timeout: Duration) -> usize {
        self.expect_log_after(0, needle, timeout)
    }

    /// Waits (at most `timeout`) until the AMQP port accepts TCP connections;
    /// panics with the output tail otherwise (or at once if the process exited).
    pub fn wait_amqp_port(&self, timeout: Duration) {
        self.wait_port("AMQP", self.ports.amqp, timeout);
    }

    /// Waits (at most `timeout`) until the HTTP port accepts TCP connections;
    /// panics with the output tail otherwise (or at once if the process exited).
    pub fn wait_http_port(&self, timeout: Duration) {
        self.wait_port("HTTP", self.ports.http, timeout);
    }

    fn wait_port(&self, what: &str, port: u16, timeout: Duration) {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if port_open(port) {
                return;
            }
            if !self.is_running() {
                drain(&self.pumps);
                panic!(
                    "{} exited ({:?}) before its {what} port {port} accepted connections; output tail:\n{}",
                    self.cfg.name,
                    self.lock().exit,
                    self.out.tail_for_panic(TAIL_LINES)
                );
            }
            if std::time::Instant::now() >= deadline {
                panic!(
                    "{}: {what} port {port} did not accept connections within {timeout:?}; output tail:\n{}",
                    self.cfg.name,
                    self.out.tail_for_panic(TAIL_LINES)
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// All of the node's ports.
    pub fn ports(&self) -> NodePorts {
        self.ports
    }

    /// `amqp://guest:guest@127.0.0.1:PORT/%2f`
    pub fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.ports.amqp)
    }

    /// The AMQP port.
    pub fn amqp_port(&self) -> u16 {
        self.ports.amqp
    }

    /// The MQTT port.
    pub fn mqtt_port(&self) -> u16 {
        self.ports.mqtt
    }

    /// The stream protocol port this node listens on (as leader) or forwards
    /// (as follower).
    pub fn stream_port(&self) -> u16 {
        self.ports.stream
    }

    /// The stream protocol's TLS port (with [`NodeConfig::tls_listeners`]).
    pub fn stream_tls_port(&self) -> Option<u16> {
        self.ports.stream_tls
    }

    /// The HTTP (management) port.
    pub fn http_port(&self) -> u16 {
        self.ports.http
    }

    /// The clustering (replication) port.
    pub fn clustering_port(&self) -> u16 {
        self.ports.clustering
    }

    /// `http://127.0.0.1:PORT`, the management API's base URL.
    pub fn http_base(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.http)
    }

    /// `127.0.0.1:PORT` of the management API, for [`super::http_request`].
    pub fn http_addr(&self) -> String {
        format!("127.0.0.1:{}", self.ports.http)
    }

    /// The node's data directory (`-D`), kept across restarts.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Opens an AMQP connection as guest (bounded by [`TIMEOUT`]); panics with
    /// the output tail if it fails.
    pub async fn connect(&self) -> lapin::Connection {
        let url = self.amqp_url();
        let fut = lapin::Connection::connect(&url, lapin::ConnectionProperties::default());
        match tokio::time::timeout(TIMEOUT, fut).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => panic!(
                "{}: AMQP connect to {}: {e}; output tail:\n{}",
                self.cfg.name,
                self.amqp_url(),
                self.out.tail_for_panic(TAIL_LINES)
            ),
            Err(_) => panic!(
                "{}: AMQP connect to {} timed out after {TIMEOUT:?}; output tail:\n{}",
                self.cfg.name,
                self.amqp_url(),
                self.out.tail_for_panic(TAIL_LINES)
            ),
        }
    }
}

/// Whether something accepts TCP connections on 127.0.0.1:`port` (within 200 ms).
pub fn port_open(port: u16) -> bool {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

impl Drop for Node {
    fn drop(&mut self) {
        let failing = std::thread::panicking();
        self.kill9();
        if failing && !self.out.was_reported() {
            eprintln!(
                "----- {} (amqp {}, http {}, clustering {}) output tail -----\n{}",
                self.cfg.name,
                self.ports.amqp,
                self.ports.http,
                self.ports.clustering,
                self.out.tail(TAIL_LINES)
            );
            if let Some(dir) = super::keep_dir_on_failure(&mut self.root) {
                eprintln!("{} directory kept: {}", self.cfg.name, dir.display());
            }
        }
    }
}
