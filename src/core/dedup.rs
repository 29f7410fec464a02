//! Message deduplication for queues and exchanges declared with
//! `x-message-deduplication: true`, behaving like LavinMQ's so publishers that
//! rely on it (retrying a publish without creating a second copy) keep working.
//!
//! # Arguments
//!
//! | argument | meaning |
//! |---|---|
//! | `x-message-deduplication` | `true` turns deduplication on |
//! | `x-cache-size` | how many identifiers are remembered (default 128); when full, the oldest is forgotten |
//! | `x-cache-ttl` | how long an identifier is remembered, in milliseconds (default: until evicted) |
//! | `x-deduplication-header` | the message header holding the identifier (default `x-deduplication-header`) |
//!
//! A message may also carry an `x-cache-ttl` header (milliseconds, as a
//! non-negative 32-bit signed integer; other types and negative values are
//! ignored) that overrides the queue's or exchange's TTL for its own
//! identifier.
//!
//! # How queues and exchanges use it
//!
//! At declare (and whenever the arguments change), build the settings with
//! [`DedupSettings::from_arguments`]; `Ok(None)` means deduplication is off,
//! `Err` is a `PRECONDITION_FAILED` text naming the bad argument. Keep one
//! [`DedupCache`] per queue or exchange, in memory only: it is lost on restart,
//! like LavinMQ's.
//!
//! * An **exchange** calls [`DedupCache::is_duplicate`] first thing on publish,
//!   before delaying or routing. A duplicate reaches no queue and is counted as
//!   deduplicated (not in the exchange's unroutable count); the publish is then
//!   unrouted as far as the channel is concerned (a mandatory message comes back
//!   with `NO_ROUTE`) and a publisher confirm is still an ack. A delayed message
//!   leaving the delay queue is routed without passing the cache again, so it
//!   neither counts as its own duplicate nor refreshes its identifier's TTL.
//! * A **queue** calls it first thing on enqueue, before the overflow check. A
//!   duplicate is not stored and is counted as deduplicated by that queue; other
//!   queues the message was routed to still take it. When no queue took it the
//!   publish is unroutable like any other; a publisher confirm is still an ack.
//!
//! A message without the header (or whose header is void or `false`, which
//! LavinMQ treats as absent) is never a duplicate and is not remembered.
//!
//! # Identifier equality
//!
//! Identifiers compare the way LavinMQ (Crystal) compares header values:
//! strings and byte arrays by content (a string never equals a byte array),
//! numbers by numeric value whatever their wire type (`5` as a 32-bit integer,
//! a 64-bit integer, the float `5.0` and the decimal `5.00` are one
//! identifier), booleans only with booleans, timestamps by second, arrays
//! element by element, tables as unordered maps. A NaN never equals anything.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::{FieldTable, FieldValue};

/// Queue/exchange argument that turns deduplication on.
pub const ENABLE_ARGUMENT: &str = "x-message-deduplication";

/// Queue/exchange argument bounding the number of remembered identifiers.
pub const CACHE_SIZE_ARGUMENT: &str = "x-cache-size";

/// Queue/exchange argument giving identifiers a lifetime in milliseconds; also
/// the name of the per-message header that overrides it.
pub const CACHE_TTL_ARGUMENT: &str = "x-cache-ttl";

/// Queue/exchange argument naming the header that carries the identifier.
pub const HEADER_ARGUMENT: &str = "x-deduplication-header";

/// Header read for the identifier when `x-deduplication-header` is not given
/// (LavinMQ reuses the argument's own name).
pub const DEFAULT_HEADER: &str = "x-deduplication-header";

/// Identifiers remembered when `x-cache-size` is not given (LavinMQ's default).
pub const DEFAULT_CACHE_SIZE: u32 = 128;

/// Parsed deduplication arguments of one queue or exchange; kept separate from
/// the cache so declare can validate arguments before anything is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DedupSettings {
    /// `x-cache-size`: most identifiers remembered at once; `None` means
    /// [`DEFAULT_CACHE_SIZE`].
    pub cache_size: Option<u32>,
    /// `x-cache-ttl`: milliseconds an identifier is remembered; `None` means
    /// until it is evicted by newer ones.
    pub cache_ttl_ms: Option<u64>,
    /// The message header holding the identifier.
    pub header: String,
}

