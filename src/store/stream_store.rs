//! The storage of a stream queue: an append-only run of segments where every
//! message has an offset (0, 1, 2, … since the stream was created) and is read,
//! not removed, by any number of consumers, each with its own [`StreamCursor`].
//! Retention removes whole segments from the front.
//!
//! A stream's backlog can be far larger than memory, and every reader goes
//! through it from its own offset: consumers copy the records of sealed
//! segments into a small window of their own ([`StreamStore::read_copied`]),
//! other readers map the segment and release the pages behind them and the
//! map when they leave it ([`StreamStore::read`]), so that reading a stream
//! from the start keeps the resident set bounded.
//!
//! Offsets are not stored per message: a segment's first offset is the stream's
//! start offset (kept in a small file, advanced when segments are removed) plus
//! the message counts of the segments before it.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use super::record::{self, RecordView};
use super::segment::{ReadWindow, SEGMENT_HEADER, Segment};
use super::stream_compaction::{self, Compacted, CompactionPlan, PlannedSegment};

/// File holding the offset of the first message of the first segment.
const START_FILE: &str = "stream_start";

/// Where a consumer reads next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamCursor {
    /// Segment number.
    pub seg: u32,
    /// Byte position in the segment.
    pub pos: u32,
    /// Offset of the message at that position.
    pub offset: u64,
    /// The store's [`StreamStore::epoch`] the position belongs to: after a
    /// compaction, positions are found again from the offset.
    epoch: u32,
}

/// How a read gets at the records.
enum Via<'w> {
    /// Through the segment's map, faulting in ahead of the reader and
    /// releasing behind it.
    Map,
    /// Through the map, touching only the pages of the record (a look at one
    /// message).
    Peek,
    /// Sealed segments through the reader's copy, the write segment (whose
    /// pages its writer keeps resident) through its map.
    Copy(&'w mut ReadWindow),
}

/// Steps over the record at `pos` through the segment's map (see [`Via`]).
/// `None` when the segment cannot be mapped.
fn step_mapped(seg: &mut Segment, pos: u32, via: &mut Via<'_>, label: &str) -> Option<Result<Option<u32>, u32>> {
    if let Err(e) = seg.map_lazily() {
        tracing::error!(queue = %label, segment = seg.id, "cannot map stream segment: {e}");
        return None;
    }
    match via {
        Via::Map => seg.reading_at(pos as usize),
        Via::Peek => {}
        // Caught up: the window's memory is not needed any more.
        Via::Copy(w) => w.release(),
    }
    Some(seg.step(pos))
}

/// One stream's segments.
pub struct StreamStore {
    dir: PathBuf,
    label: String,
    segment_size: usize,
    segments: BTreeMap<u32, Segment>,
    /// First offset of each segment.
    first_offsets: BTreeMap<u32, u64>,
    write_seg: u32,
    next_offset: u64,
    /// Bumped each time compaction replaces segments, whose byte positions
    /// then change (see [`StreamCursor`]).
    epoch: u32,
    /// Bytes of the segments sealed since the last compaction pass planned.
    dirty_bytes: u64,
    /// Bytes of the sealed segments the last compaction pass left.
    clean_bytes: u64,
    /// A compaction pass is out (planned, not installed yet).
    compacting: bool,
}

