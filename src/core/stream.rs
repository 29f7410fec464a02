//! Stream queues (`x-queue-type: stream`): an append-only log that consumers
//! read from an offset of their choosing, each with its own cursor, so that any
//! number of them read one stream without copying messages. Acks only move a
//! consumer's tracked offset; messages leave by retention (`x-max-length`,
//! `x-max-length-bytes`, `x-max-age`), whole segments at a time.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use rustc_hash::FxHashMap;

pub use super::stream_filter::Filter;
use super::{BasicProperties, FieldTable, FieldValue};
use crate::store::SegPos;
use crate::store::publisher_sequences::PublisherSequences;
use crate::store::record::RecordView;
use crate::store::segment::ReadWindow;
use crate::store::stream_store::{StreamCursor, StreamStore};

use super::consumer::Consumer;
use super::stream_runs::{EncodedRun, RecentRuns};

/// File with the tracked offset of each consumer tag.
const OFFSETS_FILE: &str = "consumer_offsets.json";
/// File with the last publishing id of each named stream-protocol publisher
/// in the first format, read once and replaced by [`PublisherSequences`].
const PUBLISHERS_FILE: &str = "publisher_sequences.json";
/// How long a changed offset or publisher sequence may wait to be written.
const SAVE_AFTER_MS: i64 = 500;

/// Queue arguments a stream does not accept (RabbitMQ and LavinMQ refuse
/// them). `x-single-active-consumer`, which RabbitMQ refuses on streams too,
/// is accepted: see [`StreamState::add_reader`].
pub const FORBIDDEN_ARGUMENTS: [&str; 7] = [
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-expires",
    "x-delivery-limit",
    "x-overflow",
    "x-max-priority",
];

/// Parses `x-max-age` (`\d+[YMDhms]`) into milliseconds.
pub fn parse_max_age(s: &str) -> Option<i64> {
    let unit = s.chars().last()?;
    let n: i64 = s[..s.len() - unit.len_utf8()].parse().ok()?;
    if n < 0 {
        return None;
    }
    let secs = match unit {
        'Y' => 365 * 24 * 3600,
        'M' => 30 * 24 * 3600,
        'D' => 24 * 3600,
        'h' => 3600,
        'm' => 60,
        's' => 1,
        _ => return None,
    };
    n.checked_mul(secs * 1000)
}

/// Encodes a stream offset as the position a delivery carries (streams are never
/// acked in the store, so the position only identifies the message).
pub fn offset_pos(offset: u64) -> SegPos {
    SegPos {
        seg: (offset >> 32) as u32,
        pos: offset as u32,
    }
}

/// The offset a delivery position stands for.
pub fn pos_offset(p: SegPos) -> u64 {
    (u64::from(p.seg) << 32) | u64::from(p.pos)
}

/// Where a new consumer starts (`x-stream-offset`).
#[derive(Debug, Clone, PartialEq)]
pub enum StartAt {
    /// The oldest message kept.
    First,
    /// The newest message.
    Last,
    /// Only messages published from now on (RabbitMQ's default).
    Next,
    /// A message offset.
    Offset(u64),
    /// The first message stored at or after this time (ms).
    Time(i64),
}

/// What a stream consumer asked for in its `basic.consume` arguments.
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    /// Where to start (`None`: the tracked offset of the tag, else next).
    pub start: Option<StartAt>,
    /// Message filter.
    pub filter: Option<Filter>,
    /// Resume from the tag's tracked offset even if `start` is given.
    pub automatic_tracking: bool,
}

impl ConsumerOptions {
    /// Reads and validates the consumer arguments.
    pub fn from_arguments(args: &FieldTable) -> Result<Self, String> {
        let start = match args.get("x-stream-offset") {
            None => None,
            Some(FieldValue::Timestamp(secs)) => Some(StartAt::Time(*secs as i64 * 1000)),
            Some(v) => match (v.as_str(), v.as_i64()) {
                (Some("first"), _) => Some(StartAt::First),
                (Some("last"), _) => Some(StartAt::Last),
                (Some("next"), _) => Some(StartAt::Next),
                // As in RabbitMQ (and LavinMQ 2.9), a negative offset means the start.
                (_, Some(n)) => Some(StartAt::Offset(n.max(0) as u64)),
                (Some(s), _) => return Err(format!("invalid arg 'x-stream-offset': '{s}'")),
                _ => {
                    return Err(
                        "invalid arg 'x-stream-offset': expected first, last, next, an offset or a timestamp".into(),
                    );
                }
            },
        };
        let filter = Filter::from_arguments(args)?;
        let flag = |key: &str| match args.get(key) {
            Some(FieldValue::Bool(b)) => *b,
            Some(v) => v.as_str() == Some("true"),
            None => false,
        };
        Ok(ConsumerOptions {
            start,
            filter,
            automatic_tracking: flag("x-stream-automatic-offset-tracking"),
        })
    }
}

