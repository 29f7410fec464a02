//! Reading the messages of one LavinMQ message store: its `msgs.N` segment
//! files, minus the positions listed in the matching `acks.N` files.
//!
//! LavinMQ writes every integer of a segment in the host's byte order (little
//! endian on the machines it runs on) except the contents of AMQP field
//! tables, which keep their network order. A segment starts with an `i32`
//! schema version (4); each record is `i64 timestamp | u8 len + exchange |
//! u8 len + routing key | properties | u64 body size | body`, and a zero
//! timestamp marks the end of the data of a segment that was still being
//! written. An acks file is a run of `u32` record positions, ended by a zero
//! or the end of the file.
//!
//! Segments are read one at a time into memory (8 MiB by default), so reading
//! a store of any size needs memory for one segment, not for the whole store.

use std::io;
use std::path::{Path, PathBuf};

use bytes::{BufMut, Bytes, BytesMut};

/// The segment schema version LavinMQ 2.x writes.
const SCHEMA_VERSION: i32 = 4;

/// One message read from a LavinMQ segment, with its properties turned into
/// the AMQP wire encoding (network byte order).
#[derive(Debug, Clone)]
pub struct StoredMessage {
    /// Milliseconds since the Unix epoch when LavinMQ accepted it.
    pub timestamp: i64,
    /// Exchange it was published to.
    pub exchange: String,
    /// Routing key it was published with.
    pub routing_key: String,
    /// Properties in the AMQP content-header encoding.
    pub properties: Bytes,
    /// The body.
    pub body: Bytes,
}

/// What could not be read from a store: the rest of a segment after damage,
/// or a whole segment whose header is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The segment file.
    pub file: PathBuf,
    /// Byte position where reading stopped.
    pub position: u64,
    /// Why.
    pub reason: String,
}

/// The numbered segment files (`msgs.0000000001` …) of the store in `dir`,
/// oldest first.
pub fn segment_ids(dir: &Path) -> io::Result<Vec<u32>> {
    let mut ids: Vec<u32> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name();
                let name = name.to_str()?;
                let digits = name.strip_prefix("msgs.")?;
                (digits.len() == 10).then(|| digits.parse().ok()).flatten()
            })
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    ids.sort_unstable();
    Ok(ids)
}

fn numbered(dir: &Path, kind: &str, id: u32) -> PathBuf {
    dir.join(format!("{kind}.{id:010}"))
}

/// The positions LavinMQ recorded as deleted (acked, expired, dropped) in
/// segment `id`, sorted.
fn acked_positions(dir: &Path, id: u32) -> io::Result<Vec<u32>> {
    let bytes = match std::fs::read(numbered(dir, "acks", id)) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut positions: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .take_while(|&p| p != 0)
        .collect();
    positions.sort_unstable();
    Ok(positions)
}

/// Calls `f` with every message of the store in `dir` that LavinMQ had not
/// deleted, in store order, and returns what had to be skipped. Stops early,
/// with the error, if `f` fails.
pub fn for_each_message<E: From<io::Error>>(
    dir: &Path,
    mut f: impl FnMut(StoredMessage) -> Result<(), E>,
) -> Result<Vec<Skipped>, E> {
    let mut skipped = Vec::new();
    for id in segment_ids(dir)? {
        let path = numbered(dir, "msgs", id);
        let data = std::fs::read(&path)?;
        let acked = acked_positions(dir, id)?;
        let mut reader = SegmentReader::new(&data);
        if let Err(reason) = reader.check_header() {
            skipped.push(Skipped {
                file: path,
                position: 0,
                reason,
            });
            continue;
        }
        loop {
            let position = reader.pos;
            match reader.next_record() {
                Ok(None) => break,
                Ok(Some(msg)) => {
                    if acked.binary_search(&(position as u32)).is_err() {
                        f(msg)?;
                    }
                }
                Err(reason) => {
                    skipped.push(Skipped {
                        file: path.clone(),
                        position: position as u64,
                        reason,
                    });
                    break;
                }
            }
        }
    }
    Ok(skipped)
}

