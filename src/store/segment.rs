//! One memory-mapped segment file (`msgs.NNNNNNNNNN`) and its ack log
//! (`acks.NNNNNNNNNN`).
//!
//! A segment is pre-sized (sparse) and mapped once; appending a message is a `memcpy`
//! into the map. The ack log is mapped the same way and holds the `u32` positions of
//! removed messages, so an ack costs a store into memory, and both files survive a
//! killed process because the kernel owns the pages.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use memmap2::MmapMut;

use super::record;

/// Bytes at the start of every segment: the format version.
pub const SEGMENT_HEADER: usize = 4;
/// Version number written in [`SEGMENT_HEADER`].
pub const FORMAT_VERSION: u32 = 1;
/// Smallest possible record, used to size the ack log of a segment.
const MIN_RECORD: usize = record::RECORD_HEADER + 8 + 1 + 1 + 4 + 8;

/// A mapped segment file with its mapped ack log.
pub struct Segment {
    /// Segment number, also the file name suffix.
    pub id: u32,
    map: MmapMut,
    /// End of the written data.
    pub end: usize,
    /// Messages written into this segment.
    pub msgs: u32,
    /// Messages removed (acked, purged, dropped) from this segment.
    pub acked: u32,
    acks: Option<MmapMut>,
    msgs_path: PathBuf,
    acks_path: PathBuf,
}

/// File name of segment `id`'s messages.
pub fn msgs_name(id: u32) -> String {
    format!("msgs.{id:010}")
}

/// File name of segment `id`'s ack log.
pub fn acks_name(id: u32) -> String {
    format!("acks.{id:010}")
}

fn map_file(path: &Path, len: u64, create: bool) -> io::Result<MmapMut> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)?;
    if file.metadata()?.len() < len {
        file.set_len(len)?;
    }
    map(&file)
}

fn map(file: &File) -> io::Result<MmapMut> {
    // SAFETY: the broker owns the data directory (it holds the directory lock) and no
    // other process writes these files; within the process a segment is only touched
    // through `&mut self` or `&self` of its owning store.
    unsafe { MmapMut::map_mut(file) }
}

impl Segment {
    /// Creates a new, empty segment able to hold `capacity` bytes.
    pub fn create(dir: &Path, id: u32, capacity: usize) -> io::Result<Self> {
        let msgs_path = dir.join(msgs_name(id));
        let acks_path = dir.join(acks_name(id));
        let capacity = capacity.max(SEGMENT_HEADER + MIN_RECORD);
        let mut map = map_file(&msgs_path, capacity as u64, true)?;
        map[0..4].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        Ok(Segment {
            id,
            map,
            end: SEGMENT_HEADER,
            msgs: 0,
            acked: 0,
            acks: None,
            msgs_path,
            acks_path,
        })
    }

