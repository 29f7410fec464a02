//! The last publishing id of each named stream publisher, which stream
//! deduplication compares new ids with. It must survive a crash as well as
//! the messages it covers: a publisher that reconnects asks for its last id
//! and resends what follows, so an id lost after its message was confirmed
//! means that message stored twice.
//!
//! Each name has a slot in a memory-mapped table (`publisher_ids`): recording
//! an id is a store into memory, which a killed process cannot lose (the
//! kernel owns the pages) and which the group sync writes to disk along with
//! the messages it confirms. A name gets its slot when it first publishes, in
//! a small JSON file (`publisher_names.json`) written before the message's
//! confirm can go out.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use super::mmap::Map;
use super::replication::{self, FileRef};

/// The slot table's file.
const IDS_FILE: &str = "publisher_ids";
/// The names and their slots.
const NAMES_FILE: &str = "publisher_names.json";
/// Bytes per slot: the last id plus one (0: nothing recorded yet).
const SLOT: usize = 8;
/// The table's first size: 512 names.
const FIRST_LEN: usize = 4096;

/// The last publishing id of each publisher name of one stream.
pub struct PublisherSequences {
    dir: PathBuf,
    /// Name → (slot, last id).
    names: BTreeMap<String, (usize, u64)>,
    file: File,
    map: Map,
    file_ref: Option<FileRef>,
    /// The slot the next new name gets.
    next_slot: usize,
}

impl PublisherSequences {
    /// Opens (or creates) the table in `dir`. `earlier` holds ids kept by an
    /// earlier format, merged in (the higher id wins).
    pub fn open(dir: &Path, earlier: BTreeMap<String, u64>) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(IDS_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let len = file.metadata()?.len() as usize;
        if len < FIRST_LEN {
            file.set_len(FIRST_LEN as u64)?;
            replication::len_set(&path, FIRST_LEN as u64);
        }
        // SAFETY: the broker owns the data directory (it holds its lock) and no
        // other process writes this file; within the process the table is only
        // touched by its stream, under the queue's lock.
        let map = unsafe { Map::map_mut(&file)? };
        let slots: BTreeMap<String, u64> = super::definitions::read_json(&dir.join(NAMES_FILE))
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        let mut names = BTreeMap::new();
        for (name, slot) in slots {
            let slot = slot as usize;
            let Some(bytes) = map.get(slot * SLOT..(slot + 1) * SLOT) else {
                tracing::warn!(publisher = %name, "publisher slot past the end of its table: ignored");
                continue;
            };
            let stored = u64::from_le_bytes(bytes.try_into().unwrap_or_default());
            // A name whose first id never reached its slot keeps the slot and
            // has no id yet (see `last`).
            names.insert(name, (slot, stored.wrapping_sub(1)));
        }
        let next_slot = names.values().map(|(slot, _)| slot + 1).max().unwrap_or(0);
        let mut table = PublisherSequences {
            dir: dir.to_path_buf(),
            names,
            file_ref: replication::register(&path),
            file,
            map,
            next_slot,
        };
        for (name, id) in earlier {
            if table.last(&name).is_none_or(|last| last < id) {
                table.set(&name, id)?;
            }
        }
        Ok(table)
    }

    /// The last id recorded for `name`.
    pub fn last(&self, name: &str) -> Option<u64> {
        let (slot, last) = self.names.get(name)?;
        // A slot whose id never arrived reads as none.
        (self.stored(*slot) != 0).then_some(*last)
    }

    fn stored(&self, slot: usize) -> u64 {
        self.map
            .get(slot * SLOT..(slot + 1) * SLOT)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    }

    /// Records `id` as the last id of `name`. Only a new name costs more than
    /// a store into memory: its slot is written to the names file.
    pub fn set(&mut self, name: &str, id: u64) -> io::Result<()> {
        let slot = match self.names.get_mut(name) {
            Some((slot, last)) => {
                *last = id;
                *slot
            }
            None => {
                let slot = self.next_slot;
                self.grow_to(slot + 1)?;
                self.next_slot += 1;
                self.names.insert(name.to_owned(), (slot, id));
                if let Err(e) = self.save_names() {
                    self.names.remove(name);
                    return Err(e);
                }
                slot
            }
        };
        let bytes = id.wrapping_add(1).to_le_bytes();
        let at = slot * SLOT;
        self.map[at..at + SLOT].copy_from_slice(&bytes);
        replication::wrote(self.file_ref, at as u64, &[&bytes]);
        Ok(())
    }

    /// Makes the table hold at least `slots` slots.
    fn grow_to(&mut self, slots: usize) -> io::Result<()> {
        if slots * SLOT <= self.map.len() {
            return Ok(());
        }
        let len = (self.map.len() * 2).max(slots * SLOT);
        self.file.set_len(len as u64)?;
        replication::len_set(&self.dir.join(IDS_FILE), len as u64);
        // SAFETY: as in `open`.
        self.map = unsafe { Map::map_mut(&self.file)? };
        Ok(())
    }

    /// Writes the names and their slots (without a sync of its own: the
    /// group sync that confirms the name's first message covers it).
    fn save_names(&self) -> io::Result<()> {
        let slots: BTreeMap<&str, usize> = self.names.iter().map(|(n, (slot, _))| (n.as_str(), *slot)).collect();
        super::definitions::write_json(&self.dir.join(NAMES_FILE), &serde_json::json!(slots), false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_survive_reopening_and_earlier_ids_merge() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = PublisherSequences::open(dir.path(), BTreeMap::new()).unwrap();
        assert_eq!(t.last("a"), None);
        t.set("a", 0).unwrap();
        t.set("b", 41).unwrap();
        t.set("b", 42).unwrap();
        // More names than the first table holds.
        for i in 0..600 {
            t.set(&format!("n{i}"), i).unwrap();
        }
        assert_eq!(
            (t.last("a"), t.last("b"), t.last("n599")),
            (Some(0), Some(42), Some(599))
        );
        // Not closed: the map's stores are what a killed process leaves.
        std::mem::forget(t);
        let earlier = BTreeMap::from([("b".to_string(), 40), ("c".to_string(), 7)]);
        let t = PublisherSequences::open(dir.path(), earlier).unwrap();
        assert_eq!(
            (t.last("a"), t.last("b"), t.last("c"), t.last("n0"), t.last("n599")),
            (Some(0), Some(42), Some(7), Some(0), Some(599))
        );
        // A name whose slot was saved but whose id never arrived has none.
        let names = dir.path().join(NAMES_FILE);
        let mut slots: BTreeMap<String, u64> = serde_json::from_slice(&std::fs::read(&names).unwrap()).unwrap();
        slots.insert("late".into(), 1000);
        std::fs::write(&names, serde_json::to_vec(&slots).unwrap()).unwrap();
        drop(t);
        let t = PublisherSequences::open(dir.path(), BTreeMap::new()).unwrap();
        assert_eq!((t.last("late"), t.last("c")), (None, Some(7)));
    }
}
