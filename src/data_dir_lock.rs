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
