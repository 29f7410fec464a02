//! RabbitMQ's shape for statistics: every count `x` comes with
//! `x_details: {"rate": per-second}`.

use serde_json::{Map, Value, json};

use crate::core::stats::Rates;

/// `{"rate": r}` for counter `name`.
pub fn details(rates: &Rates, name: &str) -> Value {
    json!({ "rate": rates.rate(name) })
}

/// A `message_stats` object: each count with its `_details`.
pub fn message_stats(values: &[(&'static str, u64)], rates: &Rates) -> Value {
    let mut out = Map::with_capacity(values.len() * 2);
    for &(name, v) in values {
        out.insert(name.to_string(), json!(v));
        out.insert(format!("{name}_details"), details(rates, name));
    }
    Value::Object(out)
}

/// Adds `name_details` next to each of `names` already in `obj`.
pub fn add_details(obj: &mut Value, rates: &Rates, names: &[&str]) {
    if let Some(map) = obj.as_object_mut() {
        for name in names {
            map.insert(format!("{name}_details"), details(rates, name));
        }
    }
}
