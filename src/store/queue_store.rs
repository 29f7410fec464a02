//! A queue's messages as one or more [`MessageStore`]s: a plain queue has one, a
//! priority queue (`x-max-priority`) one per priority level in use.
//!
//! Each level is an ordinary FIFO store, so order within a priority and across
//! restarts comes for free; taking a message means taking from the highest level
//! that has one. The level is carried in the top byte of the segment number of
//! the positions handed out, so that acks and requeues find their store without
//! any extra bookkeeping per message.

use std::io;
use std::path::{Path, PathBuf};

use super::message_store::{MessageStore, SegPos};
use super::record::RecordView;

/// Bits of a segment number left for the segment itself; the level sits above.
const LEVEL_SHIFT: u32 = 24;
const SEG_MASK: u32 = (1 << LEVEL_SHIFT) - 1;

/// The message storage of one queue.
pub struct QueueStore {
    dir: PathBuf,
    label: String,
    segment_size: u64,
    /// Index = priority level; level 0 lives in `dir` itself, level N in `dir/pN`.
    levels: Vec<Option<MessageStore>>,
    /// Stands in for files that could not be opened: holds nothing and never
    /// touches `dir`.
    closed: bool,
}

fn level_dir(dir: &Path, level: usize) -> PathBuf {
    if level == 0 {
        dir.to_path_buf()
    } else {
        dir.join(format!("p{level}"))
    }
}

/// The position handed out for `p` of `level`: plain queues (one level) use
/// positions as they are, so their segment numbers keep all 32 bits.
fn encode_for(single: bool, level: usize, p: SegPos) -> SegPos {
    if single { p } else { encode(level, p) }
}

fn encode(level: usize, p: SegPos) -> SegPos {
    SegPos {
        seg: ((level as u32) << LEVEL_SHIFT) | (p.seg & SEG_MASK),
        pos: p.pos,
    }
}

fn decode(p: SegPos) -> (usize, SegPos) {
    (
        (p.seg >> LEVEL_SHIFT) as usize,
        SegPos {
            seg: p.seg & SEG_MASK,
            pos: p.pos,
        },
    )
}

impl QueueStore {
    /// Opens the store in `dir`; `max_priority` (if any) makes it a priority
    /// store with levels 0..=max. Levels found on disk are recovered; others are
    /// created on their first message.
    pub fn open(dir: &Path, label: &str, segment_size: u64, max_priority: Option<u8>) -> io::Result<Self> {
        let count = usize::from(max_priority.unwrap_or(0)) + 1;
        let mut levels = Vec::with_capacity(count);
        levels.push(Some(MessageStore::open(dir, label, segment_size)?));
        for level in 1..count {
            let d = level_dir(dir, level);
            levels.push(if d.is_dir() {
                Some(MessageStore::open(&d, label, segment_size)?)
            } else {
                None
            });
        }
        Ok(QueueStore {
            dir: dir.to_path_buf(),
            label: label.to_string(),
            segment_size,
            levels,
            closed: false,
        })
    }

    /// An empty store standing in for the one in `dir` whose files could not be
    /// opened: it reads and writes nothing, so the files stay as they are until
    /// the queue is restarted.
    pub fn closed(dir: &Path, label: &str, segment_size: u64) -> Self {
        QueueStore {
            dir: dir.to_path_buf(),
            label: label.to_string(),
            segment_size,
            levels: vec![None],
            closed: true,
        }
    }

    /// Directory holding the segments.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Highest priority level (0 for a plain queue).
    pub fn max_priority(&self) -> u8 {
        (self.levels.len() - 1) as u8
    }

    fn stores(&self) -> impl Iterator<Item = &MessageStore> {
        self.levels.iter().flatten()
    }

    fn encode(&self, level: usize, p: SegPos) -> SegPos {
        encode_for(self.levels.len() == 1, level, p)
    }

    fn decode(&self, p: SegPos) -> (usize, SegPos) {
        if self.levels.len() == 1 { (0, p) } else { decode(p) }
    }

    /// Messages ready for delivery.
    pub fn ready_count(&self) -> u64 {
        self.stores().map(MessageStore::ready_count).sum()
    }

    /// Body bytes of the ready messages.
    pub fn ready_bytes(&mut self) -> u64 {
        self.levels.iter_mut().flatten().map(MessageStore::ready_bytes).sum()
    }

    /// Appends a message at `priority` (clamped to the queue's maximum).
    pub fn push(
        &mut self,
        priority: u8,
        timestamp: i64,
        exchange: &str,
        routing_key: &str,
        properties: &[u8],
        body: &[u8],
    ) -> io::Result<SegPos> {
        let level = usize::from(priority).min(self.levels.len() - 1);
        if self.levels[level].is_none() {
            if self.closed {
                return Err(io::Error::other("the queue's store is closed"));
            }
            let store = MessageStore::open(&level_dir(&self.dir, level), &self.label, self.segment_size)?;
            self.levels[level] = Some(store);
        }
        let Some(store) = self.levels[level].as_mut() else {
            return Err(io::Error::other("priority level store missing"));
        };
        let p = store.push(timestamp, exchange, routing_key, properties, body)?;
        Ok(self.encode(level, p))
    }

