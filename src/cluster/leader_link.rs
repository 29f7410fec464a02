//! The leader's end of one follower's replication connection: the handshake,
//! the snapshot (the follower fetches only files whose checksum differs), then
//! the stream of changes, while a second thread reads the follower's acks.
//!
//! Each connection runs on its own threads with blocking I/O: file reads and
//! hashing are blocking anyway, and a follower that stalls stalls only them.

use std::io::{BufWriter, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq;

use super::log::ReplicationLog;
use super::snapshot;
use super::wire::{self, FrameKind, WireError};

/// How long a peer may take to send its handshake, or the follower to answer
/// the file list (it hashes its own files meanwhile).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const FILE_LIST_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest time a follower holds streamed bytes without being asked to sync
/// and acknowledge them (bounds the lag shown when nobody waits for them).
const SYNC_EVERY: Duration = Duration::from_millis(100);
/// Pieces in which snapshot files are sent.
const FILE_PIECE: usize = 1 << 20;

/// What every follower connection needs from the leader.
pub struct LinkContext {
    /// The replication log.
    pub log: Arc<ReplicationLog>,
    /// The cluster's shared secret.
    pub secret: String,
    /// This leader's client ports etc. (JSON), for the followers' proxies.
    pub info: Vec<u8>,
}

/// Handshake answers.
const OK: u8 = 0;
const BAD_SECRET: u8 = 1;
const NOT_LEADER: u8 = 2;

/// Serves one follower until it disconnects or is cut off; errors are logged.
pub fn serve(stream: TcpStream, ctx: Arc<LinkContext>) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".to_string());
    if let Err(e) = handle(stream, &ctx, &peer) {
        tracing::warn!(peer = %peer, "replication connection closed: {e}");
    }
}

fn handle(stream: TcpStream, ctx: &LinkContext, peer: &str) -> Result<(), WireError> {
    let _ = stream.set_nodelay(true);
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut reader = stream.try_clone()?;
    let mut writer = BufWriter::with_capacity(256 * 1024, stream.try_clone()?);
    let mut magic = [0u8; 8];
    reader.read_exact(&mut magic)?;
    if &magic != wire::MAGIC {
        return Err(WireError::BadMagic);
    }
    let mut len = [0u8; 1];
    reader.read_exact(&mut len)?;
    let mut secret = vec![0u8; len[0] as usize];
    reader.read_exact(&mut secret)?;
    let mut id = [0u8; 4];
    reader.read_exact(&mut id)?;
    let id = u32::from_le_bytes(id);
    if !bool::from(secret.ct_eq(ctx.secret.as_bytes())) {
        writer.write_all(&[BAD_SECRET])?;
        writer.flush()?;
        return Err(WireError::Malformed("handshake: wrong cluster secret"));
    }
    let Some((conn, start, regs)) = ctx.log.add_follower(id, peer.to_string()) else {
        writer.write_all(&[NOT_LEADER])?;
        writer.flush()?;
        return Ok(());
    };
    let name = super::node_id::format(id);
    tracing::info!(follower = %name, peer = %peer, "follower connected, sending snapshot");
    let result = stream_to(&stream, reader, writer, ctx, id, conn, start, regs);
    ctx.log.follower_gone(id, conn);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    ctx.log.remove_disconnected();
    tracing::info!(follower = %name, "follower disconnected");
    result
}

