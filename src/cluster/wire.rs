//! The replication protocol's bytes: the handshake, the frames on the stream
//! from leader to follower, and the file operations inside data frames.
//!
//! All integers are little-endian. After the handshake the leader sends frames
//! (`kind: u8`, `len: u32`, payload); compressed payloads are LZ4 blocks with
//! their raw size in front. The follower answers with bare `u64` offsets: "I
//! hold (written and synced) everything up to here".

use std::io::{self, Read, Write};

/// First bytes a follower sends: protocol name and version.
pub const MAGIC: &[u8; 8] = b"LVMQCLU2";
/// Largest frame accepted: anything bigger is garbage or an attack.
pub const MAX_FRAME: u32 = 64 << 20;
/// Largest raw size of a compressed payload.
pub const MAX_RAW: usize = 256 << 20;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// Compressed file operations; the payload starts with the log offset
    /// (u64) reached after applying them.
    Data = 1,
    /// The follower joined the in-sync replica set (no payload).
    InSync = 2,
    /// Sync what you hold and acknowledge it (no payload): a confirm waits
    /// for it, or acknowledgements are due for the lag and the ISR.
    Sync = 3,
    /// Compressed list of the leader's files: path, size, SHA-256.
    FileList = 10,
    /// A file of the snapshot starts: path, then its size as i64 (-1: the
    /// leader has no such file any more).
    FileBegin = 11,
    /// A compressed piece of the current file's contents.
    FileData = 12,
    /// The snapshot is complete (no payload).
    SnapshotEnd = 13,
}

impl FrameKind {
    fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => Self::Data,
            2 => Self::InSync,
            3 => Self::Sync,
            10 => Self::FileList,
            11 => Self::FileBegin,
            12 => Self::FileData,
            13 => Self::SnapshotEnd,
            _ => return None,
        })
    }
}

/// Why bytes from a peer could not be understood.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The socket failed or closed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The peer does not speak this protocol.
    #[error("not a replication peer (bad magic bytes)")]
    BadMagic,
    /// A frame of an unknown kind.
    #[error("unknown frame kind {0}")]
    UnknownFrame(u8),
    /// A frame or payload larger than allowed.
    #[error("frame of {0} bytes is too large")]
    TooLarge(u64),
    /// A payload that does not decode.
    #[error("malformed {0}")]
    Malformed(&'static str),
}

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, kind: FrameKind, payload: &[u8]) -> io::Result<()> {
    w.write_all(&[kind as u8])?;
    w.write_all(&(payload.len() as u32).to_le_bytes())?;
    w.write_all(payload)
}

/// Encodes a frame into a buffer (for frames built once and sent to many).
pub fn encode_frame(kind: FrameKind, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.push(kind as u8);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Reads one frame into `buf`, returning its kind.
pub fn read_frame(r: &mut impl Read, buf: &mut Vec<u8>) -> Result<FrameKind, WireError> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head)?;
    let kind = FrameKind::from_u8(head[0]).ok_or(WireError::UnknownFrame(head[0]))?;
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
    if len > MAX_FRAME {
        return Err(WireError::TooLarge(len.into()));
    }
    buf.clear();
    buf.resize(len as usize, 0);
    r.read_exact(buf)?;
    Ok(kind)
}

/// LZ4-compresses `raw`, its size in front.
pub fn compress(raw: &[u8]) -> Vec<u8> {
    lz4_flex::block::compress_prepend_size(raw)
}

/// Undoes [`compress`], refusing sizes above [`MAX_RAW`].
pub fn decompress(data: &[u8]) -> Result<Vec<u8>, WireError> {
    let raw = data
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or(WireError::Malformed("compressed block"))?;
    if raw > MAX_RAW {
        return Err(WireError::TooLarge(raw as u64));
    }
    lz4_flex::block::decompress_size_prepended(data).map_err(|_| WireError::Malformed("compressed block"))
}

