//! Runs: the messages a stream publisher sent in one batch, kept for a
//! while in the form its protocol's consumers send them, so that each such
//! consumer copies the batch once instead of reading, decoding and encoding
//! every message of it. The stream protocol is the user: a publish frame of
//! a hundred messages becomes one chunk, encoded at publish time, which
//! every subscriber at its first offset sends as it is (as RabbitMQ sends
//! its stored chunks), and which costs a subscriber one copy however many
//! messages it holds.
//!
//! The messages are stored as any others: a run is only a faster way to
//! the same messages, and a consumer not at a run's first offset, or one
//! that filters, reads message by message. Only recent runs are kept: none
//! that every reader has passed, none while no consumer takes runs, and at
//! most [`MAX_BYTES`] (a consumer further behind reads message by message).

use std::collections::VecDeque;

use bytes::Bytes;

use crate::store::stream_store::StreamCursor;

/// Most bytes of runs a stream keeps; the oldest go first.
pub const MAX_BYTES: usize = 16 * 1024 * 1024;

/// Consecutive messages of a stream, encoded as one.
#[derive(Debug, Clone)]
pub struct EncodedRun {
    /// Offset of its first message.
    pub first_offset: u64,
    /// Messages in it.
    pub count: u32,
    /// The encoding, made by the publishing adapter for consumers of its
    /// own protocol; the core never looks inside.
    pub encoded: Bytes,
    /// Where a reader goes on after the run.
    pub(crate) end: StreamCursor,
}

impl EncodedRun {
    /// Offset of its last message.
    pub fn last_offset(&self) -> u64 {
        self.first_offset + u64::from(self.count.max(1)) - 1
    }
}

/// The recent runs of one stream, by first offset.
#[derive(Debug, Default)]
pub struct RecentRuns {
    runs: VecDeque<EncodedRun>,
    bytes: usize,
}

impl RecentRuns {
    /// Keeps `run`, which follows every run kept, dropping the oldest runs
    /// beyond [`MAX_BYTES`].
    pub fn push(&mut self, run: EncodedRun) {
        debug_assert!(self.runs.back().is_none_or(|r| r.last_offset() < run.first_offset));
        self.bytes += run.encoded.len();
        self.runs.push_back(run);
        while self.bytes > MAX_BYTES
            && let Some(old) = self.runs.pop_front()
        {
            self.bytes -= old.encoded.len();
        }
    }

    /// The run that starts at `offset`, if one is kept.
    pub fn starting_at(&self, offset: u64) -> Option<&EncodedRun> {
        let (front, back) = (self.runs.front()?, self.runs.back()?);
        if offset < front.first_offset || offset > back.first_offset {
            return None;
        }
        let i = self.runs.partition_point(|r| r.first_offset < offset);
        self.runs.get(i).filter(|r| r.first_offset == offset)
    }

    pub fn dbg(&self, o: u64) -> String {
        let i = self.runs.partition_point(|r| r.first_offset < o);
        format!(
            "n={} front={:?} back={:?} around={:?}",
            self.runs.len(),
            self.runs.front().map(|r| (r.first_offset, r.count)),
            self.runs.back().map(|r| (r.first_offset, r.count)),
            (
                self.runs.get(i.saturating_sub(1)).map(|r| (r.first_offset, r.count)),
                self.runs.get(i).map(|r| (r.first_offset, r.count))
            )
        )
    }
    /// The run that starts at `offset` and those that follow it without a
    /// gap (another publisher's messages between them), in order.
    pub fn consecutive_from(&self, offset: u64) -> impl Iterator<Item = &EncodedRun> {
        let start = self.runs.partition_point(|r| r.first_offset < offset);
        let mut next = offset;
        self.runs.range(start..).take_while(move |r| {
            let adjacent = r.first_offset == next;
            next = r.first_offset + u64::from(r.count);
            adjacent
        })
    }

    /// Forgets the runs that end before `offset` (every reader is past them).
    pub fn drop_before(&mut self, offset: u64) {
        while let Some(old) = self.runs.front()
            && old.last_offset() < offset
        {
            self.bytes -= old.encoded.len();
            self.runs.pop_front();
        }
    }

    /// Forgets every run (the stream's positions changed under them).
    pub fn clear(&mut self) {
        self.runs.clear();
        self.bytes = 0;
    }

    /// Bytes of the runs kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::stream_store::StreamStore;

    fn run(end: StreamCursor, first: u64, count: u32, len: usize) -> EncodedRun {
        EncodedRun {
            first_offset: first,
            count,
            encoded: Bytes::from(vec![0u8; len]),
            end,
        }
    }

    #[test]
    fn runs_are_found_by_their_first_offset_only() {
        let dir = tempfile::tempdir().unwrap();
        let end = StreamStore::open(dir.path(), "s", 1 << 20).unwrap().cursor_next();
        let mut r = RecentRuns::default();
        assert!(r.starting_at(0).is_none());
        r.push(run(end, 10, 5, 100));
        r.push(run(end, 20, 3, 100));
        r.push(run(end, 23, 1, 100));
        assert_eq!(r.starting_at(20).map(|r| r.count), Some(3));
        assert_eq!(r.starting_at(23).map(|r| r.last_offset()), Some(23));
        assert_eq!(r.starting_at(10).map(|r| r.last_offset()), Some(14));
        for missing in [0, 9, 11, 15, 22, 24] {
            assert!(r.starting_at(missing).is_none(), "{missing}");
            assert_eq!(r.consecutive_from(missing).count(), 0);
        }
        // 10..15 and 20..24 are apart: another publisher's messages between.
        let firsts = |o| r.consecutive_from(o).map(|r| r.first_offset).collect::<Vec<_>>();
        assert_eq!(firsts(10), [10]);
        assert_eq!(firsts(20), [20, 23]);
        assert_eq!(firsts(23), [23]);
        assert_eq!(r.bytes(), 300);
        r.drop_before(20);
        assert!(r.starting_at(10).is_none());
        assert_eq!(r.consecutive_from(20).count(), 2);
        r.drop_before(23);
        assert_eq!(r.consecutive_from(20).count(), 0);
        assert_eq!(r.bytes(), 100);
    }

    #[test]
    fn the_oldest_runs_go_beyond_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let end = StreamStore::open(dir.path(), "s", 1 << 20).unwrap().cursor_next();
        let mut r = RecentRuns::default();
        let size = MAX_BYTES / 4;
        for i in 0..6 {
            r.push(run(end, i * 10, 10, size));
        }
        assert_eq!(r.bytes(), 4 * size);
        assert!(r.starting_at(10).is_none());
        assert!(r.starting_at(20).is_some());
        r.clear();
        assert_eq!(r.bytes(), 0);
        assert!(r.starting_at(50).is_none());
    }
}
