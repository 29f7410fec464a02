//! Reading a stream queue over AMQP 1.0 as RabbitMQ 4 offers it: the source's
//! filter map says where to start (`rabbitmq:stream-offset-spec`: first,
//! last, next, an offset or a timestamp) and which messages to keep
//! (`rabbitmq:stream-filter`, with `rabbitmq:stream-match-unfiltered`, and
//! the AMQP filter expressions `amqp:properties-filter` and
//! `amqp:application-properties-filter`), mapped onto the consumer arguments
//! 0-9-1 consumers give a stream.

use bytes::Bytes;

use super::codec::types::{Descriptor, Value};
use crate::core::stream::ConsumerOptions;
use crate::core::stream_filter::{Filter, PropertiesTest, TextMatch};
use crate::wire::{FieldTable, FieldValue};

/// The filter entries of a source, each by its key or its descriptor.
fn entries(filter: &Value) -> impl Iterator<Item = (&str, &Value)> {
    let pairs: &[(Value, Value)] = match filter {
        Value::Map(pairs) => pairs,
        _ => &[],
    };
    pairs.iter().filter_map(|(k, v)| {
        // The value is usually described by the filter's name; the key is
        // the client's label for it.
        let inner = match v {
            Value::Described(d, inner) => match &**d {
                Descriptor::Name(name) => return Some((name.as_str(), &**inner)),
                Descriptor::Code(code) => match code_name(*code) {
                    Some(name) => return Some((name, &**inner)),
                    None => &**inner,
                },
            },
            other => other,
        };
        Some((k.as_str()?, inner))
    })
}

/// The names of the filters whose descriptor codes the AMQP filter
/// expressions specification gives.
fn code_name(code: u64) -> Option<&'static str> {
    match code {
        0x173 => Some("amqp:properties-filter"),
        0x174 => Some("amqp:application-properties-filter"),
        _ => None,
    }
}

/// The fields of the properties section, in order, by their names in a
/// properties filter.
const PROPERTY_FIELDS: [&str; 13] = [
    "message-id",
    "user-id",
    "to",
    "subject",
    "reply-to",
    "correlation-id",
    "content-type",
    "content-encoding",
    "absolute-expiry-time",
    "creation-time",
    "group-id",
    "group-sequence",
    "reply-to-group-id",
];

/// What a properties filter entry asks of one field.
enum Wanted {
    /// Text (a string or symbol field), compared as RabbitMQ does.
    Text(TextMatch),
    /// This value, of this type.
    Exactly(Value),
}

impl Wanted {
    fn matches(&self, have: &Value) -> bool {
        match (self, have) {
            (Wanted::Text(want), Value::String(s) | Value::Symbol(s)) => want.matches(s),
            (Wanted::Text(_), _) => false,
            (Wanted::Exactly(want), have) => want == have,
        }
    }
}

/// The condition of an `amqp:properties-filter`: every named field of the
/// message's properties section matches its value.
fn properties_test(filter: &Value) -> Result<PropertiesTest, String> {
    let Value::Map(pairs) = filter else {
        return Err("amqp:properties-filter must be a map".into());
    };
    let mut wanted = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        let field = k
            .as_str()
            .and_then(|k| PROPERTY_FIELDS.iter().position(|f| *f == k))
            .ok_or_else(|| format!("unknown property {k:?} in amqp:properties-filter"))?;
        let want = match v {
            Value::String(s) | Value::Symbol(s) => Wanted::Text(TextMatch::parse(s)),
            v => Wanted::Exactly(v.clone()),
        };
        wanted.push((field, want));
    }
    Ok(PropertiesTest::new(move |props| {
        let fields = super::message::properties_fields(props);
        wanted
            .iter()
            .all(|(i, want)| want.matches(fields.get(*i).unwrap_or(&Value::Null)))
    }))
}

fn text(s: &str) -> FieldValue {
    FieldValue::LongStr(Bytes::copy_from_slice(s.as_bytes()))
}

/// The filters we apply, by name.
const APPLIED: [&str; 5] = [
    "rabbitmq:stream-offset-spec",
    "rabbitmq:stream-filter",
    "rabbitmq:stream-match-unfiltered",
    "amqp:application-properties-filter",
    "amqp:properties-filter",
];