impl DedupSettings {
    /// Reads the deduplication arguments of a queue or exchange declaration.
    /// `Ok(None)` when `x-message-deduplication` is absent, void or `false`;
    /// otherwise the settings, or an `Err` naming the first bad argument
    /// (meant for `PRECONDITION_FAILED`).
    ///
    /// Accepted values: `x-cache-size` an integer from 1 to 4294967295 (LavinMQ
    /// takes 0 and then fails every publish, so it is refused here);
    /// `x-cache-ttl` an integer from 0 to 4294967295 (0 forgets every
    /// identifier at once); `x-deduplication-header` a string. A void value is
    /// the same as an absent one.
    pub fn from_arguments(arguments: &FieldTable) -> Result<Option<DedupSettings>, String> {
        if !bool_argument(arguments, ENABLE_ARGUMENT)? {
            return Ok(None);
        }
        Ok(Some(DedupSettings {
            cache_size: cache_size_argument(arguments)?,
            cache_ttl_ms: cache_ttl_argument(arguments)?,
            header: header_argument(arguments)?.unwrap_or_else(|| DEFAULT_HEADER.to_string()),
        }))
    }

    /// Checks the types and ranges of all four arguments even when
    /// deduplication is off, as LavinMQ's queue declare does (its exchange
    /// declare only looks at them when deduplication is on).
    pub fn validate_arguments(arguments: &FieldTable) -> Result<(), String> {
        bool_argument(arguments, ENABLE_ARGUMENT)?;
        cache_size_argument(arguments)?;
        cache_ttl_argument(arguments)?;
        header_argument(arguments)?;
        Ok(())
    }
}

fn present<'a>(arguments: &'a FieldTable, name: &str) -> Option<&'a FieldValue> {
    arguments.get(name).filter(|v| !matches!(v, FieldValue::Void))
}

fn invalid(name: &str, expected: &str) -> String {
    format!("invalid arg '{name}': expected {expected}")
}

fn bool_argument(arguments: &FieldTable, name: &str) -> Result<bool, String> {
    match present(arguments, name) {
        None => Ok(false),
        Some(v) => v.as_bool().ok_or_else(|| invalid(name, "a boolean")),
    }
}

fn cache_size_argument(arguments: &FieldTable) -> Result<Option<u32>, String> {
    let Some(v) = present(arguments, CACHE_SIZE_ARGUMENT) else {
        return Ok(None);
    };
    match v.as_i64() {
        Some(n) if n >= 1 => u32::try_from(n)
            .map(Some)
            .map_err(|_| invalid(CACHE_SIZE_ARGUMENT, "a positive integer up to 4294967295")),
        _ => Err(invalid(CACHE_SIZE_ARGUMENT, "a positive integer")),
    }
}

fn cache_ttl_argument(arguments: &FieldTable) -> Result<Option<u64>, String> {
    let Some(v) = present(arguments, CACHE_TTL_ARGUMENT) else {
        return Ok(None);
    };
    match v.as_i64() {
        Some(n) if n >= 0 => u32::try_from(n)
            .map(|ms| Some(u64::from(ms)))
            .map_err(|_| invalid(CACHE_TTL_ARGUMENT, "a non-negative integer up to 4294967295")),
        _ => Err(invalid(CACHE_TTL_ARGUMENT, "a non-negative integer")),
    }
}

fn header_argument(arguments: &FieldTable) -> Result<Option<String>, String> {
    match present(arguments, HEADER_ARGUMENT) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(|s| Some(s.to_string()))
            .ok_or_else(|| invalid(HEADER_ARGUMENT, "a string")),
    }
}

/// The per-message `x-cache-ttl` header, honoured only as a non-negative
/// 32-bit signed integer like LavinMQ; anything else leaves the default.
fn message_ttl(headers: &FieldTable) -> Option<u64> {
    match headers.get(CACHE_TTL_ARGUMENT) {
        Some(FieldValue::I32(ms)) => u64::try_from(*ms).ok(),
        _ => None,
    }
}

