//! A queue's messages on disk: an ordered run of segments, a read cursor, the set of
//! requeued positions, and recovery of all of it at start-up.
//!
//! Ready messages cost no heap: they are found by walking the segments from the read
//! cursor. Only requeued messages and the acks recovered from disk are held in
//! memory. The read cursor is itself kept in a small mapped file, so that after a
//! crash the messages that had been delivered but not acked come back flagged as
//! redelivered.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};

use super::mmap::Map;
use super::record::{self, RecordView};
use super::segment::{SEGMENT_HEADER, Segment};
use super::spare_segments;

/// Where a message lives: segment number and byte offset of its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegPos {
    /// Segment number.
    pub seg: u32,
    /// Byte offset of the record in the segment.
    pub pos: u32,
}

/// Name of the file holding the read cursor.
const CURSOR_FILE: &str = "cursor";

/// Per-queue message storage.
pub struct MessageStore {
    dir: PathBuf,
    label: String,
    segment_size: usize,
    segments: BTreeMap<u32, Segment>,
    write_seg: u32,
    read: SegPos,
    requeued: BTreeSet<SegPos>,
    /// Acks loaded at recovery for positions ahead of the cursor, per segment.
    recovered_acks: HashMap<u32, Vec<u32>>,
    /// Messages before this position were delivered before a restart.
    redeliver_until: SegPos,
    cursor: Option<Map>,
    ready: u64,
    /// Body bytes of the ready messages; `None` until counted after a restart.
    ready_bytes: Option<u64>,
}

fn open_cursor(dir: &Path) -> io::Result<Map> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(CURSOR_FILE))?;
    if file.metadata()?.len() < 8 {
        file.set_len(8)?;
    }
    // SAFETY: see `segment::map`; the cursor file belongs to this store alone.
    unsafe { Map::map_mut(&file) }
}

