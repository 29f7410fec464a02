//! Memory maps of the store's files (segments, ack logs, read cursors), with a
//! process-wide count of those open: LavinMQ's `mfile_count` metric. Mapping
//! and unmapping adjust the count with one relaxed atomic add; reading and
//! writing through a map cost nothing extra.

use std::fs::File;
use std::io;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapMut;

/// Maps open now, over every store in the process.
static OPEN: AtomicU64 = AtomicU64::new(0);

/// How many of the store's files are memory-mapped now.
pub fn open_count() -> u64 {
    OPEN.load(Ordering::Relaxed)
}

/// A writable shared map of a whole file, counted while it lives.
#[derive(Debug)]
pub struct Map(MmapMut);

impl Map {
    /// Maps all of `file` for reading and writing.
    ///
    /// # Safety
    ///
    /// As for [`MmapMut::map_mut`]: nothing else may truncate or change the
    /// file in ways that break the map while it lives.
    pub unsafe fn map_mut(file: &File) -> io::Result<Map> {
        // SAFETY: passed on to the caller.
        let map = unsafe { MmapMut::map_mut(file) }?;
        OPEN.fetch_add(1, Ordering::Relaxed);
        Ok(Map(map))
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Deref for Map {
    type Target = MmapMut;

    fn deref(&self) -> &MmapMut {
        &self.0
    }
}

impl DerefMut for Map {
    fn deref_mut(&mut self) -> &mut MmapMut {
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_maps_while_they_live() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.path().join("f"))
            .expect("open");
        file.set_len(4096).expect("set_len");
        // Other tests map files concurrently: this map's own count is one of them.
        // SAFETY: the file is this test's alone.
        let mut map = unsafe { Map::map_mut(&file) }.expect("map");
        assert!(open_count() >= 1);
        map[0] = 7;
        assert_eq!(map.len(), 4096);
        drop(map);
    }
}