/// The consumer options a source's filter map asks for. Filters we do not
/// apply are left out of the attach we answer with (see [`applied_only`]),
/// as the standard asks, so that a client can tell.
pub fn consumer_options(filter: Option<&Value>) -> Result<ConsumerOptions, String> {
    let mut args = FieldTable::default();
    let mut values = 0;
    let mut properties: Vec<(String, TextMatch)> = Vec::new();
    let mut tests = Vec::new();
    for (name, v) in filter.map(entries).into_iter().flatten() {
        match name {
            "rabbitmq:stream-offset-spec" => {
                let offset = match v {
                    Value::String(s) | Value::Symbol(s) => text(s),
                    Value::Timestamp(ms) => FieldValue::Timestamp((*ms / 1000).max(0) as u64),
                    v => match v.as_u64() {
                        Some(n) => FieldValue::I64(i64::try_from(n).unwrap_or(i64::MAX)),
                        None => return Err(format!("invalid rabbitmq:stream-offset-spec {v:?}")),
                    },
                };
                args.insert("x-stream-offset", offset);
            }
            "rabbitmq:stream-filter" => {
                let list: Vec<FieldValue> = match v {
                    Value::String(s) | Value::Symbol(s) => vec![text(s)],
                    Value::List(items) | Value::Array(items) => {
                        items.iter().filter_map(|i| i.as_str().map(text)).collect()
                    }
                    v => return Err(format!("invalid rabbitmq:stream-filter {v:?}")),
                };
                values = list.len();
                args.insert("x-stream-filter", FieldValue::Array(list));
            }
            "rabbitmq:stream-match-unfiltered" => {
                let b = v
                    .as_bool()
                    .ok_or("rabbitmq:stream-match-unfiltered must be a boolean")?;
                args.insert("x-stream-match-unfiltered", FieldValue::Bool(b));
            }
            "amqp:application-properties-filter" => {
                let Value::Map(pairs) = v else {
                    return Err("amqp:application-properties-filter must be a map".into());
                };
                for (k, v) in pairs {
                    let want = match v {
                        Value::String(s) | Value::Symbol(s) => Some(TextMatch::parse(s)),
                        v => super::message::to_field(v).and_then(|f| exact_text(&f)),
                    };
                    let (Some(k), Some(want)) = (k.as_str(), want) else {
                        return Err(format!("unsupported application property filter {k:?}"));
                    };
                    properties.push((k.to_string(), want));
                }
            }
            "amqp:properties-filter" => tests.push(properties_test(v)?),
            _ => {}
        }
    }
    if values > 1 {
        // RabbitMQ's filter values: a message with any of them passes.
        args.insert("x-filter-match-type", text("any"));
    }
    let mut options = ConsumerOptions::from_arguments(&args)?;
    // Every application property must match as well.
    for (key, want) in properties {
        options.filter = Some(Filter::and_header(options.filter.take(), &key, want));
    }
    for test in tests {
        options.filter = Some(Filter::and_properties(options.filter.take(), test));
    }
    Ok(options)
}

/// A non-string filter value, matched exactly with the text of the
/// message's property (a number or a boolean).
fn exact_text(v: &FieldValue) -> Option<TextMatch> {
    crate::core::stream_filter::value_text(v).map(TextMatch::Exact)
}

