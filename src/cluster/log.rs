//! The leader's replication log: the store's file operations (see
//! [`crate::store::replication`]) encoded into one byte stream, sealed into
//! compressed chunks that every follower's sender thread sends, and the
//! followers' acknowledgements that the confirm rule waits for.
//!
//! Offsets count bytes of the uncompressed stream since the process started.
//! Nothing is buffered unless the node leads and has a follower, so a single
//! node pays one atomic load per message.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::lease_clock::LeaseClock;
use super::wire::{self, FrameKind};
use crate::store::replication::{ChangeSink, FileRef};

/// Unsealed bytes past which the senders are woken.
const SEAL_AT: usize = 128 * 1024;
/// How long a sender lets bytes gather when nobody waits for them.
const LINGER: Duration = Duration::from_millis(2);
/// Compressed bytes kept for followers past which the slowest is cut off (it
/// syncs again from files when it reconnects).
const MAX_BACKLOG: usize = 256 << 20;

/// A sealed, compressed piece of the stream, shared by every sender.
pub struct Chunk {
    /// Offset of the stream right after this chunk.
    pub end: u64,
    /// The encoded `Data` frame.
    pub frame: Vec<u8>,
}

/// What a sender gets to send: chunks, and how far a confirm waits.
pub struct Outgoing {
    /// The sealed chunks after the sender's position, in order.
    pub chunks: Vec<Arc<Chunk>>,
    /// A confirm waits for the stream up to here: the follower must sync
    /// and acknowledge once it holds it.
    pub flush_to: u64,
}

/// What the leader knows of one connected or in-sync follower.
#[derive(Debug, Clone, Default)]
pub struct FollowerState {
    /// Offset the follower holds (written and synced).
    pub acked: u64,
    /// Offset sent to it.
    pub sent: u64,
    /// In the in-sync replica set (as written to etcd).
    pub in_isr: bool,
    /// Its connection is up.
    pub connected: bool,
    /// Offset it must hold to count as in sync (end of its snapshot).
    pub sync_target: Option<u64>,
    /// Its address, for the API.
    pub addr: String,
    /// Told to disconnect (lagging, dropped from the ISR).
    pub cut_off: bool,
    /// Which connection of the follower this is (a reconnect gets a new one).
    pub conn: u64,
}

/// A request to change the in-sync replica set in etcd, answered once written
/// (true) or failed (false: leadership is in doubt).
pub struct IsrChange {
    /// Followers to add.
    pub add: Vec<u32>,
    /// Followers to remove.
    pub remove: Vec<u32>,
    /// Where the answer goes.
    pub reply: std::sync::mpsc::Sender<bool>,
}

struct State {
    leading: bool,
    base: u64,
    buf: Vec<u8>,
    chunks: VecDeque<Arc<Chunk>>,
    backlog: usize,
    by_path: HashMap<Arc<str>, u32>,
    paths: HashMap<u32, Arc<str>>,
    next_id: u32,
    followers: BTreeMap<u32, FollowerState>,
    isr: Option<tokio::sync::mpsc::UnboundedSender<IsrChange>>,
    next_conn: u64,
    /// A confirm waits for the stream up to here: send without lingering.
    flush_to: u64,
    /// The last `Write` op, extended in place while the next writes continue it.
    open_write: Option<OpenWrite>,
}

/// The newest `Write` op of the stream. Appends to a segment follow each other
/// in the file, so one op header can stand for a run of messages instead of
/// one per message: a shorter stream to compress, send and apply.
struct OpenWrite {
    file: u32,
    /// The file offset a continuing write starts at.
    next_offset: u64,
    /// Stream offset of the op's length field.
    len_at: u64,
    /// Stream offset right after the op: it is still the last op only while
    /// the unsealed bytes end here.
    op_end: u64,
    len: u32,
}

/// The replication log (one per process; installed as the store's sink).
pub struct ReplicationLog {
    data_dir: PathBuf,
    ack_timeout: Duration,
    lease: Arc<LeaseClock>,
    streaming: AtomicBool,
    state: Mutex<State>,
    seal_lock: Mutex<()>,
    data_cv: Condvar,
    ack_cv: Condvar,
}

