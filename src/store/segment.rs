//! One segment file (`msgs.NNNNNNNNNN`), its ack log (`acks.NNNNNNNNNN`) and, once
//! sealed, its metadata (`meta.NNNNNNNNNN`).
//!
//! A segment's space is reserved with `fallocate` when it is created, so writing
//! into its memory map can never hit a full disk (which would kill the process
//! with SIGBUS); a full disk is an error at creation instead. Appending a message
//! is a `memcpy` into the map; a batch appended under one lock (a stream
//! publisher's frame) is staged in a buffer and written with one `pwrite`
//! instead (see [`Segment::stage`]). A sealed segment is unmapped and truncated to its
//! data, and mapped again only when a reader reaches it, so messages at rest cost
//! neither heap nor resident memory. The ack log holds the `u32` positions of
//! removed messages; an ack is a store into memory that survives a killed process
//! because the kernel owns the pages.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use super::mmap::Map;
use super::record;
use super::replication::{self, FileRef};
use super::spare_segments;

/// Bytes at the start of every segment: the format version.
pub const SEGMENT_HEADER: usize = 4;
/// Version number written in [`SEGMENT_HEADER`]: record checksums are seeded
/// with the segment number, so that a reused segment file's stale records
/// never pass for new ones (see [`super::spare_segments`]).
pub const FORMAT_VERSION: u32 = 2;
/// The first format, still read: plain (unseeded) record checksums.
const UNSEEDED_VERSION: u32 = 1;
/// Version number of meta files (unchanged since the first format).
const META_VERSION: u32 = 1;
/// Smallest possible record, used to size the ack log of a segment.
const MIN_RECORD: usize = record::RECORD_HEADER + 8 + 1 + 1 + 4 + 8;
/// How far ahead of the write cursor pages are faulted in, in one call, rather
/// than one fault per page as messages are copied in.
const PREFAULT: usize = 1 << 20;
/// The writer's first step ahead in a new segment. Each step is as long as
/// what the segment already holds, up to [`PREFAULT`], so that a queue holding
/// a few messages keeps a few pages resident rather than a megabyte: a
/// thousand such queues held a gigabyte.
const FIRST_PREFAULT: usize = 16 * 1024;
/// Written pages further than this behind the write cursor are dropped from the
/// process's resident memory (they stay in the page cache), so a queue that is
/// written to but not read does not hold its whole segment resident.
const RESIDENT_BEHIND: usize = 1 << 20;
/// Records at least this big are written with `pwrite` rather than copied into
/// the map: a full-page write needs no zero-filled page first, which a store
/// through the map of a fresh file region does.
const WRITE_THROUGH_FILE: usize = 64 * 1024;
/// Bytes a stream reader copies out of a sealed segment at a time (see
/// [`ReadWindow`]): a few hundred records of a kilobyte per system call, and
/// small enough to stay in the CPU's cache while they are delivered.
const WINDOW: usize = 256 * 1024;
/// Size of a meta file: version, message count, data end, checksum.
const META_LEN: usize = 16;

/// File name of segment `id`'s messages.
pub fn msgs_name(id: u32) -> String {
    format!("msgs.{id:010}")
}

/// File name of segment `id`'s ack log.
pub fn acks_name(id: u32) -> String {
    format!("acks.{id:010}")
}

/// File name of segment `id`'s metadata.
pub fn meta_name(id: u32) -> String {
    format!("meta.{id:010}")
}

/// Reserves `len` bytes for `file` on disk (not just a sparse size).
fn reserve(file: &File, len: u64) -> io::Result<()> {
    if file.metadata()?.len() >= len {
        return Ok(());
    }
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, len) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => file.set_len(len),
        Err(e) => Err(e.into()),
    }
}

fn map(file: &File) -> io::Result<Map> {
    // SAFETY: the broker owns the data directory (it holds the directory lock) and no
    // other process writes these files; within the process a segment is only touched
    // through its owning store, under the queue's lock.
    unsafe { Map::map_mut(file) }
}

fn open_rw(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
}

/// What a scan of a segment's records found.
struct Scan {
    end: usize,
    msgs: u32,
    damage: Vec<String>,
}

/// Walks the records of `data` from the header on, skipping damaged ranges.
fn scan(data: &[u8], seed: u32) -> Scan {
    scan_records(data, seed, |_| {})
}

/// [`scan`], handing each valid record to `visit`. A stream's gap record
/// counts as the messages it replaced (see [`record::gap_offsets`]).
fn scan_records(data: &[u8], seed: u32, mut visit: impl FnMut(&[u8])) -> Scan {
    let mut pos = SEGMENT_HEADER;
    let mut msgs: u32 = 0;
    let mut damage = Vec::new();
    loop {
        match record::total_len(&data[pos..]) {
            Ok(None) => break,
            Ok(Some(total)) if record::verify(&data[pos..], total, seed).is_ok() => {
                let rec = &data[pos..pos + total];
                visit(rec);
                pos += total;
                msgs = msgs.saturating_add(u32::try_from(record::offsets_taken(rec)).unwrap_or(u32::MAX));
                continue;
            }
            _ => {}
        }
        match resync(data, pos + 1, data.len(), seed) {
            Some(next) => {
                damage.push(format!("skipped damaged bytes {pos}..{next}"));
                pos = next;
            }
            None => {
                damage.push(format!("data ends with damaged or torn bytes at offset {pos}"));
                break;
            }
        }
    }
    Scan { end: pos, msgs, damage }
}

