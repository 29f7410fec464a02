//! Keyed compaction of a stream's sealed segments, as Kafka compacts a topic:
//! of the messages that share a key, only the newest stays; messages without
//! a key all stay. The segment being written is left alone, and so are its
//! messages' keys: a key's newer message makes the older ones go only once it
//! is in a sealed segment itself.
//!
//! Offsets do not move. A stream numbers its messages by counting them, so
//! each run of removed messages is replaced by one gap record that counts for
//! all of them (see [`record::write_gap`]); readers step over gaps, and a
//! reader sent to an offset that was removed reads the next message kept.
//!
//! A pass reads and writes files only: [`CompactionPlan::run`] works outside
//! the queue's lock, on the segments named by its plan, and the store swaps
//! the rewritten files in afterwards (`StreamStore::install_compacted`).

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::PathBuf;

use super::record::{self, RecordView};
use super::segment::{self, SealedScan};

/// Suffix of a rewritten segment before it replaces the original; one left
/// by a crash is deleted when the stream is opened.
pub const REWRITE_SUFFIX: &str = "compacting";

/// One sealed segment a pass covers.
#[derive(Debug, Clone, Copy)]
pub struct PlannedSegment {
    /// Segment number.
    pub id: u32,
    /// Offset of its first message.
    pub first_offset: u64,
    /// Its message count, gaps included: a rewrite must count the same.
    pub msgs: u32,
}

/// The sealed segments of one stream for a pass, in order.
#[derive(Debug)]
pub struct CompactionPlan {
    /// The stream's folder.
    pub dir: PathBuf,
    /// The queue's name, for logs.
    pub label: String,
    /// Segments covered.
    pub segments: Vec<PlannedSegment>,
    /// Bytes the pass's key map may take ([`KEY_MAP_BUDGET`] unless a
    /// test sets less).
    pub key_budget: usize,
}

/// A rewritten segment waiting to replace the original. Dropped without
/// being installed, its file is deleted.
#[derive(Debug)]
pub struct Compacted {
    /// Segment number.
    pub id: u32,
    /// Messages it no longer holds.
    pub removed: u64,
    path: Option<PathBuf>,
}

impl Compacted {
    /// The rewritten file, handed over to whoever installs it.
    pub fn take_path(&mut self) -> Option<PathBuf> {
        self.path.take()
    }
}

