//! How the group commit makes the data directory durable.
//!
//! One `syncfs` of the data directory's filesystem is the fast way: a single
//! system call, whatever the number of queues. Some filesystems do not pass it
//! on to their storage (FUSE daemons never see it; some network filesystems
//! ignore it), so `sync_method = fsync` instead fsyncs every file and directory
//! under the data directory, one by one. That costs a system call per file,
//! but each reaches the filesystem as an explicit fsync request, which is also
//! what the power-loss tests observe.

use std::fs::File;
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};

/// The way the group commit syncs (`[main] sync_method`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SyncMethod {
    /// One `syncfs` of the data directory's filesystem (`syncfs`, the default).
    #[default]
    Filesystem,
    /// `fsync` of every file and directory under the data directory (`fsync`).
    EachFile,
}

/// What `sync_method` accepts, for configuration errors.
pub const SYNC_METHOD_EXPECTED: &str = "syncfs or fsync";

impl SyncMethod {
    /// Reads the configuration value (`syncfs` or `fsync`).
    pub fn parse(value: &str) -> Option<SyncMethod> {
        match value.trim().to_ascii_lowercase().as_str() {
            "syncfs" => Some(SyncMethod::Filesystem),
            "fsync" => Some(SyncMethod::EachFile),
            _ => None,
        }
    }

    /// Makes everything written under `dir` so far durable.
    pub fn sync(self, dir: &File, path: &Path) -> io::Result<()> {
        match self {
            SyncMethod::Filesystem => rustix::fs::syncfs(dir).map_err(io::Error::from),
            SyncMethod::EachFile => sync_each_file(path),
        }
    }
}

/// Fsyncs every regular file and directory under `root` (and `root` itself).
/// A directory is synced after its files, so that the names of new files are
/// made durable with them. Files and directories deleted while the walk runs
/// are skipped: what is gone need not be durable. Sockets and other special
/// files are not opened.
fn sync_each_file(root: &Path) -> io::Result<()> {
    let mut dirs: Vec<PathBuf> = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let kind = match entry.file_type() {
                Ok(kind) => kind,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if kind.is_dir() {
                dirs.push(entry.path());
            } else if kind.is_file() {
                sync_path(&entry.path())?;
            }
        }
        sync_path(&dir)?;
    }
    Ok(())
}

/// Fsyncs one file or directory, if it still exists.
fn sync_path(path: &Path) -> io::Result<()> {
    match File::open(path) {
        Ok(f) => f.sync_all(),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_methods_and_rejects_others() {
        assert_eq!(SyncMethod::parse("syncfs"), Some(SyncMethod::Filesystem));
        assert_eq!(SyncMethod::parse(" FSYNC "), Some(SyncMethod::EachFile));
        assert_eq!(SyncMethod::parse("fdatasync"), None);
    }

    #[test]
    fn each_file_walks_nested_directories_and_skips_sockets() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/segment"), b"data").unwrap();
        std::fs::write(dir.path().join("top"), b"data").unwrap();
        let _socket = std::os::unix::net::UnixListener::bind(dir.path().join("ctl.sock")).unwrap();
        let root = File::open(dir.path()).unwrap();
        SyncMethod::EachFile.sync(&root, dir.path()).unwrap();
        SyncMethod::Filesystem.sync(&root, dir.path()).unwrap();
    }
}
