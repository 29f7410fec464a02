//! The storage of a stream queue: an append-only run of segments where every
//! message has an offset (0, 1, 2, … since the stream was created) and is read,
//! not removed, by any number of consumers, each with its own [`StreamCursor`].
//! Retention removes whole segments from the front.
//!
//! Offsets are not stored per message: a segment's first offset is the stream's
//! start offset (kept in a small file, advanced when segments are removed) plus
//! the message counts of the segments before it.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use super::record::{self, RecordView};
use super::segment::{SEGMENT_HEADER, Segment};

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
                let (kind, id) = name.to_str()?.split_once('.')?;
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
        while c.offset < offset {
            if self.read(&mut c).is_none() {
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
        loop {
            let before = c;
            match self.read(&mut c) {
                Some((_, ts, _)) if ts < timestamp_ms => continue,
                Some(_) => return before,
                None => return c,
            }
        }
    }

    fn peek_timestamp(&mut self, c: StreamCursor) -> Option<i64> {
        let mut c = c;
        self.read(&mut c).map(|(_, ts, _)| ts)
    }

    /// Reads the message at the cursor and advances it: its offset, timestamp
    /// and position (for [`StreamStore::view`]). `None` at the end.
    pub fn read(&mut self, c: &mut StreamCursor) -> Option<(u64, i64, (u32, u32))> {
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
            if let Err(e) = seg.ensure_mapped() {
                tracing::error!(queue = %self.label, segment = c.seg, "cannot map stream segment: {e}");
                return None;
            }
            match seg.step(c.pos) {
                Ok(Some(next)) => {
                    let here = (c.seg, c.pos);
                    let ts = seg
                        .record_at(c.pos)
                        .and_then(|r| record::parse(r).ok())
                        .map_or(0, |v| v.timestamp);
                    let offset = c.offset;
                    c.pos = next;
                    c.offset += 1;
                    return Some((offset, ts, here));
                }
                Ok(None) => {
                    if c.seg >= self.write_seg {
                        return None;
                    }
                    let next = self.segments.range(c.seg + 1..).next().map(|(id, _)| *id)?;
                    c.seg = next;
                    c.pos = SEGMENT_HEADER as u32;
                    c.offset = self.first_offsets.get(&next).copied().unwrap_or(c.offset);
                }
                Err(resume) => {
                    tracing::warn!(queue = %self.label, segment = c.seg, "damaged stream record skipped");
                    c.pos = resume;
                }
            }
        }
    }

    /// The message at a position returned by [`StreamStore::read`].
    pub fn view(&self, at: (u32, u32)) -> Option<RecordView<'_>> {
        let rec = self.segments.get(&at.0)?.record_at(at.1)?;
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