    /// The highest level with a ready message.
    fn top(&mut self) -> Option<(usize, &mut MessageStore)> {
        self.levels
            .iter_mut()
            .enumerate()
            .rev()
            .filter_map(|(l, s)| s.as_mut().map(|s| (l, s)))
            .find(|(_, s)| s.ready_count() > 0)
    }

    /// The next message to deliver, without taking it.
    pub fn peek(&mut self) -> Option<(SegPos, bool)> {
        let single = self.levels.len() == 1;
        let (level, store) = self.top()?;
        store.peek().map(|(p, r)| (encode_for(single, level, p), r))
    }

    /// Takes the next message to deliver: the oldest of the highest priority.
    pub fn shift(&mut self) -> Option<(SegPos, bool)> {
        let single = self.levels.len() == 1;
        let (level, store) = self.top()?;
        store.shift().map(|(p, r)| (encode_for(single, level, p), r))
    }

    /// A zero-copy view of the message at `p`.
    pub fn read_at(&self, p: SegPos) -> Option<RecordView<'_>> {
        let (level, p) = self.decode(p);
        self.levels.get(level)?.as_ref()?.read_at(p)
    }

    /// A view of the message at `p`, mapping its segment again if needed (for
    /// messages delivered long ago, whose segment the reader has left).
    pub fn read_mapped(&mut self, p: SegPos) -> Option<RecordView<'_>> {
        let (level, p) = self.decode(p);
        self.levels.get_mut(level)?.as_mut()?.read_mapped(p)
    }

    /// Permanently removes a delivered message.
    pub fn ack(&mut self, p: SegPos) -> io::Result<()> {
        let (level, p) = self.decode(p);
        match self.levels.get_mut(level).and_then(Option::as_mut) {
            Some(s) => s.ack(p),
            None => Ok(()),
        }
    }

    /// Puts a delivered message back in its place.
    pub fn requeue(&mut self, p: SegPos) {
        let (level, p) = self.decode(p);
        if let Some(s) = self.levels.get_mut(level).and_then(Option::as_mut) {
            s.requeue(p);
        }
    }

    /// Removes every ready message, returning how many there were.
    pub fn purge(&mut self) -> io::Result<u64> {
        let mut n = 0;
        for s in self.levels.iter_mut().flatten() {
            n += s.purge()?;
        }
        Ok(n)
    }

    /// Number of segment files (for tests and statistics).
    pub fn segment_count(&self) -> usize {
        self.stores().map(MessageStore::segment_count).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(s: &mut QueueStore, prio: u8, body: &str) {
        s.push(prio, 1, "", "q", &[], body.as_bytes()).unwrap();
    }

    fn drain(s: &mut QueueStore) -> Vec<String> {
        let mut out = Vec::new();
        while let Some((p, _)) = s.shift() {
            out.push(String::from_utf8(s.read_at(p).unwrap().body.to_vec()).unwrap());
            s.ack(p).unwrap();
        }
        out
    }

    #[test]
    fn highest_priority_first_fifo_within_and_across_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = QueueStore::open(dir.path(), "q", 4096, Some(10)).unwrap();
        push(&mut s, 0, "a0");
        push(&mut s, 5, "b5");
        push(&mut s, 200, "c10");
        push(&mut s, 5, "d5");
        push(&mut s, 0, "e0");
        assert_eq!(s.ready_count(), 5);
        assert_eq!(s.ready_bytes(), 11);
        drop(s);
        let mut s = QueueStore::open(dir.path(), "q", 4096, Some(10)).unwrap();
        assert_eq!(s.ready_count(), 5);
        assert_eq!(s.ready_bytes(), 11);
        let (p, _) = s.peek().unwrap();
        assert_eq!(s.read_at(p).unwrap().body, b"c10");
        assert_eq!(drain(&mut s), ["c10", "b5", "d5", "a0", "e0"]);
    }

    #[test]
    fn requeue_returns_to_its_level() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = QueueStore::open(dir.path(), "q", 4096, Some(3)).unwrap();
        push(&mut s, 1, "low");
        push(&mut s, 3, "high");
        let (p, redelivered) = s.shift().unwrap();
        assert!(!redelivered);
        s.requeue(p);
        assert_eq!(s.ready_count(), 2);
        let (again, redelivered) = s.shift().unwrap();
        assert_eq!(again, p);
        assert!(redelivered);
        s.ack(again).unwrap();
        assert_eq!(drain(&mut s), ["low"]);
    }
}