impl ReplicationLog {
    /// A log for the data dir `data_dir` (the same path the broker is given).
    pub fn new(data_dir: &Path, ack_timeout: Duration, lease: Arc<LeaseClock>) -> Self {
        ReplicationLog {
            data_dir: data_dir.to_path_buf(),
            ack_timeout,
            lease,
            streaming: AtomicBool::new(false),
            state: Mutex::new(State {
                leading: false,
                base: 0,
                buf: Vec::new(),
                chunks: VecDeque::new(),
                backlog: 0,
                by_path: HashMap::new(),
                paths: HashMap::new(),
                next_id: 1,
                followers: BTreeMap::new(),
                isr: None,
                next_conn: 1,
                flush_to: 0,
                open_write: None,
            }),
            seal_lock: Mutex::new(()),
            data_cv: Condvar::new(),
            ack_cv: Condvar::new(),
        }
    }

    /// The data dir this log replicates.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Starts leading: changes are logged from now on; ISR changes go to `isr`.
    pub fn start_leading(&self, isr: tokio::sync::mpsc::UnboundedSender<IsrChange>) {
        let mut st = self.state.lock();
        st.leading = true;
        st.isr = Some(isr);
        st.followers.clear();
        st.chunks.clear();
        st.backlog = 0;
        st.base += st.buf.len() as u64;
        st.buf.clear();
    }

    /// Stops leading: nothing more is confirmed, every follower is cut off.
    pub fn stop_leading(&self) {
        let mut st = self.state.lock();
        st.leading = false;
        st.isr = None;
        for f in st.followers.values_mut() {
            f.cut_off = true;
        }
        self.streaming.store(false, Ordering::SeqCst);
        drop(st);
        self.data_cv.notify_all();
        self.ack_cv.notify_all();
    }

    /// True while this node leads.
    pub fn leading(&self) -> bool {
        self.state.lock().leading
    }

    fn relative(&self, path: &Path) -> Option<String> {
        let rel = path.strip_prefix(&self.data_dir).ok()?;
        let mut out = String::new();
        for c in rel.components() {
            let std::path::Component::Normal(c) = c else {
                return None;
            };
            let c = c.to_str()?;
            if c == "transient" {
                // Non-durable queues are wiped at every start: nothing to keep.
                return None;
            }
            if !out.is_empty() {
                out.push('/');
            }
            out.push_str(c);
        }
        (!out.is_empty()).then_some(out)
    }

    fn append(&self, encode: impl FnOnce(&mut Vec<u8>)) {
        let mut st = self.state.lock();
        if !st.leading || st.followers.is_empty() {
            return;
        }
        encode(&mut st.buf);
        if st.buf.len() >= SEAL_AT {
            drop(st);
            self.data_cv.notify_all();
        }
    }

    /// Adds a connecting follower: returns its connection number, the offset
    /// its stream starts at and the file registrations it needs first (as
    /// operations). A follower still listed in the ISR from an earlier
    /// connection is removed from it first: it must sync again before it may
    /// count as in sync.
    pub fn add_follower(&self, id: u32, addr: String) -> Option<(u64, u64, Vec<u8>)> {
        let listed = self.state.lock().followers.get(&id).is_some_and(|f| f.in_isr);
        if listed && !self.drop_from_isr(vec![id]) {
            return None;
        }
        let _seal = self.seal_lock.lock();
        let mut st = self.state.lock();
        if !st.leading {
            return None;
        }
        self.seal_locked(&mut st);
        let start = st.base;
        let mut regs = Vec::new();
        for (id, path) in &st.paths {
            wire::put_register(&mut regs, *id, path);
        }
        let conn = st.next_conn;
        st.next_conn += 1;
        st.followers.insert(
            id,
            FollowerState {
                acked: start,
                sent: start,
                in_isr: false,
                connected: true,
                sync_target: None,
                addr,
                cut_off: false,
                conn,
            },
        );
        self.streaming.store(true, Ordering::SeqCst);
        Some((conn, start, regs))
    }

    /// Connection `conn` of a follower ended. A follower in the ISR stays
    /// listed until the leader removes it there (the next confirm does, or
    /// [`ReplicationLog::remove_disconnected`]).
    pub fn follower_gone(&self, id: u32, conn: u64) {
        let mut st = self.state.lock();
        if let Some(f) = st.followers.get_mut(&id)
            && f.conn == conn
        {
            f.connected = false;
            if !f.in_isr {
                st.followers.remove(&id);
            }
        }
        if !st.followers.values().any(|f| f.connected) {
            self.streaming.store(false, Ordering::SeqCst);
        }
        self.trim(&mut st);
        drop(st);
        self.ack_cv.notify_all();
    }