/// Offsets delivered to a reader and not yet settled, lowest first. A reader
/// is handed increasing offsets and acknowledgements mostly come in order, so
/// this is a queue: a delivery is a push at the back and an acknowledgement a
/// pop at the front, cheaper than a sorted set; an acknowledgement out of
/// order moves at most the unacknowledged deliveries (the prefetch).
#[derive(Default)]
struct Inflight(VecDeque<u64>);

impl Inflight {
    /// Records the delivery of `offset`.
    fn push(&mut self, offset: u64) {
        match self.0.back() {
            Some(&last) if last >= offset => {
                if let Err(i) = self.0.binary_search(&offset) {
                    self.0.insert(i, offset);
                }
            }
            _ => self.0.push_back(offset),
        }
    }

    /// Records the settlement of `offset`.
    fn remove(&mut self, offset: u64) {
        if self.0.front() == Some(&offset) {
            self.0.pop_front();
        } else if let Ok(i) = self.0.binary_search(&offset) {
            self.0.remove(i);
        }
    }

    /// The lowest offset not settled.
    fn first(&self) -> Option<u64> {
        self.0.front().copied()
    }
}

/// One consumer's place in the stream.
struct Reader {
    cursor: StreamCursor,
    /// The records it reads from sealed segments, copied.
    window: ReadWindow,
    tag: String,
    /// Tracked across reconnects (an explicit consumer tag).
    tracked: bool,
    filter: Option<Filter>,
    /// Offsets delivered and not yet acknowledged.
    inflight: Inflight,
    /// The last offset delivered.
    last: Option<u64>,
    /// Messages below this offset are skipped (a start offset past the end
    /// waits for that offset, as in RabbitMQ).
    from: u64,
    /// Where it asked to start, for when it becomes active.
    start: StartAt,
    /// A single active consumer's group member that waits for the active
    /// one to leave; it reads nothing meanwhile.
    waiting: bool,
}

impl Reader {
    /// Puts the reader at its start, or just past `resume` (the group's
    /// tracked offset when a waiting reader takes over).
    fn place(&mut self, store: &mut StreamStore, resume: Option<u64>) {
        let start = match resume {
            Some(t) => StartAt::Offset(t + 1),
            None => self.start.clone(),
        };
        self.cursor = cursor_in(store, &start);
        self.window = ReadWindow::default();
        self.from = match start {
            StartAt::Offset(o) => o,
            _ => 0,
        };
    }
}

/// A cursor of `store` at `start` (see [`StreamState::cursor_for`]).
fn cursor_in(store: &mut StreamStore, start: &StartAt) -> StreamCursor {
    match *start {
        StartAt::First => store.cursor_first(),
        StartAt::Next => store.cursor_next(),
        StartAt::Last => {
            let last = store.next_offset().saturating_sub(1).max(store.first_offset());
            store.cursor_at(last)
        }
        StartAt::Offset(o) => store.cursor_at(o.max(store.first_offset())),
        StartAt::Time(t) => store.cursor_at_time(t),
    }
}

/// The state of a stream queue.
pub struct StreamState {
    /// The messages.
    pub store: StreamStore,
    readers: FxHashMap<u64, Reader>,
    offsets: BTreeMap<String, u64>,
    offsets_path: PathBuf,
    dirty_since: Option<i64>,
    /// Last publishing id of each named publisher (stream protocol
    /// deduplication), by publisher reference.
    publishers: PublisherSequences,
    /// Recently published messages kept encoded for consumers that send
    /// them as one.
    pub recent: RecentRuns,
}

