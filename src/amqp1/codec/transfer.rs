//! The transfer performative on the hot path: one per message each way.
//!
//! The generic codec decodes a performative into a tree of [`Value`]s (a
//! vector of fields, a boxed descriptor) and encodes one from such a tree,
//! allocations that cost more than the rest of a small message's handling.
//! A transfer is a list of scalars: these functions read and write it
//! directly. [`decode`] takes the shapes clients send (scalar fields, no
//! delivery state) and leaves anything else to [`Performative::decode`],
//! whose result it matches field for field.
//!
//! [`Value`]: super::types::Value
//! [`Performative::decode`]: super::performative::Performative::decode

use bytes::{BufMut, Bytes, BytesMut};

use super::performative::Transfer;

/// The transfer's descriptor, as a small ulong.
const DESCRIPTOR: [u8; 3] = [0x00, 0x53, 0x14];

/// A cursor over the fields of a transfer's list.
struct Fields<'a> {
    buf: &'a [u8],
    at: usize,
}

/// A scalar field: absent (null) or its value.
type Field<T> = Option<Option<T>>;

impl Fields<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.buf.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn uint(&mut self) -> Field<u32> {
        Some(match self.byte()? {
            0x40 => None,
            0x43 => Some(0),
            0x52 => Some(u32::from(self.byte()?)),
            0x70 => Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?)),
            _ => return None,
        })
    }

    fn boolean(&mut self) -> Field<bool> {
        Some(match self.byte()? {
            0x40 => None,
            0x41 => Some(true),
            0x42 => Some(false),
            0x56 => match self.byte()? {
                0 => Some(false),
                1 => Some(true),
                _ => return None,
            },
            _ => return None,
        })
    }

    /// A binary field, as its range in the buffer.
    fn binary(&mut self) -> Field<(usize, usize)> {
        let len = match self.byte()? {
            0x40 => return Some(None),
            0xa0 => usize::from(self.byte()?),
            0xb0 => u32::from_be_bytes(self.take(4)?.try_into().ok()?) as usize,
            _ => return None,
        };
        let start = self.at;
        self.take(len)?;
        Some(Some((start, start + len)))
    }

    fn ubyte(&mut self) -> Field<u8> {
        Some(match self.byte()? {
            0x40 => None,
            0x50 => Some(self.byte()?),
            _ => return None,
        })
    }
}

/// Decodes a transfer frame's body (performative and payload) of the usual
/// shape; `None` when it takes the generic decoder (a delivery state,
/// another encoding, or something invalid, which that decoder reports).
pub fn decode(body: &Bytes) -> Option<(Transfer, Bytes)> {
    let (mut t, tag, end) = decode_fields(body)?;
    t.delivery_tag = tag.map(|(from, to)| body.slice(from..to));
    Some((t, body.slice(end..)))
}

/// [`decode`] for a body the caller owns: the transfer and where its
/// payload starts, so that the body itself becomes the payload (advanced in
/// place, without another reference to count per message). The delivery
/// tag is left out: the broker never reads the tags of the messages it
/// receives (deliveries are matched by id), so it takes no reference for it.
pub fn decode_head(body: &[u8]) -> Option<(Transfer, usize)> {
    decode_fields(body).map(|(t, _, end)| (t, end))
}

/// Where a transfer's delivery tag lies in its frame body, when it has one.
type TagRange = Option<(usize, usize)>;

/// The transfer's fields, where its delivery tag lies in `body`, and where
/// its payload starts.
fn decode_fields(body: &[u8]) -> Option<(Transfer, TagRange, usize)> {
    let rest = body.strip_prefix(&DESCRIPTOR)?;
    let (size, count, header) = match *rest.first()? {
        0xc0 => (usize::from(*rest.get(1)?), usize::from(*rest.get(2)?), 2),
        0xd0 => (
            u32::from_be_bytes(rest.get(1..5)?.try_into().ok()?) as usize,
            u32::from_be_bytes(rest.get(5..9)?.try_into().ok()?) as usize,
            8,
        ),
        _ => return None,
    };
    // The list's end: after its constructor and size, `size` bytes (which
    // include the count).
    let start = DESCRIPTOR.len() + 1 + header;
    let end = DESCRIPTOR.len() + 1 + (header / 2) + size;
    if count == 0 || count > 11 || end > body.len() {
        return None;
    }
    let mut f = Fields {
        buf: body.get(..end)?,
        at: start,
    };
    let mut t = Transfer {
        handle: f.uint()??,
        ..Transfer::default()
    };
    let mut tag = None;
    for i in 1..count {
        match i {
            1 => t.delivery_id = f.uint()?,
            2 => tag = f.binary()?,
            3 => t.message_format = f.uint()?,
            4 => t.settled = f.boolean()?,
            5 => t.more = f.boolean()?.unwrap_or(false),
            6 => {
                f.ubyte()?;
            }
            7 => {
                // A delivery state: the generic decoder reads it.
                if f.byte()? != 0x40 {
                    return None;
                }
            }
            9 => t.aborted = f.boolean()?.unwrap_or(false),
            _ => {
                f.boolean()?;
            }
        }
    }
    if f.at != end {
        return None;
    }
    Some((t, tag, end))
}