    /// The follower's snapshot is complete: it is in sync once it holds `target`.
    pub fn set_sync_target(&self, id: u32, conn: u64, target: u64) {
        if let Some(f) = self.state.lock().followers.get_mut(&id)
            && f.conn == conn
        {
            f.sync_target = Some(target);
        }
    }

    /// The current end of the stream.
    pub fn end(&self) -> u64 {
        let st = self.state.lock();
        st.base + st.buf.len() as u64
    }

    /// Records a follower's acknowledgement. Returns true when this makes it
    /// eligible for the ISR (it holds its snapshot target and is not in yet).
    pub fn ack(&self, id: u32, conn: u64, offset: u64) -> bool {
        let mut st = self.state.lock();
        let eligible = match st.followers.get_mut(&id) {
            Some(f) if f.conn == conn => {
                f.acked = f.acked.max(offset);
                !f.in_isr && f.sync_target.is_some_and(|t| f.acked >= t)
            }
            _ => false,
        };
        drop(st);
        self.ack_cv.notify_all();
        eligible
    }

    /// Asks the leader's ISR task for a change and waits for the answer.
    fn change_isr(&self, add: Vec<u32>, remove: Vec<u32>) -> bool {
        let Some(tx) = self.state.lock().isr.clone() else {
            return false;
        };
        let (reply, answer) = std::sync::mpsc::channel();
        if tx.send(IsrChange { add, remove, reply }).is_err() {
            return false;
        }
        answer
            .recv_timeout(self.ack_timeout.max(Duration::from_secs(5)))
            .unwrap_or(false)
    }

    /// Puts a caught-up follower into the ISR (written to etcd first).
    pub fn join_isr(&self, id: u32, conn: u64) -> bool {
        if !self.change_isr(vec![id], Vec::new()) {
            return false;
        }
        let mut st = self.state.lock();
        match st.followers.get_mut(&id) {
            Some(f) if f.connected && f.conn == conn => {
                f.in_isr = true;
                true
            }
            _ => false,
        }
    }

    /// Removes followers whose connection is gone from the ISR (in etcd, then
    /// here), so that none of them can be elected with data it may lack.
    pub fn remove_disconnected(&self) -> bool {
        let gone: Vec<u32> = {
            let st = self.state.lock();
            st.followers
                .iter()
                .filter(|(_, f)| f.in_isr && !f.connected)
                .map(|(id, _)| *id)
                .collect()
        };
        gone.is_empty() || self.drop_from_isr(gone)
    }

    /// Removes followers from the ISR (in etcd, then here) and cuts them off.
    pub fn drop_from_isr(&self, ids: Vec<u32>) -> bool {
        for id in &ids {
            tracing::warn!(follower = %super::node_id::format(*id), "removing follower from the in-sync replica set");
        }
        if !self.change_isr(Vec::new(), ids.clone()) {
            return false;
        }
        let mut st = self.state.lock();
        for id in ids {
            if let Some(f) = st.followers.get_mut(&id) {
                f.in_isr = false;
                f.cut_off = true;
                if !f.connected {
                    st.followers.remove(&id);
                }
            }
        }
        drop(st);
        self.data_cv.notify_all();
        true
    }

    /// Seals the unsealed bytes into a chunk (caller holds `seal_lock`).
    fn seal_locked(&self, st: &mut State) {
        if st.buf.is_empty() {
            return;
        }
        let end = st.base + st.buf.len() as u64;
        let frame = data_frame(end, &st.buf);
        push_chunk(st, end, frame);
        st.base = end;
        st.buf.clear();
    }

    /// Seals what is buffered, compressing outside the state lock so that
    /// appenders are not held up.
    fn seal(&self) {
        let _seal = self.seal_lock.lock();
        let (raw, end) = {
            let mut st = self.state.lock();
            if st.buf.is_empty() {
                return;
            }
            let end = st.base + st.buf.len() as u64;
            st.base = end;
            (std::mem::take(&mut st.buf), end)
        };
        let frame = data_frame(end, &raw);
        let mut st = self.state.lock();
        push_chunk(&mut st, end, frame);
        if st.buf.capacity() == 0 {
            let mut raw = raw;
            raw.clear();
            st.buf = raw;
        }
        self.cut_off_slowest(&mut st);
    }