/// A cursor over the bytes of one segment.
struct SegmentReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> SegmentReader<'a> {
    fn new(data: &'a [u8]) -> Self {
        SegmentReader { data, pos: 0 }
    }

    fn check_header(&mut self) -> Result<(), String> {
        let version = i32::from_le_bytes(self.array("schema version")?);
        if version != SCHEMA_VERSION {
            return Err(format!("unsupported segment schema version {version}"));
        }
        Ok(())
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.data.len())
            .ok_or_else(|| format!("truncated {what}"))?;
        let out = &self.data[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn byte(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    fn short_str(&mut self, what: &str) -> Result<&'a [u8], String> {
        let len = self.byte(what)?;
        self.take(usize::from(len), what)
    }

    fn utf8(&mut self, what: &str) -> Result<String, String> {
        let raw = self.short_str(what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
    }

    /// The next record, `None` at the end of the data.
    fn next_record(&mut self) -> Result<Option<StoredMessage>, String> {
        if self.data.len() - self.pos < 8 {
            return Ok(None);
        }
        let timestamp = i64::from_le_bytes(self.array("timestamp")?);
        if timestamp == 0 {
            return Ok(None);
        }
        let exchange = self.utf8("exchange name")?;
        let routing_key = self.utf8("routing key")?;
        let properties = self.properties()?;
        let body_len = u64::from_le_bytes(self.array("body size")?);
        let body_len = usize::try_from(body_len).map_err(|_| "body size out of range".to_string())?;
        let body = Bytes::copy_from_slice(self.take(body_len, "body")?);
        Ok(Some(StoredMessage {
            timestamp,
            exchange,
            routing_key,
            properties,
            body,
        }))
    }

    /// Reads LavinMQ's host-order properties and writes them in the AMQP
    /// (network order) encoding.
    fn properties(&mut self) -> Result<Bytes, String> {
        let flags = u16::from_le_bytes(self.array("property flags")?);
        let mut out = BytesMut::with_capacity(64);
        out.put_u16(flags);
        for bit in (2..16).rev() {
            let flag = 1u16 << bit;
            if flags & flag == 0 {
                continue;
            }
            match flag {
                // headers: a host-order length, then the table in network order.
                0x2000 => {
                    let len = u32::from_le_bytes(self.array("headers length")?);
                    let table = self.take(len as usize, "headers")?;
                    out.put_u32(len);
                    out.put_slice(table);
                }
                // delivery mode, priority
                0x1000 | 0x0800 => out.put_u8(self.byte("property")?),
                // timestamp
                0x0040 => out.put_i64(i64::from_le_bytes(self.array("timestamp property")?)),
                _ => {
                    let s = self.short_str("property")?;
                    out.put_u8(s.len() as u8);
                    out.put_slice(s);
                }
            }
        }
        Ok(out.freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ts: i64, ex: &str, rk: &str, props: &[u8], body: &[u8]) -> Vec<u8> {
        let mut v = ts.to_le_bytes().to_vec();
        v.push(ex.len() as u8);
        v.extend_from_slice(ex.as_bytes());
        v.push(rk.len() as u8);
        v.extend_from_slice(rk.as_bytes());
        v.extend_from_slice(props);
        v.extend_from_slice(&(body.len() as u64).to_le_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn reads_records_converts_properties_and_skips_acked() {
        let dir = tempfile::tempdir().unwrap();
        // content_type "t", headers {} (empty table), delivery_mode 2, timestamp 7
        let mut props = (0x8000u16 | 0x2000 | 0x1000 | 0x0040).to_le_bytes().to_vec();
        props.extend_from_slice(&[1, b't']);
        props.extend_from_slice(&0u32.to_le_bytes());
        props.push(2);
        props.extend_from_slice(&7i64.to_le_bytes());
        let mut seg = 4i32.to_le_bytes().to_vec();
        let first = seg.len() as u32;
        seg.extend(record(1, "x", "a", &props, b"one"));
        let second = seg.len() as u32;
        seg.extend(record(2, "", "q", &0u16.to_le_bytes(), b"two"));
        seg.extend(record(3, "", "q", &0u16.to_le_bytes(), b"three"));
        seg.extend([0u8; 64]);
        std::fs::write(dir.path().join("msgs.0000000001"), &seg).unwrap();
        let mut acks = second.to_le_bytes().to_vec();
        acks.extend([0u8; 8]);
        std::fs::write(dir.path().join("acks.0000000001"), acks).unwrap();
        let mut got = Vec::new();
        let skipped = for_each_message::<io::Error>(dir.path(), |m| {
            got.push(m);
            Ok(())
        })
        .unwrap();
        assert!(skipped.is_empty());
        assert_eq!(got.len(), 2);
        assert_eq!(first, 4);
        assert_eq!(&got[0].body[..], b"one");
        assert_eq!(&got[1].body[..], b"three");
        let p = crate::wire::BasicProperties::decode(&mut got[0].properties.clone()).unwrap();
        assert_eq!(p.content_type.as_deref(), Some("t"));
        assert_eq!(p.delivery_mode, Some(2));
        assert_eq!(p.timestamp, Some(7));
        assert!(p.headers.is_some());
    }

    #[test]
    fn truncated_segment_keeps_what_is_readable() {
        let dir = tempfile::tempdir().unwrap();
        let mut seg = 4i32.to_le_bytes().to_vec();
        seg.extend(record(1, "", "q", &0u16.to_le_bytes(), b"whole"));
        let cut = record(2, "", "q", &0u16.to_le_bytes(), b"cut short");
        seg.extend(&cut[..cut.len() - 3]);
        std::fs::write(dir.path().join("msgs.0000000001"), &seg).unwrap();
        std::fs::write(dir.path().join("msgs.0000000002"), 3i32.to_le_bytes()).unwrap();
        let mut n = 0;
        let skipped = for_each_message::<io::Error>(dir.path(), |_| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 1);
        assert_eq!(skipped.len(), 2);
        assert!(skipped[0].reason.contains("truncated body"), "{skipped:?}");
        assert!(skipped[1].reason.contains("schema version 3"), "{skipped:?}");
    }
}