/// The size of the performative [`encode`] writes for a transfer's first
/// frame (with delivery id and tag).
pub const FIRST_FRAME_HEADER: usize = 3 + 3 + 5 + 5 + 6 + 1 + 1 + 1;

/// Appends a transfer performative for an outgoing delivery: `delivery_id`
/// and `tag` on the first frame of a delivery, neither on the frames after.
pub fn encode(
    out: &mut BytesMut,
    handle: u32,
    delivery_id: Option<u32>,
    tag: Option<[u8; 4]>,
    settled: bool,
    more: bool,
) {
    let bool_byte = |b: bool| if b { 0x41 } else { 0x42 };
    let fields = 5 + delivery_id.map_or(1, |_| 5) + tag.map_or(1, |_| 6) + 3;
    out.put_slice(&DESCRIPTOR);
    out.put_slice(&[0xc0, fields as u8 + 1, 6]);
    out.put_u8(0x70);
    out.put_u32(handle);
    match delivery_id {
        Some(id) => {
            out.put_u8(0x70);
            out.put_u32(id);
        }
        None => out.put_u8(0x40),
    }
    match tag {
        Some(tag) => {
            out.put_slice(&[0xa0, 4]);
            out.put_slice(&tag);
        }
        None => out.put_u8(0x40),
    }
    out.put_u8(0x43);
    out.put_u8(bool_byte(settled));
    out.put_u8(bool_byte(more));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp1::codec::performative::{DeliveryState, Performative};
    use crate::amqp1::codec::types::{Value, encode_described_list};

    fn generic(body: &Bytes) -> (Transfer, Bytes) {
        match Performative::decode_generic(body).unwrap() {
            Performative::Transfer(t, p) => (t, p),
            other => panic!("not a transfer: {other:?}"),
        }
    }

    fn with_payload(fields: &[Value]) -> Bytes {
        let mut out = BytesMut::new();
        encode_described_list(0x14, fields, &mut out);
        out.put_slice(b"payload");
        out.freeze()
    }

    /// Every shape the fast path takes decodes as the generic decoder
    /// decodes it; the shapes it leaves are left whole.
    #[test]
    fn the_fast_path_agrees_with_the_generic_decoder() {
        let tag = Value::Binary(Bytes::from_static(b"tag"));
        let cases: Vec<Vec<Value>> = vec![
            vec![Value::Uint(0)],
            vec![
                Value::Uint(3),
                Value::Uint(7),
                tag.clone(),
                Value::Uint(0),
                Value::Bool(true),
            ],
            vec![
                Value::Uint(300),
                Value::Uint(70_000),
                tag.clone(),
                Value::Null,
                Value::Bool(false),
                Value::Bool(true),
                Value::Ubyte(1),
                Value::Null,
                Value::Bool(false),
                Value::Bool(true),
                Value::Bool(false),
            ],
            vec![
                Value::Uint(1),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Bool(true),
            ],
        ];
        for fields in cases {
            let body = with_payload(&fields);
            assert_eq!(decode(&body), Some(generic(&body)), "{fields:?}");
        }
        // A delivery state, a list of twelve, a truncated list: generic.
        let mut state = BytesMut::new();
        DeliveryState::Accepted.encode(&mut state);
        let mut slice = &state[..];
        let accepted = Value::decode(&mut slice).unwrap();
        let stated = vec![
            Value::Uint(0),
            Value::Uint(1),
            tag,
            Value::Uint(0),
            Value::Bool(false),
            Value::Bool(false),
            Value::Null,
            accepted,
        ];
        assert_eq!(decode(&with_payload(&stated)), None);
        let body = with_payload(&[Value::Uint(0), Value::Uint(1)]);
        assert_eq!(decode(&body.slice(..body.len() - 9)), None);
        // Booleans as 0x56 with a byte, uints in every width.
        let body = Bytes::from_static(&[
            0x00, 0x53, 0x14, 0xc0, 0x08, 0x05, 0x52, 0x05, 0x43, 0x40, 0x43, 0x56, 0x01, b'x',
        ]);
        assert_eq!(decode(&body), Some(generic(&body)));
        assert_eq!(decode(&body).unwrap().0.handle, 5);
    }

    /// What the encoder writes, the generic decoder reads.
    #[test]
    fn encoded_transfers_decode() {
        for (id, tag, settled, more) in [
            (Some(70_000), Some(70_000u32.to_be_bytes()), true, false),
            (None, None, false, true),
        ] {
            let mut out = BytesMut::new();
            encode(&mut out, 9, id, tag, settled, more);
            if id.is_some() {
                assert_eq!(out.len(), FIRST_FRAME_HEADER);
            }
            out.put_slice(b"m");
            let (t, payload) = generic(&out.freeze());
            assert_eq!(t.handle, 9);
            assert_eq!(t.delivery_id, id);
            assert_eq!(t.delivery_tag.as_deref(), tag.as_ref().map(|t| &t[..]));
            assert_eq!(t.message_format, Some(0));
            assert_eq!((t.settled, t.more), (Some(settled), more));
            assert_eq!(&payload[..], b"m");
        }
    }
}
