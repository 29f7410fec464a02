//! AMQP field tables and field values, using RabbitMQ's type tags (the
//! 0-9-1 errata that every mainstream client implements).

use bytes::{BufMut, Bytes, BytesMut};

use crate::wire::error::CodecError;
use crate::wire::primitives::{
    get_f32, get_f64, get_i8, get_i16, get_i32, get_i64, get_longstr, get_shortstr, get_u8, get_u16, get_u32, get_u64,
    patch_u32_len, put_longstr, put_shortstr, reserve_u32,
};
use crate::wire::shortstr::ShortStr;

/// Maximum nesting of tables/arrays accepted when decoding, so hostile input
/// cannot exhaust the stack through recursion.
pub const MAX_NESTING_DEPTH: usize = 64;

/// One value in a field table or field array.
///
/// Variants map one-to-one onto RabbitMQ's type tags so a decoded table
/// re-encodes byte-for-byte.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    /// `t`: boolean octet.
    Bool(bool),
    /// `b`: signed 8-bit integer.
    I8(i8),
    /// `B`: unsigned 8-bit integer.
    U8(u8),
    /// `s`: signed 16-bit integer.
    I16(i16),
    /// `u`: unsigned 16-bit integer.
    U16(u16),
    /// `I`: signed 32-bit integer.
    I32(i32),
    /// `i`: unsigned 32-bit integer.
    U32(u32),
    /// `l`: signed 64-bit integer.
    I64(i64),
    /// `f`: 32-bit float.
    F32(f32),
    /// `d`: 64-bit float.
    F64(f64),
    /// `D`: decimal, `value / 10^scale`.
    Decimal {
        /// Number of decimal places.
        scale: u8,
        /// Unscaled value.
        value: u32,
    },
    /// `S`: long string (not necessarily UTF-8).
    LongStr(Bytes),
    /// `A`: field array.
    Array(Vec<FieldValue>),
    /// `T`: timestamp, seconds since the epoch.
    Timestamp(u64),
    /// `F`: nested field table.
    Table(FieldTable),
    /// `V`: no value.
    Void,
    /// `x`: byte array.
    ByteArray(Bytes),
}