/// A header value in a form that can be hashed and compared with LavinMQ's
/// equality (see the module documentation). Owned copies, so the cache never
/// pins a message's frame buffer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum DedupKey {
    Void,
    Bool(bool),
    /// Every integer, and every float or decimal with an integral value.
    Int(i128),
    /// Bits of a non-integral or infinite float (never NaN; `-0.0` is `Int(0)`).
    Float(u64),
    Str(Box<[u8]>),
    Bytes(Box<[u8]>),
    Time(u64),
    Array(Box<[DedupKey]>),
    /// Sorted by name, first occurrence of a repeated name only.
    Table(Box<[(Box<str>, DedupKey)]>),
}

impl DedupKey {
    /// The identifier of a message, or `None` when it has none: void and
    /// `false` are falsy in LavinMQ and treated like a missing header, and a
    /// value containing NaN can never match, so remembering it is pointless.
    fn for_message(value: &FieldValue) -> Option<DedupKey> {
        match value {
            FieldValue::Void | FieldValue::Bool(false) => None,
            v => DedupKey::from_value(v),
        }
    }

    fn from_value(value: &FieldValue) -> Option<DedupKey> {
        Some(match value {
            FieldValue::Void => DedupKey::Void,
            FieldValue::Bool(b) => DedupKey::Bool(*b),
            FieldValue::I8(v) => DedupKey::Int((*v).into()),
            FieldValue::U8(v) => DedupKey::Int((*v).into()),
            FieldValue::I16(v) => DedupKey::Int((*v).into()),
            FieldValue::U16(v) => DedupKey::Int((*v).into()),
            FieldValue::I32(v) => DedupKey::Int((*v).into()),
            FieldValue::U32(v) => DedupKey::Int((*v).into()),
            FieldValue::I64(v) => DedupKey::Int((*v).into()),
            FieldValue::F32(v) => DedupKey::number(f64::from(*v))?,
            FieldValue::F64(v) => DedupKey::number(*v)?,
            FieldValue::Decimal { scale, value } => DedupKey::number(decimal(*scale, *value))?,
            FieldValue::LongStr(b) => DedupKey::Str(Box::from(&b[..])),
            FieldValue::ByteArray(b) => DedupKey::Bytes(Box::from(&b[..])),
            FieldValue::Timestamp(t) => DedupKey::Time(*t),
            FieldValue::Array(items) => DedupKey::Array(items.iter().map(DedupKey::from_value).collect::<Option<_>>()?),
            FieldValue::Table(table) => {
                let mut entries: Vec<(&str, &FieldValue)> = table.iter().map(|(k, v)| (k.as_str(), v)).collect();
                // Stable sort, then keep the first of each name: that is the
                // entry a lookup by name finds.
                entries.sort_by(|a, b| a.0.cmp(b.0));
                entries.dedup_by(|later, earlier| later.0 == earlier.0);
                DedupKey::Table(
                    entries
                        .into_iter()
                        .map(|(k, v)| DedupKey::from_value(v).map(|v| (Box::from(k), v)))
                        .collect::<Option<_>>()?,
                )
            }
        })
    }

    fn number(v: f64) -> Option<DedupKey> {
        const I128_BOUND: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0; // 2^127
        if v.is_nan() {
            None
        } else if v.is_finite() && v.fract() == 0.0 && v.abs() < I128_BOUND {
            // Integral and in range, so the conversion is exact.
            Some(DedupKey::Int(v as i128))
        } else {
            Some(DedupKey::Float(v.to_bits()))
        }
    }
}

/// LavinMQ's reading of an AMQP decimal: the unscaled value as a signed 32-bit
/// integer divided by `10^scale`.
fn decimal(scale: u8, value: u32) -> f64 {
    let signed = i32::from_be_bytes(value.to_be_bytes());
    f64::from(signed) / 10f64.powi(i32::from(scale))
}