impl Drop for Compacted {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// What a pass keeps and drops: the newest offset of each key.
type Newest = HashMap<Box<[u8]>, u64>;

/// Bytes a pass's key map may take (keys and their entries, see
/// [`ENTRY_BYTES`]); [`CompactionPlan`] carries its own limit, this by
/// default. Kafka bounds its map the same way (128 MiB for all its cleaner
/// threads by default); one pass runs per stream at a time.
pub const KEY_MAP_BUDGET: usize = 32 << 20;

/// What an entry of the key map costs beside its key's bytes: the boxed
/// key's pointer and length, the offset, the table's control byte and spare
/// capacity, and the allocation's own overhead.
const ENTRY_BYTES: usize = 48;

impl CompactionPlan {
    /// Reads the planned segments, and rewrites those holding a message that a
    /// newer one with its key supersedes. `key_of` gives a message's key
    /// (`None`: it has none and stays). A segment that cannot be read or
    /// rewritten is logged and left as it is.
    ///
    /// Segments are read newest first, so that a key's first sighting is its
    /// newest message. Once the key map is full, keys met for the first time
    /// (older ones) are left out: their messages stay until a later pass,
    /// when the newest segments may have fewer distinct keys. Nothing newer
    /// is ever lost to the limit.
    pub fn run(&self, key_of: impl Fn(&RecordView<'_>) -> Option<Box<[u8]>>) -> Vec<Compacted> {
        let mut newest = Newest::new();
        let mut map_bytes = 0usize;
        let mut keys_left_out = 0u64;
        // Per planned segment: its scan, and whether a newer message of one
        // of its keys exists (it then changes).
        let mut scans: Vec<Option<(SealedScan, bool)>> = self.segments.iter().map(|_| None).collect();
        for (i, s) in self.segments.iter().enumerate().rev() {
            let end = s.first_offset + u64::from(s.msgs);
            let mut offset = s.first_offset;
            let mut changes = false;
            let scan = segment::visit_sealed(&self.dir, s.id, |rec| {
                if let Some(n) = record::gap_offsets(rec) {
                    offset += n;
                    return;
                }
                if let Some(key) = record::parse(rec).ok().as_ref().and_then(&key_of) {
                    match newest.get_mut(&*key) {
                        // A newer segment has the key: this message goes.
                        Some(&mut n) if n >= end => changes = true,
                        // So has a later message of this segment: the earlier one goes.
                        Some(n) => {
                            *n = offset;
                            changes = true;
                        }
                        None if map_bytes + key.len() + ENTRY_BYTES <= self.key_budget => {
                            map_bytes += key.len() + ENTRY_BYTES;
                            newest.insert(key, offset);
                        }
                        None => keys_left_out += 1,
                    }
                }
                offset += 1;
            });
            scans[i] = match scan {
                Ok(scan) if scan.msgs == s.msgs => Some((scan, changes)),
                Ok(scan) => {
                    tracing::warn!(
                        queue = %self.label, segment = s.id,
                        "segment counts {} messages on disk, {} in memory: not compacted", scan.msgs, s.msgs
                    );
                    None
                }
                Err(e) => {
                    tracing::warn!(queue = %self.label, segment = s.id, "cannot read segment to compact: {e}");
                    None
                }
            };
        }
        if keys_left_out > 0 {
            tracing::info!(
                queue = %self.label,
                "compaction key map full ({} keys in {} bytes): {keys_left_out} older messages wait for a later pass",
                newest.len(),
                self.key_budget
            );
        }
        let mut out = Vec::new();
        for (s, scan) in self.segments.iter().zip(scans) {
            let Some((scan, true)) = scan else { continue };
            match self.rewrite(*s, scan, &newest, &key_of) {
                Ok(done) => out.push(done),
                Err(e) => tracing::warn!(queue = %self.label, segment = s.id, "cannot compact segment: {e}"),
            }
        }
        out
    }

    /// Writes segment `s` without its superseded messages (it has some).
    fn rewrite(
        &self,
        s: PlannedSegment,
        scan: SealedScan,
        newest: &Newest,
        key_of: &impl Fn(&RecordView<'_>) -> Option<Box<[u8]>>,
    ) -> io::Result<Compacted> {
        let superseded = |rec: &[u8], offset: u64| {
            record::parse(rec)
                .ok()
                .as_ref()
                .and_then(key_of)
                .is_some_and(|key| newest.get(&key).is_some_and(|&n| n > offset))
        };
        let path = self.dir.join(format!("{}.{REWRITE_SUFFIX}", segment::msgs_name(s.id)));
        let mut done = Compacted {
            id: s.id,
            removed: 0,
            path: Some(path.clone()),
        };
        let mut out = Rewriter {
            out: io::BufWriter::with_capacity(256 * 1024, std::fs::File::create(&path)?),
            seed: scan.seed,
            gap: 0,
            failed: Ok(()),
        };
        out.write(&scan.header);
        let mut offset = s.first_offset;
        segment::visit_sealed(&self.dir, s.id, |rec| {
            let taken = record::offsets_taken(rec);
            if record::gap_offsets(rec).is_some() {
                out.gap += taken;
            } else if superseded(rec, offset) {
                out.gap += taken;
                done.removed += 1;
            } else {
                out.put(rec);
            }
            offset += taken;
        })?;
        out.finish()?;
        let counted = offset - s.first_offset;
        if counted != u64::from(s.msgs) {
            return Err(io::Error::other(format!(
                "segment changed while compacted ({counted} messages, {} expected)",
                s.msgs
            )));
        }
        tracing::debug!(queue = %self.label, segment = s.id, removed = done.removed, "segment compacted");
        Ok(done)
    }
}

/// Writes a rewritten segment: the records kept, each run of removed ones
/// as one gap.
struct Rewriter {
    out: io::BufWriter<std::fs::File>,
    seed: u32,
    /// Offsets removed since the last record written.
    gap: u64,
    /// The first write error, reported by [`Rewriter::finish`].
    failed: io::Result<()>,
}

impl Rewriter {
    fn write(&mut self, bytes: &[u8]) {
        if self.failed.is_ok() {
            self.failed = self.out.write_all(bytes);
        }
    }

    fn flush_gap(&mut self) {
        if self.gap > 0 {
            let mut rec = [0u8; record::GAP_RECORD];
            record::write_gap(&mut rec, self.seed, self.gap);
            self.gap = 0;
            self.write(&rec);
        }
    }

    /// Writes a kept record, after the gap before it.
    fn put(&mut self, rec: &[u8]) {
        self.flush_gap();
        self.write(rec);
    }

    /// Writes the last gap and syncs the file.
    fn finish(mut self) -> io::Result<()> {
        self.flush_gap();
        std::mem::replace(&mut self.failed, Ok(()))?;
        let file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()
    }
}
