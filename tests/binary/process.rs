//! Helpers shared by the crash and corruption tests: the real `lavinmq` binary as a
//! child process (killed on drop, its output captured), the layout of its data
//! directory, and a reader for segment files.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use lapin::{Connection, ConnectionProperties};

/// The broker binary built by cargo for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_lavinmq");

/// The load generator built by cargo for these tests.
pub const PERF: &str = env!("CARGO_BIN_EXE_lavinmqperf");

/// How long any single wait for the broker may take.
pub const TIMEOUT: Duration = Duration::from_secs(15);

/// A `lavinmq` child process. Dropping it kills the process (SIGKILL) and reaps it,
/// so that a failed assertion never leaves a broker behind.
pub struct BrokerProcess {
    child: Option<Child>,
    /// The ephemeral AMQP port, read from the "AMQP listening on" log line.
    pub port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

/// Removes ANSI colour sequences (`ESC [ ... letter`).
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

fn pump(stream: impl Read + Send + 'static, log: Arc<Mutex<Vec<String>>>, port: Option<mpsc::Sender<u16>>) {
    std::thread::spawn(move || {
        let mut port = port;
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            let line = strip_ansi(&line);
            if let Some(addr) = line.split("AMQP listening on ").nth(1)
                && let Some(tx) = port.take()
                && let Some(p) = addr.trim().rsplit(':').next().and_then(|p| p.parse::<u16>().ok())
            {
                let _ = tx.send(p);
            }
            log.lock().unwrap().push(line);
        }
    });
}

/// Writes an ini file with `[main] segment_size = SIZE` into `dir` and returns its path.
pub fn segment_size_ini(dir: &Path, size: u64) -> PathBuf {
    let p = dir.join("lavinmq.ini");
    std::fs::write(&p, format!("[main]\nsegment_size = {size}\n")).expect("write ini");
    p
}

impl BrokerProcess {
    /// Starts the binary on `data` with an ephemeral port (and the ini file `ini`,
    /// if given) and waits until it listens.
    pub fn spawn(data: &Path, ini: Option<&Path>) -> BrokerProcess {
        BrokerProcess::spawn_with(data, ini, |_| {})
    }

    /// [`BrokerProcess::spawn`] with more arguments or environment set by
    /// `configure` on the command.
    pub fn spawn_with(data: &Path, ini: Option<&Path>, configure: impl FnOnce(&mut Command)) -> BrokerProcess {
        let (mut broker, rx) = BrokerProcess::launch(data, ini, configure);
        match rx.recv_timeout(TIMEOUT) {
            Ok(port) => broker.port = port,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(100));
                panic!("broker did not start listening; its output:\n{}", broker.log_text());
            }
        }
        broker
    }

    /// Starts the binary without waiting for it to listen (`port` stays 0): for
    /// killing it while it recovers.
    pub fn start(data: &Path, ini: Option<&Path>) -> BrokerProcess {
        BrokerProcess::launch(data, ini, |_| {}).0
    }

    fn launch(
        data: &Path,
        ini: Option<&Path>,
        configure: impl FnOnce(&mut Command),
    ) -> (BrokerProcess, mpsc::Receiver<u16>) {
        let mut cmd = Command::new(BIN);
        cmd.arg("-D").arg(data).args([
            "-p",
            "0",
            "--http-port",
            "0",
            "--metrics-http-port",
            "0",
            "--mqtt-port",
            "0",
            "--stream-port",
            "0",
        ]);
        cmd.arg("--control-unix-path").arg(data.join("ctl.sock"));
        if let Some(ini) = ini {
            cmd.arg("-c").arg(ini);
        }
        configure(&mut cmd);
        let mut child = cmd
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn lavinmq");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        pump(child.stdout.take().expect("stdout"), log.clone(), Some(tx));
        pump(child.stderr.take().expect("stderr"), log.clone(), None);
        let broker = BrokerProcess {
            child: Some(child),
            port: 0,
            log,
        };
        (broker, rx)
    }

    /// Process id of the broker.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("broker running").id()
    }

    /// `amqp://guest:guest@127.0.0.1:PORT/%2f`
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// The MQTT listener's address, from the broker's log.
    pub fn mqtt_addr(&self) -> std::net::SocketAddr {
        self.log_lines()
            .iter()
            .find_map(|l| l.split("MQTT listening on ").nth(1)?.trim().parse().ok())
            .expect("the broker logs its MQTT address")
    }

    /// The stream protocol listener's address, from the broker's log (which
    /// may name it a moment after the AMQP listener).
    pub fn stream_addr(&self) -> std::net::SocketAddr {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let found = self
                .log_lines()
                .iter()
                .find_map(|l| l.split("Stream protocol listening on ").nth(1)?.trim().parse().ok());
            match found {
                Some(addr) => return addr,
                None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                None => panic!("the broker logs no stream protocol address:\n{}", self.log_text()),
            }
        }
    }

    /// Opens a lapin connection (bounded by [`TIMEOUT`]).
    pub async fn connect(&self) -> Connection {
        within(
            "connect",
            Connection::connect(&self.url(), ConnectionProperties::default()),
        )
        .await
        .expect("connect")
    }

    /// Everything the broker printed so far, one line per line, without colours.
    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The printed lines so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// `kill -9`: the process dies at once, wherever it is.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for a clean exit (the broker syncs and closes everything).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        sigterm(child.id());
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(s) = child.try_wait().expect("wait") {
                assert!(s.success(), "broker exited with {s}; output:\n{}", self.log_text());
                return;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("broker did not exit after SIGTERM; output:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Awaits `fut`, failing the test if it takes longer than [`TIMEOUT`].
/// A free TCP port on loopback (bound, then released for a broker to bind).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(TIMEOUT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {TIMEOUT:?} waiting for {what}"),
    }
}

