//! Conversion of argument tables to and from JSON, the form definitions are stored
//! and exported in (RabbitMQ's definitions format).

use bytes::Bytes;
use serde_json::{Map, Number, Value};

use super::{FieldTable, FieldValue, ShortStr};

/// JSON form of a field value; numbers stay numbers, strings stay strings.
pub fn value_to_json(v: &FieldValue) -> Value {
    match v {
        FieldValue::Bool(b) => Value::Bool(*b),
        FieldValue::I8(n) => (*n).into(),
        FieldValue::U8(n) => (*n).into(),
        FieldValue::I16(n) => (*n).into(),
        FieldValue::U16(n) => (*n).into(),
        FieldValue::I32(n) => (*n).into(),
        FieldValue::U32(n) => (*n).into(),
        FieldValue::I64(n) => (*n).into(),
        FieldValue::F32(f) => Number::from_f64(f64::from(*f)).map_or(Value::Null, Value::Number),
        FieldValue::F64(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
        FieldValue::Decimal { scale, value } => {
            Number::from_f64(f64::from(*value) / 10f64.powi(i32::from(*scale))).map_or(Value::Null, Value::Number)
        }
        FieldValue::LongStr(b) | FieldValue::ByteArray(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
        FieldValue::Array(a) => Value::Array(a.iter().map(value_to_json).collect()),
        FieldValue::Timestamp(t) => (*t).into(),
        FieldValue::Table(t) => table_to_json(t),
        FieldValue::Void => Value::Null,
    }
}

/// JSON object form of a table.
pub fn table_to_json(t: &FieldTable) -> Value {
    let mut m = Map::new();
    for (k, v) in t.iter() {
        m.insert(k.to_string(), value_to_json(v));
    }
    Value::Object(m)
}

/// Field value for a JSON value: integers become 64-bit integers, as RabbitMQ's
/// management API does.
pub fn json_to_value(v: &Value) -> FieldValue {
    match v {
        Value::Null => FieldValue::Void,
        Value::Bool(b) => FieldValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => FieldValue::I64(i),
            None => FieldValue::F64(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => FieldValue::LongStr(Bytes::copy_from_slice(s.as_bytes())),
        Value::Array(a) => FieldValue::Array(a.iter().map(json_to_value).collect()),
        Value::Object(_) => FieldValue::Table(json_to_table(v)),
    }
}

/// Table for a JSON object; anything else is an empty table.
pub fn json_to_table(v: &Value) -> FieldTable {
    let mut t = FieldTable::default();
    if let Value::Object(m) = v {
        for (k, v) in m {
            if k.len() <= 255 {
                t.insert(ShortStr::from(k.as_str()), json_to_value(v));
            }
        }
    }
    t
}
