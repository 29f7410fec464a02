//! A vhost's definitions log while the broker runs: each change is appended
//! (see [`super::definitions`] for the line shapes), and once more than
//! `max_deleted_definitions` deletions have piled up the log is compacted in
//! place, as LavinMQ does, so that a broker that declares and deletes queues
//! for months neither grows the file nor its start-up replay without bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

use super::definitions;
use crate::store::json_log::JsonLog;

/// The open log with its count of deletions since the last compaction.
pub struct DefinitionsLog {
    log: JsonLog,
    vhost: String,
    deletions: usize,
    max_deletions: Arc<AtomicUsize>,
}

impl DefinitionsLog {
    /// Wraps the log of `vhost`, compacting it after `max_deletions` deletions
    /// (read at each deletion, so a config reload takes effect at once).
    pub fn new(log: JsonLog, vhost: &str, max_deletions: Arc<AtomicUsize>) -> Self {
        DefinitionsLog {
            log,
            vhost: vhost.to_string(),
            deletions: 0,
            max_deletions,
        }
    }

    /// Appends one change; a deletion may trigger a compaction, whose failure
    /// is logged and leaves the (still correct) uncompacted log in use.
    pub fn append(&mut self, line: &Value) -> std::io::Result<()> {
        self.log.append(line)?;
        if is_deletion(line) {
            self.deletions += 1;
            if self.deletions > self.max_deletions.load(Ordering::Relaxed) {
                self.compact();
            }
        }
        Ok(())
    }

    fn compact(&mut self) {
        let vhost = self.vhost.clone();
        match self.log.compact(|lines| definitions::compact(lines, &vhost)) {
            Ok(dropped) => {
                tracing::info!(vhost = %self.vhost, "definitions log compacted: {dropped} lines dropped");
                self.deletions = 0;
            }
            Err(e) => tracing::error!(vhost = %self.vhost, "cannot compact the definitions log: {e}"),
        }
    }
}

/// True for lines that remove something: `delete_*` and `unbind`.
fn is_deletion(line: &Value) -> bool {
    line.as_object()
        .and_then(|o| o.keys().next())
        .is_some_and(|op| op.starts_with("delete_") || op == "unbind")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deletions_past_the_limit_compact_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("definitions.log");
        let log = JsonLog::open(&path, false, |l| l).unwrap();
        let mut log = DefinitionsLog::new(log, "/", Arc::new(AtomicUsize::new(3)));
        let lines = |p: &std::path::Path| std::fs::read_to_string(p).unwrap().lines().count();
        log.append(&definitions::queue("keep", false, json!({}))).unwrap();
        for i in 0..3 {
            let name = format!("q{i}");
            log.append(&definitions::queue(&name, false, json!({}))).unwrap();
            log.append(&definitions::delete("queue", &name)).unwrap();
        }
        assert_eq!(lines(&path), 7, "three deletions are within the limit");
        log.append(&definitions::queue("q3", false, json!({}))).unwrap();
        log.append(&definitions::delete("queue", "q3")).unwrap();
        assert_eq!(lines(&path), 1, "the fourth deletion compacts the log");
        log.append(&definitions::queue("after", false, json!({}))).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"keep\"") && text.contains("\"after\"") && !text.contains("\"q3\""));
    }
}