/// Directory name of a vhost or queue: hex of the first 20 bytes of its name's SHA-256.
pub fn dir_name(name: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(name.as_bytes())
        .iter()
        .take(20)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `DATA/<vhost "/">`
pub fn vhost_dir(data: &Path) -> PathBuf {
    data.join(dir_name("/"))
}

/// `DATA/<vhost "/">/<queue>` for a durable queue.
pub fn queue_dir(data: &Path, queue: &str) -> PathBuf {
    vhost_dir(data).join(dir_name(queue))
}

/// `msgs.NNNNNNNNNN`
pub fn msgs_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("msgs.{id:010}"))
}

/// `acks.NNNNNNNNNN`
pub fn acks_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("acks.{id:010}"))
}

/// `meta.NNNNNNNNNN`
pub fn meta_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("meta.{id:010}"))
}

/// The segment numbers of the `msgs.*` files in `dir`, ascending.
pub fn segment_ids(dir: &Path) -> Vec<u32> {
    let mut ids: Vec<u32> = std::fs::read_dir(dir)
        .expect("read queue dir")
        .filter_map(|e| {
            let name = e.ok()?.file_name();
            name.to_str()?.strip_prefix("msgs.")?.parse().ok()
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// One record of a segment file, located by byte offsets.
#[derive(Debug, Clone)]
pub struct Record {
    /// Offset of the record (its length field) in the file.
    pub offset: usize,
    /// Whole record size, header included.
    pub len: usize,
    /// Offset of the message body in the file.
    pub body_offset: usize,
    /// The message body.
    pub body: Vec<u8>,
}

/// Reads the records of a segment file as the broker writes them:
/// `u32 len | u32 crc | i64 ts | u8+exchange | u8+routing key | u32+properties |
/// u64+body`, after a 4-byte version header, up to the first zero length.
pub fn read_records(path: &Path) -> Vec<Record> {
    let data = std::fs::read(path).expect("read segment");
    let u32_at = |p: usize| u32::from_le_bytes(data[p..p + 4].try_into().unwrap()) as usize;
    let mut out = Vec::new();
    let mut pos = 4;
    while pos + 8 <= data.len() {
        let payload = u32_at(pos);
        if payload == 0 || pos + 8 + payload > data.len() {
            break;
        }
        let mut at = pos + 8 + 8;
        at += 1 + data[at] as usize; // exchange
        at += 1 + data[at] as usize; // routing key
        at += 4 + u32_at(at); // properties
        let body_len = u64::from_le_bytes(data[at..at + 8].try_into().unwrap()) as usize;
        at += 8;
        out.push(Record {
            offset: pos,
            len: 8 + payload,
            body_offset: at,
            body: data[at..at + body_len].to_vec(),
        });
        pos += 8 + payload;
    }
    out
}

/// The message id at the start of a body (`ID|padding`).
pub fn body_id(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(body);
    s.split('|').next().unwrap_or_default().to_string()
}

/// A body carrying `id` followed by `pad` filler bytes.
pub fn make_body(id: &str, pad: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(id.len() + 1 + pad);
    b.extend_from_slice(id.as_bytes());
    b.push(b'|');
    b.extend(std::iter::repeat_n(b'x', pad));
    b
}

/// Flips every bit of the byte at `offset` of `path`.
pub fn flip_byte(path: &Path, offset: usize) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[offset] ^= 0xff;
    std::fs::write(path, bytes).expect("write");
}

/// Cuts `path` to `len` bytes.
pub fn truncate(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open")
        .set_len(len)
        .expect("set_len");
}

/// A small deterministic PRNG (xorshift64*), so that a failing seed can be rerun.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value, zero included).
    pub fn new(seed: u64) -> Rng {
        let mut s = seed ^ 0x9E37_79B9_7F4A_7C15;
        if s == 0 {
            s = 0x2545_F491_4F6C_DD1D;
        }
        let mut r = Rng(s);
        for _ in 0..4 {
            r.next_u64();
        }
        r
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `1/n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.next_u64().is_multiple_of(n)
    }
}

/// Sends SIGTERM to process `pid` (without depending on a `kill` program).
pub fn sigterm(pid: u32) {
    send_signal(pid, rustix::process::Signal::TERM);
}

/// Sends `signal` to process `pid`.
pub fn send_signal(pid: u32, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("a child's pid is positive");
    rustix::process::kill_process(pid, signal).expect("kill");
}