impl FieldValue {
    /// Any integer variant widened to `i64`; used for numeric arguments such
    /// as `x-message-ttl` that clients send with varying integer types.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            FieldValue::I8(v) => Some(v.into()),
            FieldValue::U8(v) => Some(v.into()),
            FieldValue::I16(v) => Some(v.into()),
            FieldValue::U16(v) => Some(v.into()),
            FieldValue::I32(v) => Some(v.into()),
            FieldValue::U32(v) => Some(v.into()),
            FieldValue::I64(v) => Some(v),
            _ => None,
        }
    }

    /// A long string interpreted as UTF-8, for string arguments such as
    /// `x-dead-letter-exchange`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            FieldValue::LongStr(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The boolean value, for flag arguments.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            FieldValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The nested table, e.g. client `capabilities`.
    pub fn as_table(&self) -> Option<&FieldTable> {
        match self {
            FieldValue::Table(t) => Some(t),
            _ => None,
        }
    }

    /// The array items, e.g. `x-death` entries.
    pub fn as_array(&self) -> Option<&[FieldValue]> {
        match self {
            FieldValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// Decodes a tag + value; `depth` counts enclosing tables/arrays.
    fn decode(buf: &mut Bytes, depth: usize) -> Result<Self, CodecError> {
        let tag = get_u8(buf, "field value type")?;
        Ok(match tag {
            b't' => FieldValue::Bool(get_u8(buf, "bool field")? != 0),
            b'b' => FieldValue::I8(get_i8(buf, "i8 field")?),
            b'B' => FieldValue::U8(get_u8(buf, "u8 field")?),
            b's' => FieldValue::I16(get_i16(buf, "i16 field")?),
            b'u' => FieldValue::U16(get_u16(buf, "u16 field")?),
            b'I' => FieldValue::I32(get_i32(buf, "i32 field")?),
            b'i' => FieldValue::U32(get_u32(buf, "u32 field")?),
            b'l' => FieldValue::I64(get_i64(buf, "i64 field")?),
            b'f' => FieldValue::F32(get_f32(buf, "f32 field")?),
            b'd' => FieldValue::F64(get_f64(buf, "f64 field")?),
            b'D' => FieldValue::Decimal {
                scale: get_u8(buf, "decimal scale")?,
                value: get_u32(buf, "decimal value")?,
            },
            b'S' => FieldValue::LongStr(get_longstr(buf, "long string field")?),
            b'A' => {
                let body = get_longstr(buf, "field array")?;
                FieldValue::Array(decode_array_body(body, depth + 1)?)
            }
            b'T' => FieldValue::Timestamp(get_u64(buf, "timestamp field")?),
            b'F' => {
                let body = get_longstr(buf, "nested table")?;
                FieldValue::Table(FieldTable::decode_body_at(body, depth + 1)?)
            }
            b'V' => FieldValue::Void,
            b'x' => FieldValue::ByteArray(get_longstr(buf, "byte array field")?),
            other => return Err(CodecError::InvalidFieldType(other)),
        })
    }

    /// Encodes the tag + value.
    fn encode(&self, buf: &mut BytesMut) -> Result<(), CodecError> {
        match self {
            FieldValue::Bool(v) => {
                buf.put_u8(b't');
                buf.put_u8(u8::from(*v));
            }
            FieldValue::I8(v) => {
                buf.put_u8(b'b');
                buf.put_i8(*v);
            }
            FieldValue::U8(v) => {
                buf.put_u8(b'B');
                buf.put_u8(*v);
            }
            FieldValue::I16(v) => {
                buf.put_u8(b's');
                buf.put_i16(*v);
            }
            FieldValue::U16(v) => {
                buf.put_u8(b'u');
                buf.put_u16(*v);
            }
            FieldValue::I32(v) => {
                buf.put_u8(b'I');
                buf.put_i32(*v);
            }
            FieldValue::U32(v) => {
                buf.put_u8(b'i');
                buf.put_u32(*v);
            }
            FieldValue::I64(v) => {
                buf.put_u8(b'l');
                buf.put_i64(*v);
            }
            FieldValue::F32(v) => {
                buf.put_u8(b'f');
                buf.put_f32(*v);
            }
            FieldValue::F64(v) => {
                buf.put_u8(b'd');
                buf.put_f64(*v);
            }
            FieldValue::Decimal { scale, value } => {
                buf.put_u8(b'D');
                buf.put_u8(*scale);
                buf.put_u32(*value);
            }
            FieldValue::LongStr(v) => {
                buf.put_u8(b'S');
                put_longstr(buf, v)?;
            }
            FieldValue::Array(items) => {
                buf.put_u8(b'A');
                let pos = reserve_u32(buf);
                for item in items {
                    item.encode(buf)?;
                }
                patch_u32_len(buf, pos)?;
            }
            FieldValue::Timestamp(v) => {
                buf.put_u8(b'T');
                buf.put_u64(*v);
            }
            FieldValue::Table(t) => {
                buf.put_u8(b'F');
                t.encode(buf)?;
            }
            FieldValue::Void => buf.put_u8(b'V'),
            FieldValue::ByteArray(v) => {
                buf.put_u8(b'x');
                put_longstr(buf, v)?;
            }
        }
        Ok(())
    }
}

/// Checks the nesting limit before descending into a table or array.
fn check_depth(depth: usize) -> Result<(), CodecError> {
    if depth > MAX_NESTING_DEPTH {
        Err(CodecError::Malformed(format!(
            "field table/array nesting deeper than {MAX_NESTING_DEPTH}"
        )))
    } else {
        Ok(())
    }
}

/// Decodes the items of a field array whose length prefix was already read.
fn decode_array_body(mut body: Bytes, depth: usize) -> Result<Vec<FieldValue>, CodecError> {
    check_depth(depth)?;
    let mut items = Vec::new();
    while !body.is_empty() {
        items.push(FieldValue::decode(&mut body, depth)?);
    }
    Ok(items)
}

impl From<bool> for FieldValue {
    fn from(v: bool) -> Self {
        FieldValue::Bool(v)
    }
}

impl From<i32> for FieldValue {
    fn from(v: i32) -> Self {
        FieldValue::I32(v)
    }
}

impl From<i64> for FieldValue {
    fn from(v: i64) -> Self {
        FieldValue::I64(v)
    }
}

impl From<&str> for FieldValue {
    fn from(v: &str) -> Self {
        FieldValue::LongStr(Bytes::copy_from_slice(v.as_bytes()))
    }
}

impl From<FieldTable> for FieldValue {
    fn from(v: FieldTable) -> Self {
        FieldValue::Table(v)
    }
}

/// An AMQP field table: named arguments on declares, message headers,
/// client/server properties.
///
/// Stored as an ordered list so decoding and re-encoding preserves the
/// sender's entry order; tables are small, so linear lookup is cheap.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldTable(pub Vec<(ShortStr, FieldValue)>);

impl FieldTable {
    /// Creates an empty table.
    pub fn new() -> Self {
        FieldTable(Vec::new())
    }

    /// Looks up a value by key (first match).
    pub fn get(&self, key: &str) -> Option<&FieldValue> {
        self.0.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
    }

    /// Sets a value, replacing an existing entry with the same key in place
    /// (keeping its position) or appending a new one.
    pub fn insert(&mut self, key: impl Into<ShortStr>, value: FieldValue) {
        let key = key.into();
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.0.push((key, value)),
        }
    }

    /// Removes an entry, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<FieldValue> {
        let idx = self.0.iter().position(|(k, _)| k.as_str() == key)?;
        Some(self.0.remove(idx).1)
    }

    /// Whether the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Iterates entries in wire order.
    pub fn iter(&self) -> impl Iterator<Item = (&ShortStr, &FieldValue)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// Reads a table with its 32-bit length prefix from a cursor.
    pub fn decode(buf: &mut Bytes) -> Result<Self, CodecError> {
        let body = get_longstr(buf, "field table")?;
        Self::decode_body(body)
    }

    /// Reads table entries from a buffer that holds exactly the table body
    /// (length prefix already consumed).
    pub fn decode_body(body: Bytes) -> Result<Self, CodecError> {
        Self::decode_body_at(body, 1)
    }

    fn decode_body_at(mut body: Bytes, depth: usize) -> Result<Self, CodecError> {
        check_depth(depth)?;
        let mut entries = Vec::new();
        while !body.is_empty() {
            let key = get_shortstr(&mut body, "field table key")?;
            let value = FieldValue::decode(&mut body, depth)?;
            entries.push((key, value));
        }
        Ok(FieldTable(entries))
    }

    /// Writes the table with its 32-bit length prefix.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), CodecError> {
        let pos = reserve_u32(buf);
        for (k, v) in &self.0 {
            put_shortstr(buf, k)?;
            v.encode(buf)?;
        }
        patch_u32_len(buf, pos)
    }
}

