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
        };
        for id in ids {
            match Segment::open(dir, id) {
                Ok((seg, _acks, damage)) => {
                    for d in damage {
                        tracing::warn!(queue = %label, segment = id, "damaged stream segment: {d}");
                    }
                    store.first_offsets.insert(id, store.next_offset);
                    store.next_offset += u64::from(seg.msgs);
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
        let total = record::size(exchange, routing_key, properties, body)?;
        let fits = self.segments.get(&self.write_seg).map(|s| s.free() >= total);
        if fits != Some(true) {
            if fits == Some(false) {
                if let Some(s) = self.segments.get_mut(&self.write_seg) {
                    s.seal()?;
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
        seg.append(timestamp, exchange, routing_key, properties, body)?;
        let offset = self.next_offset;
        self.next_offset += 1;
        Ok(offset)
    }

    /// A cursor at the first message kept.
    pub fn cursor_first(&self) -> StreamCursor {
        match self.first_offsets.iter().next() {
            Some((&seg, &offset)) => StreamCursor {
                seg,
                pos: SEGMENT_HEADER as u32,
                offset,
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
        };
        // Walked through a copy, which leaves no segment mapped.
        let mut w = ReadWindow::default();
        while c.offset < offset {
            if self.read_copied(&mut c, &mut w).is_none() {
                break;
            }
        }
        c
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
}
