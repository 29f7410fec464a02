//! Whole-file JSON documents (definitions, users, vhosts) written atomically:
//! temp file, sync, rename, so a crash leaves either the old or the new file.

use std::io::{self, Write};
use std::path::Path;

/// Writes `value` to `path` atomically and durably.
pub fn write_json(path: &Path, value: &serde_json::Value, sync: bool) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        if sync {
            f.sync_data()?;
        }
    }
    std::fs::rename(&tmp, path)?;
    super::replication::replaced(path, &bytes);
    if sync && let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Reads a JSON document; a missing file is `None`, an unreadable one is logged and
/// treated as missing so that start-up goes on.
pub fn read_json(path: &Path) -> Option<serde_json::Value> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::error!(path = %path.display(), "cannot read: {e}");
            return None;
        }
    };
    match serde_json::from_slice(&bytes) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::error!(path = %path.display(), "ignoring unparsable file: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.json");
        assert!(read_json(&p).is_none());
        write_json(&p, &serde_json::json!({"a": 1}), true).unwrap();
        assert_eq!(read_json(&p).unwrap()["a"], 1);
        std::fs::write(&p, b"{garbage").unwrap();
        assert!(read_json(&p).is_none());
    }
}