/// A message read for a consumer: its offset and where it is.
pub struct Next {
    /// Message offset.
    pub offset: u64,
    /// Segment and byte position, for [`StreamStore::view`].
    pub at: (u32, u32),
}

impl StreamState {
    /// Opens the stream stored under `dir`.
    pub fn open(dir: &Path, label: &str, segment_size: u64) -> std::io::Result<Self> {
        let store = StreamStore::open(&dir.join("stream"), label, segment_size)?;
        let offsets_path = dir.join(OFFSETS_FILE);
        let offsets = crate::store::definitions::read_json(&offsets_path)
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        let earlier_format = dir.join(PUBLISHERS_FILE);
        let earlier = crate::store::definitions::read_json(&earlier_format)
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        // The earlier file stays: merged again at each open, its older ids
        // never win.
        let publishers = PublisherSequences::open(dir, earlier)?;
        Ok(StreamState {
            store,
            readers: FxHashMap::default(),
            offsets,
            offsets_path,
            dirty_since: None,
            publishers,
            recent: RecentRuns::default(),
        })
    }

    /// Gives an empty stream its first offset `start` and the tracked
    /// consumer offsets `offsets` (tag → last consumed offset): a stream
    /// converted from another broker keeps both.
    pub fn seed(&mut self, start: u64, offsets: BTreeMap<String, u64>) -> std::io::Result<()> {
        self.store.start_at(start)?;
        self.offsets = offsets;
        self.dirty_since = Some(0);
        self.save_offsets();
        Ok(())
    }

    /// Adds a reader for consumer `id` with tag `tag`. On a stream declared
    /// with `x-single-active-consumer` (`single_active`), the readers that
    /// share an explicit tag form a group in which one at a time reads, as
    /// the stream protocol's single active consumer: the others wait, and
    /// the oldest of them takes over where the last active one's
    /// acknowledgements end.
    pub fn add_reader(&mut self, id: u64, tag: &str, explicit_tag: bool, opts: &ConsumerOptions, single_active: bool) {
        let waiting = single_active && explicit_tag && self.readers.values().any(|r| r.tracked && r.tag == tag);
        let tracked_offset = explicit_tag.then(|| self.offsets.get(tag).copied()).flatten();
        let start = match (&opts.start, tracked_offset) {
            (None, Some(t)) => StartAt::Offset(t + 1),
            (Some(_), Some(t)) if opts.automatic_tracking => StartAt::Offset(t + 1),
            (Some(s), _) => s.clone(),
            (None, None) => StartAt::Next,
        };
        let mut reader = Reader {
            // A waiting reader is placed when it becomes active.
            cursor: self.store.cursor_next(),
            window: ReadWindow::default(),
            tag: tag.to_string(),
            tracked: explicit_tag,
            filter: opts.filter.clone(),
            inflight: Inflight::default(),
            last: None,
            from: 0,
            start,
            waiting,
        };
        if !waiting {
            reader.place(&mut self.store, None);
        }
        self.readers.insert(id, reader);
    }

    /// A cursor at `start`, placed as for a consumer starting there. Reading
    /// with it ([`StreamStore::read`]) consumes nothing: the management API's
    /// stream read uses it to look at a stream without a reader. A cursor
    /// for an offset past the end is at the end; skip offsets below the one
    /// asked for, as [`StreamState::next_for`] does.
    pub fn cursor_for(&mut self, start: &StartAt) -> StreamCursor {
        cursor_in(&mut self.store, start)
    }

    /// Removes consumer `id`'s reader, saving its tracked offset.
    pub fn remove_reader(&mut self, id: u64) {
        let Some(r) = self.readers.remove(&id) else {
            return;
        };
        if r.tracked && !r.waiting {
            self.track(&r);
            self.activate_next(&r.tag);
        }
        self.save_offsets();
    }

    /// The oldest waiting reader of group `tag` becomes its active one,
    /// resuming after the group's tracked offset.
    fn activate_next(&mut self, tag: &str) {
        let next = self
            .readers
            .iter()
            .filter(|(_, r)| r.waiting && r.tag == tag)
            .map(|(id, _)| *id)
            .min();
        let Some(id) = next else { return };
        let resume = self.offsets.get(tag).copied();
        if let Some(r) = self.readers.get_mut(&id) {
            r.waiting = false;
            r.place(&mut self.store, resume);
        }
    }