/// Finds the first offset in `from..limit` where a whole, valid record starts.
fn resync(data: &[u8], from: usize, limit: usize, seed: u32) -> Option<usize> {
    let limit = limit.min(data.len());
    (from..limit).find(|&p| {
        matches!(record::total_len(&data[p..limit]), Ok(Some(total)) if record::verify(&data[p..limit], total, seed).is_ok())
    })
}

/// The seed of the record checksums of segment `id` written in format `version`,
/// or `None` for a version this build does not know.
fn checksum_seed(version: u32, id: u32) -> Option<u32> {
    match version {
        FORMAT_VERSION => Some(id),
        // 0: a segment whose header was never written holds no records either.
        UNSEEDED_VERSION | 0 => Some(0),
        _ => None,
    }
}

/// How to fault in the pages ahead of a segment's writer, given the
/// [`super::group_sync::syncs_so_far`] it saw the last time (updated).
/// Writable and dirty in one go, unless syncs ran since: each sync would write
/// the pages back while still empty and write-protect them, so that every page
/// would be faulted twice and written back twice. They are then only mapped,
/// and each takes its write fault when first written.
fn populate_advice(syncs_seen: &mut u64) -> memmap2::Advice {
    let syncs = super::group_sync::syncs_so_far();
    let syncing = syncs != *syncs_seen;
    *syncs_seen = syncs;
    if syncing {
        memmap2::Advice::PopulateRead
    } else {
        memmap2::Advice::PopulateWrite
    }
}

/// A stream reader's copy of a run of records of a sealed segment, read with
/// `pread` (see [`Segment::step_copied`]). Reading a backlog through the
/// segment's map instead maps every page into the process, and keeping the
/// resident set small then means unmapping each again: two page-table updates
/// per page and a TLB flush on every core per unmap, measured costlier than
/// the copy. The window is all the reader holds (a quarter of a megabyte of
/// heap), and it is freed once the reader catches up with the writer.
#[derive(Debug, Default)]
pub struct ReadWindow {
    seg: u32,
    start: usize,
    len: usize,
    buf: Vec<u8>,
}

impl ReadWindow {
    /// The bytes of segment `seg` from `pos` on that the window holds.
    fn at(&self, seg: u32, pos: usize) -> &[u8] {
        if self.seg != seg || pos < self.start {
            return &[];
        }
        self.buf.get(pos - self.start..self.len).unwrap_or(&[])
    }

    /// The whole record at `pos` of segment `seg`, if the window holds it.
    pub fn record(&self, seg: u32, pos: u32) -> Option<&[u8]> {
        let data = self.at(seg, pos as usize);
        let total = record::total_len(data).ok()??;
        data.get(..total)
    }

    /// Bytes of buffer held, so tests can check it is freed.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.buf.capacity()
    }

    /// Frees the buffer: the reader reads the write segment through its map.
    pub fn release(&mut self) {
        if self.buf.capacity() > 0 {
            *self = ReadWindow::default();
        }
    }
}

/// A segment with its ack log.
pub struct Segment {
    /// Segment number, also the file name suffix.
    pub id: u32,
    file: File,
    map: Option<Map>,
    /// End of the written data.
    pub end: usize,
    /// Messages in this segment.
    pub msgs: u32,
    /// Messages removed (acked, purged, dropped) from this segment.
    pub acked: u32,
    /// Records handed out by the reader in this run (to recount after damage).
    pub seen: u32,
    acks: Option<Map>,
    sealed: bool,
    dir: PathBuf,
    /// Pages of the map up to here are faulted in: for the writer while the
    /// segment is open, for the reader once it is sealed.
    prefaulted: usize,
    /// Pages of the map before here were dropped from resident memory.
    released: usize,
    /// The messages file as registered for replication (clustered only).
    msgs_ref: Option<FileRef>,
    /// The ack log as registered for replication (clustered only).
    acks_ref: Option<FileRef>,
    /// Created by this process, so every record in it was appended by this
    /// process and the reader steps over them without checking their checksum
    /// again: checksums guard against torn writes and damage at rest, which
    /// only records found on disk at start can have.
    written_here: bool,
    /// Records before this position were found valid by a reader in this
    /// run (see [`Segment::record_checked`]): later readers step over them as over
    /// records written here.
    checked_end: usize,
    /// The file held an earlier segment: what lies past the data is stale.
    reused: bool,
    /// Seed of this segment's record checksums.
    seed: u32,
    /// [`super::group_sync::syncs_so_far`] when the writer last faulted in
    /// pages ahead.
    syncs_seen: u64,
    /// Records appended with [`Segment::stage`] and not yet in the file
    /// (see [`Segment::write_staged`]), and how many they are.
    staged: Vec<u8>,
    staged_msgs: u32,
}