    fn cut_off_slowest(&self, st: &mut State) {
        if st.backlog <= MAX_BACKLOG {
            return;
        }
        if let Some((id, f)) = st
            .followers
            .iter_mut()
            .filter(|(_, f)| f.connected && !f.cut_off)
            .min_by_key(|(_, f)| f.sent)
        {
            tracing::warn!(follower = %super::node_id::format(*id), "follower too far behind, disconnecting it");
            f.cut_off = true;
        }
    }

    /// Drops chunks every connected follower was sent.
    fn trim(&self, st: &mut State) {
        let min_sent = st
            .followers
            .values()
            .filter(|f| f.connected && !f.cut_off)
            .map(|f| f.sent)
            .min();
        while let Some(c) = st.chunks.front() {
            if min_sent.is_some_and(|m| c.end > m) {
                break;
            }
            st.backlog -= c.frame.len();
            st.chunks.pop_front();
        }
    }

    /// For follower `id`'s sender: the chunks after `from`, waiting up to
    /// `wait` for some, or less when a confirm waits for bytes it was sent
    /// after `synced_to` (the last offset it asked the follower to sync).
    /// `None` when the follower must disconnect.
    pub fn chunks_after(&self, id: u32, conn: u64, from: u64, synced_to: u64, wait: Duration) -> Option<Outgoing> {
        let deadline = Instant::now() + wait;
        let linger_until = Instant::now() + LINGER;
        let sync_due = |st: &State| st.flush_to > synced_to && from > synced_to;
        loop {
            {
                // Unless a confirm waits for the bytes, they pile up, or
                // chunks are ready, let them gather a moment: fewer, larger
                // chunks cost fewer wake-ups, writes and follower syncs.
                let mut st = self.state.lock();
                let ready = st.chunks.back().is_some_and(|c| c.end > from);
                let wanted = st.flush_to > st.base || sync_due(&st);
                if !ready && !wanted && st.buf.len() < SEAL_AT && Instant::now() < linger_until {
                    self.data_cv.wait_until(&mut st, linger_until.min(deadline));
                    continue;
                }
            }
            self.seal();
            let mut st = self.state.lock();
            let leading = st.leading;
            match st.followers.get_mut(&id) {
                Some(f) if f.conn == conn && f.connected && !f.cut_off && leading => f.sent = from,
                _ => return None,
            }
            self.trim(&mut st);
            let chunks: Vec<Arc<Chunk>> = st.chunks.iter().filter(|c| c.end > from).cloned().collect();
            if !chunks.is_empty() || sync_due(&st) || Instant::now() >= deadline {
                return Some(Outgoing {
                    chunks,
                    flush_to: st.flush_to,
                });
            }
            if st.buf.is_empty() {
                self.data_cv.wait_until(&mut st, deadline);
            }
        }
    }

    /// True once the follower is in the ISR.
    pub fn in_isr(&self, id: u32) -> bool {
        self.state.lock().followers.get(&id).is_some_and(|f| f.in_isr)
    }

    /// Whether a connected follower's replication connection comes from
    /// `ip`: its forwarded client connections then come from there too.
    pub fn is_follower_address(&self, ip: std::net::IpAddr) -> bool {
        self.state.lock().followers.values().any(|f| {
            f.connected
                && f.addr
                    .parse::<std::net::SocketAddr>()
                    .is_ok_and(|a| a.ip().to_canonical() == ip)
        })
    }

    /// Every known follower, for the API.
    pub fn followers(&self) -> Vec<(u32, FollowerState)> {
        self.state
            .lock()
            .followers
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect()
    }
}

/// The `Data` frame of the stream bytes `raw`, which end at offset `end`.
fn data_frame(end: u64, raw: &[u8]) -> Vec<u8> {
    let mut payload = end.to_le_bytes().to_vec();
    payload.extend_from_slice(&wire::compress(raw));
    wire::encode_frame(FrameKind::Data, &payload)
}

/// Queues a sealed chunk for the senders.
fn push_chunk(st: &mut State, end: u64, frame: Vec<u8>) {
    st.backlog += frame.len();
    st.chunks.push_back(Arc::new(Chunk { end, frame }));
}

