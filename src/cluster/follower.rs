//! The follower's end of replication: connect to the leader, fetch the files
//! whose checksums differ, then apply the stream of changes, syncing and
//! acknowledging each batch. Runs on its own thread with blocking I/O; the
//! node stops it by setting its stop flag and shutting its socket down.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest time an asked-for acknowledgement waits while data keeps arriving.
const ACK_EVERY: Duration = Duration::from_millis(20);

use parking_lot::Mutex;

use super::snapshot;
use super::wire::{self, FrameKind, Op, OpReader, WireError};

/// What the leader tells a follower about itself in the handshake.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaderInfo {
    /// The leader's node id (base 36).
    pub id: String,
    /// Its client ports, which the follower's proxies forward to.
    pub amqp_port: u16,
    /// MQTT port.
    pub mqtt_port: u16,
    /// HTTP API port.
    pub http_port: u16,
    /// AMQPS port, when TLS is on.
    pub amqps_port: Option<u16>,
    /// MQTTS port, when TLS is on.
    pub mqtts_port: Option<u16>,
    /// HTTPS port, when TLS is on.
    pub https_port: Option<u16>,
    /// Stream protocol port, when its listener is on (absent from older
    /// leaders' handshakes).
    #[serde(default)]
    pub stream_port: Option<u16>,
    /// Stream protocol TLS port, when TLS is on and its listener too (absent
    /// from older leaders' handshakes).
    #[serde(default)]
    pub stream_tls_port: Option<u16>,
}

/// Why following stopped.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The connection or the protocol failed.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The leader refused the cluster secret.
    #[error("the leader refused this node's cluster secret")]
    BadSecret,
    /// The node asked is not (or no longer) the leader.
    #[error("that node is not the leader")]
    NotLeader,
    /// The leader's address does not resolve.
    #[error("cannot resolve the leader's address {0}")]
    Resolve(String),
}

impl From<std::io::Error> for FollowError {
    fn from(e: std::io::Error) -> Self {
        FollowError::Wire(WireError::Io(e))
    }
}

/// Events a follower reports to the node while it runs.
pub trait FollowerEvents: Send + Sync {
    /// Connected: the leader's ports for the proxies.
    fn connected(&self, info: &LeaderInfo);
    /// The snapshot was applied: `fetched` files of `total` differed.
    fn snapshot_applied(&self, fetched: usize, total: usize);
    /// The leader put this node into the in-sync replica set.
    fn in_sync(&self);
    /// Bytes of the stream applied so far (for the lag shown in the API).
    fn applied(&self, offset: u64);
}

/// A handle to stop a running follower.
#[derive(Default, Clone)]
pub struct StopHandle {
    inner: Arc<Mutex<(bool, Option<TcpStream>)>>,
}