/// The client's source with only the filters we apply (none on a queue that
/// is not a stream), for the attach we answer with.
pub fn applied_only(source: &Value, stream: bool) -> Value {
    let Value::Described(d, body) = source else {
        return source.clone();
    };
    let Value::List(items) = &**body else {
        return source.clone();
    };
    let mut items = items.clone();
    if let Some(Value::Map(pairs)) = items.get(7) {
        let kept: Vec<(Value, Value)> = pairs
            .iter()
            .filter(|(k, v)| {
                let name = match v {
                    Value::Described(d, _) => match &**d {
                        Descriptor::Name(n) => Some(n.as_str()),
                        Descriptor::Code(c) => code_name(*c).or(k.as_str()),
                    },
                    _ => k.as_str(),
                };
                stream && name.is_some_and(|n| APPLIED.contains(&n))
            })
            .cloned()
            .collect();
        items[7] = if kept.is_empty() { Value::Null } else { Value::Map(kept) };
    }
    Value::Described(d.clone(), Box::new(Value::List(items)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::stream::StartAt;

    fn described(name: &str, v: Value) -> Value {
        Value::Described(Box::new(Descriptor::Name(name.into())), Box::new(v))
    }

    #[test]
    fn offset_specs_and_filters() {
        let f = Value::Map(vec![
            (
                Value::Symbol("rabbitmq:stream-offset-spec".into()),
                described("rabbitmq:stream-offset-spec", Value::Symbol("first".into())),
            ),
            (
                Value::Symbol("my-filter".into()),
                described("rabbitmq:stream-filter", Value::Array(vec![Value::String("a".into())])),
            ),
        ]);
        let o = consumer_options(Some(&f)).unwrap();
        assert_eq!(o.start, Some(StartAt::First));
        assert!(o.filter.is_some());
        let f = Value::Map(vec![(
            Value::Symbol("rabbitmq:stream-offset-spec".into()),
            Value::Ulong(42),
        )]);
        assert_eq!(consumer_options(Some(&f)).unwrap().start, Some(StartAt::Offset(42)));
        let f = Value::Map(vec![(
            Value::Symbol("rabbitmq:stream-offset-spec".into()),
            Value::Timestamp(5_000),
        )]);
        assert_eq!(consumer_options(Some(&f)).unwrap().start, Some(StartAt::Time(5_000)));
        assert_eq!(consumer_options(None).unwrap().start, None);
        let bad = Value::Map(vec![(
            Value::Symbol("rabbitmq:stream-offset-spec".into()),
            Value::String("sideways".into()),
        )]);
        assert!(consumer_options(Some(&bad)).is_err());
    }

    #[test]
    fn filters_we_do_not_apply_are_left_out_of_the_answer() {
        let filter = Value::Map(vec![
            (
                Value::Symbol("rabbitmq:stream-filter".into()),
                described("rabbitmq:stream-filter", Value::String("a".into())),
            ),
            (
                Value::Symbol("sql-filter".into()),
                described("amqp:sql-filter", Value::String("subject = 'a'".into())),
            ),
        ]);
        let source = Value::Described(
            Box::new(Descriptor::Code(0x28)),
            Box::new(Value::List(vec![
                Value::String("/queues/s".into()),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                filter,
            ])),
        );
        let Value::Described(_, body) = applied_only(&source, true) else {
            panic!()
        };
        let Value::List(items) = *body else { panic!() };
        let Value::Map(kept) = &items[7] else { panic!() };
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].0.as_str(), Some("rabbitmq:stream-filter"));
    }

    #[test]
    fn application_property_filters_match_headers() {
        let f = Value::Map(vec![(
            Value::Symbol("amqp:application-properties-filter".into()),
            described(
                "amqp:application-properties-filter",
                Value::Map(vec![(Value::String("region".into()), Value::String("eu".into()))]),
            ),
        )]);
        let filter = consumer_options(Some(&f)).unwrap().filter.unwrap();
        let mut h = FieldTable::default();
        h.insert("region", text("eu"));
        assert!(filter.accepts(Some(&h)));
        h.insert("region", text("us"));
        assert!(!filter.accepts(Some(&h)));
        assert!(!filter.accepts(None));
    }

    #[test]
    fn properties_filters_match_the_sections_fields() {
        use crate::wire::BasicProperties;
        let f = Value::Map(vec![(
            Value::Symbol("props".into()),
            Value::Described(
                Box::new(Descriptor::Code(0x173)),
                Box::new(Value::Map(vec![
                    (Value::Symbol("subject".into()), Value::String("&p:order.".into())),
                    (Value::Symbol("group-id".into()), Value::String("g1".into())),
                ])),
            ),
        )]);
        let filter = consumer_options(Some(&f)).unwrap().filter.unwrap();
        // group-id is mapped from app-id; subject only the original has.
        let mapped = BasicProperties {
            app_id: Some("g1".into()),
            ..BasicProperties::default()
        };
        assert!(!filter.accepts_message(&mapped), "no subject");
        let mut payload = bytes::BytesMut::new();
        let fields = [
            Value::Null,
            Value::Null,
            Value::Null,
            Value::String("order.created".into()),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::String("g1".into()),
        ];
        crate::amqp1::codec::types::encode_described_list(0x73, &fields, &mut payload);
        crate::amqp1::message::write_data_section(&mut payload, b"x");
        let m = crate::amqp1::message::Received::parse(&payload.freeze()).unwrap();
        assert!(filter.accepts_message(&m.properties));
        let mut other = m.properties.clone();
        other.app_id = Some("g2".into());
        assert!(filter.accepts_message(&other), "the original section decides");
        let bad = Value::Map(vec![(
            Value::Symbol("amqp:properties-filter".into()),
            Value::Map(vec![(Value::Symbol("colour".into()), Value::Null)]),
        )]);
        assert!(consumer_options(Some(&bad)).is_err());
    }
}