impl ChangeSink for ReplicationLog {
    fn register(&self, path: &Path) -> Option<FileRef> {
        let rel = self.relative(path)?;
        let mut st = self.state.lock();
        if let Some(id) = st.by_path.get(rel.as_str()) {
            return Some(FileRef(*id));
        }
        let id = st.next_id;
        st.next_id += 1;
        let rel: Arc<str> = rel.into();
        st.by_path.insert(rel.clone(), id);
        st.paths.insert(id, rel.clone());
        if st.leading && !st.followers.is_empty() {
            wire::put_register(&mut st.buf, id, &rel);
        }
        Some(FileRef(id))
    }

    fn write_at(&self, file: FileRef, offset: u64, parts: &[&[u8]]) {
        if !self.streaming.load(Ordering::SeqCst) {
            return;
        }
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut guard = self.state.lock();
        let st = &mut *guard;
        if !st.leading || st.followers.is_empty() {
            return;
        }
        let end = st.base + st.buf.len() as u64;
        match st.open_write.as_mut() {
            Some(w)
                if w.file == file.0
                    && w.next_offset == offset
                    && w.op_end == end
                    && w.len_at >= st.base
                    && (w.len as usize).saturating_add(total) <= u32::MAX as usize =>
            {
                w.len += total as u32;
                w.next_offset += total as u64;
                let at = (w.len_at - st.base) as usize;
                st.buf[at..at + 4].copy_from_slice(&w.len.to_le_bytes());
                for p in parts {
                    st.buf.extend_from_slice(p);
                }
                w.op_end = st.base + st.buf.len() as u64;
            }
            _ => {
                wire::put_write(&mut st.buf, file.0, offset, parts);
                st.open_write = Some(OpenWrite {
                    file: file.0,
                    next_offset: offset + total as u64,
                    len_at: end + wire::WRITE_LEN_AT as u64,
                    op_end: st.base + st.buf.len() as u64,
                    len: total as u32,
                });
            }
        }
        if st.buf.len() >= SEAL_AT {
            drop(guard);
            self.data_cv.notify_all();
        }
    }

    fn set_len(&self, path: &Path, len: u64) {
        if let Some(rel) = self.relative(path) {
            self.append(|buf| wire::put_set_len(buf, &rel, len));
        }
    }

    fn replace(&self, path: &Path, contents: &[u8]) {
        if let Some(rel) = self.relative(path) {
            self.append(|buf| wire::put_replace(buf, &rel, contents));
        }
    }

    fn remove(&self, path: &Path) {
        let Some(rel) = self.relative(path) else { return };
        let mut st = self.state.lock();
        let prefix = format!("{rel}/");
        let gone: Vec<Arc<str>> = st
            .by_path
            .keys()
            .filter(|p| p.as_ref() == rel.as_str() || p.starts_with(&prefix))
            .cloned()
            .collect();
        for p in gone {
            if let Some(id) = st.by_path.remove(&p) {
                st.paths.remove(&id);
            }
        }
        if st.leading && !st.followers.is_empty() {
            wire::put_remove(&mut st.buf, &rel);
        }
    }

    fn mark(&self) -> u64 {
        let mut st = self.state.lock();
        let end = st.base + st.buf.len() as u64;
        st.flush_to = st.flush_to.max(end);
        drop(st);
        // The followers write and sync while the leader syncs.
        self.data_cv.notify_all();
        end
    }