impl Segment {
    /// Creates a new, empty segment able to hold `capacity` bytes, with its space
    /// reserved on disk. A spare file of the same folder is reused when there is
    /// one (see [`super::spare_segments`]).
    pub fn create(dir: &Path, id: u32, capacity: usize) -> io::Result<Self> {
        // Leftovers of an earlier segment with this number must not count against
        // the new one.
        remove_files(dir, &[acks_name(id), meta_name(id)])?;
        let path = dir.join(msgs_name(id));
        let capacity = capacity.max(SEGMENT_HEADER + MIN_RECORD);
        let reused = spare_segments::take(dir, &path);
        let file = open_rw(&path, true)?;
        let sized = if reused && file.metadata()?.len() > capacity as u64 {
            file.set_len(capacity as u64)
        } else {
            reserve(&file, capacity as u64)
        };
        if let Err(e) = sized {
            drop(file);
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        // Not populated: pages become resident only as messages are written, so an
        // idle queue costs no memory. No readahead either: every page of a new
        // segment is about to be overwritten, and reading ahead would zero-fill
        // megabytes of page cache on the first touch.
        let mut map = map(&file)?;
        let _ = map.advise(memmap2::Advice::Random);
        map[0..4].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        if reused {
            map[SEGMENT_HEADER..SEGMENT_HEADER + 4].fill(0);
        }
        let msgs_ref = replication::register(&path);
        replication::wrote(msgs_ref, 0, &[&map[0..4]]);
        Ok(Segment {
            id,
            file,
            map: Some(map),
            end: SEGMENT_HEADER,
            msgs: 0,
            acked: 0,
            seen: 0,
            acks: None,
            sealed: false,
            dir: dir.to_path_buf(),
            prefaulted: 0,
            released: 0,
            msgs_ref,
            acks_ref: None,
            written_here: true,
            checked_end: SEGMENT_HEADER,
            reused,
            seed: id,
            syncs_seen: super::group_sync::syncs_so_far(),
            staged: Vec::new(),
            staged_msgs: 0,
        })
    }

    /// Opens an existing segment as sealed. Its metadata gives the message count
    /// without reading the data; without (valid) metadata the records are scanned,
    /// damaged ones skipped and reported. Returns the segment, the acked positions
    /// from its ack log, and the damage found.
    pub fn open(dir: &Path, id: u32) -> io::Result<(Self, Vec<u32>, Vec<String>)> {
        let path = dir.join(msgs_name(id));
        let file = open_rw(&path, false)?;
        let mut seg = Segment {
            id,
            file,
            map: None,
            end: SEGMENT_HEADER,
            msgs: 0,
            acked: 0,
            seen: 0,
            acks: None,
            sealed: true,
            dir: dir.to_path_buf(),
            prefaulted: 0,
            released: 0,
            msgs_ref: replication::register(&path),
            acks_ref: None,
            written_here: false,
            checked_end: SEGMENT_HEADER,
            reused: false,
            seed: 0,
            syncs_seen: 0,
            staged: Vec::new(),
            staged_msgs: 0,
        };
        let len = seg.file.metadata()?.len() as usize;
        if len >= SEGMENT_HEADER {
            use std::os::unix::fs::FileExt;
            let mut header = [0u8; SEGMENT_HEADER];
            seg.file.read_exact_at(&mut header, 0)?;
            let version = u32::from_le_bytes(header);
            seg.seed = checksum_seed(version, id).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unknown segment format version {version}"),
                )
            })?;
        }
        let mut damage = Vec::new();
        let meta = seg.read_meta();
        match meta {
            Some((msgs, end)) if end <= len => {
                seg.msgs = msgs;
                seg.end = end;
            }
            _ => {
                if let Some((msgs, end)) = meta {
                    damage.push(format!(
                        "file is {len} bytes but its metadata says {msgs} messages in {end} bytes; rescanned"
                    ));
                }
                if len >= SEGMENT_HEADER {
                    let map = map(&seg.file)?;
                    let s = scan(&map, seg.seed);
                    seg.msgs = s.msgs;
                    seg.end = s.end;
                    damage = s.damage;
                }
                seg.write_meta()?;
                if len > seg.end {
                    seg.file.set_len(seg.end as u64)?;
                    replication::len_set(&path, seg.end as u64);
                }
            }
        }
        let acks = seg.load_acks()?;
        seg.acked = acks.len() as u32;
        Ok((seg, acks, damage))
    }

    fn read_meta(&self) -> Option<(u32, usize)> {
        let bytes = std::fs::read(self.dir.join(meta_name(self.id))).ok()?;
        if bytes.len() != META_LEN {
            return None;
        }
        let word = |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        if word(0) != META_VERSION || crc32fast::hash(&bytes[..12]) != word(12) {
            return None;
        }
        Some((word(4), word(8) as usize))
    }

    fn write_meta(&self) -> io::Result<()> {
        let mut bytes = Vec::with_capacity(META_LEN);
        bytes.extend_from_slice(&META_VERSION.to_le_bytes());
        bytes.extend_from_slice(&self.msgs.to_le_bytes());
        bytes.extend_from_slice(&(self.end as u32).to_le_bytes());
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        let path = self.dir.join(meta_name(self.id));
        std::fs::write(&path, &bytes)?;
        replication::replaced(&path, &bytes);
        Ok(())
    }

    /// Reads the ack log into a sorted list of positions, rewriting it compacted.
    fn load_acks(&mut self) -> io::Result<Vec<u32>> {
        let path = self.dir.join(acks_name(self.id));
        let file = match open_rw(&path, false) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        if file.metadata()?.len() > 0 {
            let acks = map(&file)?;
            for chunk in acks.chunks_exact(4) {
                let p = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
                if p == 0 {
                    break;
                }
                if (p as usize) < self.end {
                    out.push(p);
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        drop(file);
        // Rewrite compacted, so that new acks append right after the valid ones.
        let tmp = path.with_extension("tmp");
        let bytes: Vec<u8> = out.iter().flat_map(|p| p.to_le_bytes()).collect();
        std::fs::write(&tmp, &bytes)?;
        std::fs::rename(&tmp, &path)?;
        replication::replaced(&path, &bytes);
        Ok(out)
    }

    /// Bytes still free for appending.
    pub fn free(&self) -> usize {
        match &self.map {
            Some(m) if !self.sealed => m.len() - self.end,
            _ => 0,
        }
    }

    /// Appends one record; the caller checked `free()`.
    pub fn append(
        &mut self,
        timestamp: i64,
        exchange: &str,
        routing_key: &str,
        properties: &[u8],
        body: &[u8],
    ) -> io::Result<u32> {
        let total = record::size(exchange, routing_key, properties, body)?;
        let pos = self.end;
        if total >= WRITE_THROUGH_FILE {
            use std::os::unix::fs::FileExt;
            let head = record::head(self.seed, timestamp, exchange, routing_key, properties, body);
            self.file.write_all_at(&head, pos as u64)?;
            self.file.write_all_at(body, (pos + head.len()) as u64)?;
            replication::wrote(self.msgs_ref, pos as u64, &[&head, body]);
        } else if let Some(map) = self.map.as_mut() {
            if pos + total > self.prefaulted {
                let advice = populate_advice(&mut self.syncs_seen);
                let step = self.prefaulted.clamp(FIRST_PREFAULT, PREFAULT);
                let to = (pos + total).max(self.prefaulted + step).min(map.len());
                // Best effort: on kernels without MADV_POPULATE_WRITE the pages
                // simply fault in as they are written.
                let _ = map.advise_range(advice, self.prefaulted, to - self.prefaulted);
                self.prefaulted = to;
            }
            record::write(
                &mut map[pos..pos + total],
                self.seed,
                timestamp,
                exchange,
                routing_key,
                properties,
                body,
            );
            replication::wrote(self.msgs_ref, pos as u64, &[&map[pos..pos + total]]);
        } else {
            return Err(io::Error::other("segment is sealed: no more appends"));
        }
        self.end += total;
        self.msgs += 1;
        if self.reused {
            // The stale bytes of the file's earlier life start here: a zero length
            // ends the data for a recovery after a crash of this process (the
            // kernel keeps the page). After a power cut the zero may be lost, and
            // the seeded checksums reject what lies beyond instead.
            if let Some(next) = self.map.as_mut().and_then(|m| m.get_mut(self.end..self.end + 4)) {
                next.fill(0);
            }
        }
        self.release_behind(self.end);
        Ok(pos as u32)
    }

    /// Appends one record as [`Segment::append`] does, but into a buffer
    /// that [`Segment::write_staged`] writes to the file in one `pwrite`;
    /// readers must not look past the data before that. For a batch of
    /// small records appended under one lock (a stream publisher's frame):
    /// storing through the map costs a page fault per page written while
    /// the data is being synced (each sync write-protects the pages it
    /// wrote), and those faults contend with the sync for the page table.
    pub fn stage(
        &mut self,
        timestamp: i64,
        exchange: &str,
        routing_key: &str,
        properties: &[u8],
        body: &[u8],
    ) -> io::Result<u32> {
        if self.sealed {
            return Err(io::Error::other("segment is sealed: no more appends"));
        }
        let total = record::size(exchange, routing_key, properties, body)?;
        let pos = self.end;
        let start = self.staged.len();
        self.staged.resize(start + total, 0);
        record::write(
            &mut self.staged[start..],
            self.seed,
            timestamp,
            exchange,
            routing_key,
            properties,
            body,
        );
        self.end += total;
        self.msgs += 1;
        self.staged_msgs += 1;
        Ok(pos as u32)
    }

    /// Records staged and not yet written.
    pub fn staged_msgs(&self) -> u32 {
        self.staged_msgs
    }

    /// Writes the records staged with [`Segment::stage`] to the file. On an
    /// error they are dropped: the data ends where it did before them.
    pub fn write_staged(&mut self) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        if self.staged.is_empty() {
            return Ok(());
        }
        let pos = self.end - self.staged.len();
        let len = self.staged.len();
        // A reused file's stale bytes start after the data: a zero length
        // ends it, as `append` writes one (see there).
        let room = self.map.as_ref().map_or(0, |m| m.len());
        if self.reused && self.end + 4 <= room {
            self.staged.extend_from_slice(&[0; 4]);
        }
        let written = self.file.write_all_at(&self.staged, pos as u64);
        self.staged.truncate(len);
        if let Err(e) = written {
            self.end = pos;
            self.msgs -= self.staged_msgs;
            self.staged.clear();
            self.staged_msgs = 0;
            return Err(e);
        }
        replication::wrote(self.msgs_ref, pos as u64, &[&self.staged]);
        self.staged.clear();
        self.staged_msgs = 0;
        self.release_behind(self.end);
        Ok(())
    }

    /// The reader of a sealed segment moved to `pos`: the pages ahead of it are
    /// faulted in a megabyte at a time, and those well behind it dropped from
    /// the resident set, so reading a backlog holds about two megabytes of each
    /// segment resident rather than all of it.
    pub fn reading_at(&mut self, pos: usize) {
        if !self.sealed {
            return;
        }
        let Some(map) = self.map.as_ref() else { return };
        if pos + PREFAULT / 2 > self.prefaulted && self.prefaulted < map.len() {
            let from = self.prefaulted.max(pos);
            let to = (pos + PREFAULT).min(map.len());
            // Best effort, as for the writer.
            let _ = map.advise_range(memmap2::Advice::PopulateRead, from, to - from);
            self.prefaulted = to;
        }
        self.release_behind(pos);
    }

    /// Drops the pages well behind `cursor` (the writer's or the reader's) from
    /// this process's resident set. A reader that still needs them faults them
    /// back from the page cache.
    fn release_behind(&mut self, cursor: usize) {
        let Some(map) = self.map.as_ref() else { return };
        let upto = cursor.saturating_sub(RESIDENT_BEHIND) & !(RESIDENT_BEHIND - 1);
        if upto > self.released + RESIDENT_BEHIND {
            // SAFETY: the map is a shared mapping of a file, so MADV_DONTNEED only
            // unmaps pages; their contents stay in the page cache (dirty ones
            // included) and are read back on the next access.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, self.released, upto - self.released)
            };
            self.released = upto;
        }
    }

    /// Stops appending: records the metadata, unmaps, and gives back the space
    /// beyond the data.
    pub fn seal(&mut self) -> io::Result<()> {
        if self.sealed {
            return Ok(());
        }
        self.write_staged()?;
        self.sealed = true;
        self.write_meta()?;
        self.unmap();
        self.file.set_len(self.end as u64)?;
        replication::len_set(&self.dir.join(msgs_name(self.id)), self.end as u64);
        Ok(())
    }

    /// True while the data is mapped.
    pub fn is_mapped(&self) -> bool {
        self.map.is_some()
    }

    /// Maps a sealed segment again so that it can be read from the start; the
    /// reader's window is kept resident by [`Segment::reading_at`].
    pub fn ensure_mapped(&mut self) -> io::Result<()> {
        if !self.is_mapped() {
            self.map_lazily()?;
            self.reading_at(SEGMENT_HEADER);
        }
        Ok(())
    }

    /// Maps a sealed segment again without faulting any page in: for a reader
    /// that resumes mid-segment (and calls [`Segment::reading_at`] where it
    /// is) or only looks at one record, a megabyte read ahead from the start
    /// would be wasted.
    pub fn map_lazily(&mut self) -> io::Result<()> {
        if self.map.is_none() {
            self.map = Some(map(&self.file)?);
            self.prefaulted = 0;
            self.released = 0;
        }
        Ok(())
    }

    /// Bytes of this segment's map resident in the process (from
    /// `/proc/self/smaps`), so tests can check what a reader keeps.
    #[cfg(test)]
    pub(crate) fn resident_bytes(&self) -> usize {
        let Some(map) = self.map.as_ref() else { return 0 };
        let (start, end) = (map.as_ptr() as usize, map.as_ptr() as usize + map.len());
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
        let mut inside = false;
        let mut kib = 0;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().and_then(|r| r.split_once('-'));
            if let Some((from, to)) = range
                && let (Ok(from), Ok(to)) = (usize::from_str_radix(from, 16), usize::from_str_radix(to, 16))
            {
                // The map's last page is partly past its length.
                inside = from < end && to > start;
            } else if inside && let Some(rss) = line.strip_prefix("Rss:") {
                kib += rss.trim().trim_end_matches("kB").trim().parse::<usize>().unwrap_or(0);
            }
        }
        kib * 1024
    }

    /// Drops the map of a sealed segment (readers have moved on).
    pub fn unmap(&mut self) {
        if self.sealed {
            self.map = None;
            self.acks = None;
        }
    }

    /// The record bytes at `pos` if a whole, valid record starts there.
    pub fn record_at(&self, pos: u32) -> Option<&[u8]> {
        let pos = pos as usize;
        let map = self.map.as_ref()?;
        let data = map.get(pos..self.end)?;
        let total = record::total_len(data).ok()??;
        data.get(..total)
    }

    /// Where the reader goes after `pos`: `Ok(Some(next))` past a valid record,
    /// `Ok(None)` at the end of the data, `Err(resume)` when the bytes at `pos`
    /// are damaged and reading resumes at `resume` (the end if nothing is left).
    pub fn step(&self, pos: u32) -> Result<Option<u32>, u32> {
        let p = pos as usize;
        if p >= self.end {
            return Ok(None);
        }
        let Some(map) = self.map.as_ref() else { return Ok(None) };
        let data = &map[p..self.end];
        match record::total_len(data) {
            Ok(Some(total)) if self.trusted(p) => Ok(Some((p + total) as u32)),
            Ok(Some(total)) if record::verify(data, total, self.seed).is_ok() => Ok(Some((p + total) as u32)),
            Ok(None) if !self.sealed => Ok(None),
            _ => Err(resync(map, p + 1, self.end, self.seed).unwrap_or(self.end) as u32),
        }
    }

    /// True when the record at `pos` needs no checksum test: written by this
    /// process, or checked by a reader already.
    fn trusted(&self, pos: usize) -> bool {
        self.written_here || pos < self.checked_end
    }

    /// True once the segment takes no more appends.
    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    /// Where the reader goes after `pos`, as [`Segment::step`], for a sealed
    /// segment read through the copy `w` of its records rather than its map.
    /// A damaged or unreadable record is left to the map's [`Segment::step`],
    /// which finds where reading resumes.
    pub fn step_copied(&mut self, pos: u32, w: &mut ReadWindow) -> Result<Option<u32>, u32> {
        let p = pos as usize;
        if p >= self.end {
            return Ok(None);
        }
        if let Some(total) = self.copy_record(p, w)
            && (self.trusted(p) || record::verify(w.at(self.id, p), total, self.seed).is_ok())
        {
            return Ok(Some((p + total) as u32));
        }
        if let Err(e) = self.map_lazily() {
            tracing::error!(segment = self.id, "cannot map segment to skip a damaged record: {e}");
            return Err(self.end as u32);
        }
        self.step(pos)
    }

    /// Makes `w` hold the whole record at `p` and returns its length; `None`
    /// when its length field is zero or runs past the data, or on a read error.
    fn copy_record(&self, p: usize, w: &mut ReadWindow) -> Option<usize> {
        if let Ok(Some(total)) = record::total_len(w.at(self.id, p)) {
            return Some(total);
        }
        self.copy(p, WINDOW, w)?;
        let data = w.at(self.id, p);
        let len = u32::from_le_bytes(data.get(..4)?.try_into().ok()?) as usize;
        let total = record::RECORD_HEADER + len;
        if len == 0 || total > self.end - p {
            return None;
        }
        if total > data.len() {
            self.copy(p, total, w)?;
        }
        Some(total)
    }

    /// Reads `want` bytes from `p` on (fewer at the end of the data) into `w`.
    fn copy(&self, p: usize, want: usize, w: &mut ReadWindow) -> Option<()> {
        use std::os::unix::fs::FileExt;
        let len = want.min(self.end - p);
        // Sized to what is read: a reader at the tail copies only the last
        // records of a segment its writer just sealed. Shrunk back after a
        // large record.
        if w.buf.len() < len || (len <= WINDOW && w.buf.len() > WINDOW) {
            w.buf = vec![0; len];
        }
        w.len = 0;
        if let Err(e) = self.file.read_exact_at(&mut w.buf[..len], p as u64) {
            tracing::warn!(segment = self.id, "cannot read segment at offset {p}: {e}");
            return None;
        }
        (w.seg, w.start, w.len) = (self.id, p, len);
        Some(())
    }

    /// A reader found the record at `pos` valid ([`Segment::step`] returned
    /// `next`). When it continues the run of checked records, the run grows,
    /// so that other readers of the stream (and later ones: the data of a
    /// sealed segment never changes) do not compute its checksum again.
    pub fn record_checked(&mut self, pos: u32, next: u32) {
        if pos as usize == self.checked_end {
            self.checked_end = next as usize;
        }
    }

    /// Records the removal of the message at `pos` in the ack log.
    pub fn ack(&mut self, pos: u32) -> io::Result<()> {
        if self.acks.is_none() {
            let capacity = self.end.max(self.map.as_ref().map_or(0, |m| m.len()));
            let slots = capacity / MIN_RECORD + 1;
            let path = self.dir.join(acks_name(self.id));
            let file = open_rw(&path, true)?;
            reserve(&file, (slots * 4) as u64)?;
            self.acks_ref = replication::register(&path);
            let acks = map(&file)?;
            // Written front to back, 4 bytes at a time: no readahead of zeros.
            let _ = acks.advise(memmap2::Advice::Random);
            self.acks = Some(acks);
        }
        let acked = self.acked as usize;
        if let Some(acks) = self.acks.as_mut()
            && let Some(slot) = acks.get_mut(acked * 4..acked * 4 + 4)
        {
            slot.copy_from_slice(&pos.to_le_bytes());
            replication::wrote(self.acks_ref, (acked * 4) as u64, &[&pos.to_le_bytes()]);
        }
        self.acked += 1;
        Ok(())
    }

    /// Removes the segment's files; the maps go away with `self`.
    pub fn remove(self) -> io::Result<()> {
        let (dir, id) = (self.dir.clone(), self.id);
        drop(self);
        remove_files(&dir, &[msgs_name(id), acks_name(id), meta_name(id)])
    }

    /// Removes a consumed segment, keeping its messages file as a spare for the
    /// folder's next segment when this process wrote it (its records' checksum
    /// seed is then known to be this segment's number; see
    /// [`super::spare_segments`]).
    pub fn retire(self) -> io::Result<()> {
        if !self.written_here {
            return self.remove();
        }
        let (dir, id) = (self.dir.clone(), self.id);
        drop(self);
        let msgs = dir.join(msgs_name(id));
        // The messages file goes first, as in `remove`: an ack log without its
        // messages is harmless, messages without their ack log are not.
        match spare_segments::keep(&dir, &msgs) {
            Ok(()) => replication::removed(&msgs),
            Err(e) => {
                tracing::debug!(segment = id, "cannot keep the segment file as a spare: {e}");
                remove_files(&dir, &[msgs_name(id)])?;
            }
        }
        remove_files(&dir, &[acks_name(id), meta_name(id)])
    }
}