#[allow(clippy::too_many_arguments)]
fn stream_to(
    stream: &TcpStream,
    mut reader: TcpStream,
    mut w: BufWriter<TcpStream>,
    ctx: &LinkContext,
    id: u32,
    conn: u64,
    start: u64,
    regs: Vec<u8>,
) -> Result<(), WireError> {
    w.write_all(&[OK])?;
    w.write_all(&(ctx.info.len() as u32).to_le_bytes())?;
    w.write_all(&ctx.info)?;
    let mut payload = start.to_le_bytes().to_vec();
    payload.extend_from_slice(&wire::compress(&regs));
    wire::write_frame(&mut w, FrameKind::Data, &payload)?;
    // The snapshot: the follower asks for the files that differ.
    let root = ctx.log.data_dir().to_path_buf();
    let list = snapshot::list(&root)?;
    wire::write_frame(&mut w, FrameKind::FileList, &wire::compress(&snapshot::encode(&list)))?;
    w.flush()?;
    stream.set_read_timeout(Some(FILE_LIST_TIMEOUT))?;
    let mut count = [0u8; 4];
    reader.read_exact(&mut count)?;
    let count = u32::from_le_bytes(count);
    let mut wanted = Vec::new();
    for _ in 0..count {
        wanted.push(wire::read_path(&mut reader)?);
    }
    let mut sent_bytes = 0u64;
    let mut piece = vec![0u8; FILE_PIECE];
    for path in &wanted {
        let mut begin = Vec::new();
        wire::put_path(&mut begin, path);
        match std::fs::File::open(root.join(path)) {
            Ok(mut file) => {
                begin.push(1);
                wire::write_frame(&mut w, FrameKind::FileBegin, &begin)?;
                loop {
                    let n = file.read(&mut piece)?;
                    if n == 0 {
                        break;
                    }
                    sent_bytes += n as u64;
                    wire::write_frame(&mut w, FrameKind::FileData, &wire::compress(&piece[..n]))?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                begin.push(0);
                wire::write_frame(&mut w, FrameKind::FileBegin, &begin)?;
            }
            Err(e) => return Err(e.into()),
        }
        wire::write_frame(&mut w, FrameKind::FileData, &wire::compress(&[]))?;
    }
    let target = ctx.log.end();
    ctx.log.set_sync_target(id, conn, target);
    wire::write_frame(&mut w, FrameKind::SnapshotEnd, &[])?;
    w.flush()?;
    tracing::info!(
        follower = %super::node_id::format(id),
        "snapshot sent: {} of {} files differed ({sent_bytes} bytes)",
        wanted.len(),
        list.len()
    );
    stream.set_read_timeout(None)?;
    let acks = {
        let log = ctx.log.clone();
        let closer = stream.try_clone()?;
        std::thread::Builder::new()
            .name("lavinmq-repl-acks".into())
            .spawn(move || read_acks(reader, &log, id, conn, closer))?
    };
    let mut pos = start;
    let mut told_in_sync = false;
    // The follower syncs and acknowledges only when asked: at once when a
    // confirm waits for what it was sent, else every SYNC_EVERY while data
    // flows and when the stream goes idle. Transient traffic then costs it a
    // sync a tenth of a second, not one per chunk.
    let mut sync_asked_to = start;
    let mut sync_asked_at = Instant::now();
    let result = loop {
        let Some(out) = ctx
            .log
            .chunks_after(id, conn, pos, sync_asked_to, Duration::from_millis(200))
        else {
            break Ok(());
        };
        for c in &out.chunks {
            if let Err(e) = w.write_all(&c.frame) {
                return Err(e.into());
            }
            pos = c.end;
        }
        if !told_in_sync && ctx.log.in_isr(id) {
            wire::write_frame(&mut w, FrameKind::InSync, &[])?;
            told_in_sync = true;
        }
        let due = out.flush_to > sync_asked_to || out.chunks.is_empty() || sync_asked_at.elapsed() >= SYNC_EVERY;
        if pos > sync_asked_to && due {
            wire::write_frame(&mut w, FrameKind::Sync, &[])?;
            sync_asked_to = pos;
            sync_asked_at = Instant::now();
        }
        if let Err(e) = w.flush() {
            break Err(e.into());
        }
    };
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let _ = acks.join();
    result
}

/// Reads the follower's acks until the connection ends; puts the follower into
/// the ISR once it holds its snapshot and everything after it.
fn read_acks(mut reader: TcpStream, log: &ReplicationLog, id: u32, conn: u64, closer: TcpStream) {
    let mut buf = [0u8; 8];
    while reader.read_exact(&mut buf).is_ok() {
        let offset = u64::from_le_bytes(buf);
        if log.ack(id, conn, offset) {
            if log.join_isr(id, conn) {
                tracing::info!(follower = %super::node_id::format(id), "follower joined the in-sync replica set");
            } else {
                tracing::warn!(follower = %super::node_id::format(id), "could not add follower to the in-sync replica set");
            }
        }
    }
    log.follower_gone(id, conn);
    let _ = closer.shutdown(std::net::Shutdown::Both);
}