impl StopHandle {
    /// Stops the follower: its socket is shut down, so blocking reads end.
    pub fn stop(&self) {
        let mut g = self.inner.lock();
        g.0 = true;
        if let Some(s) = g.1.take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    fn stopped(&self) -> bool {
        self.inner.lock().0
    }

    fn attach(&self, s: &TcpStream) -> bool {
        let mut g = self.inner.lock();
        if g.0 {
            return false;
        }
        g.1 = s.try_clone().ok();
        true
    }
}

/// Connection settings of a follower.
pub struct FollowerSettings {
    /// The data dir to keep in step with the leader's.
    pub data_dir: PathBuf,
    /// The cluster secret.
    pub secret: String,
    /// This node's id.
    pub id: u32,
}

/// Follows the leader at `addr` (`host:port`) until the connection ends or
/// `stop` is used.
pub fn follow(
    addr: &str,
    settings: &FollowerSettings,
    events: &dyn FollowerEvents,
    stop: &StopHandle,
) -> Result<(), FollowError> {
    let sock = addr
        .to_socket_addrs()
        .map_err(|_| FollowError::Resolve(addr.to_string()))?
        .next()
        .ok_or_else(|| FollowError::Resolve(addr.to_string()))?;
    let stream = TcpStream::connect_timeout(&sock, Duration::from_secs(5))?;
    let _ = stream.set_nodelay(true);
    if !stop.attach(&stream) {
        return Ok(());
    }
    let mut out = stream.try_clone()?;
    let mut hello = wire::MAGIC.to_vec();
    let secret = &settings.secret.as_bytes()[..settings.secret.len().min(255)];
    hello.push(secret.len() as u8);
    hello.extend_from_slice(secret);
    hello.extend_from_slice(&settings.id.to_le_bytes());
    out.write_all(&hello)?;
    let mut input = BufReader::with_capacity(1 << 20, stream);
    let mut status = [0u8; 1];
    input.read_exact(&mut status)?;
    match status[0] {
        0 => {}
        1 => return Err(FollowError::BadSecret),
        _ => return Err(FollowError::NotLeader),
    }
    let mut len = [0u8; 4];
    input.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > 64 * 1024 {
        return Err(WireError::TooLarge(len.into()).into());
    }
    let mut info = vec![0u8; len as usize];
    input.read_exact(&mut info)?;
    let info: LeaderInfo = serde_json::from_slice(&info).map_err(|_| WireError::Malformed("leader info"))?;
    events.connected(&info);
    let root = settings.data_dir.clone();
    let mut applier = Applier::new(&root)?;
    let mut frame = Vec::new();
    // The file registrations made before this connection.
    let mut offset = match wire::read_frame(&mut input, &mut frame)? {
        FrameKind::Data => applier.apply_data(&frame)?,
        _ => return Err(WireError::Malformed("expected the registrations").into()),
    };
    // The snapshot: ask for every file whose checksum differs.
    if wire::read_frame(&mut input, &mut frame)? != FrameKind::FileList {
        return Err(WireError::Malformed("expected the file list").into());
    }
    let theirs = snapshot::decode(&wire::decompress(&frame)?)?;
    let ours = snapshot::list(&root)?;
    let ours: HashMap<&str, &snapshot::FileEntry> = ours.iter().map(|f| (f.path.as_str(), f)).collect();
    let wanted: Vec<&str> = theirs
        .iter()
        .filter(|f| {
            ours.get(f.path.as_str())
                .is_none_or(|o| o.size != f.size || o.sha256 != f.sha256)
        })
        .map(|f| f.path.as_str())
        .collect();
    let keep: std::collections::HashSet<&str> = theirs.iter().map(|f| f.path.as_str()).collect();
    for path in ours.keys() {
        if !keep.contains(path) {
            applier.remove(path);
        }
    }
    let mut request = (wanted.len() as u32).to_le_bytes().to_vec();
    for p in &wanted {
        wire::put_path(&mut request, p);
    }
    out.write_all(&request)?;
    receive_files(&mut input, &mut frame, &root, &mut applier)?;
    applier.sync()?;
    out.write_all(&offset.to_le_bytes())?;
    events.snapshot_applied(wanted.len(), theirs.len());
    // The stream: apply what arrives; sync and acknowledge when the leader
    // asks, once what has arrived is applied (under a steady stream at least
    // every ACK_EVERY, so a waiting confirm never waits for a pause).
    let mut acked_at = Instant::now();
    let mut sync_asked = false;
    loop {
        if stop.stopped() {
            return Ok(());
        }
        match wire::read_frame(&mut input, &mut frame)? {
            FrameKind::Data => offset = applier.apply_data(&frame)?,
            FrameKind::InSync => events.in_sync(),
            FrameKind::Sync => sync_asked = true,
            _ => return Err(WireError::Malformed("unexpected frame in the stream").into()),
        }
        if sync_asked && (input.buffer().is_empty() || acked_at.elapsed() >= ACK_EVERY) {
            applier.sync()?;
            out.write_all(&offset.to_le_bytes())?;
            events.applied(offset);
            acked_at = Instant::now();
            sync_asked = false;
        }
    }
}

/// Receives the snapshot's files up to `SnapshotEnd`, each written to a
/// temporary file and renamed into place.
fn receive_files(
    input: &mut impl Read,
    frame: &mut Vec<u8>,
    root: &Path,
    applier: &mut Applier,
) -> Result<(), FollowError> {
    loop {
        match wire::read_frame(input, frame)? {
            FrameKind::SnapshotEnd => return Ok(()),
            FrameKind::FileBegin => {}
            _ => return Err(WireError::Malformed("expected a snapshot file").into()),
        }
        let mut header = frame.as_slice();
        let path = wire::read_path(&mut header)?;
        let exists = header.first() == Some(&1);
        let target = root.join(&path);
        applier.forget(&path);
        let tmp = target.with_file_name(format!(
            "{}.repl.tmp",
            target.file_name().and_then(|n| n.to_str()).unwrap_or("file")
        ));
        let mut file = match exists {
            true => Some(create_with_parents(&tmp)?),
            false => None,
        };
        loop {
            if wire::read_frame(input, frame)? != FrameKind::FileData {
                return Err(WireError::Malformed("expected file data").into());
            }
            let data = wire::decompress(frame)?;
            if data.is_empty() {
                break;
            }
            if let Some(f) = file.as_mut() {
                f.write_all(&data)?;
            }
        }
        match file {
            Some(_) => std::fs::rename(&tmp, &target)?,
            None => applier.remove(&path),
        }
    }
}

fn create_with_parents(path: &Path) -> std::io::Result<File> {
    match File::create(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            File::create(path)
        }
        other => other,
    }
}