    /// True when consumer `id` has a message to read.
    pub fn has_next(&self, id: u64) -> bool {
        self.readers
            .get(&id)
            .is_some_and(|r| !r.waiting && r.cursor.offset < self.store.next_offset())
    }

    /// False for a single active consumer's group member that waits.
    pub fn is_active(&self, id: u64) -> bool {
        self.readers.get(&id).is_some_and(|r| !r.waiting)
    }

    /// The next message for consumer `id` that passes its filter.
    pub fn next_for(&mut self, id: u64) -> Option<Next> {
        let reader = self.readers.get_mut(&id).filter(|r| !r.waiting)?;
        loop {
            let (offset, _ts, at) = self.store.read_copied(&mut reader.cursor, &mut reader.window)?;
            if offset < reader.from {
                continue;
            }
            if let Some(f) = &reader.filter {
                let props = self
                    .store
                    .view_copied(&reader.window, at)
                    .and_then(|v| BasicProperties::decode(&mut Bytes::copy_from_slice(v.properties)).ok());
                let pass = match &props {
                    Some(p) => f.accepts_message(p),
                    None => f.accepts(None),
                };
                if !pass {
                    continue;
                }
            }
            reader.inflight.push(offset);
            reader.last = Some(offset);
            return Some(Next { offset, at });
        }
    }

    /// Offers consumer `c` the runs that follow one another from where it
    /// reads, if it reads everything (no filter, nothing skipped): the
    /// number of messages it took, its reader now past them.
    pub fn deliver_runs(&mut self, c: &dyn Consumer) -> Option<u32> {
        let reader = self.readers.get_mut(&c.id())?;
        if reader.waiting || reader.filter.is_some() || reader.cursor.offset < reader.from {
            return None;
        }
        let offset = reader.cursor.offset;
        let taken = c.deliver_runs(&mut self.recent.consecutive_from(offset));
        let mut count = 0;
        let mut last: Option<&EncodedRun> = None;
        for run in self.recent.consecutive_from(offset).take(taken) {
            count += run.count;
            last = Some(run);
        }
        let last = last?;
        reader.cursor = last.end;
        reader.last = Some(last.last_offset());
        // Settled by the delivery: the tracked offset moves past the runs.
        self.settle(c.id(), [], true, 0);
        Some(count)
    }

    /// Keeps the run of the `count` messages just appended from offset
    /// `first_offset` on, encoded as `encoded`, for consumers that take runs.
    pub fn keep_run(&mut self, first_offset: u64, count: u32, encoded: Bytes) {
        if let Some(oldest) = self
            .readers
            .values()
            .filter(|r| !r.waiting)
            .map(|r| r.cursor.offset)
            .min()
        {
            self.recent.drop_before(oldest);
        }
        self.recent.push(EncodedRun {
            first_offset,
            count,
            encoded,
            end: self.store.cursor_next(),
        });
    }