/// When an identifier was seen: `seq` orders entries by insertion, and the
/// identifier is forgotten from `expires_at_ms` on (never when `None`).
#[derive(Debug, Clone, Copy)]
struct Slot {
    seq: u64,
    expires_at_ms: Option<i64>,
}

/// The identifiers recently seen by one queue or exchange, so a message whose
/// identifier was already seen can be dropped.
///
/// At most `cache_size` identifiers are held; adding one to a full cache
/// forgets the oldest (first inserted), whether or not it expired. Expired
/// identifiers are only dropped when looked up again, as in LavinMQ. Each
/// message costs one hash lookup and at most one insert (amortized O(1)).
#[derive(Debug)]
pub struct DedupCache {
    settings: DedupSettings,
    capacity: usize,
    entries: HashMap<Arc<DedupKey>, Slot>,
    /// Insertion order; may hold stale pairs for identifiers that expired and
    /// were seen again, skipped on eviction and compacted away.
    order: VecDeque<(u64, Arc<DedupKey>)>,
    next_seq: u64,
}

impl DedupCache {
    /// An empty cache for `settings`.
    pub fn new(settings: DedupSettings) -> Self {
        let size = settings.cache_size.unwrap_or(DEFAULT_CACHE_SIZE).max(1);
        let capacity = usize::try_from(size).unwrap_or(usize::MAX);
        let initial = capacity.min(usize::try_from(DEFAULT_CACHE_SIZE).unwrap_or(128));
        DedupCache {
            settings,
            capacity,
            entries: HashMap::with_capacity(initial),
            order: VecDeque::with_capacity(initial),
            next_seq: 0,
        }
    }

    /// The settings the cache was built from, for the management API.
    pub fn settings(&self) -> &DedupSettings {
        &self.settings
    }

