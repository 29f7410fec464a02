//! The files of a data dir as replication sees them: which are replicated, and
//! their checksums, so that a follower fetches only the files that differ.

use std::io::{self, Read};
use std::path::Path;

use sha2::{Digest, Sha256};

/// One replicated file: path relative to the data dir, size, SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// `/`-separated path relative to the data dir.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the contents.
    pub sha256: [u8; 32],
}

/// True for files that belong to this node alone and are never replicated:
/// its lock, its cluster id, temporary files, non-durable queues.
pub fn is_local_only(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    rel == ".lock"
        || rel == super::node_id::FILE_NAME
        || name.ends_with(".tmp")
        || rel.split('/').any(|c| c == "transient")
}

/// SHA-256 of a file's contents, read in pieces.
pub fn hash_file(path: &Path) -> io::Result<(u64, [u8; 32])> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok((size, hasher.finalize().into()))
}

/// Every replicated regular file under `root` with its checksum.
pub fn list(root: &Path) -> io::Result<Vec<FileEntry>> {
    let mut out = Vec::new();
    walk(root, root, &mut out)?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<FileEntry>) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        let Ok(rel) = path.strip_prefix(root) else { continue };
        let Some(rel) = rel.to_str().map(|s| s.replace('\\', "/")) else {
            continue;
        };
        if is_local_only(&rel) {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(root, &path, out)?;
        } else if kind.is_file() {
            match hash_file(&path) {
                Ok((size, sha256)) => out.push(FileEntry {
                    path: rel,
                    size,
                    sha256,
                }),
                // Removed while we looked: the stream will say so.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Encodes a file list (to be compressed into a `FileList` frame).
pub fn encode(list: &[FileEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in list {
        super::wire::put_path(&mut out, &f.path);
        out.extend_from_slice(&f.size.to_le_bytes());
        out.extend_from_slice(&f.sha256);
    }
    out
}

/// Decodes a file list, refusing paths that would leave the data dir.
pub fn decode(mut data: &[u8]) -> Result<Vec<FileEntry>, super::wire::WireError> {
    use super::wire::WireError::Malformed;
    let mut out = Vec::new();
    while !data.is_empty() {
        let n = data
            .get(..2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
            .ok_or(Malformed("file list"))?;
        let rest = data.get(2..).ok_or(Malformed("file list"))?;
        if rest.len() < n + 40 {
            return Err(Malformed("file list"));
        }
        let path = std::str::from_utf8(&rest[..n]).map_err(|_| Malformed("file list path"))?;
        if !super::wire::is_safe_relative(path) {
            return Err(Malformed("file list path"));
        }
        let mut size = [0u8; 8];
        size.copy_from_slice(&rest[n..n + 8]);
        let mut sha256 = [0u8; 32];
        sha256.copy_from_slice(&rest[n + 8..n + 40]);
        out.push(FileEntry {
            path: path.to_string(),
            size: u64::from_le_bytes(size),
            sha256,
        });
        data = &rest[n + 40..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_replicated_files_with_checksums() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("v/q")).unwrap();
        std::fs::create_dir_all(root.join("v/transient/q")).unwrap();
        std::fs::write(root.join("users.json"), b"[]").unwrap();
        std::fs::write(root.join("v/q/msgs.0000000001"), b"abcd").unwrap();
        std::fs::write(root.join("v/transient/q/msgs.0000000001"), b"x").unwrap();
        std::fs::write(root.join(".lock"), b"").unwrap();
        std::fs::write(root.join("vhosts.tmp"), b"").unwrap();
        let list = list(root).unwrap();
        let paths: Vec<&str> = list.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, vec!["users.json", "v/q/msgs.0000000001"]);
        assert_eq!(list[1].size, 4);
        assert_eq!(decode(&encode(&list)).unwrap(), list);
        let bytes = encode(&list);
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
    }
}