/// One file operation of the replication stream. Paths are relative to the
/// data dir, `/`-separated.
#[derive(Debug, PartialEq, Eq)]
pub enum Op<'a> {
    /// File number `id` is `path` from now on.
    Register {
        /// The number.
        id: u32,
        /// The file.
        path: &'a str,
    },
    /// `data` was written at `offset` of file number `id`.
    Write {
        /// The file's number.
        id: u32,
        /// Where in the file.
        offset: u64,
        /// The bytes.
        data: &'a [u8],
    },
    /// The file is now `len` bytes long.
    SetLen {
        /// The file.
        path: &'a str,
        /// Its new length.
        len: u64,
    },
    /// The file now holds exactly `data`.
    Replace {
        /// The file.
        path: &'a str,
        /// Its contents.
        data: &'a [u8],
    },
    /// The file or folder is gone.
    Remove {
        /// The file or folder.
        path: &'a str,
    },
}

const OP_REGISTER: u8 = 1;
const OP_WRITE: u8 = 2;
const OP_SET_LEN: u8 = 3;
const OP_REPLACE: u8 = 4;
const OP_REMOVE: u8 = 5;

/// Appends a length-prefixed (u16) path.
pub fn put_path(out: &mut Vec<u8>, path: &str) {
    let bytes = &path.as_bytes()[..path.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Appends a `Register` operation.
pub fn put_register(out: &mut Vec<u8>, id: u32, path: &str) {
    out.push(OP_REGISTER);
    out.extend_from_slice(&id.to_le_bytes());
    put_path(out, path);
}

/// Where a `Write` operation's u32 data length sits, from the op's start:
/// the log extends the last op in place when the next write continues it.
pub const WRITE_LEN_AT: usize = 1 + 4 + 8;

/// Appends a `Write` operation whose data is `parts` concatenated.
pub fn put_write(out: &mut Vec<u8>, id: u32, offset: u64, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    out.push(OP_WRITE);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    for p in parts {
        out.extend_from_slice(p);
    }
}

/// Appends a `SetLen` operation.
pub fn put_set_len(out: &mut Vec<u8>, path: &str, len: u64) {
    out.push(OP_SET_LEN);
    put_path(out, path);
    out.extend_from_slice(&len.to_le_bytes());
}

/// Appends a `Replace` operation.
pub fn put_replace(out: &mut Vec<u8>, path: &str, data: &[u8]) {
    out.push(OP_REPLACE);
    put_path(out, path);
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(data);
}

/// Appends a `Remove` operation.
pub fn put_remove(out: &mut Vec<u8>, path: &str) {
    out.push(OP_REMOVE);
    put_path(out, path);
}

/// Reads operations one by one out of a decompressed data frame.
pub struct OpReader<'a> {
    rest: &'a [u8],
}

impl<'a> OpReader<'a> {
    /// Starts at the first operation of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        OpReader { rest: data }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.rest.len() < n {
            return Err(WireError::Malformed("file operation"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn path(&mut self) -> Result<&'a str, WireError> {
        let n = self.u16()? as usize;
        let raw = self.take(n)?;
        let path = std::str::from_utf8(raw).map_err(|_| WireError::Malformed("path"))?;
        if !is_safe_relative(path) {
            return Err(WireError::Malformed("path"));
        }
        Ok(path)
    }

    /// The next operation, `None` at the end.
    pub fn next_op(&mut self) -> Result<Option<Op<'a>>, WireError> {
        let Some((&code, _)) = self.rest.split_first() else {
            return Ok(None);
        };
        self.rest = &self.rest[1..];
        let op = match code {
            OP_REGISTER => Op::Register {
                id: self.u32()?,
                path: self.path()?,
            },
            OP_WRITE => {
                let id = self.u32()?;
                let offset = self.u64()?;
                let len = self.u32()? as usize;
                Op::Write {
                    id,
                    offset,
                    data: self.take(len)?,
                }
            }
            OP_SET_LEN => Op::SetLen {
                path: self.path()?,
                len: self.u64()?,
            },
            OP_REPLACE => {
                let path = self.path()?;
                let len = self.u32()? as usize;
                Op::Replace {
                    path,
                    data: self.take(len)?,
                }
            }
            OP_REMOVE => Op::Remove { path: self.path()? },
            _ => return Err(WireError::Malformed("file operation code")),
        };
        Ok(Some(op))
    }
}

/// True for a relative path that stays inside the data dir: no leading `/`,
/// no `..` or empty components.
pub fn is_safe_relative(path: &str) -> bool {
    !path.is_empty() && !path.starts_with('/') && path.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Reads a length-prefixed (u16) path, refusing one that leaves the data dir.
pub fn read_path(r: &mut impl Read) -> Result<String, WireError> {
    let mut len = [0u8; 2];
    r.read_exact(&mut len)?;
    let mut raw = vec![0u8; u16::from_le_bytes(len) as usize];
    r.read_exact(&mut raw)?;
    let path = String::from_utf8(raw).map_err(|_| WireError::Malformed("path"))?;
    if !is_safe_relative(&path) {
        return Err(WireError::Malformed("path"));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_roundtrip() {
        let mut buf = Vec::new();
        put_register(&mut buf, 7, "a/b/msgs.0000000001");
        put_write(&mut buf, 7, 4, &[b"he", b"llo"]);
        put_set_len(&mut buf, "a/b/msgs.0000000001", 9);
        put_replace(&mut buf, "users.json", b"[]");
        put_remove(&mut buf, "a/b");
        let mut r = OpReader::new(&buf);
        assert_eq!(
            r.next_op().unwrap(),
            Some(Op::Register {
                id: 7,
                path: "a/b/msgs.0000000001"
            })
        );
        assert_eq!(
            r.next_op().unwrap(),
            Some(Op::Write {
                id: 7,
                offset: 4,
                data: b"hello"
            })
        );
        assert!(matches!(r.next_op().unwrap(), Some(Op::SetLen { len: 9, .. })));
        assert!(matches!(r.next_op().unwrap(), Some(Op::Replace { data: b"[]", .. })));
        assert!(matches!(r.next_op().unwrap(), Some(Op::Remove { path: "a/b" })));
        assert_eq!(r.next_op().unwrap(), None);
    }

    #[test]
    fn truncated_and_hostile_input_is_refused() {
        let mut buf = Vec::new();
        put_write(&mut buf, 1, 0, &[b"0123456789"]);
        for cut in 1..buf.len() {
            assert!(OpReader::new(&buf[..cut]).next_op().is_err(), "cut at {cut}");
        }
        let mut evil = Vec::new();
        put_replace(&mut evil, "../etc/passwd", b"x");
        assert!(OpReader::new(&evil).next_op().is_err());
        let mut abs = Vec::new();
        put_remove(&mut abs, "/tmp");
        assert!(OpReader::new(&abs).next_op().is_err());
        assert!(decompress(&[0xff, 0xff, 0xff, 0x7f, 1, 2]).is_err());
        assert!(decompress(&[1]).is_err());
    }

    #[test]
    fn frames_roundtrip_and_garbage_is_refused() {
        let mut out = Vec::new();
        write_frame(&mut out, FrameKind::Data, &compress(b"abc")).unwrap();
        let mut buf = Vec::new();
        let kind = read_frame(&mut out.as_slice(), &mut buf).unwrap();
        assert_eq!(kind, FrameKind::Data);
        assert_eq!(decompress(&buf).unwrap(), b"abc");
        assert!(matches!(
            read_frame(&mut [99u8, 0, 0, 0, 0].as_slice(), &mut buf),
            Err(WireError::UnknownFrame(99))
        ));
        assert!(matches!(
            read_frame(&mut [1u8, 255, 255, 255, 255].as_slice(), &mut buf),
            Err(WireError::TooLarge(_))
        ));
    }
}