/// Applies file operations to the follower's data dir.
struct Applier {
    root: PathBuf,
    dir: File,
    files: HashMap<u32, (String, Option<File>)>,
    /// A write not yet done, extended while the next ones continue it.
    pending: Option<(u32, u64, Vec<u8>)>,
}

impl Applier {
    fn new(root: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(root)?;
        Ok(Applier {
            root: root.to_path_buf(),
            dir: File::open(root)?,
            files: HashMap::new(),
            pending: None,
        })
    }

    /// Applies one `Data` frame; returns the stream offset it ends at.
    fn apply_data(&mut self, frame: &[u8]) -> Result<u64, FollowError> {
        let end = frame
            .get(..8)
            .map(|b| {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                u64::from_le_bytes(a)
            })
            .ok_or(WireError::Malformed("data frame"))?;
        let ops = wire::decompress(&frame[8..])?;
        let mut reader = OpReader::new(&ops);
        while let Some(op) = reader.next_op()? {
            self.apply(op)?;
        }
        Ok(end)
    }

    fn apply(&mut self, op: Op<'_>) -> std::io::Result<()> {
        match op {
            Op::Write { id, offset, data } => {
                if let Some((pid, poff, buf)) = self.pending.as_mut()
                    && *pid == id
                    && poff.checked_add(buf.len() as u64) == Some(offset)
                {
                    buf.extend_from_slice(data);
                    return Ok(());
                }
                self.flush()?;
                self.pending = Some((id, offset, data.to_vec()));
            }
            Op::Register { id, path } => {
                self.flush()?;
                self.files.insert(id, (path.to_string(), None));
            }
            Op::SetLen { path, len } => {
                self.flush()?;
                self.forget(path);
                create_open(&self.root.join(path))?.set_len(len)?;
            }
            Op::Replace { path, data } => {
                self.flush()?;
                self.forget(path);
                let target = self.root.join(path);
                let tmp = target.with_extension("repl.tmp");
                create_with_parents(&tmp)?.write_all(data)?;
                std::fs::rename(&tmp, &target)?;
            }
            Op::Remove { path } => {
                self.flush()?;
                self.remove(path);
            }
        }
        Ok(())
    }

    /// Does the pending write.
    fn flush(&mut self) -> std::io::Result<()> {
        let Some((id, offset, buf)) = self.pending.take() else {
            return Ok(());
        };
        let Some((path, handle)) = self.files.get_mut(&id) else {
            tracing::warn!(file = id, "write to an unregistered file ignored");
            return Ok(());
        };
        if handle.is_none() {
            *handle = Some(create_open(&self.root.join(path.as_str()))?);
        }
        if let Some(f) = handle {
            f.write_all_at(&buf, offset)?;
        }
        Ok(())
    }

    /// Closes cached handles of `path` and anything under it (it is about to
    /// be replaced or removed).
    fn forget(&mut self, path: &str) {
        let prefix = format!("{path}/");
        for (p, handle) in self.files.values_mut() {
            if p == path || p.starts_with(&prefix) {
                *handle = None;
            }
        }
    }

    fn remove(&mut self, path: &str) {
        self.forget(path);
        let target = self.root.join(path);
        let result = match std::fs::symlink_metadata(&target) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&target),
            Ok(_) => std::fs::remove_file(&target),
            Err(_) => Ok(()),
        };
        if let Err(e) = result {
            tracing::warn!(path = %path, "cannot remove replicated file: {e}");
        }
    }

    fn sync(&mut self) -> std::io::Result<()> {
        self.flush()?;
        rustix::fs::syncfs(&self.dir).map_err(Into::into)
    }
}

/// Opens a file for writing, creating it (and its folders) when missing.
fn create_open(path: &Path) -> std::io::Result<File> {
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
    };
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            open()
        }
        other => other,
    }
}
