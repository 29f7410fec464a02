//! An exclusive lock on the data dir, so that two brokers never share one.

use std::fs::File;
use std::path::Path;

/// Held for the life of the server; the OS releases it when the process ends.
pub struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    /// Takes the lock on `DIR/.lock`, failing with a message that names the dir.
    pub fn acquire(dir: &Path) -> Result<Self, String> {
        let path = dir.join(".lock");
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(|_| {
            format!(
                "data dir {} is in use by another broker (lock held on {})",
                dir.display(),
                path.display()
            )
        })?;
        Ok(DataDirLock { _file: file })
    }
}

/// A shared hold on `DIR/.lock` for reading a data dir without a broker
/// (`lavinmqctl definitions`): it cannot be had while a broker holds the
/// lock, and while held no broker can start on the dir. It never creates
/// the lock file, so the dir is left exactly as it was.
pub struct DataDirReadLock {
    _file: Option<File>,
}

impl DataDirReadLock {
    /// Takes the shared lock if the lock file exists (a dir no broker with a
    /// lock ever ran on needs none); fails with a message that names the dir
    /// when a broker holds it.
    pub fn acquire(dir: &Path) -> Result<Self, String> {
        let path = dir.join(".lock");
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(DataDirReadLock { _file: None }),
            Err(e) => return Err(format!("cannot open {}: {e}", path.display())),
        };
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared).map_err(|_| {
            format!(
                "data dir {} is in use by a running broker (lock held on {}); stop it first, or use export_definitions",
                dir.display(),
                path.display()
            )
        })?;
        Ok(DataDirReadLock { _file: Some(file) })
    }
}
