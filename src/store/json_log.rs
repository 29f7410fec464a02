//! An append-only log of JSON documents, one per line: every change is one line
//! appended (and synced) before it is acknowledged, and the log is compacted at
//! start-up and, when its owner asks, while running. A torn or garbled line (a
//! crash mid-append, a damaged disk) is skipped with a log line that names it;
//! every other line still counts.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::replication::{self, FileRef};

/// An open log file.
pub struct JsonLog {
    path: PathBuf,
    /// Shared with the group commit, which syncs it when an append noted it
    /// (see [`super::group_sync::note_durable_file`]).
    file: Arc<File>,
    /// Sync each append before it returns.
    sync: bool,
    /// Sync rewrites (compactions), which replace the whole file, before the
    /// new file takes the old one's place.
    durable: bool,
    /// Bytes in the file: where the next line goes.
    len: u64,
    /// The file as registered for replication (clustered only).
    replicated: Option<FileRef>,
}

impl JsonLog {
    /// Reads every readable line of the log at `path` (missing = empty), then
    /// rewrites it atomically with `compact(lines)` and opens it for appending.
    pub fn open(
        path: &Path,
        sync: bool,
        compact: impl FnOnce(Vec<serde_json::Value>) -> Vec<serde_json::Value>,
    ) -> io::Result<Self> {
        let lines = read_lines(path)?;
        let (file, len) = rewrite(path, &compact(lines), sync)?;
        Ok(JsonLog {
            path: path.to_path_buf(),
            file: Arc::new(file),
            sync,
            durable: sync,
            len,
            replicated: replication::register(path),
        })
    }

    /// Rewrites the open log atomically with `compact(lines)`, as at start-up,
    /// so that a long-running broker's log does not grow without bound.
    /// Returns how many lines were dropped. On error the old file stays in use.
    pub fn compact(
        &mut self,
        compact: impl FnOnce(Vec<serde_json::Value>) -> Vec<serde_json::Value>,
    ) -> io::Result<usize> {
        let lines = read_lines(&self.path)?;
        let before = lines.len();
        let kept = compact(lines);
        let after = kept.len();
        let (file, len) = rewrite(&self.path, &kept, self.durable)?;
        // A sync of the old file that an append noted still runs; the new
        // file holds the same lines and was synced (when durable) before it
        // took the old one's place.
        self.file = Arc::new(file);
        self.len = len;
        Ok(before.saturating_sub(after))
    }

    /// Appends one document and syncs it (when syncing is on) before returning.
    pub fn append(&mut self, value: &serde_json::Value) -> io::Result<()> {
        let mut line = serde_json::to_vec(value).map_err(io::Error::other)?;
        line.push(b'\n');
        (&*self.file).write_all(&line)?;
        replication::wrote(self.replicated, self.len, &[&line]);
        self.len += line.len() as u64;
        if self.sync {
            self.file.sync_data()?;
        } else {
            super::group_sync::note_durable_file(&self.file);
        }
        Ok(())
    }

    /// Stops syncing every append: the data directory's group commit makes
    /// appends durable within its interval, and before any confirm or reply
    /// that waits for it (a definition change's `-ok` does). Appends still
    /// reach the file at once, so a broker crash loses nothing; a power loss
    /// can take only changes that no client was told of.
    pub fn synced_by_group_commit(mut self) -> Self {
        self.sync = false;
        self
    }

    /// Where the log lives.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Every readable line of the log at `path` (missing = none); unreadable
/// lines are skipped with a warning naming them. It only reads, so it also
/// serves to look at the log of a broker that is not running.
pub fn read_lines(path: &Path) -> io::Result<Vec<serde_json::Value>> {
    let mut lines = Vec::new();
    match std::fs::read(path) {
        Ok(bytes) => {
            for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match serde_json::from_slice::<serde_json::Value>(line) {
                    Ok(v) => lines.push(v),
                    Err(e) => {
                        tracing::warn!(file = %path.display(), line = i + 1, "skipping unreadable line: {e}");
                    }
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(lines)
}

/// Replaces the file at `path` with `lines` through a temporary file renamed
/// over it (synced first when `sync`), and opens it for appending.
fn rewrite(path: &Path, lines: &[serde_json::Value], sync: bool) -> io::Result<(File, u64)> {
    let tmp = path.with_extension("tmp");
    let mut buf = Vec::new();
    for v in lines {
        serde_json::to_writer(&mut buf, v).map_err(io::Error::other)?;
        buf.push(b'\n');
    }
    {
        let mut f = File::create(&tmp)?;
        f.write_all(&buf)?;
        if sync {
            f.sync_data()?;
        }
    }
    std::fs::rename(&tmp, path)?;
    replication::replaced(path, &buf);
    if sync && let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    let file = OpenOptions::new().append(true).open(path)?;
    Ok((file, buf.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn garbage_and_torn_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        let mut log = JsonLog::open(&p, true, |l| l).unwrap();
        log.append(&json!({"a": 1})).unwrap();
        log.append(&json!({"a": 2})).unwrap();
        drop(log);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.extend_from_slice(b"garbage\n{\"a\": 3}\n{\"a\": 4");
        std::fs::write(&p, bytes).unwrap();
        let mut seen = Vec::new();
        let _log = JsonLog::open(&p, true, |l| {
            seen = l.clone();
            l
        })
        .unwrap();
        assert_eq!(seen, vec![json!({"a": 1}), json!({"a": 2}), json!({"a": 3})]);
        assert_eq!(std::fs::read_to_string(&p).unwrap().lines().count(), 3);
    }
}