/// What [`visit_sealed`] found in a sealed segment.
#[derive(Debug, Clone, Copy)]
pub struct SealedScan {
    /// The segment's header (its format version), which a rewrite keeps so
    /// that the records it copies keep their checksums.
    pub header: [u8; SEGMENT_HEADER],
    /// Seed of the segment's record checksums.
    pub seed: u32,
    /// Messages counted, gaps included (as [`Segment::msgs`]).
    pub msgs: u32,
}

/// Reads sealed segment `id` of `dir` from disk and hands each valid record to
/// `visit`, in order. For a pass that runs beside the segment's owner (stream
/// compaction): the data of a sealed segment never changes.
pub fn visit_sealed(dir: &Path, id: u32, visit: impl FnMut(&[u8])) -> io::Result<SealedScan> {
    let data = std::fs::read(dir.join(msgs_name(id)))?;
    let header: [u8; SEGMENT_HEADER] = data
        .get(..SEGMENT_HEADER)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "segment shorter than its header"))?;
    let version = u32::from_le_bytes(header);
    let seed = checksum_seed(version, id).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unknown segment format version {version}"),
        )
    })?;
    let s = scan_records(&data, seed, visit);
    Ok(SealedScan {
        header,
        seed,
        msgs: s.msgs,
    })
}