    fn wait_replicated(&self, mark: u64) -> bool {
        let deadline = Instant::now() + self.ack_timeout;
        self.data_cv.notify_all();
        loop {
            if !self.lease.valid() {
                return false;
            }
            let mut st = self.state.lock();
            if !st.leading {
                return false;
            }
            let mut lagging = Vec::new();
            let mut gone = Vec::new();
            for (id, f) in &st.followers {
                if f.in_isr && f.acked < mark {
                    match !f.connected || f.cut_off {
                        true => gone.push(*id),
                        false => lagging.push(*id),
                    }
                }
            }
            if lagging.is_empty() && gone.is_empty() {
                return true;
            }
            // A follower whose connection is gone cannot catch up: drop it at
            // once. One that is merely slow gets until the deadline.
            if Instant::now() >= deadline {
                gone.append(&mut lagging);
            }
            if !gone.is_empty() {
                drop(st);
                if !self.drop_from_isr(gone) {
                    return false;
                }
                continue;
            }
            self.ack_cv.wait_until(&mut st, deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::wire::{Op, OpReader};

    fn log(dir: &Path, lease: bool) -> Arc<ReplicationLog> {
        let clock = Arc::new(LeaseClock::default());
        if lease {
            clock.renewed(Instant::now(), Duration::from_secs(60));
        }
        Arc::new(ReplicationLog::new(dir, Duration::from_millis(200), clock))
    }

    /// ISR changes seen: (added, removed).
    type Changes = Arc<Mutex<Vec<(Vec<u32>, Vec<u32>)>>>;

    /// Leads with an ISR "etcd" that answers every change with `answer`, and
    /// records the changes.
    fn lead(log: &ReplicationLog, answer: bool) -> Changes {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<IsrChange>();
        log.start_leading(tx);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            while let Some(change) = rx.blocking_recv() {
                record.lock().push((change.add.clone(), change.remove.clone()));
                let _ = change.reply.send(answer);
            }
        });
        seen
    }

    fn ops(chunks: &[Arc<Chunk>]) -> Vec<String> {
        let mut out = Vec::new();
        for c in chunks {
            let mut frame = Vec::new();
            let kind = wire::read_frame(&mut c.frame.as_slice(), &mut frame).unwrap();
            assert_eq!(kind, FrameKind::Data);
            let raw = wire::decompress(&frame[8..]).unwrap();
            let mut r = OpReader::new(&raw);
            while let Some(op) = r.next_op().unwrap() {
                out.push(match op {
                    Op::Register { id, path } => format!("register {id} {path}"),
                    Op::Write { id, offset, data } => format!("write {id}@{offset} {}", String::from_utf8_lossy(data)),
                    Op::SetLen { path, len } => format!("len {path} {len}"),
                    Op::Replace { path, data } => format!("replace {path} {}", String::from_utf8_lossy(data)),
                    Op::Remove { path } => format!("remove {path}"),
                });
            }
        }
        out
    }

    #[test]
    fn nothing_is_logged_or_confirmed_unless_leading() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path(), true);
        let f = log.register(&dir.path().join("v/q/msgs.0000000001")).unwrap();
        log.write_at(f, 0, &[b"abc"]);
        assert_eq!(log.end(), 0);
        assert!(!log.wait_replicated(0), "a follower confirms nothing");
        assert!(log.register(&dir.path().join("v/transient/q/msgs.1")).is_none());
        assert!(log.register(Path::new("/elsewhere/file")).is_none());
    }

    #[test]
    fn a_leader_without_followers_confirms_only_while_its_lease_holds() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path(), true);
        lead(&log, true);
        assert!(log.wait_replicated(log.mark()));
        log.lease.invalidate();
        assert!(!log.wait_replicated(log.mark()));
    }

    #[test]
    fn changes_reach_a_follower_in_order_after_its_registrations() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path(), true);
        lead(&log, true);
        let seg = log.register(&dir.path().join("v/q/msgs.0000000001")).unwrap();
        let (conn, start, regs) = log.add_follower(7, "peer".into()).unwrap();
        let mut r = OpReader::new(&regs);
        assert!(matches!(
            r.next_op().unwrap(),
            Some(Op::Register {
                path: "v/q/msgs.0000000001",
                ..
            })
        ));
        log.write_at(seg, 4, &[b"he", b"llo"]);
        log.replace(&dir.path().join("users.json"), b"[]");
        log.set_len(&dir.path().join("v/q/msgs.0000000001"), 9);
        log.remove(&dir.path().join("v/q"));
        let chunks = log
            .chunks_after(7, conn, start, start, Duration::from_millis(10))
            .unwrap()
            .chunks;
        assert_eq!(
            ops(&chunks),
            vec![
                format!("write {}@4 hello", seg.0),
                "replace users.json []".into(),
                "len v/q/msgs.0000000001 9".into(),
                "remove v/q".into(),
            ]
        );
        assert_eq!(chunks.last().unwrap().end, log.end());
    }

    #[test]
    fn writes_that_continue_each_other_share_one_operation() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path(), true);
        lead(&log, true);
        let a = log.register(&dir.path().join("q/msgs.0000000001")).unwrap();
        let b = log.register(&dir.path().join("q/acks.0000000001")).unwrap();
        let (conn, start, _) = log.add_follower(4, "peer".into()).unwrap();
        log.write_at(a, 0, &[b"ab"]);
        log.write_at(a, 2, &[b"c", b"d"]);
        log.write_at(b, 4, &[b"x"]);
        log.write_at(a, 4, &[b"e"]);
        log.write_at(a, 9, &[b"z"]);
        log.write_at(a, 10, &[b"y"]);
        let sent = log
            .chunks_after(4, conn, start, start, Duration::from_millis(10))
            .unwrap()
            .chunks;
        // A seal ends the run: the next write starts a new op.
        log.write_at(a, 11, &[b"w"]);
        let from = sent.last().unwrap().end;
        let next = log.chunks_after(4, conn, from, start, Duration::from_millis(10));
        let mut all = sent.clone();
        all.extend(next.unwrap().chunks);
        let (a, b) = (a.0, b.0);
        assert_eq!(
            ops(&all),
            vec![
                format!("write {a}@0 abcd"),
                format!("write {b}@4 x"),
                format!("write {a}@4 e"),
                format!("write {a}@9 zy"),
                format!("write {a}@11 w"),
            ]
        );
    }

    #[test]
    fn a_sender_is_told_at_once_when_a_confirm_waits_for_what_it_sent() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path(), true);
        lead(&log, true);
        let seg = log.register(&dir.path().join("q/msgs.0000000001")).unwrap();
        let (conn, start, _) = log.add_follower(5, "127.0.0.1:4000".into()).unwrap();
        assert!(log.is_follower_address("127.0.0.1".parse().unwrap()));
        assert!(!log.is_follower_address("10.0.0.1".parse().unwrap()));
        // Sent while nobody waits: nothing asks for a sync.
        log.write_at(seg, 0, &[b"abc"]);
        let out = log
            .chunks_after(5, conn, start, start, Duration::from_millis(50))
            .unwrap();
        let sent = out.chunks.last().unwrap().end;
        assert!(out.flush_to < sent);
        // A confirm now waits for those bytes: the sender returns long
        // before its wait is over, with nothing new but the flush offset.
        let mark = log.mark();
        let t0 = Instant::now();
        let out = log.chunks_after(5, conn, sent, start, Duration::from_secs(30)).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(20));
        assert!(out.chunks.is_empty());
        assert_eq!(out.flush_to, mark);
        // Once it asked for that sync, it waits for new bytes again.
        let t0 = Instant::now();
        let out = log
            .chunks_after(5, conn, sent, sent, Duration::from_millis(100))
            .unwrap();
        assert!(out.chunks.is_empty() && t0.elapsed() >= Duration::from_millis(100));
    }

    #[test]
    fn a_lagging_follower_is_dropped_from_the_isr_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path(), true);
        let changes = lead(&log, true);
        let seg = log.register(&dir.path().join("q/msgs.0000000001")).unwrap();
        let (conn, start, _) = log.add_follower(9, "peer".into()).unwrap();
        log.set_sync_target(9, conn, start);
        assert!(log.ack(9, conn, start), "holding its target makes it eligible");
        assert!(log.join_isr(9, conn));
        log.write_at(seg, 4, &[b"x"]);
        let mark = log.mark();
        // It acks in time: the wait ends with it still in the ISR.
        let acker = {
            let log = log.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                log.ack(9, conn, mark);
            })
        };
        assert!(log.wait_replicated(mark));
        acker.join().unwrap();
        assert!(log.in_isr(9));
        // It stops acking: at the deadline it leaves the ISR and is cut off.
        log.write_at(seg, 5, &[b"y"]);
        assert!(log.wait_replicated(log.mark()));
        assert!(!log.in_isr(9));
        assert!(
            log.chunks_after(9, conn, mark, mark, Duration::from_millis(1))
                .is_none()
        );
        assert_eq!(*changes.lock(), vec![(vec![9], vec![]), (vec![], vec![9])]);
    }

    #[test]
    fn nothing_is_confirmed_when_the_isr_cannot_be_changed() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path(), true);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<IsrChange>();
        log.start_leading(tx);
        let refuse_removals = std::thread::spawn(move || {
            while let Some(change) = rx.blocking_recv() {
                let _ = change.reply.send(change.remove.is_empty());
            }
        });
        let seg = log.register(&dir.path().join("q/msgs.0000000001")).unwrap();
        let (conn, start, _) = log.add_follower(3, "peer".into()).unwrap();
        log.set_sync_target(3, conn, start);
        log.ack(3, conn, start);
        assert!(log.join_isr(3, conn));
        // Gone without acking, and etcd refuses to drop it (leadership lost).
        log.write_at(seg, 4, &[b"z"]);
        log.follower_gone(3, conn);
        assert!(!log.wait_replicated(log.mark()));
        log.stop_leading();
        refuse_removals.join().unwrap();
    }
}