    /// The message at `at`, returned by [`StreamState::next_for`] for consumer `id`.
    pub fn view(&self, id: u64, at: (u32, u32)) -> Option<RecordView<'_>> {
        match self.readers.get(&id) {
            Some(r) => self.store.view_copied(&r.window, at),
            None => self.store.view(at),
        }
    }

    /// Settles deliveries of consumer `id`, whether acknowledged, rejected or
    /// returned (`acked` is not consulted: a stream never redelivers): its
    /// tracked offset moves forward, never past a delivery still outstanding.
    /// A closing channel detaches its stream readers before it returns their
    /// deliveries, so that those hold the offset back.
    pub fn settle(&mut self, id: u64, offsets: impl IntoIterator<Item = u64>, acked: bool, now_ms: i64) {
        let Some(reader) = self.readers.get_mut(&id) else {
            return;
        };
        // A stream never redelivers, so a returned message is settled too; only
        // deliveries still outstanding hold the tracked offset back.
        let _ = acked;
        for o in offsets {
            reader.inflight.remove(o);
        }
        if reader.tracked {
            let reader = &self.readers[&id];
            let tracked = Self::tracked_offset(reader);
            if let Some(t) = tracked
                && self.offsets.get(&reader.tag) != Some(&t)
            {
                self.offsets.insert(reader.tag.clone(), t);
                self.dirty_since.get_or_insert(now_ms);
            }
            if self.dirty_since.is_some_and(|since| now_ms - since >= SAVE_AFTER_MS) {
                self.save_offsets();
            }
        }
    }

    /// The offset up to which everything delivered to `r` is acknowledged.
    fn tracked_offset(r: &Reader) -> Option<u64> {
        match r.inflight.first() {
            Some(lowest) => lowest.checked_sub(1),
            None => r.last,
        }
    }

    fn track(&mut self, r: &Reader) {
        if let Some(t) = Self::tracked_offset(r) {
            self.offsets.insert(r.tag.clone(), t);
            self.dirty_since.get_or_insert(0);
        }
    }

    /// The offset stored under `reference` (a consumer tag, or a stream
    /// client's consumer name).
    pub fn stored_offset(&self, reference: &str) -> Option<u64> {
        self.offsets.get(reference).copied()
    }

    /// Stores `offset` under `reference`, as a stream client's store-offset
    /// asks; written out within [`SAVE_AFTER_MS`] and at close.
    pub fn store_offset(&mut self, reference: &str, offset: u64, now_ms: i64) {
        if self.offsets.get(reference) != Some(&offset) {
            self.offsets.insert(reference.to_owned(), offset);
            self.dirty_since.get_or_insert(now_ms);
        }
        if self.dirty_since.is_some_and(|since| now_ms - since >= SAVE_AFTER_MS) {
            self.save_offsets();
        }
    }

    /// The last publishing id stored for the publisher named `reference`
    /// (0 when none).
    pub fn publisher_sequence(&self, reference: &str) -> u64 {
        self.publishers.last(reference).unwrap_or(0)
    }

    /// True when the publisher named `reference` already stored
    /// `publishing_id` or a later id. A name never stored has no duplicates,
    /// not even id 0, which clients number their first message with (as
    /// RabbitMQ's streams decide).
    pub fn is_duplicate(&self, reference: &str, publishing_id: u64) -> bool {
        self.publishers
            .last(reference)
            .is_some_and(|last| last >= publishing_id)
    }

    /// Records that the publisher named `reference` sent `publishing_id`;
    /// false when it sent that id (or a later one) before: the message is
    /// a duplicate and is not stored again.
    /// Kept as it is recorded (see [`PublisherSequences`]), so that a
    /// crash after the message's confirm cannot lose it.
    pub fn track_publisher(&mut self, reference: &str, publishing_id: u64) -> bool {
        if self.is_duplicate(reference, publishing_id) {
            return false;
        }
        if let Err(e) = self.publishers.set(reference, publishing_id) {
            tracing::warn!(publisher = %reference, "cannot record the stream publisher's sequence: {e}");
        }
        true
    }

    /// Forgets unsaved changes: the stream is being deleted.
    pub fn discard_tracking(&mut self) {
        self.dirty_since = None;
    }

    /// When the offsets changed since they were last written are due to be
    /// written (`None`: nothing to write). The queue's housekeeping writes
    /// them then, so that a consumer that goes quiet after its last
    /// acknowledgement has it on disk within [`SAVE_AFTER_MS`].
    pub fn offsets_deadline(&self) -> Option<i64> {
        self.dirty_since.map(|since| since.saturating_add(SAVE_AFTER_MS))
    }

    /// Writes the changed offsets if their deadline passed.
    pub fn save_offsets_due(&mut self, now_ms: i64) {
        if self.offsets_deadline().is_some_and(|at| now_ms >= at) {
            self.save_offsets();
        }
    }

    /// Writes the tracked offsets if they changed.
    pub fn save_offsets(&mut self) {
        if self.dirty_since.take().is_none() {
            return;
        }
        let offsets = serde_json::json!(self.offsets);
        if let Err(e) = crate::store::definitions::write_json(&self.offsets_path, &offsets, false) {
            tracing::warn!("cannot save stream consumer offsets: {e}");
        }
    }
}