/// Makes the file `rewritten` (a complete segment, synced) segment `id` of
/// `dir` in place of the sealed one there, and opens it. Crash-safe: the old
/// metadata goes first (durably), so a crash at any point leaves either the
/// old file or the new one, and metadata only for the one present; without
/// metadata the file is scanned at start.
pub fn replace_sealed(dir: &Path, id: u32, rewritten: &Path) -> io::Result<Segment> {
    let sync_dir = || File::open(dir)?.sync_all();
    let meta = dir.join(meta_name(id));
    match std::fs::remove_file(&meta) {
        Ok(()) => replication::removed(&meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    sync_dir()?;
    let path = dir.join(msgs_name(id));
    std::fs::rename(rewritten, &path)?;
    sync_dir()?;
    if replication::sink().is_some() {
        replication::replaced(&path, &std::fs::read(&path)?);
    }
    let (seg, _acks, damage) = Segment::open(dir, id)?;
    for d in damage {
        tracing::warn!(segment = id, "damage in a rewritten segment: {d}");
    }
    Ok(seg)
}

/// Removes the files `names` of `dir` that exist, in order, reporting each to
/// replication; their data is deleted later, off this thread (see
/// [`super::file_reaper`]).
fn remove_files(dir: &Path, names: &[String]) -> io::Result<()> {
    for name in names {
        super::file_reaper::remove(dir, name)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(dir: &Path, n: usize) -> Segment {
        let mut s = Segment::create(dir, 1, 64 * 1024).unwrap();
        for i in 0..n {
            s.append(1, "e", "k", &[], format!("body {i}").as_bytes()).unwrap();
        }
        s
    }

    #[test]
    fn sealed_segments_reopen_from_meta_without_scanning() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = filled(dir.path(), 10);
        s.ack(SEGMENT_HEADER as u32).unwrap();
        let end = s.end;
        s.seal().unwrap();
        drop(s);
        assert_eq!(
            std::fs::metadata(dir.path().join(msgs_name(1))).unwrap().len() as usize,
            end
        );
        let (s, acks, damage) = Segment::open(dir.path(), 1).unwrap();
        assert!(!s.is_mapped());
        assert_eq!((s.msgs, s.end, s.acked), (10, end, 1));
        assert_eq!(acks, vec![SEGMENT_HEADER as u32]);
        assert!(damage.is_empty());
    }

    #[test]
    fn a_flipped_byte_loses_only_its_record() {
        let dir = tempfile::tempdir().unwrap();
        let s = filled(dir.path(), 10);
        let second = s.step(SEGMENT_HEADER as u32).unwrap().unwrap() as usize;
        drop(s);
        let path = dir.path().join(msgs_name(1));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[second + 12] ^= 0x55;
        std::fs::write(&path, bytes).unwrap();
        let (s, _, damage) = Segment::open(dir.path(), 1).unwrap();
        assert_eq!(s.msgs, 9);
        assert_eq!(damage.len(), 1, "{damage:?}");
    }

    #[test]
    fn a_torn_tail_keeps_the_whole_records() {
        let dir = tempfile::tempdir().unwrap();
        let s = filled(dir.path(), 10);
        let end = s.end;
        drop(s);
        let path = dir.path().join(msgs_name(1));
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..end - 3]).unwrap();
        let (s, _, damage) = Segment::open(dir.path(), 1).unwrap();
        assert_eq!(s.msgs, 9);
        assert_eq!(damage.len(), 1);
    }

    #[test]
    fn records_written_in_this_run_are_stepped_over_and_reopened_ones_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = filled(dir.path(), 3);
        let second = s.step(SEGMENT_HEADER as u32).unwrap().unwrap();
        let third = s.step(second).unwrap().unwrap();
        s.seal().unwrap();
        drop(s);
        let path = dir.path().join(msgs_name(1));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[second as usize + 12] ^= 0x55;
        std::fs::write(&path, bytes).unwrap();
        // Reopened from its metadata: nothing was scanned, so the reader checks.
        let (mut s, _, damage) = Segment::open(dir.path(), 1).unwrap();
        assert!(damage.is_empty());
        s.ensure_mapped().unwrap();
        assert_eq!(s.step(SEGMENT_HEADER as u32), Ok(Some(second)));
        assert_eq!(s.step(second), Err(third));
    }

    fn spares_in(dir: &Path) -> usize {
        // Removed files carry a spare's name until the reaper deletes them.
        super::super::file_reaper::settle();
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_str()
                    .is_some_and(spare_segments::is_spare_name)
            })
            .count()
    }

    #[test]
    fn a_reused_file_recovers_only_its_new_records() {
        let dir = tempfile::tempdir().unwrap();
        // Same-sized records in both lives, so stale ones sit exactly where the
        // next new one would start.
        let mut old = Segment::create(dir.path(), 1, 64 * 1024).unwrap();
        for i in 0..200 {
            old.append(1, "e", "k", &[], format!("old {i:03}").as_bytes()).unwrap();
        }
        old.seal().unwrap();
        old.retire().unwrap();
        assert!(!dir.path().join(msgs_name(1)).exists());
        assert_eq!(spares_in(dir.path()), 1);

        let mut new = Segment::create(dir.path(), 2, 64 * 1024).unwrap();
        assert!(new.reused, "the spare of this folder was not taken");
        assert_eq!(spares_in(dir.path()), 0);
        for i in 0..3 {
            new.append(1, "e", "k", &[], format!("new {i:03}").as_bytes()).unwrap();
        }
        let end = new.end;
        // A crash of the process: the kernel keeps the pages, zero after the data.
        drop(new);
        let path = dir.path().join(msgs_name(2));
        let mut bytes = std::fs::read(&path).unwrap();
        let (s, _, damage) = Segment::open(dir.path(), 2).unwrap();
        assert_eq!((s.msgs, s.end), (3, end));
        assert!(damage.is_empty(), "{damage:?}");
        drop(s);

        // A power cut that lost the zero: the stale record after the data is
        // whole again, and valid for the segment it was written in.
        let record = (end - SEGMENT_HEADER) / 3;
        let stale_len = (record - record::RECORD_HEADER) as u32;
        bytes[end..end + 4].copy_from_slice(&stale_len.to_le_bytes());
        assert_eq!(record::verify(&bytes[end..], record, 1), Ok(()));
        std::fs::write(&path, &bytes).unwrap();
        std::fs::remove_file(dir.path().join(meta_name(2))).unwrap();
        let (s, _, _) = Segment::open(dir.path(), 2).unwrap();
        assert_eq!(s.msgs, 3, "a stale record of the file's earlier life came back");
    }

    /// The writer faults pages in steps as long as what the segment holds: a
    /// segment with a few messages has a few pages faulted in, a busy one
    /// steps a megabyte at a time.
    #[test]
    fn the_writer_faults_in_more_as_the_segment_fills() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Segment::create(dir.path(), 1, 8 << 20).unwrap();
        let body = vec![7u8; 100];
        for _ in 0..10 {
            s.append(1, "e", "k", &[], &body).unwrap();
        }
        assert_eq!(s.prefaulted, FIRST_PREFAULT);
        while s.end < 3 * PREFAULT {
            s.append(1, "e", "k", &[], &body).unwrap();
        }
        assert!(s.prefaulted - s.end <= PREFAULT, "{} ahead", s.prefaulted - s.end);
        assert!(s.prefaulted >= s.end);
    }
}