    /// Opens an existing segment for reading, scanning its records to find where the
    /// data ends. Returns the segment and a description of damage found, if any.
    pub fn open(dir: &Path, id: u32) -> io::Result<(Self, Option<String>)> {
        let msgs_path = dir.join(msgs_name(id));
        let acks_path = dir.join(acks_name(id));
        let file = OpenOptions::new().read(true).write(true).open(&msgs_path)?;
        let len = file.metadata()?.len();
        if len < SEGMENT_HEADER as u64 {
            file.set_len(SEGMENT_HEADER as u64)?;
        }
        let mut map = map(&file)?;
        let mut damage = None;
        let version = u32::from_le_bytes([map[0], map[1], map[2], map[3]]);
        if version == 0 {
            map[0..4].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        } else if version != FORMAT_VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unknown segment version {version}"),
            ));
        }
        let mut end = SEGMENT_HEADER;
        let mut msgs = 0;
        loop {
            match record::total_len(&map[end..]) {
                Ok(None) => break,
                Ok(Some(total)) => match record::verify(&map[end..], total) {
                    Ok(()) => {
                        end += total;
                        msgs += 1;
                    }
                    Err(e) => {
                        damage = Some(format!("{e} at offset {end}, rest of segment skipped"));
                        break;
                    }
                },
                Err(e) => {
                    damage = Some(format!("{e} at offset {end}, rest of segment skipped"));
                    break;
                }
            }
        }
        let mut seg = Segment {
            id,
            map,
            end,
            msgs,
            acked: 0,
            acks: None,
            msgs_path,
            acks_path,
        };
        seg.acked = seg.count_acks()?;
        Ok((seg, damage))
    }

    /// Bytes still free for appending.
    pub fn free(&self) -> usize {
        self.map.len() - self.end
    }

    /// Appends one record; the caller checked `free()`.
    pub fn append(&mut self, timestamp: i64, exchange: &str, routing_key: &str, properties: &[u8], body: &[u8]) -> u32 {
        let total = record::RECORD_HEADER + record::payload_len(exchange, routing_key, properties.len(), body.len());
        let pos = self.end;
        record::write(
            &mut self.map[pos..pos + total],
            timestamp,
            exchange,
            routing_key,
            properties,
            body,
        );
        self.end += total;
        self.msgs += 1;
        pos as u32
    }

    /// The record bytes at `pos`, or `None` when `pos` does not start a record.
    pub fn record_at(&self, pos: u32) -> Option<&[u8]> {
        let pos = pos as usize;
        if pos >= self.end {
            return None;
        }
        let total = record::total_len(&self.map[pos..self.end]).ok()??;
        self.map.get(pos..pos + total)
    }

    /// Position of the record following the one at `pos`.
    pub fn next_pos(&self, pos: u32) -> Option<u32> {
        self.record_at(pos).map(|r| pos + r.len() as u32)
    }

    /// Records the removal of the message at `pos` in the ack log.
    pub fn ack(&mut self, pos: u32) -> io::Result<()> {
        if self.acks.is_none() {
            let slots = self.map.len() / MIN_RECORD + 1;
            self.acks = Some(map_file(&self.acks_path, (slots * 4) as u64, true)?);
        }
        let acked = self.acked as usize;
        if let Some(acks) = self.acks.as_mut()
            && let Some(slot) = acks.get_mut(acked * 4..acked * 4 + 4)
        {
            slot.copy_from_slice(&pos.to_le_bytes());
        }
        self.acked += 1;
        Ok(())
    }

    /// Positions recorded in the ack log, read at recovery.
    pub fn acked_positions(&self) -> Vec<u32> {
        let mut out = Vec::new();
        if let Some(acks) = &self.acks {
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
        out
    }

    fn count_acks(&mut self) -> io::Result<u32> {
        if !self.acks_path.exists() {
            return Ok(0);
        }
        let file = OpenOptions::new().read(true).write(true).open(&self.acks_path)?;
        let slots = self.map.len() / MIN_RECORD + 1;
        if file.metadata()?.len() < (slots * 4) as u64 {
            file.set_len((slots * 4) as u64)?;
        }
        self.acks = Some(map(&file)?);
        let n = self.acked_positions().len() as u32;
        // Rewrite the log compacted so that appends continue after the valid entries.
        let positions = self.acked_positions();
        if let Some(acks) = self.acks.as_mut() {
            acks.fill(0);
            for (i, p) in positions.iter().enumerate() {
                acks[i * 4..i * 4 + 4].copy_from_slice(&p.to_le_bytes());
            }
        }
        Ok(n)
    }

    /// Flushes both maps to disk.
    pub fn flush(&self) -> io::Result<()> {
        self.map.flush()?;
        if let Some(acks) = &self.acks {
            acks.flush()?;
        }
        Ok(())
    }

    /// Asynchronously starts writing dirty pages back, without waiting.
    pub fn flush_async(&self) -> io::Result<()> {
        self.map.flush_async()?;
        if let Some(acks) = &self.acks {
            acks.flush_async()?;
        }
        Ok(())
    }

    /// Removes both files; the maps go away with `self`.
    pub fn remove(self) -> io::Result<()> {
        let (m, a) = (self.msgs_path.clone(), self.acks_path.clone());
        drop(self);
        std::fs::remove_file(m)?;
        match std::fs::remove_file(a) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}