impl StreamStore {
    /// Opens (or creates) the stream in `dir`.
    pub fn open(dir: &Path, label: &str, segment_size: u64) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let start = super::definitions::read_json(&dir.join(START_FILE))
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        let mut ids: Vec<u32> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name();
                let name = name.to_str()?;
                if super::spare_segments::is_spare_name(name) {
                    // Removed segments whose deletion a stop cut short.
                    super::file_reaper::delete_later(e.path());
                    return None;
                }
                if name.ends_with(stream_compaction::REWRITE_SUFFIX) {
                    // A rewrite a crash cut short: its original is intact.
                    let _ = std::fs::remove_file(e.path());
                    return None;
                }
                let (kind, id) = name.split_once('.')?;
                (kind == "msgs").then(|| id.parse().ok()).flatten()
            })
            .collect();
        ids.sort_unstable();
        let mut store = StreamStore {
            dir: dir.to_path_buf(),
            label: label.to_string(),
            segment_size: segment_size.max(4096) as usize,
            segments: BTreeMap::new(),
            first_offsets: BTreeMap::new(),
            write_seg: ids.last().map_or(1, |id| id + 1),
            next_offset: start,
            epoch: 0,
            dirty_bytes: 0,
            clean_bytes: 0,
            compacting: false,
        };
        for id in ids {
            match Segment::open(dir, id) {
                Ok((seg, _acks, damage)) => {
                    for d in damage {
                        tracing::warn!(queue = %label, segment = id, "damaged stream segment: {d}");
                    }
                    store.first_offsets.insert(id, store.next_offset);
                    store.next_offset += u64::from(seg.msgs);
                    store.dirty_bytes += seg.end as u64;
                    store.segments.insert(id, seg);
                }
                Err(e) => tracing::error!(queue = %label, segment = id, "cannot open stream segment, skipped: {e}"),
            }
        }
        Ok(store)
    }

    /// Makes an empty stream start at offset `start` instead of 0, so that a
    /// stream converted from another broker keeps its offsets.
    pub fn start_at(&mut self, start: u64) -> io::Result<()> {
        if !self.segments.is_empty() {
            return Err(io::Error::other("only an empty stream can be given its first offset"));
        }
        super::definitions::write_json(&self.dir.join(START_FILE), &start.into(), true)?;
        self.next_offset = start;
        Ok(())
    }

    /// Offset the next message will get.
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Offset of the oldest message kept.
    pub fn first_offset(&self) -> u64 {
        self.first_offsets.values().next().copied().unwrap_or(self.next_offset)
    }

    /// Messages kept.
    pub fn len(&self) -> u64 {
        self.next_offset - self.first_offset()
    }

    /// True when no message is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the segments kept.
    pub fn bytes(&self) -> u64 {
        self.segments.values().map(|s| s.end as u64).sum()
    }

    /// Number of segment files.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Appends a message and returns its offset.
    pub fn push(
        &mut self,
        timestamp: i64,
        exchange: &str,
        routing_key: &str,
        properties: &[u8],
        body: &[u8],
    ) -> io::Result<u64> {
        self.append(timestamp, exchange, routing_key, properties, body, false)
    }

    /// Appends messages that differ only in their bodies (a stream
    /// publisher's frame), staged (see [`Segment::stage`]) and written to
    /// the file in one go before it returns. On an error, the messages
    /// before the failing one are kept when they could be written; the next
    /// offset says how many were stored.
    pub fn push_batch(
        &mut self,
        timestamp: i64,
        exchange: &str,
        routing_key: &str,
        properties: &[u8],
        bodies: &[&[u8]],
    ) -> io::Result<()> {
        let mut staged = Ok(());
        for body in bodies {
            staged = self
                .append(timestamp, exchange, routing_key, properties, body, true)
                .map(|_| ());
            if staged.is_err() {
                break;
            }
        }
        // A seal wrote what earlier segments staged; the write segment's
        // records are written here, also after a failure.
        let written = match self.segments.get_mut(&self.write_seg) {
            Some(seg) => {
                let count = u64::from(seg.staged_msgs());
                seg.write_staged().inspect_err(|_| self.next_offset -= count)
            }
            None => Ok(()),
        };
        staged.and(written)
    }

    fn append(
        &mut self,
        timestamp: i64,
        exchange: &str,
        routing_key: &str,
        properties: &[u8],
        body: &[u8],
        staged: bool,
    ) -> io::Result<u64> {
        let total = record::size(exchange, routing_key, properties, body)?;
        let fits = self.segments.get(&self.write_seg).map(|s| s.free() >= total);
        if fits != Some(true) {
            if fits == Some(false) {
                if let Some(s) = self.segments.get_mut(&self.write_seg) {
                    s.seal()?;
                    self.dirty_bytes += s.end as u64;
                }
                self.write_seg += 1;
            }
            let seg = Segment::create(&self.dir, self.write_seg, self.segment_size.max(SEGMENT_HEADER + total))?;
            self.segments.insert(self.write_seg, seg);
            self.first_offsets.insert(self.write_seg, self.next_offset);
        }
        let seg = self
            .segments
            .get_mut(&self.write_seg)
            .ok_or_else(|| io::Error::other("stream write segment missing"))?;
        if staged {
            seg.stage(timestamp, exchange, routing_key, properties, body)?;
        } else {
            seg.append(timestamp, exchange, routing_key, properties, body)?;
        }
        let offset = self.next_offset;
        self.next_offset += 1;
        Ok(offset)
    }

    /// The number of the segment being written.
    pub fn write_segment(&self) -> u32 {
        self.write_seg
    }

    /// A cursor at the first message kept.
    pub fn cursor_first(&self) -> StreamCursor {
        match self.first_offsets.iter().next() {
            Some((&seg, &offset)) => StreamCursor {
                seg,
                pos: SEGMENT_HEADER as u32,
                offset,
                epoch: self.epoch,
            },
            None => self.cursor_next(),
        }
    }

    /// A cursor after the last message: only new messages will be read.
    pub fn cursor_next(&self) -> StreamCursor {
        let (seg, pos) = match self.segments.get(&self.write_seg) {
            Some(s) => (self.write_seg, s.end as u32),
            None => (self.write_seg, SEGMENT_HEADER as u32),
        };
        StreamCursor {
            seg,
            pos,
            offset: self.next_offset,
            epoch: self.epoch,
        }
    }

    /// A cursor at `offset` (clamped to what is kept; past the end means next).
    pub fn cursor_at(&mut self, offset: u64) -> StreamCursor {
        if offset >= self.next_offset {
            return self.cursor_next();
        }
        let Some((&seg, &first)) = self.first_offsets.range(..).rev().find(|(_, o)| **o <= offset) else {
            return self.cursor_first();
        };
        let mut c = StreamCursor {
            seg,
            pos: SEGMENT_HEADER as u32,
            offset: first,
            epoch: self.epoch,
        };
        // Walked through a copy, which leaves no segment mapped. The cursor
        // stops before the message at `offset` or, when compaction removed
        // it, before the next one kept (a gap on the way is read past).
        let mut w = ReadWindow::default();
        loop {
            let before = c;
            match self.read_copied(&mut c, &mut w) {
                Some((o, _, _)) if o < offset => {}
                Some(_) => return before,
                None => return c,
            }
        }
    }

    /// A cursor at the first message stored at or after `timestamp_ms`.
    pub fn cursor_at_time(&mut self, timestamp_ms: i64) -> StreamCursor {
        let segs: Vec<u32> = self.segments.keys().copied().collect();
        // Start in the last segment whose first message is not newer than the target.
        let mut start = self.cursor_first();
        for id in segs {
            let c = StreamCursor {
                seg: id,
                pos: SEGMENT_HEADER as u32,
                offset: self.first_offsets.get(&id).copied().unwrap_or(0),
                epoch: self.epoch,
            };
            match self.peek_timestamp(c) {
                Some(ts) if ts <= timestamp_ms => start = c,
                _ => break,
            }
        }
        let mut c = start;
        let mut w = ReadWindow::default();
        loop {
            let before = c;
            match self.read_copied(&mut c, &mut w) {
                Some((_, ts, _)) if ts < timestamp_ms => continue,
                Some(_) => return before,
                None => return c,
            }
        }
    }

    /// The timestamp of the first message at or after `c`. The segment is left
    /// mapped only if it already was: finding a time looks at the first message
    /// of every segment, which must not keep them all mapped.
    fn peek_timestamp(&mut self, c: StreamCursor) -> Option<i64> {
        let was_mapped = self.segments.get(&c.seg).is_some_and(Segment::is_mapped);
        let mut at = c;
        let ts = self.read_via(&mut at, &mut Via::Peek).map(|(_, ts, _)| ts);
        if !was_mapped && let Some(seg) = self.segments.get_mut(&c.seg) {
            seg.unmap();
        }
        ts
    }

    /// Reads the message at the cursor and advances it: its offset, timestamp
    /// and position (for [`StreamStore::view`]). `None` at the end.
    ///
    /// The reader's pages are faulted in ahead of it and released behind it,
    /// and a segment it reads to the end is unmapped, so that reading a stream
    /// from the start keeps a few megabytes resident, not all it has read.
    /// Another reader still in that segment maps it again on its next read.
    pub fn read(&mut self, c: &mut StreamCursor) -> Option<(u64, i64, (u32, u32))> {
        self.read_via(c, &mut Via::Map)
    }

    /// [`StreamStore::read`] for a reader that goes on: the records of sealed
    /// segments are copied into its window `w` rather than mapped (see
    /// [`ReadWindow`]), and its messages are viewed with
    /// [`StreamStore::view_copied`].
    pub fn read_copied(&mut self, c: &mut StreamCursor, w: &mut ReadWindow) -> Option<(u64, i64, (u32, u32))> {
        self.read_via(c, &mut Via::Copy(w))
    }

    fn read_via(&mut self, c: &mut StreamCursor, via: &mut Via<'_>) -> Option<(u64, i64, (u32, u32))> {
        if c.epoch != self.epoch {
            // Segments were rewritten since the cursor was placed: its byte
            // position may point anywhere in the new file, and a reader's copy
            // may hold the old one.
            if let Via::Copy(w) = via {
                w.release();
            }
            *c = self.cursor_at(c.offset);
        }
        loop {
            if !self.segments.contains_key(&c.seg) {
                if c.seg >= self.write_seg {
                    // The segment for the next message is not created yet.
                    return None;
                }
                // Removed by retention: continue at the oldest kept message.
                *c = self.cursor_first();
                if !self.segments.contains_key(&c.seg) {
                    return None;
                }
            }
            let seg = self.segments.get_mut(&c.seg)?;
            let step = match via {
                Via::Copy(w) if seg.is_sealed() => seg.step_copied(c.pos, w),
                _ => step_mapped(seg, c.pos, via, &self.label)?,
            };
            match step {
                Ok(Some(next)) => {
                    seg.record_checked(c.pos, next);
                    let here = (c.seg, c.pos);
                    let rec = match via {
                        Via::Copy(w) => w.record(c.seg, c.pos).or_else(|| seg.record_at(c.pos)),
                        _ => seg.record_at(c.pos),
                    };
                    if let Some(n) = rec.and_then(record::gap_offsets) {
                        // Messages removed by compaction.
                        c.pos = next;
                        c.offset += n;
                        continue;
                    }
                    let ts = rec.and_then(record::timestamp).unwrap_or(0);
                    let offset = c.offset;
                    c.pos = next;
                    c.offset += 1;
                    return Some((offset, ts, here));
                }
                Ok(None) => self.leave_segment(c)?,
                Err(resume) => {
                    tracing::warn!(queue = %self.label, segment = c.seg, "damaged stream record skipped");
                    c.pos = resume;
                }
            }
        }
    }

    /// Moves a cursor at the end of its segment to the start of the next one,
    /// unmapping the one it read to the end (a sealed one: the write segment
    /// stays mapped for its writer). `None` when there is no next segment.
    fn leave_segment(&mut self, c: &mut StreamCursor) -> Option<()> {
        if c.seg >= self.write_seg {
            return None;
        }
        if let Some(seg) = self.segments.get_mut(&c.seg) {
            seg.unmap();
        }
        let next = self.segments.range(c.seg + 1..).next().map(|(id, _)| *id)?;
        c.seg = next;
        c.pos = SEGMENT_HEADER as u32;
        c.offset = self.first_offsets.get(&next).copied().unwrap_or(c.offset);
        Some(())
    }

    /// The message at a position returned by [`StreamStore::read`].
    pub fn view(&self, at: (u32, u32)) -> Option<RecordView<'_>> {
        let rec = self.segments.get(&at.0)?.record_at(at.1)?;
        record::parse(rec).ok()
    }

    /// The message at a position returned by [`StreamStore::read_copied`]
    /// with the window `w`.
    pub fn view_copied<'a>(&'a self, w: &'a ReadWindow, at: (u32, u32)) -> Option<RecordView<'a>> {
        let rec = match w.record(at.0, at.1) {
            Some(rec) => rec,
            None => self.segments.get(&at.0)?.record_at(at.1)?,
        };
        record::parse(rec).ok()
    }

    /// Removes the oldest segments while the stream is over a limit: more than
    /// `max_len` messages, more than `max_bytes`, or (with `max_age_ms`) all of a
    /// segment older than `now - max_age`. The segment being written stays.
    pub fn apply_retention(&mut self, max_len: Option<u64>, max_bytes: Option<u64>, max_age: Option<(i64, i64)>) {
        loop {
            let Some(&oldest) = self.segments.keys().next() else {
                return;
            };
            if oldest == self.write_seg {
                return;
            }
            let next_seg = self.segments.range(oldest + 1..).next().map(|(id, _)| *id);
            let in_oldest = self.segments.get(&oldest).map_or(0, |s| u64::from(s.msgs));
            let over_len = max_len.is_some_and(|m| self.len() - in_oldest >= m);
            let oldest_bytes = self.segments.get(&oldest).map_or(0, |s| s.end as u64);
            let over_bytes = max_bytes.is_some_and(|m| self.bytes() - oldest_bytes >= m);
            let too_old = match (max_age, next_seg) {
                (Some((now, age)), Some(next)) => {
                    let c = StreamCursor {
                        seg: next,
                        pos: SEGMENT_HEADER as u32,
                        offset: self.first_offsets.get(&next).copied().unwrap_or(0),
                        epoch: self.epoch,
                    };
                    // Everything in the oldest segment is older than the next one's first.
                    self.peek_timestamp(c).is_some_and(|ts| now - ts > age)
                }
                _ => false,
            };
            if !(over_len || over_bytes || too_old) {
                return;
            }
            // Record the new start first (atomically), then remove the segment: a
            // crash in between leaves a segment that is counted from the new start
            // and removed again, never offsets shifted.
            let start = self.first_offset() + in_oldest;
            if let Err(e) = super::definitions::write_json(&self.dir.join(START_FILE), &start.into(), false) {
                tracing::warn!(queue = %self.label, "cannot record the stream start: {e}");
                return;
            }
            let Some(seg) = self.segments.remove(&oldest) else {
                return;
            };
            self.first_offsets.remove(&oldest);
            if let Err(e) = seg.remove() {
                tracing::warn!(queue = %self.label, segment = oldest, "cannot remove stream segment: {e}");
            }
        }
    }
}

