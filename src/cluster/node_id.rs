//! The node's cluster identity: a random positive 31-bit number, created on
//! first start and kept in `<data dir>/.clustering_id` (base 36, as LavinMQ
//! writes it), so that a node keeps its place in the in-sync replica set across
//! restarts. It doubles as the node's etcd lease id, which makes etcd refuse a
//! second live node with the same id.

use std::io;
use std::path::Path;

/// File in the data dir holding the id.
pub const FILE_NAME: &str = ".clustering_id";

/// The id in base 36, as stored and shown.
pub fn format(id: u32) -> String {
    let mut n = id;
    let mut out = Vec::new();
    loop {
        let d = (n % 36) as u8;
        out.push(if d < 10 { b'0' + d } else { b'a' + d - 10 });
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// Parses a base-36 id; `None` for anything else (or zero).
pub fn parse(text: &str) -> Option<u32> {
    let id = u32::from_str_radix(text.trim(), 36).ok()?;
    (id > 0 && id <= i32::MAX as u32).then_some(id)
}

/// Reads the node's id from `data_dir`, creating it on first start.
pub fn load_or_create(data_dir: &Path) -> io::Result<u32> {
    let path = data_dir.join(FILE_NAME);
    match std::fs::read_to_string(&path) {
        Ok(text) => parse(&text).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} does not hold a node id: {text:?}", path.display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let id = loop {
                let n = rand::random::<u32>() & i32::MAX as u32;
                if n > 0 {
                    break n;
                }
            };
            std::fs::create_dir_all(data_dir)?;
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, format(id))?;
            std::fs::rename(&tmp, &path)?;
            Ok(id)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base36_roundtrip_and_persistence() {
        for id in [1, 35, 36, 12345, i32::MAX as u32] {
            assert_eq!(parse(&format(id)), Some(id));
        }
        assert_eq!(parse("0"), None);
        assert_eq!(parse("not an id!"), None);
        let dir = tempfile::tempdir().unwrap();
        let a = load_or_create(dir.path()).unwrap();
        assert_eq!(load_or_create(dir.path()).unwrap(), a);
    }
}