impl Drop for StreamState {
    /// A stream closed with the broker keeps its consumer offsets (publisher
    /// sequences are kept as they are recorded).
    fn drop(&mut self) {
        self.save_offsets();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_age_units() {
        assert_eq!(parse_max_age("30s"), Some(30_000));
        assert_eq!(parse_max_age("2h"), Some(7_200_000));
        assert_eq!(parse_max_age("1D"), Some(86_400_000));
        assert_eq!(parse_max_age("5x"), None);
        assert_eq!(parse_max_age("s"), None);
    }

    #[test]
    fn positions_carry_offsets() {
        for o in [0, 1, u64::from(u32::MAX) + 7] {
            assert_eq!(pos_offset(offset_pos(o)), o);
        }
    }

    #[test]
    fn inflight_keeps_the_lowest_unsettled_offset_whatever_the_order() {
        let mut f = Inflight::default();
        for o in [3, 4, 5, 6, 9, 7] {
            f.push(o);
        }
        assert_eq!(f.0, [3, 4, 5, 6, 7, 9]);
        f.remove(5);
        f.remove(3);
        f.remove(8);
        assert_eq!(f.first(), Some(4));
        for o in [9, 4, 7, 6] {
            f.remove(o);
        }
        assert_eq!(f.first(), None);
    }

    #[test]
    fn a_new_publisher_name_has_no_duplicates_not_even_id_0() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamState::open(dir.path(), "s", 4096).unwrap();
        assert!(!s.is_duplicate("writer", 0));
        assert!(s.track_publisher("writer", 0));
        assert!(s.is_duplicate("writer", 0));
        assert!(!s.is_duplicate("writer", 1));
        assert!(!s.is_duplicate("other", 0));
    }

    #[test]
    fn tracked_offset_never_skips_unacked() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamState::open(dir.path(), "s", 4096).unwrap();
        for i in 0..5 {
            s.store.push(i, "", "s", &[0, 0], b"m").unwrap();
        }
        let opts = ConsumerOptions::from_arguments(
            &[("x-stream-offset".into(), FieldValue::from("first"))]
                .into_iter()
                .collect(),
        )
        .unwrap();
        s.add_reader(1, "tag", true, &opts, false);
        let got: Vec<u64> = std::iter::from_fn(|| s.next_for(1).map(|n| n.offset)).collect();
        assert_eq!(got, [0, 1, 2, 3, 4]);
        s.settle(1, [0, 1, 3], true, 0);
        assert_eq!(s.offsets.get("tag"), Some(&1));
        // A returned (nacked) delivery is not redelivered by a stream: it no
        // longer holds the tracked offset back.
        s.settle(1, [4], false, 0);
        assert_eq!(s.offsets.get("tag"), Some(&1));
        s.remove_reader(1);
        drop(s);
        let mut s = StreamState::open(dir.path(), "s", 4096).unwrap();
        s.add_reader(
            2,
            "tag",
            true,
            &ConsumerOptions::from_arguments(&FieldTable::new()).unwrap(),
            false,
        );
        assert_eq!(s.next_for(2).map(|n| n.offset), Some(2));
    }

    #[test]
    fn single_active_readers_of_a_tag_take_turns() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamState::open(dir.path(), "s", 4096).unwrap();
        for i in 0..4 {
            s.store.push(i, "", "s", &[0, 0], b"m").unwrap();
        }
        let first = ConsumerOptions::from_arguments(
            &[("x-stream-offset".into(), FieldValue::from("first"))]
                .into_iter()
                .collect(),
        )
        .unwrap();
        s.add_reader(1, "g", true, &first, true);
        s.add_reader(2, "g", true, &first, true);
        s.add_reader(3, "h", true, &first, true);
        // Another tag reads on its own; an anonymous tag never waits.
        s.add_reader(4, "g", false, &first, true);
        assert!(s.is_active(1) && !s.is_active(2) && s.is_active(3) && s.is_active(4));
        assert!(!s.has_next(2) && s.next_for(2).is_none());
        let got: Vec<u64> = std::iter::from_fn(|| s.next_for(1).map(|n| n.offset)).collect();
        assert_eq!(got, [0, 1, 2, 3]);
        s.settle(1, [0, 1], true, 0);
        s.remove_reader(1);
        assert!(s.is_active(2));
        assert_eq!(s.next_for(2).map(|n| n.offset), Some(2), "after the acknowledged ones");
    }
}