impl StreamStore {
    /// True when no compaction pass is out and the segments sealed since the
    /// last one hold at least as many bytes as that pass left: each pass reads
    /// every sealed segment, so passes are spaced as the stream grows (Kafka's
    /// `min.cleanable.dirty.ratio` of one half). A cheap test for the
    /// publishing path.
    pub fn compaction_due(&self) -> bool {
        !self.compacting && self.dirty_bytes > 0 && self.dirty_bytes >= self.clean_bytes
    }

    /// The sealed segments for a compaction pass, when one was sealed since
    /// the last pass and no pass is out; the caller runs it
    /// ([`CompactionPlan::run`], outside its lock) and hands the result to
    /// [`StreamStore::install_compacted`].
    pub fn compaction_plan(&mut self) -> Option<CompactionPlan> {
        if !self.compaction_due() {
            return None;
        }
        let segments = self
            .segments
            .range(..self.write_seg)
            .map(|(&id, seg)| PlannedSegment {
                id,
                first_offset: self.first_offsets.get(&id).copied().unwrap_or(0),
                msgs: seg.msgs,
            })
            .collect();
        self.compacting = true;
        self.dirty_bytes = 0;
        Some(CompactionPlan {
            dir: self.dir.clone(),
            label: self.label.clone(),
            segments,
            key_budget: stream_compaction::KEY_MAP_BUDGET,
        })
    }