    /// Number of identifiers held, expired ones not yet dropped included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no identifier is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Decides whether a message with these `headers` arriving at `now_ms`
    /// (milliseconds on any clock that does not go backwards, used for TTLs
    /// only) is a duplicate: `true` means drop it. `false` means it is new (or
    /// has no identifier); a new identifier is remembered, for the message's
    /// own `x-cache-ttl` header if it has a valid one, else for the configured
    /// TTL.
    pub fn is_duplicate(&mut self, headers: Option<&FieldTable>, now_ms: i64) -> bool {
        let Some(headers) = headers else {
            return false;
        };
        let Some(key) = headers.get(&self.settings.header).and_then(DedupKey::for_message) else {
            return false;
        };
        if let Some(slot) = self.entries.get(&key) {
            match slot.expires_at_ms {
                Some(at) if at <= now_ms => {
                    self.entries.remove(&key);
                }
                _ => return true,
            }
        }
        let ttl = message_ttl(headers).or(self.settings.cache_ttl_ms);
        let expires_at_ms = ttl.map(|ms| now_ms.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)));
        if self.entries.len() >= self.capacity {
            self.evict_oldest();
        }
        let key = Arc::new(key);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.entries.insert(Arc::clone(&key), Slot { seq, expires_at_ms });
        self.order.push_back((seq, key));
        self.compact();
        false
    }

    fn is_live(&self, seq: u64, key: &DedupKey) -> bool {
        self.entries.get(key).is_some_and(|slot| slot.seq == seq)
    }

    fn evict_oldest(&mut self) {
        while let Some((seq, key)) = self.order.pop_front() {
            if self.is_live(seq, &key) {
                self.entries.remove(&*key);
                return;
            }
        }
    }

    /// Drops stale order pairs once they outnumber live entries, so an
    /// identifier that keeps expiring and coming back cannot grow memory.
    fn compact(&mut self) {
        if self.order.len() > 2 * self.entries.len() + 32 {
            let entries = &self.entries;
            self.order
                .retain(|(seq, key)| entries.get(&**key).is_some_and(|slot| slot.seq == *seq));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
        let mut t = FieldTable::new();
        for (k, v) in entries {
            t.insert(*k, v.clone());
        }
        t
    }

    fn msg(id: &str) -> FieldTable {
        table(&[(DEFAULT_HEADER, id.into())])
    }

    fn cache(size: Option<u32>, ttl: Option<u64>) -> DedupCache {
        DedupCache::new(DedupSettings {
            cache_size: size,
            cache_ttl_ms: ttl,
            header: DEFAULT_HEADER.to_string(),
        })
    }

    #[test]
    fn settings_off_unless_enabled() {
        assert_eq!(DedupSettings::from_arguments(&FieldTable::new()), Ok(None));
        let off = table(&[(ENABLE_ARGUMENT, false.into()), (CACHE_SIZE_ARGUMENT, "x".into())]);
        assert_eq!(DedupSettings::from_arguments(&off), Ok(None));
        let void = table(&[(ENABLE_ARGUMENT, FieldValue::Void)]);
        assert_eq!(DedupSettings::from_arguments(&void), Ok(None));
    }

    #[test]
    fn settings_defaults_and_values() {
        let on = table(&[(ENABLE_ARGUMENT, true.into())]);
        assert_eq!(
            DedupSettings::from_arguments(&on),
            Ok(Some(DedupSettings {
                cache_size: None,
                cache_ttl_ms: None,
                header: DEFAULT_HEADER.to_string(),
            }))
        );
        let full = table(&[
            (ENABLE_ARGUMENT, true.into()),
            (CACHE_SIZE_ARGUMENT, FieldValue::U16(1000)),
            (CACHE_TTL_ARGUMENT, FieldValue::I64(0)),
            (HEADER_ARGUMENT, "msg-id".into()),
        ]);
        assert_eq!(
            DedupSettings::from_arguments(&full),
            Ok(Some(DedupSettings {
                cache_size: Some(1000),
                cache_ttl_ms: Some(0),
                header: "msg-id".to_string(),
            }))
        );
        let big = table(&[
            (ENABLE_ARGUMENT, true.into()),
            (CACHE_SIZE_ARGUMENT, FieldValue::U32(u32::MAX)),
            (CACHE_TTL_ARGUMENT, FieldValue::I64(i64::from(u32::MAX))),
        ]);
        let s = DedupSettings::from_arguments(&big).ok().flatten();
        assert_eq!(s.as_ref().and_then(|s| s.cache_size), Some(u32::MAX));
        assert_eq!(s.and_then(|s| s.cache_ttl_ms), Some(u64::from(u32::MAX)));
    }

    #[test]
    fn settings_errors_name_the_argument() {
        let cases: [(&str, FieldValue, &str); 9] = [
            (
                ENABLE_ARGUMENT,
                "true".into(),
                "invalid arg 'x-message-deduplication': expected a boolean",
            ),
            (
                CACHE_SIZE_ARGUMENT,
                "10".into(),
                "invalid arg 'x-cache-size': expected a positive integer",
            ),
            (
                CACHE_SIZE_ARGUMENT,
                0.into(),
                "invalid arg 'x-cache-size': expected a positive integer",
            ),
            (
                CACHE_SIZE_ARGUMENT,
                (-5).into(),
                "invalid arg 'x-cache-size': expected a positive integer",
            ),
            (
                CACHE_SIZE_ARGUMENT,
                FieldValue::I64(1 << 32),
                "invalid arg 'x-cache-size': expected a positive integer up to 4294967295",
            ),
            (
                CACHE_TTL_ARGUMENT,
                FieldValue::F64(1.5),
                "invalid arg 'x-cache-ttl': expected a non-negative integer",
            ),
            (
                CACHE_TTL_ARGUMENT,
                (-1).into(),
                "invalid arg 'x-cache-ttl': expected a non-negative integer",
            ),
            (
                CACHE_TTL_ARGUMENT,
                FieldValue::I64(1 << 32),
                "invalid arg 'x-cache-ttl': expected a non-negative integer up to 4294967295",
            ),
            (
                HEADER_ARGUMENT,
                1.into(),
                "invalid arg 'x-deduplication-header': expected a string",
            ),
        ];
        for (name, value, message) in cases {
            let mut args = table(&[(ENABLE_ARGUMENT, true.into())]);
            args.insert(name, value.clone());
            assert_eq!(
                DedupSettings::from_arguments(&args),
                Err(message.to_string()),
                "{name} {value:?}"
            );
            let mut off = FieldTable::new();
            off.insert(name, value);
            assert_eq!(DedupSettings::validate_arguments(&off), Err(message.to_string()));
        }
        let void_size = table(&[(ENABLE_ARGUMENT, true.into()), (CACHE_SIZE_ARGUMENT, FieldValue::Void)]);
        assert!(matches!(DedupSettings::from_arguments(&void_size), Ok(Some(_))));
        assert_eq!(DedupSettings::validate_arguments(&FieldTable::new()), Ok(()));
    }

    #[test]
    fn hit_and_miss() {
        let mut c = cache(Some(10), None);
        assert!(!c.is_duplicate(Some(&msg("item1")), 0));
        assert!(c.is_duplicate(Some(&msg("item1")), 1));
        assert!(!c.is_duplicate(Some(&msg("item2")), 2));
        assert!(c.is_duplicate(Some(&msg("item2")), 3));
        assert!(c.is_duplicate(Some(&msg("item1")), 1_000_000));
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn missing_identifier_is_never_a_duplicate() {
        let mut c = cache(None, None);
        for _ in 0..3 {
            assert!(!c.is_duplicate(None, 0));
            assert!(!c.is_duplicate(Some(&FieldTable::new()), 0));
            assert!(!c.is_duplicate(Some(&table(&[("other", "a".into())])), 0));
            assert!(!c.is_duplicate(Some(&table(&[(DEFAULT_HEADER, FieldValue::Void)])), 0));
            assert!(!c.is_duplicate(Some(&table(&[(DEFAULT_HEADER, false.into())])), 0));
            assert!(!c.is_duplicate(Some(&table(&[(DEFAULT_HEADER, FieldValue::F64(f64::NAN))])), 0));
        }
        assert!(c.is_empty());
    }

    #[test]
    fn custom_header_name() {
        let mut c = DedupCache::new(DedupSettings {
            cache_size: None,
            cache_ttl_ms: None,
            header: "custom".to_string(),
        });
        let custom = table(&[("custom", "msg1".into())]);
        assert!(!c.is_duplicate(Some(&custom), 0));
        assert!(c.is_duplicate(Some(&custom), 0));
        // The default header is not looked at any more.
        assert!(!c.is_duplicate(Some(&msg("msg1")), 0));
        assert!(!c.is_duplicate(Some(&msg("msg1")), 0));
        assert_eq!(c.settings().header, "custom");
    }

    // LavinMQ spec: MemoryCache "should default cache size" and "should have
    // max size as optional setting".
    #[test]
    fn size_eviction_forgets_the_oldest() {
        let mut c = cache(None, None);
        for n in 0..=DEFAULT_CACHE_SIZE {
            assert!(!c.is_duplicate(Some(&msg(&n.to_string())), 0));
        }
        assert_eq!(c.len(), DEFAULT_CACHE_SIZE as usize);
        assert!(c.is_duplicate(Some(&msg("1")), 0));
        assert!(c.is_duplicate(Some(&msg(&DEFAULT_CACHE_SIZE.to_string())), 0));
        assert!(!c.is_duplicate(Some(&msg("0")), 0));

        let mut c = cache(Some(2), None);
        assert!(!c.is_duplicate(Some(&msg("item1")), 0));
        assert!(!c.is_duplicate(Some(&msg("item2")), 0));
        assert!(!c.is_duplicate(Some(&msg("item3")), 0));
        assert!(c.is_duplicate(Some(&msg("item2")), 0));
        assert!(c.is_duplicate(Some(&msg("item3")), 0));
        assert!(!c.is_duplicate(Some(&msg("item1")), 0));
        assert_eq!(c.len(), 2);
    }

    // LavinMQ spec: MemoryCache "should respect ttl".
    #[test]
    fn ttl_expiry() {
        let mut c = cache(Some(3), Some(300));
        let with_ttl = |id: &str, ttl: i32| table(&[(DEFAULT_HEADER, id.into()), (CACHE_TTL_ARGUMENT, ttl.into())]);
        assert!(!c.is_duplicate(Some(&with_ttl("item1", 1)), 0));
        assert!(!c.is_duplicate(Some(&msg("item2")), 0));
        assert!(c.is_duplicate(Some(&msg("item2")), 299));
        // Expired: dropped on lookup and remembered afresh.
        assert!(!c.is_duplicate(Some(&msg("item1")), 200));
        assert!(!c.is_duplicate(Some(&msg("item2")), 300));
        assert!(c.is_duplicate(Some(&msg("item2")), 599));
        assert!(c.is_duplicate(Some(&msg("item1")), 499));
    }

    #[test]
    fn no_ttl_means_until_evicted() {
        let mut c = cache(Some(3), None);
        assert!(!c.is_duplicate(Some(&msg("a")), 0));
        assert!(c.is_duplicate(Some(&msg("a")), i64::MAX));
        // A per-message TTL still applies without a default.
        let h = table(&[(DEFAULT_HEADER, "b".into()), (CACHE_TTL_ARGUMENT, 10.into())]);
        assert!(!c.is_duplicate(Some(&h), 0));
        assert!(c.is_duplicate(Some(&msg("b")), 9));
        assert!(!c.is_duplicate(Some(&msg("b")), 10));
    }

    #[test]
    fn message_ttl_header_only_as_non_negative_i32() {
        assert_eq!(message_ttl(&table(&[(CACHE_TTL_ARGUMENT, 10.into())])), Some(10));
        assert_eq!(message_ttl(&table(&[(CACHE_TTL_ARGUMENT, 0.into())])), Some(0));
        assert_eq!(message_ttl(&table(&[(CACHE_TTL_ARGUMENT, (-1).into())])), None);
        assert_eq!(message_ttl(&table(&[(CACHE_TTL_ARGUMENT, FieldValue::I64(10))])), None);
        assert_eq!(message_ttl(&table(&[(CACHE_TTL_ARGUMENT, "10".into())])), None);
        assert_eq!(message_ttl(&FieldTable::new()), None);
    }

    #[test]
    fn zero_ttl_forgets_immediately() {
        let mut c = cache(None, Some(0));
        assert!(!c.is_duplicate(Some(&msg("a")), 5));
        assert!(!c.is_duplicate(Some(&msg("a")), 5));
    }

    #[test]
    fn expired_entries_still_take_space_until_evicted() {
        let mut c = cache(Some(2), Some(10));
        assert!(!c.is_duplicate(Some(&msg("a")), 0));
        assert!(!c.is_duplicate(Some(&msg("b")), 0));
        assert_eq!(c.len(), 2);
        assert!(!c.is_duplicate(Some(&msg("c")), 100));
        assert_eq!(c.len(), 2);
        assert!(!c.is_duplicate(Some(&msg("a")), 100));
        assert!(c.is_duplicate(Some(&msg("c")), 105));
    }

    #[test]
    fn reinserted_identifier_moves_to_the_back() {
        let mut c = cache(Some(2), Some(10));
        assert!(!c.is_duplicate(Some(&msg("a")), 0));
        assert!(!c.is_duplicate(Some(&msg("b")), 5));
        // "a" expired and comes back: now newer than "b".
        assert!(!c.is_duplicate(Some(&msg("a")), 10));
        assert!(!c.is_duplicate(Some(&msg("c")), 11));
        assert!(c.is_duplicate(Some(&msg("a")), 12));
        assert!(c.is_duplicate(Some(&msg("c")), 12));
        assert!(!c.is_duplicate(Some(&msg("b")), 12));
    }

    #[test]
    fn order_queue_stays_bounded() {
        let mut c = cache(Some(100), Some(1));
        for t in 0..10_000 {
            assert!(!c.is_duplicate(Some(&msg("same")), t * 2));
        }
        assert_eq!(c.len(), 1);
        assert!(c.order.len() <= 2 * c.entries.len() + 33);
    }

    #[test]
    fn numbers_compare_by_value() {
        let mut c = cache(None, None);
        let h = |v: FieldValue| table(&[(DEFAULT_HEADER, v)]);
        assert!(!c.is_duplicate(Some(&h(FieldValue::I32(5))), 0));
        for same in [
            FieldValue::I64(5),
            FieldValue::U8(5),
            FieldValue::U32(5),
            FieldValue::F64(5.0),
            FieldValue::F32(5.0),
            FieldValue::Decimal { scale: 2, value: 500 },
        ] {
            assert!(c.is_duplicate(Some(&h(same.clone())), 0), "{same:?}");
        }
        for different in [
            FieldValue::LongStr(Bytes::from_static(b"5")),
            FieldValue::Timestamp(5),
            FieldValue::F64(5.5),
            FieldValue::Bool(true),
        ] {
            assert!(!c.is_duplicate(Some(&h(different.clone())), 0), "{different:?}");
        }
        assert!(c.is_duplicate(Some(&h(FieldValue::Decimal { scale: 1, value: 55 })), 0));
        assert!(!c.is_duplicate(Some(&h(FieldValue::F64(-0.0))), 0));
        assert!(c.is_duplicate(Some(&h(FieldValue::I8(0))), 0));
        assert!(!c.is_duplicate(
            Some(&h(FieldValue::Decimal {
                scale: 0,
                value: u32::MAX
            })),
            0
        ));
        assert!(c.is_duplicate(Some(&h(FieldValue::I32(-1))), 0));
    }

    #[test]
    fn strings_bytes_and_composites() {
        let mut c = cache(None, None);
        let h = |v: FieldValue| table(&[(DEFAULT_HEADER, v)]);
        assert!(!c.is_duplicate(Some(&h(FieldValue::LongStr(Bytes::from_static(b"id")))), 0));
        assert!(!c.is_duplicate(Some(&h(FieldValue::ByteArray(Bytes::from_static(b"id")))), 0));
        assert!(c.is_duplicate(Some(&h(FieldValue::ByteArray(Bytes::from_static(b"id")))), 0));

        let arr = |a: FieldValue, b: FieldValue| FieldValue::Array(vec![a, b]);
        assert!(!c.is_duplicate(Some(&h(arr(1.into(), "x".into()))), 0));
        assert!(c.is_duplicate(Some(&h(arr(FieldValue::I64(1), "x".into()))), 0));
        assert!(!c.is_duplicate(Some(&h(arr("x".into(), 1.into()))), 0));

        // A repeated name: the first entry counts, as in a lookup by name.
        let t1 = FieldTable(vec![
            ("a".into(), 1.into()),
            ("b".into(), "x".into()),
            ("a".into(), 2.into()),
        ]);
        let t2 = table(&[("b", "x".into()), ("a", FieldValue::I64(1))]);
        let t3 = table(&[("a", 1.into())]);
        assert!(!c.is_duplicate(Some(&h(FieldValue::Table(t1))), 0));
        assert!(c.is_duplicate(Some(&h(FieldValue::Table(t2))), 0));
        assert!(!c.is_duplicate(Some(&h(FieldValue::Table(t3))), 0));

        assert!(!c.is_duplicate(Some(&h(arr(FieldValue::Void, false.into()))), 0));
        assert!(c.is_duplicate(Some(&h(arr(FieldValue::Void, false.into()))), 0));
        assert!(!c.is_duplicate(Some(&h(arr(FieldValue::F64(f64::NAN), 1.into()))), 0));
        assert!(!c.is_duplicate(Some(&h(arr(FieldValue::F64(f64::NAN), 1.into()))), 0));
        assert!(!c.is_duplicate(Some(&h(true.into())), 0));
        assert!(c.is_duplicate(Some(&h(true.into())), 0));
    }

    #[test]
    fn zero_cache_size_is_treated_as_one() {
        let mut c = cache(Some(0), None);
        assert!(!c.is_duplicate(Some(&msg("a")), 0));
        assert!(c.is_duplicate(Some(&msg("a")), 0));
        assert!(!c.is_duplicate(Some(&msg("b")), 0));
        assert!(!c.is_duplicate(Some(&msg("a")), 0));
    }
}