/// A field table kept as its encoded bytes, in one allocation of its own.
///
/// For tables held long and read rarely: a connection's client properties
/// live as long as the connection and are read only when the management API
/// lists it. Decoded, such a table costs a vector per nested table and an
/// enum slot per value (about five times its encoded size), and its strings
/// would be slices of the read buffer, keeping all of it alive.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PackedTable(Bytes);

impl PackedTable {
    /// The table, decoded again.
    pub fn unpack(&self) -> FieldTable {
        // These bytes were encoded from a table, so they decode.
        FieldTable::decode(&mut self.0.clone()).unwrap_or_default()
    }
}

impl From<&FieldTable> for PackedTable {
    fn from(table: &FieldTable) -> PackedTable {
        let mut encoded = BytesMut::new();
        match table.encode(&mut encoded) {
            Ok(()) => PackedTable(Bytes::copy_from_slice(&encoded)),
            // Only a table too big for its length prefix fails to encode; a
            // decoded one never is.
            Err(_) => PackedTable::default(),
        }
    }
}

impl FromIterator<(ShortStr, FieldValue)> for FieldTable {
    fn from_iter<I: IntoIterator<Item = (ShortStr, FieldValue)>>(iter: I) -> Self {
        FieldTable(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FieldTable {
        let mut inner = FieldTable::new();
        inner.insert("publisher_confirms", FieldValue::Bool(true));
        inner.insert(
            "arr",
            FieldValue::Array(vec![FieldValue::Array(vec![FieldValue::Void])]),
        );
        let mut t = FieldTable::new();
        t.insert("bool", FieldValue::Bool(false));
        t.insert("i8", FieldValue::I8(-5));
        t.insert("u8", FieldValue::U8(250));
        t.insert("i16", FieldValue::I16(-300));
        t.insert("u16", FieldValue::U16(65000));
        t.insert("i32", FieldValue::I32(-70000));
        t.insert("u32", FieldValue::U32(4_000_000_000));
        t.insert("i64", FieldValue::I64(-1 << 40));
        t.insert("f32", FieldValue::F32(1.5));
        t.insert("f64", FieldValue::F64(-2.25));
        t.insert("dec", FieldValue::Decimal { scale: 2, value: 12345 });
        t.insert("str", FieldValue::from("héllo"));
        t.insert(
            "arr",
            FieldValue::Array(vec![
                FieldValue::I32(1),
                FieldValue::from("two"),
                FieldValue::Table(inner.clone()),
                FieldValue::Array(vec![]),
            ]),
        );
        t.insert("ts", FieldValue::Timestamp(1_700_000_000));
        t.insert("tbl", FieldValue::Table(inner));
        t.insert("void", FieldValue::Void);
        t.insert("bytes", FieldValue::ByteArray(Bytes::from_static(b"\x00\x01\xff")));
        t
    }

    #[test]
    fn a_packed_table_unpacks_to_the_original_and_holds_none_of_its_buffer() {
        let mut encoded = BytesMut::new();
        sample().encode(&mut encoded).unwrap();
        encoded.extend_from_slice(&[0u8; 4096]);
        let big = encoded.freeze();
        let decoded = FieldTable::decode(&mut big.clone()).unwrap();
        let packed = PackedTable::from(&decoded);
        let compact = packed.unpack();
        assert_eq!(compact, decoded);
        assert!(!big.as_ptr_range().contains(&packed.0.as_ptr()));
        let Some(FieldValue::LongStr(s)) = compact.get("str") else {
            panic!("str is a long string");
        };
        let range = big.as_ptr_range();
        assert!(
            !range.contains(&s.as_ptr()),
            "the string is still a slice of the read buffer"
        );
    }

    #[test]
    fn roundtrip_every_type() {
        let t = sample();
        let mut out = BytesMut::new();
        t.encode(&mut out).unwrap();
        let mut b = out.freeze();
        let back = FieldTable::decode(&mut b).unwrap();
        assert!(b.is_empty());
        assert_eq!(back, t);
        // Re-encoding is byte-identical.
        let mut again = BytesMut::new();
        back.encode(&mut again).unwrap();
        let mut first = BytesMut::new();
        t.encode(&mut first).unwrap();
        assert_eq!(again, first);
    }

    #[test]
    fn known_encoding() {
        let mut t = FieldTable::new();
        t.insert("a", FieldValue::I32(1));
        let mut out = BytesMut::new();
        t.encode(&mut out).unwrap();
        assert_eq!(&out[..], b"\x00\x00\x00\x07\x01aI\x00\x00\x00\x01");
    }

    #[test]
    fn accessors_and_mutation() {
        let mut t = sample();
        assert_eq!(t.get("u32").and_then(FieldValue::as_i64), Some(4_000_000_000));
        assert_eq!(t.get("i8").and_then(FieldValue::as_i64), Some(-5));
        assert_eq!(t.get("str").and_then(FieldValue::as_str), Some("héllo"));
        assert_eq!(t.get("bool").and_then(FieldValue::as_bool), Some(false));
        assert!(t.get("tbl").and_then(FieldValue::as_table).is_some());
        assert_eq!(t.get("arr").and_then(FieldValue::as_array).map(<[_]>::len), Some(4));
        assert_eq!(t.get("f32").and_then(FieldValue::as_i64), None);
        let n = t.len();
        t.insert("i8", FieldValue::I8(7));
        assert_eq!(t.len(), n);
        assert_eq!(t.0[1].1, FieldValue::I8(7));
        assert_eq!(t.remove("i8"), Some(FieldValue::I8(7)));
        assert_eq!(t.remove("i8"), None);
        assert!(t.get("i8").is_none());
        assert!(!t.is_empty());
        assert_eq!(t.iter().count(), n - 1);
    }

    #[test]
    fn bad_input_errors() {
        let mut b = Bytes::from_static(b"\x00\x00\x00\x03\x01aZ");
        assert!(matches!(
            FieldTable::decode(&mut b),
            Err(CodecError::InvalidFieldType(b'Z'))
        ));
        let mut b = Bytes::from_static(b"\x00\x00\x00\x04\x01aI\x00");
        assert!(matches!(FieldTable::decode(&mut b), Err(CodecError::Truncated(_))));
        let mut b = Bytes::from_static(b"\x00\x00\x00\x09\x01aI");
        assert!(matches!(FieldTable::decode(&mut b), Err(CodecError::Truncated(_))));
        let mut b = Bytes::from_static(b"\x00\x00\x00\x03\x01\xffV");
        assert!(matches!(FieldTable::decode(&mut b), Err(CodecError::InvalidUtf8(_))));
    }

    #[test]
    fn deep_nesting_is_rejected() {
        // Build 10_000 nested arrays by hand: 'A' + len, innermost empty.
        let depth = 10_000usize;
        let mut body: Vec<u8> = Vec::new();
        for _ in 0..depth {
            let mut outer = vec![b'A'];
            outer.extend_from_slice(&(body.len() as u32).to_be_bytes());
            outer.extend_from_slice(&body);
            body = outer;
        }
        let mut table = vec![1u8, b'k'];
        table.extend_from_slice(&body);
        let r = FieldTable::decode_body(Bytes::from(table));
        assert!(matches!(r, Err(CodecError::Malformed(_))));

        // Exactly at the limit is fine: table depth 1 + 63 arrays.
        let mut body: Vec<u8> = Vec::new();
        for _ in 0..(MAX_NESTING_DEPTH - 1) {
            let mut outer = vec![b'A'];
            outer.extend_from_slice(&(body.len() as u32).to_be_bytes());
            outer.extend_from_slice(&body);
            body = outer;
        }
        let mut table = vec![1u8, b'k'];
        table.extend_from_slice(&body);
        assert!(FieldTable::decode_body(Bytes::from(table)).is_ok());
    }
}