    /// Replaces segments with their compacted rewrites (those retention has
    /// not removed meanwhile), and ends the pass. Returns the messages removed.
    pub fn install_compacted(&mut self, done: Vec<Compacted>) -> u64 {
        self.compacting = false;
        let mut removed = 0;
        for mut c in done {
            if !self.segments.contains_key(&c.id) {
                continue;
            }
            let Some(path) = c.take_path() else { continue };
            match super::segment::replace_sealed(&self.dir, c.id, &path) {
                Ok(seg) => {
                    self.segments.insert(c.id, seg);
                    removed += c.removed;
                }
                Err(e) => {
                    let _ = std::fs::remove_file(&path);
                    // The new file may or may not be in place: either holds
                    // the same offsets, and reopening finds which.
                    tracing::error!(queue = %self.label, segment = c.id, "cannot install compacted segment: {e}");
                    if let Ok((seg, _, _)) = Segment::open(&self.dir, c.id) {
                        self.segments.insert(c.id, seg);
                    }
                }
            }
            self.epoch = self.epoch.wrapping_add(1);
        }
        // What the pass left: the sealed bytes but those sealed meanwhile.
        let sealed: u64 = self
            .segments
            .range(..self.write_seg)
            .map(|(_, seg)| seg.end as u64)
            .sum();
        self.clean_bytes = sealed.saturating_sub(self.dirty_bytes);
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(s: &mut StreamStore, ts: i64, body: &str) -> u64 {
        s.push(ts, "", "s", &[0, 0], body.as_bytes()).unwrap()
    }

    fn body(s: &StreamStore, at: (u32, u32)) -> String {
        String::from_utf8(s.view(at).unwrap().body.to_vec()).unwrap()
    }

    #[test]
    fn offsets_cursors_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamStore::open(dir.path(), "s", 4096).unwrap();
        for i in 0..300 {
            assert_eq!(push(&mut s, 1000 + i, &format!("m{i}")), i as u64);
        }
        assert!(s.segment_count() > 2);
        let mut c = s.cursor_at(150);
        let (o, ts, at) = s.read(&mut c).unwrap();
        assert_eq!((o, ts, body(&s, at)), (150, 1150, "m150".to_string()));
        let mut c = s.cursor_at_time(1200);
        assert_eq!(s.read(&mut c).unwrap().0, 200);
        let mut c = s.cursor_next();
        assert!(s.read(&mut c).is_none());
        push(&mut s, 2000, "new");
        assert_eq!(s.read(&mut c).unwrap().0, 300);
        drop(s);
        let mut s = StreamStore::open(dir.path(), "s", 4096).unwrap();
        assert_eq!(s.next_offset(), 301);
        let mut c = s.cursor_first();
        let mut n = 0;
        while let Some((o, _, _)) = s.read(&mut c) {
            assert_eq!(o, n);
            n += 1;
        }
        assert_eq!(n, 301);
    }