impl MessageStore {
    /// Opens (or creates) the store in `dir`, recovering every intact message that
    /// was not acked. Damage is logged (naming `label`, the queue) and skipped.
    pub fn open(dir: &Path, label: &str, segment_size: u64) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        // Spares are only safe to reuse while segment numbers keep growing,
        // which they do only within one opening of the store: those of an
        // earlier opening are deleted.
        spare_segments::forget(dir);
        let mut ids = Vec::new();
        let mut leftovers = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if spare_segments::is_spare_name(name) {
                match std::fs::remove_file(entry.path()) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => continue,
                }
            }
            let Some((kind, id)) = name.split_once('.') else {
                continue;
            };
            let Ok(id) = id.parse::<u32>() else { continue };
            match kind {
                "msgs" => ids.push(id),
                "acks" | "meta" => leftovers.push((id, name.to_string())),
                _ => {}
            }
        }
        ids.sort_unstable();
        // Ack logs and metadata whose messages file is gone: say so, and remove them
        // so that a new segment of that number does not inherit them.
        for (id, name) in &leftovers {
            if ids.binary_search(id).is_err() {
                tracing::warn!(queue = %label, segment = id, "messages file missing; removing its {name}");
                std::fs::remove_file(dir.join(name))?;
                super::replication::removed(&dir.join(name));
            }
        }
        let cursor = open_cursor(dir)?;
        let word = |i: usize| u32::from_le_bytes([cursor[i], cursor[i + 1], cursor[i + 2], cursor[i + 3]]);
        let redeliver_until = SegPos {
            seg: word(0),
            pos: word(4),
        };
        let mut store = MessageStore {
            dir: dir.to_path_buf(),
            label: label.to_string(),
            segment_size: segment_size.max(4096) as usize,
            segments: BTreeMap::new(),
            write_seg: 0,
            read: SegPos {
                seg: 0,
                pos: SEGMENT_HEADER as u32,
            },
            requeued: BTreeSet::new(),
            recovered_acks: HashMap::new(),
            redeliver_until,
            cursor: Some(cursor),
            ready: 0,
            ready_bytes: None,
        };
        for id in ids {
            match Segment::open(dir, id) {
                Ok((seg, acks, damage)) => {
                    for d in damage {
                        tracing::warn!(queue = %label, segment = id, "damaged segment: {d}");
                    }
                    if seg.msgs as usize <= acks.len() {
                        seg.remove()?;
                        continue;
                    }
                    store.ready += u64::from(seg.msgs) - acks.len() as u64;
                    if !acks.is_empty() {
                        store.recovered_acks.insert(id, acks);
                    }
                    store.segments.insert(id, seg);
                }
                Err(e) => {
                    // Skipping it would let new messages take its number and
                    // overwrite it: the store does not open, and the queue is
                    // closed until the file is fixed (as LavinMQ does).
                    tracing::error!(queue = %label, segment = id, "cannot open segment: {e}");
                    return Err(io::Error::new(
                        e.kind(),
                        format!("segment {}: {e}", super::segment::msgs_name(id)),
                    ));
                }
            }
        }
        let next = store.segments.keys().next_back().map_or(1, |id| id + 1);
        store.read.seg = store.segments.keys().next().copied().unwrap_or(next);
        // The write segment is created by the first publish, so that an idle queue
        // reserves no disk space.
        store.write_seg = next;
        Ok(store)
    }

    fn open_write_segment(&mut self, id: u32, min: usize) -> io::Result<()> {
        let seg = Segment::create(&self.dir, id, self.segment_size.max(SEGMENT_HEADER + min))?;
        self.segments.insert(id, seg);
        self.write_seg = id;
        Ok(())
    }

    /// Directory holding the segments.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Messages ready for delivery (not delivered, or requeued).
    pub fn ready_count(&self) -> u64 {
        self.ready
    }

    /// Appends a message and returns its position. Fails (and stores nothing) when
    /// a new segment cannot be created, e.g. on a full disk.
    pub fn push(
        &mut self,
        timestamp: i64,
        exchange: &str,
        routing_key: &str,
        properties: &[u8],
        body: &[u8],
    ) -> io::Result<SegPos> {
        let total = record::size(exchange, routing_key, properties, body)?;
        let fits = match self.segments.get(&self.write_seg) {
            Some(s) => s.free() >= total,
            None => {
                self.open_write_segment(self.write_seg, total)?;
                true
            }
        };
        if !fits {
            let sealed = self.write_seg;
            self.open_write_segment(sealed + 1, total)?;
            if let Some(seg) = self.segments.get_mut(&sealed) {
                seg.seal()?;
            }
            self.collect(sealed)?;
        }
        let seg = self
            .segments
            .get_mut(&self.write_seg)
            .ok_or_else(|| io::Error::other("write segment missing"))?;
        let pos = seg.append(timestamp, exchange, routing_key, properties, body)?;
        self.ready += 1;
        if let Some(b) = self.ready_bytes.as_mut() {
            *b += body.len() as u64;
        }
        Ok(SegPos {
            seg: self.write_seg,
            pos,
        })
    }

    /// The next ready message without taking it: requeued ones first, in their
    /// original order. Returns its position and whether it was delivered before.
    pub fn peek(&mut self) -> Option<(SegPos, bool)> {
        if let Some(p) = self.requeued.first().copied() {
            self.map_segment(p.seg);
            return Some((p, true));
        }
        let (here, _) = self.settle_read()?;
        Some((here, here < self.redeliver_until))
    }

    /// Takes the next ready message: requeued ones first, in their original order.
    /// Returns its position and whether it was delivered before.
    pub fn shift(&mut self) -> Option<(SegPos, bool)> {
        if let Some(p) = self.requeued.pop_first() {
            self.ready = self.ready.saturating_sub(1);
            self.map_segment(p.seg);
            self.forget_bytes(p);
            return Some((p, true));
        }
        let (here, next) = self.settle_read()?;
        self.read.pos = next;
        if let Some(seg) = self.segments.get_mut(&here.seg) {
            seg.seen += 1;
            seg.reading_at(next as usize);
        }
        self.ready = self.ready.saturating_sub(1);
        self.save_cursor();
        self.forget_bytes(here);
        Some((here, here < self.redeliver_until))
    }

    fn map_segment(&mut self, id: u32) {
        if let Some(seg) = self.segments.get_mut(&id)
            && let Err(e) = seg.ensure_mapped()
        {
            tracing::error!(queue = %self.label, segment = id, "cannot map segment: {e}");
        }
    }

    /// Subtracts the body of the message at `p` from the ready bytes, if counted.
    fn forget_bytes(&mut self, p: SegPos) {
        if self.ready_bytes.is_some() {
            let n = self.read_at(p).map_or(0, |v| v.body.len() as u64);
            if let Some(b) = self.ready_bytes.as_mut() {
                *b = b.saturating_sub(n);
            }
        }
    }

    /// Moves the read cursor onto the next unread record that is neither acked
    /// nor damaged, without taking it. Returns its position and where the record
    /// after it starts.
    fn settle_read(&mut self) -> Option<(SegPos, u32)> {
        loop {
            let seg = self.segments.get_mut(&self.read.seg)?;
            if let Err(e) = seg.ensure_mapped() {
                tracing::error!(queue = %self.label, segment = seg.id, "cannot map segment, skipped: {e}");
                if !self.leave_read_segment() {
                    return None;
                }
                continue;
            }
            match seg.step(self.read.pos) {
                Ok(Some(next)) => {
                    let here = self.read;
                    if !self.recovered_acks.is_empty()
                        && let Some(acks) = self.recovered_acks.get(&here.seg)
                        && acks.binary_search(&here.pos).is_ok()
                    {
                        self.read.pos = next;
                        continue;
                    }
                    return Some((here, next));
                }
                Ok(None) => {
                    if !self.leave_read_segment() {
                        return None;
                    }
                }
                Err(resume) => {
                    tracing::warn!(
                        queue = %self.label,
                        segment = self.read.seg,
                        "damaged record at offset {}, skipped to offset {resume}",
                        self.read.pos
                    );
                    self.read.pos = resume;
                }
            }
        }
    }

    /// Body bytes of the ready messages. After a restart they are counted once, by
    /// walking the stored records, on the first call.
    pub fn ready_bytes(&mut self) -> u64 {
        if let Some(b) = self.ready_bytes {
            return b;
        }
        let mut total = 0u64;
        for p in self.requeued.clone() {
            self.map_segment(p.seg);
            total += self.read_at(p).map_or(0, |v| v.body.len() as u64);
        }
        let ids: Vec<u32> = self.segments.range(self.read.seg..).map(|(id, _)| *id).collect();
        for id in ids {
            self.map_segment(id);
            let Some(seg) = self.segments.get(&id) else { continue };
            let acks = self.recovered_acks.get(&id);
            let mut pos = if id == self.read.seg {
                self.read.pos
            } else {
                SEGMENT_HEADER as u32
            };
            loop {
                match seg.step(pos) {
                    Ok(Some(next)) => {
                        if acks.is_none_or(|a| a.binary_search(&pos).is_err())
                            && let Some(rec) = seg.record_at(pos)
                            && let Ok(view) = record::parse(rec)
                        {
                            total += view.body.len() as u64;
                        }
                        pos = next;
                    }
                    Ok(None) => break,
                    Err(resume) => pos = resume,
                }
            }
        }
        self.ready_bytes = Some(total);
        total
    }

    /// Moves the read cursor to the next segment, settling the count of the one
    /// left behind (damage found while reading lowers it). False at the write
    /// segment, where there is nothing further to read.
    fn leave_read_segment(&mut self) -> bool {
        if self.read.seg == self.write_seg {
            return false;
        }
        let old = self.read.seg;
        let recovered = self.recovered_acks.remove(&old).map_or(0, |a| a.len() as u32);
        if let Some(seg) = self.segments.get_mut(&old) {
            let real = seg.seen + recovered;
            if real < seg.msgs {
                self.ready = self.ready.saturating_sub(u64::from(seg.msgs - real));
                seg.msgs = real;
            }
            if !self.requeued.iter().any(|p| p.seg == old) {
                seg.unmap();
            }
        }
        let Some(next) = self.segments.range(old + 1..).next().map(|(id, _)| *id) else {
            return false;
        };
        self.read = SegPos {
            seg: next,
            pos: SEGMENT_HEADER as u32,
        };
        if let Err(e) = self.collect(old) {
            tracing::warn!(queue = %self.label, segment = old, "cannot delete segment: {e}");
        }
        true
    }

    fn save_cursor(&mut self) {
        if let Some(c) = self.cursor.as_mut() {
            c[0..4].copy_from_slice(&self.read.seg.to_le_bytes());
            c[4..8].copy_from_slice(&self.read.pos.to_le_bytes());
        }
    }

    /// A zero-copy view of the message at `p` (its segment must be mapped, which
    /// `shift` ensures for the positions it returns).
    pub fn read_at(&self, p: SegPos) -> Option<RecordView<'_>> {
        let rec = self.segments.get(&p.seg)?.record_at(p.pos)?;
        record::parse(rec).ok()
    }

    /// A view of the message at `p`, mapping its segment first if the reader
    /// already left it (for messages held long after they were taken).
    pub fn read_mapped(&mut self, p: SegPos) -> Option<RecordView<'_>> {
        self.map_segment(p.seg);
        self.read_at(p)
    }

    /// Permanently removes a delivered message.
    pub fn ack(&mut self, p: SegPos) -> io::Result<()> {
        let Some(seg) = self.segments.get_mut(&p.seg) else {
            return Ok(());
        };
        seg.ack(p.pos)?;
        self.collect(p.seg)
    }

    /// Deletes segment `id` once every message in it is removed and it is no longer
    /// written to or read from.
    fn collect(&mut self, id: u32) -> io::Result<()> {
        if id == self.write_seg || id == self.read.seg {
            return Ok(());
        }
        if let Some(seg) = self.segments.get(&id)
            && seg.acked >= seg.msgs
            && let Some(seg) = self.segments.remove(&id)
        {
            seg.retire()?;
        }
        Ok(())
    }

    /// Puts a delivered message back; it keeps its place in the queue order.
    pub fn requeue(&mut self, p: SegPos) {
        if self.requeued.insert(p) {
            self.ready += 1;
            if self.ready_bytes.is_some() {
                self.map_segment(p.seg);
                let n = self.read_at(p).map_or(0, |v| v.body.len() as u64);
                if let Some(b) = self.ready_bytes.as_mut() {
                    *b += n;
                }
            }
        }
    }

    /// Removes every ready message, returning how many there were.
    pub fn purge(&mut self) -> io::Result<u64> {
        let mut n = 0;
        while let Some((p, _)) = self.shift() {
            self.ack(p)?;
            n += 1;
        }
        let ids: Vec<u32> = self.segments.keys().copied().collect();
        for id in ids {
            self.collect(id)?;
        }
        Ok(n)
    }

    /// Number of segment files (for tests and statistics).
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(s: &mut MessageStore, body: &str) -> SegPos {
        s.push(1, "ex", "rk", &[], body.as_bytes()).unwrap()
    }

    fn body(s: &MessageStore, p: SegPos) -> String {
        String::from_utf8(s.read_at(p).unwrap().body.to_vec()).unwrap()
    }

    fn open(dir: &Path) -> MessageStore {
        MessageStore::open(dir, "q", 4096).unwrap()
    }

    #[test]
    fn fifo_requeue_and_recovery() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        for i in 0..200 {
            push(&mut s, &format!("m{i}"));
        }
        assert_eq!(s.ready_count(), 200);
        let (a, r) = s.shift().unwrap();
        assert!(!r);
        assert_eq!(body(&s, a), "m0");
        let (b, _) = s.shift().unwrap();
        s.requeue(a);
        let (again, r) = s.shift().unwrap();
        assert!(r);
        assert_eq!(again, a);
        s.ack(a).unwrap();
        s.ack(b).unwrap();
        assert_eq!(s.ready_count(), 198);
        drop(s);
        let mut s = open(dir.path());
        assert_eq!(s.ready_count(), 198);
        let (p, redelivered) = s.shift().unwrap();
        assert_eq!(body(&s, p), "m2");
        assert!(!redelivered);
        assert_eq!(s.purge().unwrap(), 197);
        s.ack(p).unwrap();
        assert_eq!(s.ready_count(), 0);
    }

    #[test]
    fn delivered_but_unacked_messages_come_back_redelivered() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        for i in 0..10 {
            push(&mut s, &format!("m{i}"));
        }
        let (a, _) = s.shift().unwrap();
        let (_b, _) = s.shift().unwrap();
        let (_c, _) = s.shift().unwrap();
        s.ack(a).unwrap();
        drop(s);
        let mut s = open(dir.path());
        assert_eq!(s.ready_count(), 9);
        let mut got = Vec::new();
        while let Some((p, r)) = s.shift() {
            got.push((body(&s, p), r));
        }
        assert_eq!(got[0], ("m1".to_string(), true));
        assert_eq!(got[1], ("m2".to_string(), true));
        assert_eq!(got[2], ("m3".to_string(), false));
        assert_eq!(got.len(), 9);
    }

    #[test]
    fn large_message_gets_own_segment() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        let big = "x".repeat(100_000);
        push(&mut s, "small");
        let p = push(&mut s, &big);
        push(&mut s, "after");
        let mut order = Vec::new();
        while let Some((q, _)) = s.shift() {
            order.push(body(&s, q));
        }
        assert_eq!(order, vec!["small".to_string(), big, "after".to_string()]);
        let _ = p;
    }

    #[test]
    fn fully_acked_segments_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        for i in 0..500 {
            push(&mut s, &format!("message number {i}"));
        }
        assert!(s.segment_count() > 3);
        while let Some((p, _)) = s.shift() {
            s.ack(p).unwrap();
        }
        push(&mut s, "tail");
        assert!(s.segment_count() <= 2, "{} segments left", s.segment_count());
    }

    #[test]
    fn reused_segment_files_recover_exactly_their_new_messages() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        for round in 0..3 {
            for i in 0..300 {
                push(&mut s, &format!("round {round} message {i:03}"));
            }
            while let Some((p, _)) = s.shift() {
                s.ack(p).unwrap();
            }
        }
        for i in 0..300 {
            push(&mut s, &format!("kept message {i:03}"));
        }
        // A crash: nothing sealed, the files as the kernel holds them.
        drop(s);
        let mut s = open(dir.path());
        assert_eq!(s.ready_count(), 300);
        let mut i = 0;
        while let Some((p, _)) = s.shift() {
            assert_eq!(body(&s, p), format!("kept message {i:03}"));
            i += 1;
        }
        assert_eq!(i, 300);
    }

    #[test]
    fn spares_left_by_an_earlier_run_are_deleted_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let spare = dir.path().join("spare-4000000000.tmp");
        std::fs::write(&spare, b"stale").unwrap();
        let _s = open(dir.path());
        assert!(!spare.exists());
    }
}