    #[test]
    fn staged_batches_read_back_across_segments_and_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamStore::open(dir.path(), "s", 4096).unwrap();
        // Batches of 50 staged records, each written in one go; small
        // segments make batches straddle segment ends (the seal writes what
        // the old segment staged).
        for batch in 0..6u64 {
            let bodies: Vec<String> = (0..50).map(|i| format!("m{}", batch * 50 + i)).collect();
            let bodies: Vec<&[u8]> = bodies.iter().map(|b| b.as_bytes()).collect();
            s.push_batch(1000 + batch as i64, "", "s", &[0, 0], &bodies).unwrap();
            assert_eq!(s.next_offset(), (batch + 1) * 50);
            let mut c = s.cursor_at(batch * 50);
            let (o, _, at) = s.read(&mut c).unwrap();
            assert_eq!((o, body(&s, at)), (batch * 50, format!("m{}", batch * 50)));
        }
        assert!(s.segment_count() > 2);
        drop(s);
        let mut s = StreamStore::open(dir.path(), "s", 4096).unwrap();
        assert_eq!(s.next_offset(), 300);
        let mut c = s.cursor_first();
        let mut n = 0;
        while let Some((o, _, at)) = s.read(&mut c) {
            assert_eq!((o, body(&s, at)), (n, format!("m{n}")));
            n += 1;
        }
        assert_eq!(n, 300);
    }

    fn mapped(s: &StreamStore) -> Vec<u32> {
        s.segments
            .iter()
            .filter(|(_, seg)| seg.is_mapped())
            .map(|(id, _)| *id)
            .collect()
    }

    #[test]
    fn readers_unmap_the_segments_they_passed_and_share_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamStore::open(dir.path(), "s", 4096).unwrap();
        for i in 0..600 {
            push(&mut s, 1000 + i, &format!("m{i}"));
        }
        assert!(s.segment_count() > 4);
        let last = *s.segments.keys().next_back().unwrap();
        // Two readers at different offsets, in turns: each unmaps the segments
        // it leaves, and the other maps them again as it needs them.
        let mut a = s.cursor_first();
        let mut b = s.cursor_at(250);
        let (mut next_a, mut next_b) = (0, 250);
        loop {
            let got_a = s.read(&mut a).map(|(o, _, at)| (o, body(&s, at)));
            let got_b = s.read(&mut b).map(|(o, _, at)| (o, body(&s, at)));
            if let Some(got) = got_a {
                assert_eq!(got, (next_a, format!("m{next_a}")));
                next_a += 1;
            }
            if let Some(got) = got_b {
                assert_eq!(got, (next_b, format!("m{next_b}")));
                next_b += 1;
            }
            if next_a == 600 && next_b == 600 {
                break;
            }
            assert!(next_a <= 600 && next_b <= 600);
        }
        assert!(s.read(&mut a).is_none() && s.read(&mut b).is_none());
        assert_eq!(mapped(&s), [last], "segments read to the end stay mapped");
        // Looking for a time maps segments only while it looks at them.
        let mut c = s.cursor_at_time(1300);
        assert_eq!(s.read(&mut c).unwrap().0, 300);
        assert!(mapped(&s).len() <= 2, "{:?}", mapped(&s));
    }

    #[test]
    fn a_reader_keeps_only_a_window_of_a_segment_resident() {
        const MIB: usize = 1 << 20;
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamStore::open(dir.path(), "s", 16 * MIB as u64).unwrap();
        let body = "x".repeat(4000);
        while s.segment_count() < 2 {
            push(&mut s, 1, &body);
        }
        let first = *s.segments.keys().next().unwrap();
        let mut c = s.cursor_first();
        while c.pos < 15 * MIB as u32 {
            s.read(&mut c).unwrap();
        }
        let resident = s.segments[&first].resident_bytes();
        // Under 3 MiB behind the reader and 1 MiB ahead; all 15 MiB it read without the release.
        assert!(resident > 0 && resident <= 5 * MIB, "{resident} bytes resident");
    }

    #[test]
    fn copied_reads_map_no_sealed_segment_and_free_the_window_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamStore::open(dir.path(), "s", 64 * 1024).unwrap();
        // Some records larger than a window, which grows for them.
        let body = |i: u64| {
            format!(
                "m{i} {}",
                "y".repeat(if i % 50 == 7 { 200_000 } else { i as usize % 300 })
            )
        };
        for i in 0..600 {
            push(&mut s, 1000 + i as i64, &body(i));
        }
        let last = *s.segments.keys().next_back().unwrap();
        let mut readers: Vec<(StreamCursor, ReadWindow, u64)> = [0, 1, 300]
            .into_iter()
            .map(|o| (s.cursor_at(o), ReadWindow::default(), o))
            .collect();
        // In turns, so that they pass one another.
        for _ in 0..600 {
            for (c, w, next) in readers.iter_mut().filter(|r| r.2 < 600) {
                let (o, _, at) = s.read_copied(c, w).unwrap();
                assert_eq!(o, *next);
                assert_eq!(s.view_copied(w, at).unwrap().body, body(o).as_bytes());
                *next += 1;
            }
            assert_eq!(mapped(&s), [last], "only the write segment is mapped");
        }
        assert!(readers.iter().all(|(_, w, next)| *next == 600 && w.held() == 0));
        // Sealed segments reopened from disk are checked as they are copied.
        drop(readers);
        drop(s);
        let mut s = StreamStore::open(dir.path(), "s", 64 * 1024).unwrap();
        let (mut c, mut w) = (s.cursor_first(), ReadWindow::default());
        let mut n = 0;
        while let Some((o, _, at)) = s.read_copied(&mut c, &mut w) {
            assert_eq!(s.view_copied(&w, at).unwrap().body, body(o).as_bytes());
            n += 1;
        }
        assert_eq!(n, 600);
        assert!(w.held() > 0);
    }

    #[test]
    fn every_reader_skips_a_damaged_record_that_the_first_one_found() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamStore::open(dir.path(), "s", 4096).unwrap();
        for i in 0..5 {
            push(&mut s, i, &format!("m{i}"));
        }
        let mut c = s.cursor_first();
        s.read(&mut c).unwrap();
        let (_, _, (seg, second)) = s.read(&mut c).unwrap();
        drop(s);
        let path = dir.path().join(super::super::segment::msgs_name(seg));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[second as usize + 12] ^= 0x55;
        std::fs::write(&path, bytes).unwrap();
        // Reopened: records are checked when first read, and only once.
        let mut s = StreamStore::open(dir.path(), "s", 4096).unwrap();
        for copied in [false, true, false, true] {
            let (mut c, mut w) = (s.cursor_first(), ReadWindow::default());
            let mut read = Vec::new();
            while let Some((_, _, at)) = if copied {
                s.read_copied(&mut c, &mut w)
            } else {
                s.read(&mut c)
            } {
                read.push(String::from_utf8(s.view_copied(&w, at).unwrap().body.to_vec()).unwrap());
            }
            assert_eq!(read, ["m0", "m2", "m3", "m4"]);
        }
    }

    #[test]
    fn retention_drops_whole_segments_and_keeps_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamStore::open(dir.path(), "s", 4096).unwrap();
        for i in 0..500 {
            push(&mut s, i, &format!("m{i}"));
        }
        let mut reader = s.cursor_first();
        s.apply_retention(Some(100), None, None);
        assert!(s.len() >= 100 && s.len() < 250, "{}", s.len());
        let first = s.first_offset();
        assert!(first > 0);
        // A reader left in a removed segment continues at the oldest kept message.
        assert_eq!(s.read(&mut reader).unwrap().0, first);
        drop(s);
        let s = StreamStore::open(dir.path(), "s", 4096).unwrap();
        assert_eq!(s.first_offset(), first);
        assert_eq!(s.next_offset(), 500);
    }

    fn push_keyed(s: &mut StreamStore, key: &str, body: &str) -> u64 {
        s.push(1, "", key, &[0, 0], body.as_bytes()).unwrap()
    }

    fn compact_by_routing_key(s: &mut StreamStore) -> u64 {
        let plan = s.compaction_plan().expect("a segment was sealed");
        let done = plan.run(|v| (!v.routing_key.is_empty()).then(|| v.routing_key.as_bytes().into()));
        s.install_compacted(done)
    }

    fn read_all(s: &mut StreamStore, c: &mut StreamCursor) -> Vec<(u64, String)> {
        let mut w = ReadWindow::default();
        let mut out = Vec::new();
        while let Some((o, _, at)) = s.read_copied(c, &mut w) {
            out.push((
                o,
                String::from_utf8(s.view_copied(&w, at).unwrap().body.to_vec()).unwrap(),
            ));
        }
        out
    }

    #[test]
    fn compaction_keeps_the_newest_per_key_and_every_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamStore::open(dir.path(), "s", 4096).unwrap();
        // Keys k0..k4 in turn, and every tenth message without a key.
        let key = |i: u64| {
            if i % 10 == 9 {
                String::new()
            } else {
                format!("k{}", i % 5)
            }
        };
        for i in 0..400 {
            assert_eq!(push_keyed(&mut s, &key(i), &format!("m{i}")), i);
        }
        let active_from = s.first_offsets[&s.write_seg];
        let mut reader = s.cursor_at(100);
        assert_eq!(s.read(&mut reader).unwrap().0, 100);
        let removed = compact_by_routing_key(&mut s);
        assert!(removed > 0);
        // No pass without a newly sealed segment.
        assert!(s.compaction_plan().is_none());
        let expect = |from: u64| -> Vec<(u64, String)> {
            let last_sealed = |k: &str| (0..active_from).rev().find(|&j| key(j) == k);
            (from..400)
                .filter(|&i| i >= active_from || key(i).is_empty() || last_sealed(&key(i)) == Some(i))
                .map(|i| (i, format!("m{i}")))
                .collect()
        };
        let mut c = s.cursor_first();
        assert_eq!(read_all(&mut s, &mut c), expect(0));
        assert_eq!(removed, 400 - expect(0).len() as u64);
        assert_eq!((s.first_offset(), s.next_offset()), (0, 400));
        // A reader placed before the pass goes on from its offset.
        assert_eq!(read_all(&mut s, &mut reader), expect(101));
        // An offset compacted away reads the next message kept.
        let mut c = s.cursor_at(3);
        assert_eq!(read_all(&mut s, &mut c), expect(3));
        drop(s);
        let mut s = StreamStore::open(dir.path(), "s", 4096).unwrap();
        assert_eq!(s.next_offset(), 400);
        let mut c = s.cursor_first();
        assert_eq!(read_all(&mut s, &mut c), expect(0));
    }

    #[test]
    fn a_full_key_map_leaves_older_keys_for_later_and_loses_nothing_newer() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamStore::open(dir.path(), "s", 4096).unwrap();
        let key = |i: u64| format!("k{}", i % 10);
        for i in 0..400 {
            push_keyed(&mut s, &key(i), &format!("m{i}"));
        }
        let active_from = s.first_offsets[&s.write_seg];
        let mut plan = s.compaction_plan().unwrap();
        // Room for three two-byte keys.
        plan.key_budget = 3 * (2 + 48);
        let done = plan.run(|v| Some(v.routing_key.as_bytes().into()));
        s.install_compacted(done);
        let mut c = s.cursor_first();
        let kept = read_all(&mut s, &mut c);
        let sealed_kept = |k: &str| {
            kept.iter()
                .filter(|(o, _)| *o < active_from && key(*o) == k)
                .map(|(o, _)| *o)
                .collect::<Vec<_>>()
        };
        let mut compacted = 0;
        for k in (0..10).map(key) {
            let all: Vec<u64> = (0..active_from).filter(|&i| key(i) == k).collect();
            let got = sealed_kept(&k);
            // The newest sealed message of every key stays.
            assert_eq!(got.last(), all.last(), "{k}");
            if got.len() == 1 {
                compacted += 1;
            } else {
                assert_eq!(got, all, "{k}: a key left out keeps every message");
            }
        }
        assert_eq!(compacted, 3);
        // The segment being written is untouched.
        assert_eq!(
            kept.iter().filter(|(o, _)| *o >= active_from).count() as u64,
            400 - active_from
        );
        // A pass with room for every key finishes the job.
        s.dirty_bytes = s.clean_bytes.max(1);
        compact_by_routing_key(&mut s);
        let mut c = s.cursor_first();
        let kept = read_all(&mut s, &mut c);
        assert_eq!(kept.iter().filter(|(o, _)| *o < active_from).count(), 10);
    }

    #[test]
    fn a_second_pass_merges_gaps_and_leftovers_of_a_crash_are_harmless() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamStore::open(dir.path(), "s", 4096).unwrap();
        for i in 0..300 {
            push_keyed(&mut s, &format!("k{}", i % 3), &format!("m{i}"));
        }
        compact_by_routing_key(&mut s);
        let first_pass_bytes = s.bytes();
        for i in 300..600 {
            push_keyed(&mut s, &format!("k{}", i % 3), &format!("m{i}"));
        }
        compact_by_routing_key(&mut s);
        assert!(s.bytes() < first_pass_bytes + 4096 * 2, "{} bytes", s.bytes());
        let mut c = s.cursor_first();
        let got = read_all(&mut s, &mut c);
        let offsets: Vec<u64> = got.iter().map(|(o, _)| *o).collect();
        assert!(offsets.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(offsets.last(), Some(&599));
        let active_from = s.first_offsets[&s.write_seg];
        assert_eq!(offsets.iter().filter(|&&o| o < active_from).count(), 3);
        // A crash mid-install: a rewrite left beside its original, and a
        // segment whose metadata was removed before its file was replaced.
        let first = *s.segments.keys().next().unwrap();
        drop(s);
        let stray = dir.path().join(format!(
            "{}.{}",
            super::super::segment::msgs_name(first),
            stream_compaction::REWRITE_SUFFIX
        ));
        std::fs::write(&stray, b"half written").unwrap();
        std::fs::remove_file(dir.path().join(super::super::segment::meta_name(first))).unwrap();
        let mut s = StreamStore::open(dir.path(), "s", 4096).unwrap();
        assert!(!stray.exists());
        let mut c = s.cursor_first();
        assert_eq!(read_all(&mut s, &mut c), got);
    }

    #[test]
    fn retention_during_a_pass_drops_the_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamStore::open(dir.path(), "s", 4096).unwrap();
        for i in 0..300 {
            push_keyed(&mut s, &format!("k{}", i % 3), &format!("m{i}"));
        }
        let plan = s.compaction_plan().unwrap();
        let done = plan.run(|v| Some(v.routing_key.as_bytes().into()));
        assert!(!done.is_empty());
        s.apply_retention(Some(1), None, None);
        let kept_segments = s.segment_count();
        s.install_compacted(done);
        assert_eq!(s.segment_count(), kept_segments);
        let leftovers = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_str()
                    .unwrap()
                    .ends_with(stream_compaction::REWRITE_SUFFIX)
            })
            .count();
        assert_eq!(leftovers, 0);
        assert_eq!(s.next_offset(), 300);
    }
}
