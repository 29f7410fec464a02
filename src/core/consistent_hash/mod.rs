//! Placement for the `x-consistent-hash` exchange: which single destination a
//! message goes to. Three algorithms exist so that a topology moved from
//! either broker keeps sending every key to the same queue: RabbitMQ's (the
//! default, [`rabbitmq`]) and LavinMQ's ring and jump hashes, byte for byte.
//!
//! # How the exchange uses this module
//!
//! * **Declare.** The exchange argument `x-algorithm` picks the placement
//!   algorithm (`"rabbitmq"`, `"ring"` or `"jump"`, see
//!   [`HashAlgorithm::parse`]); a missing, non-string or unknown value falls
//!   back to the broker's `default_consistent_hash_algorithm` setting
//!   (`rabbitmq` unless configured), see [`HashAlgorithm::from_arguments`].
//!   RabbitMQ's `hash-header` and `hash-property` arguments are checked by
//!   [`validate_arguments`]. Exchanges taken over from LavinMQ (its data
//!   directory or its exported definitions) get `x-algorithm = "ring"`
//!   written in ([`pin_lavinmq_algorithm`]), so they keep LavinMQ's mapping.
//! * **Bind / unbind.** The binding key is the destination's *weight*
//!   ([`parse_weight`]; [`check_weight`] applies each algorithm's limits and
//!   error texts). With RabbitMQ's algorithm a weight is a number of buckets,
//!   so weights 1 and 3 split keys 1 : 3; a destination's first binding
//!   decides its weight. With LavinMQ's ring a weight is a number of ring
//!   points, which is not a proportion.
//! * **Publish.** [`hash_input`] picks what the message is placed by: with
//!   `hash-header` that header's value, with `hash-property` the
//!   `message_id`, `correlation_id` or `timestamp` property (RabbitMQ's
//!   arguments); with LavinMQ's `x-hash-on` that header's string value (the
//!   empty string when missing; a header that is present but not a string
//!   fails the publish with `PRECONDITION_FAILED` and [`NON_STRING_HASH_HEADER`]);
//!   otherwise the routing key. [`ConsistentHasher::select`] then yields at most
//!   one destination; an exchange without bindings routes nowhere.
//!
//! # Differences from RabbitMQ
//!
//! A header holding a decimal, an array or a table places the message as a
//! missing header would (RabbitMQ hashes the Erlang term). RabbitMQ accepts
//! neither `x-hash-on` nor `x-algorithm`; both are LavinMQ's.

use std::collections::BTreeMap;

pub mod erlang;
pub mod rabbitmq;

use super::{BasicProperties, FieldTable, FieldValue, ShortStr};
use rabbitmq::{BucketMap, Term};

/// Exchange argument naming the message header to hash instead of the routing
/// key; LavinMQ's name for it (RabbitMQ uses `hash-header`).
pub const HASH_ON_ARGUMENT: &str = "x-hash-on";

/// RabbitMQ's exchange argument naming the message header to hash instead of
/// the routing key.
pub const HASH_HEADER_ARGUMENT: &str = "hash-header";

/// RabbitMQ's exchange argument naming the message property to hash instead
/// of the routing key: one of [`HASH_PROPERTIES`].
pub const HASH_PROPERTY_ARGUMENT: &str = "hash-property";

/// The properties `hash-property` may name, as RabbitMQ spells them.
pub const HASH_PROPERTIES: [&str; 3] = ["correlation_id", "message_id", "timestamp"];

/// Exchange argument selecting the placement algorithm per exchange, so one
/// broker can serve exchanges created for either algorithm.
pub const ALGORITHM_ARGUMENT: &str = "x-algorithm";

/// `PRECONDITION_FAILED` text LavinMQ sends when a binding key is not a weight;
/// kept verbatim (grammar included) for clients that match on it.
pub const INVALID_WEIGHT: &str = "Routing key must to be a number";

/// `PRECONDITION_FAILED` text LavinMQ sends when the `x-hash-on` header holds
/// something other than a string; kept verbatim for clients that match on it.
pub const NON_STRING_HASH_HEADER: &str = "Routing header must be string";

/// The placement algorithm of a consistent-hash exchange. RabbitMQ's is the
/// default, so that a RabbitMQ user keeps each key's queue; LavinMQ's two stay
/// for topologies made on LavinMQ: its ring keeps placements stable across
/// restarts and binding order, its jump spreads keys more evenly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashAlgorithm {
    /// RabbitMQ's plugin: `weight` buckets per destination in binding order,
    /// Erlang's `phash2` and a jump hash driven by Erlang's `exs1024`.
    #[default]
    RabbitMq,
    /// A CRC32 hash ring with `weight` points per binding (LavinMQ's default).
    Ring,
    /// Lamping–Veach jump consistent hash over buckets in binding order.
    Jump,
}

impl HashAlgorithm {
    /// Parses an `x-algorithm` value (or the `default_consistent_hash_algorithm`
    /// setting) the way LavinMQ's enum parsing does, so every spelling LavinMQ
    /// accepts is accepted here: case-insensitive, with `-` and `_` ignored
    /// (`"ring"`, `"Jump"`, `"JUMP"`, `"j-u_m-p"`, `"RabbitMQ"`). Anything
    /// else is `None`.
    pub fn parse(value: &str) -> Option<Self> {
        const LONGEST_NAME: usize = "rabbitmq".len();
        let mut normalized = String::with_capacity(LONGEST_NAME);
        let mut chars = 0;
        for c in value.chars().filter(|&c| c != '-' && c != '_') {
            chars += 1;
            if chars > LONGEST_NAME {
                return None;
            }
            normalized.extend(c.to_lowercase());
        }
        match normalized.as_str() {
            "rabbitmq" => Some(HashAlgorithm::RabbitMq),
            "ring" => Some(HashAlgorithm::Ring),
            "jump" => Some(HashAlgorithm::Jump),
            _ => None,
        }
    }

    /// The canonical name, for the management API and definitions export.
    pub fn name(self) -> &'static str {
        match self {
            HashAlgorithm::RabbitMq => "rabbitmq",
            HashAlgorithm::Ring => "ring",
            HashAlgorithm::Jump => "jump",
        }
    }

    /// The algorithm an exchange declared with `arguments` uses: its
    /// `x-algorithm` when that is a string naming an algorithm, otherwise
    /// `default` (the configured default). LavinMQ never rejects a bad value,
    /// it falls back, and so does this.
    pub fn from_arguments(arguments: &FieldTable, default: HashAlgorithm) -> HashAlgorithm {
        arguments
            .get(ALGORITHM_ARGUMENT)
            .and_then(FieldValue::as_str)
            .and_then(HashAlgorithm::parse)
            .unwrap_or(default)
    }
}

/// Parses a binding key into a weight exactly like LavinMQ (Crystal's
/// `String#to_u32?` with its defaults), so the same keys are accepted and
/// rejected: an unsigned decimal number up to `u32::MAX`, optionally with a
/// leading `+`, leading zeros (`"007"` is 7, never octal) and surrounding
/// whitespace. Signs other than `+`, underscores, `0x` prefixes, fractions and
/// overflow are rejected, as is the empty string. `None` means the bind or
/// unbind must fail with `PRECONDITION_FAILED` ([`INVALID_WEIGHT`]).
///
/// A weight of 0 is valid: the binding exists but receives no messages.
pub fn parse_weight(binding_key: &str) -> Option<u32> {
    let bytes = binding_key.as_bytes();
    // Crystal strings are NUL-terminated and its parser stops at the first NUL.
    let at = |i: usize| bytes.get(i).copied().unwrap_or(0);
    let mut i = leading_whitespace_len(binding_key);
    match at(i) {
        b'-' => return None,
        b'+' => i += 1,
        _ => {}
    }
    let mut found_digit = false;
    if at(i) == b'0' {
        i += 1;
        found_digit = true;
    }
    let mut value: u32 = 0;
    while at(i).is_ascii_digit() {
        value = value.checked_mul(10)?.checked_add(u32::from(at(i) - b'0'))?;
        found_digit = true;
        i += 1;
    }
    if !found_digit {
        return None;
    }
    if at(i) != 0 {
        i += trailing_whitespace_len(binding_key);
        if at(i) != 0 {
            return None;
        }
    }
    Some(value)
}

/// Largest binding weight: RabbitMQ's limit, which also keeps one bind from
/// filling memory with ring points.
pub const MAX_WEIGHT: u32 = 10_000;

/// The weight a binding key gives under `algorithm`, or the
/// `PRECONDITION_FAILED` text refusing it: RabbitMQ's texts and its range
/// (1 to [`MAX_WEIGHT`]) for its algorithm, LavinMQ's text for LavinMQ's
/// (which takes 0: bound but never chosen).
pub fn check_weight(algorithm: HashAlgorithm, binding_key: &str) -> Result<u32, String> {
    let weight = parse_weight(binding_key);
    match (algorithm, weight) {
        (HashAlgorithm::RabbitMq, None) => Err(format!("The binding key must be an integer: <<\"{binding_key}\">>")),
        (HashAlgorithm::RabbitMq, Some(0)) => Err("The binding key must be greater than 0".into()),
        (_, None) => Err(INVALID_WEIGHT.into()),
        (_, Some(w)) if w > MAX_WEIGHT => Err(format!("The binding key must not exceed {MAX_WEIGHT}")),
        (_, Some(w)) => Ok(w),
    }
}

/// Checks a consistent-hash exchange's declaration arguments as RabbitMQ
/// does: `hash-header` and `hash-property` exclude each other, and the
/// property must be one RabbitMQ can hash. `Err` is the
/// `PRECONDITION_FAILED` text.
pub fn validate_arguments(arguments: &FieldTable) -> Result<(), String> {
    let header = arguments.get(HASH_HEADER_ARGUMENT).and_then(FieldValue::as_str);
    let property = arguments.get(HASH_PROPERTY_ARGUMENT).and_then(FieldValue::as_str);
    match (header, property) {
        (Some(_), Some(_)) => Err("hash-header and hash-property are mutually exclusive".into()),
        (None, Some(p)) if !HASH_PROPERTIES.contains(&p) => Err(format!("Unsupported property: {p}")),
        _ => Ok(()),
    }
}

/// Writes LavinMQ's placement (`x-algorithm = "ring"`) into the arguments of
/// a consistent-hash exchange that names none, for an exchange taken over
/// from LavinMQ (its data directory or its exported definitions): there it
/// was placed by LavinMQ's default, and its keys must keep their queues.
/// `arguments` is the exchange's JSON arguments object (null counts as empty).
pub fn pin_lavinmq_algorithm(kind: &str, arguments: &mut serde_json::Value) {
    if kind != "x-consistent-hash" {
        return;
    }
    if arguments.is_null() {
        *arguments = serde_json::Value::Object(Default::default());
    }
    if let Some(map) = arguments.as_object_mut() {
        map.entry(ALGORITHM_ARGUMENT)
            .or_insert_with(|| HashAlgorithm::Ring.name().into());
    }
}

/// Crystal's `Char#whitespace?`: ASCII space and `\t`..`\r`, plus the Unicode
/// space, line and paragraph separators (which is Rust's set minus U+0085).
fn is_crystal_whitespace(c: char) -> bool {
    if c.is_ascii() {
        c == ' ' || ('\t'..='\r').contains(&c)
    } else {
        c != '\u{85}' && c.is_whitespace()
    }
}

fn leading_whitespace_len(s: &str) -> usize {
    s.len() - s.trim_start_matches(is_crystal_whitespace).len()
}

fn trailing_whitespace_len(s: &str) -> usize {
    s.len() - s.trim_end_matches(is_crystal_whitespace).len()
}

/// Where a consistent-hash exchange finds what places a message, read once
/// from its declaration arguments (which never change) rather than looked up
/// in them for every message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashSource {
    /// The routing key: both brokers' default.
    RoutingKey,
    /// LavinMQ's `x-hash-on`: a header whose value must be a string (`None`:
    /// a name that is not UTF-8, which no header has).
    LavinMqHeader(Option<String>),
    /// RabbitMQ's `hash-header`: any header value, as RabbitMQ reads it.
    Header(String),
    /// RabbitMQ's `hash-property` `message_id`.
    MessageId,
    /// RabbitMQ's `hash-property` `correlation_id`.
    CorrelationId,
    /// RabbitMQ's `hash-property` `timestamp`, in seconds as decimal text.
    Timestamp,
}

impl HashSource {
    /// The source `arguments` name: RabbitMQ's `hash-header`, else its
    /// `hash-property`, else LavinMQ's `x-hash-on`, else the routing key.
    pub fn from_arguments(arguments: &FieldTable) -> HashSource {
        if let Some(header) = arguments.get(HASH_HEADER_ARGUMENT).and_then(FieldValue::as_str) {
            return HashSource::Header(header.to_owned());
        }
        match arguments.get(HASH_PROPERTY_ARGUMENT).and_then(FieldValue::as_str) {
            Some("message_id") => return HashSource::MessageId,
            Some("correlation_id") => return HashSource::CorrelationId,
            Some("timestamp") => return HashSource::Timestamp,
            _ => {}
        }
        match arguments.get(HASH_ON_ARGUMENT) {
            Some(FieldValue::LongStr(name)) => {
                HashSource::LavinMqHeader(std::str::from_utf8(name).ok().map(str::to_owned))
            }
            _ => HashSource::RoutingKey,
        }
    }

    /// The bytes LavinMQ places a message by: the routing key, or with
    /// `x-hash-on` that header's string value (empty when the message has no
    /// headers or the header is missing or void). `Err` carries the
    /// `PRECONDITION_FAILED` text for a header that holds a non-string
    /// value, which LavinMQ refuses at publish.
    pub fn lavinmq_key<'a>(
        &self,
        routing_key: &'a str,
        headers: Option<&'a FieldTable>,
    ) -> Result<&'a [u8], &'static str> {
        let HashSource::LavinMqHeader(name) = self else {
            return Ok(routing_key.as_bytes());
        };
        let value = match (headers, name) {
            (Some(headers), Some(name)) => headers.get(name),
            _ => None,
        };
        match value {
            Some(FieldValue::LongStr(s)) => Ok(s),
            None | Some(FieldValue::Void) => Ok(b""),
            Some(_) => Err(NON_STRING_HASH_HEADER),
        }
    }

    /// What a message is placed by, for [`ConsistentHasher::select`]: a
    /// RabbitMQ header as RabbitMQ reads it; a property as its string, the
    /// timestamp written into `scratch`; missing ones are RabbitMQ's
    /// `undefined`. Otherwise [`HashSource::lavinmq_key`].
    pub fn input<'a>(
        &self,
        routing_key: &'a str,
        properties: &'a BasicProperties,
        scratch: &'a mut [u8; 20],
    ) -> Result<Term<'a>, &'static str> {
        let text = |v: &'a Option<ShortStr>| v.as_deref().map_or(Term::Undefined, |s| Term::Binary(s.as_bytes()));
        Ok(match self {
            HashSource::Header(header) => header_term(properties.headers.as_ref().and_then(|h| h.get(header))),
            HashSource::MessageId => text(&properties.message_id),
            HashSource::CorrelationId => text(&properties.correlation_id),
            HashSource::Timestamp => match properties.timestamp {
                Some(seconds) => Term::Binary(decimal(seconds, scratch)),
                None => Term::Undefined,
            },
            HashSource::RoutingKey | HashSource::LavinMqHeader(_) => {
                Term::Binary(self.lavinmq_key(routing_key, properties.headers.as_ref())?)
            }
        })
    }
}

/// A header value as RabbitMQ's routing headers hold it.
fn header_term(value: Option<&FieldValue>) -> Term<'_> {
    match value {
        Some(FieldValue::LongStr(b) | FieldValue::ByteArray(b)) => Term::Binary(b),
        Some(FieldValue::Bool(b)) => Term::Bool(*b),
        Some(FieldValue::F32(f)) => Term::Float(f64::from(*f)),
        Some(FieldValue::F64(f)) => Term::Float(*f),
        // RabbitMQ routes on a timestamp header in milliseconds.
        Some(FieldValue::Timestamp(t)) => Term::Integer((*t as i64).wrapping_mul(1000)),
        Some(v) => v.as_i64().map_or(Term::Undefined, Term::Integer),
        None => Term::Undefined,
    }
}

/// `value` in decimal digits, written at the end of `scratch`.
fn decimal(mut value: u64, scratch: &mut [u8; 20]) -> &[u8] {
    let mut start = scratch.len();
    loop {
        start -= 1;
        // value % 10 < 10, so the cast cannot truncate.
        scratch[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    &scratch[start..]
}

/// Consistent placement of hash keys onto weighted destinations, so that the
/// same key keeps going to the same destination and adding or removing a
/// destination moves only the keys that must move.
///
/// `T` is the destination handle (a queue or exchange reference); it is only
/// cloned and compared. Placement depends on the `key` passed to
/// [`add`](Self::add) (LavinMQ passes the destination's name), the weights,
/// and, for [`HashAlgorithm::Jump`], the order of the adds.
#[derive(Debug, Clone)]
pub struct ConsistentHasher<T> {
    inner: Inner<T>,
}

#[derive(Debug, Clone)]
enum Inner<T> {
    RabbitMq(BucketMap<T>),
    Ring(Ring<T>),
    Jump(Jump<T>),
}

impl<T: Clone + PartialEq> ConsistentHasher<T> {
    /// An empty hasher using `algorithm`; an exchange creates one at declare.
    pub fn new(algorithm: HashAlgorithm) -> Self {
        let inner = match algorithm {
            HashAlgorithm::RabbitMq => Inner::RabbitMq(BucketMap::default()),
            HashAlgorithm::Ring => Inner::Ring(Ring::default()),
            HashAlgorithm::Jump => Inner::Jump(Jump::default()),
        };
        ConsistentHasher { inner }
    }

    /// The algorithm in use, for the management API.
    pub fn algorithm(&self) -> HashAlgorithm {
        match self.inner {
            Inner::RabbitMq(_) => HashAlgorithm::RabbitMq,
            Inner::Ring(_) => HashAlgorithm::Ring,
            Inner::Jump(_) => HashAlgorithm::Jump,
        }
    }

    /// Adds `dest` with `weight` shares of the key space, named `key` (the
    /// destination's name in LavinMQ; the parsed binding key is the weight).
    ///
    /// RabbitMQ: appends `weight` buckets for `dest`, unless `dest` has
    /// buckets already (its first binding decides, as in RabbitMQ).
    /// Ring: adds the points `CRC32("{key}.{i}")` for `i` in `0..weight`; a
    /// point that already exists (the same name added again, or a CRC32
    /// collision) is taken over by `dest` and keeps its age. Jump: appends
    /// `weight` buckets for `dest` after all existing ones, even when the same
    /// `key` and weight were added before (so a destination bound twice counts
    /// twice). Runs in time proportional to `weight`.
    pub fn add(&mut self, key: &str, weight: u32, dest: T) {
        match &mut self.inner {
            Inner::RabbitMq(m) => m.add(weight, dest),
            Inner::Ring(r) => r.add(key, weight, dest),
            Inner::Jump(j) => j.add(key, weight, dest),
        }
    }

    /// Undoes [`add`](Self::add): removes the ring points named
    /// `"{key}.{i}"` (for `i` in `0..weight`), or every jump entry added with
    /// this `key` and `weight`, but only those that belong to `dest`. LavinMQ
    /// removes by name alone; checking `dest` as well only differs when two
    /// destinations share a name (a queue and an exchange) or two point names
    /// collide under CRC32, where it keeps the other destination routable.
    /// RabbitMQ: takes all of `dest`'s buckets away, whichever of its
    /// bindings goes, as RabbitMQ does.
    pub fn remove(&mut self, key: &str, weight: u32, dest: &T) {
        match &mut self.inner {
            Inner::RabbitMq(m) => m.remove(dest),
            Inner::Ring(r) => r.remove(key, weight, dest),
            Inner::Jump(j) => j.remove(key, weight, dest),
        }
    }

    /// The destination for `hash_key` (usually from [`HashSource::lavinmq_key`]), or `None`
    /// when nothing with a non-zero weight is bound.
    pub fn get(&self, hash_key: &str) -> Option<&T> {
        self.get_bytes(hash_key.as_bytes())
    }

    /// [`get`](Self::get) for a key that need not be UTF-8 (AMQP header
    /// strings are raw bytes); LavinMQ hashes the bytes either way.
    pub fn get_bytes(&self, hash_key: &[u8]) -> Option<&T> {
        self.select(Term::Binary(hash_key))
    }

    /// The destination for a message placed by `input` (from
    /// [`hash_input`]). LavinMQ's algorithms hash bytes: a header that is not
    /// a string is hashed as its text, a missing one as the empty string.
    pub fn select(&self, input: Term<'_>) -> Option<&T> {
        let mut scratch = [0u8; 32];
        let key: &[u8] = match input {
            Term::Binary(b) => b,
            Term::Undefined => b"",
            other => {
                let len = term_text(other, &mut scratch);
                &scratch[..len]
            }
        };
        match &self.inner {
            Inner::RabbitMq(m) => m.get(input),
            Inner::Ring(r) => r.get(key),
            Inner::Jump(j) => j.get(key),
        }
    }

    /// True when no destination can be selected (nothing bound, or only
    /// weight-0 bindings).
    pub fn is_empty(&self) -> bool {
        match &self.inner {
            Inner::RabbitMq(m) => m.buckets() == 0,
            Inner::Ring(r) => r.points.is_empty(),
            Inner::Jump(j) => j.total_weight() == 0,
        }
    }
}

/// The bucket just past each of a run of destinations holding `weights`
/// consecutive buckets each (running totals), for finding a bucket's owner
/// by binary search.
fn bucket_ends(weights: impl Iterator<Item = u32>) -> Vec<u64> {
    weights
        .scan(0u64, |end, weight| {
            *end += u64::from(weight);
            Some(*end)
        })
        .collect()
}

/// Writes a non-binary term as text into `scratch` (large enough for any
/// i64, f64 or bool) and returns its length.
fn term_text(term: Term<'_>, scratch: &mut [u8; 32]) -> usize {
    use std::io::Write;
    let mut cursor = std::io::Cursor::new(&mut scratch[..]);
    // Cannot fail for these types at this size; a cut value would still hash
    // consistently.
    let _ = match term {
        Term::Integer(i) => write!(cursor, "{i}"),
        Term::Float(f) => write!(cursor, "{f}"),
        Term::Bool(b) => write!(cursor, "{b}"),
        Term::Binary(_) | Term::Undefined => Ok(()),
    };
    cursor.position() as usize
}

/// One point on the ring: its destination and its insertion sequence number.
#[derive(Debug, Clone)]
struct Point<T> {
    seq: u64,
    dest: T,
}

/// LavinMQ's `RingConsistentHasher`: points keyed by CRC32 in a sorted map; a
/// key goes to the first point at or above its CRC32. Past the highest point
/// LavinMQ does not wrap to the lowest point but to the *oldest* surviving
/// point (its insertion-ordered hash's first entry), reproduced via `order`.
#[derive(Debug, Clone)]
struct Ring<T> {
    points: BTreeMap<u32, Point<T>>,
    /// Insertion sequence number -> point hash, oldest first.
    order: BTreeMap<u64, u32>,
    next_seq: u64,
}

impl<T> Default for Ring<T> {
    fn default() -> Self {
        Ring {
            points: BTreeMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
        }
    }
}

/// CRC32 of `"{key}.{index}"` without allocating a string per point.
fn point_hash(key: &str, index: u32) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(key.as_bytes());
    h.update(b".");
    h.update(decimal(u64::from(index), &mut [0u8; 20]));
    h.finalize()
}

impl<T: Clone + PartialEq> Ring<T> {
    fn add(&mut self, key: &str, weight: u32, dest: T) {
        for i in 0..weight {
            let hash = point_hash(key, i);
            match self.points.get_mut(&hash) {
                Some(point) => point.dest = dest.clone(),
                None => {
                    let seq = self.next_seq;
                    self.next_seq += 1;
                    self.points.insert(
                        hash,
                        Point {
                            seq,
                            dest: dest.clone(),
                        },
                    );
                    self.order.insert(seq, hash);
                }
            }
        }
    }

    fn remove(&mut self, key: &str, weight: u32, dest: &T) {
        for i in 0..weight {
            let hash = point_hash(key, i);
            if let Some(point) = self.points.get(&hash)
                && point.dest == *dest
            {
                let seq = point.seq;
                self.points.remove(&hash);
                self.order.remove(&seq);
            }
        }
    }

    fn get(&self, hash_key: &[u8]) -> Option<&T> {
        let hash = crc32fast::hash(hash_key);
        match self.points.range(hash..).next() {
            Some((_, point)) => Some(&point.dest),
            None => {
                let (_, oldest) = self.order.first_key_value()?;
                self.points.get(oldest).map(|p| &p.dest)
            }
        }
    }
}

/// One `add` of the jump hasher.
#[derive(Debug, Clone)]
struct JumpEntry<T> {
    key: String,
    weight: u32,
    dest: T,
}

/// LavinMQ's `JumpConsistentHasher`: buckets are the entries in add order,
/// each repeated `weight` times; a key picks bucket
/// `jump(crc32(key) << 32 | crc32(key + "_salt"), bucket count)`. The bucket
/// list is not materialized: `ends[i]` is the bucket index just past entry `i`.
#[derive(Debug, Clone)]
struct Jump<T> {
    entries: Vec<JumpEntry<T>>,
    ends: Vec<u64>,
}

impl<T> Default for Jump<T> {
    fn default() -> Self {
        Jump {
            entries: Vec::new(),
            ends: Vec::new(),
        }
    }
}

impl<T: Clone + PartialEq> Jump<T> {
    fn add(&mut self, key: &str, weight: u32, dest: T) {
        self.entries.push(JumpEntry {
            key: key.to_string(),
            weight,
            dest,
        });
        self.rebuild();
    }

    fn remove(&mut self, key: &str, weight: u32, dest: &T) {
        self.entries
            .retain(|e| !(e.key == key && e.weight == weight && e.dest == *dest));
        self.rebuild();
    }

    fn rebuild(&mut self) {
        self.ends = bucket_ends(self.entries.iter().map(|e| e.weight));
    }

    fn total_weight(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    fn get(&self, hash_key: &[u8]) -> Option<&T> {
        let buckets = self.total_weight();
        if buckets == 0 {
            return None;
        }
        let bucket = if buckets == 1 {
            0
        } else {
            jump_hash(hash_key64(hash_key), buckets)
        };
        let entry = self.ends.partition_point(|&end| end <= bucket);
        self.entries.get(entry).map(|e| &e.dest)
    }
}

/// LavinMQ's 64-bit key for jump hashing: `CRC32(key)` in the high half and
/// `CRC32(key + "_salt")` in the low half.
fn hash_key64(key: &[u8]) -> u64 {
    let mut h = crc32fast::Hasher::new();
    h.update(key);
    let high = h.clone().finalize();
    h.update(b"_salt");
    let low = h.finalize();
    (u64::from(high) << 32) | u64::from(low)
}

/// The Lamping–Veach jump consistent hash ("A Fast, Minimal Memory,
/// Consistent Hash Algorithm", 2014): maps `key` to a bucket in
/// `0..buckets` (`buckets` >= 1). The division is evaluated as
/// `((b + 1) * 2^31) / ((key >> 33) + 1)`, LavinMQ's order of operations.
fn jump_hash(mut key: u64, buckets: u64) -> u64 {
    let buckets = i64::try_from(buckets).unwrap_or(i64::MAX);
    let mut b: i64 = -1;
    let mut j: i64 = 0;
    while j < buckets {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * (1i64 << 31) as f64 / ((key >> 33) + 1) as f64) as i64;
    }
    // The loop runs at least once because buckets >= 1, so b >= 0.
    u64::try_from(b).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn ring3() -> ConsistentHasher<&'static str> {
        let mut ch = ConsistentHasher::new(HashAlgorithm::Ring);
        ch.add("1", 3, "first");
        ch.add("2", 3, "second");
        ch.add("3", 3, "third");
        ch
    }

    fn jump3() -> ConsistentHasher<&'static str> {
        let mut ch = ConsistentHasher::new(HashAlgorithm::Jump);
        ch.add("1", 1, "first");
        ch.add("2", 1, "second");
        ch.add("3", 1, "third");
        ch
    }

    fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
        let mut t = FieldTable::new();
        for (k, v) in entries {
            t.insert(*k, v.clone());
        }
        t
    }

    #[test]
    fn algorithm_parse_accepts_lavinmq_spellings() {
        assert_eq!(HashAlgorithm::parse("ring"), Some(HashAlgorithm::Ring));
        assert_eq!(HashAlgorithm::parse("jump"), Some(HashAlgorithm::Jump));
        assert_eq!(HashAlgorithm::parse("Jump"), Some(HashAlgorithm::Jump));
        assert_eq!(HashAlgorithm::parse("RING"), Some(HashAlgorithm::Ring));
        assert_eq!(HashAlgorithm::parse("j-u_m-p"), Some(HashAlgorithm::Jump));
        assert_eq!(HashAlgorithm::parse("juump"), None);
        assert_eq!(HashAlgorithm::parse(""), None);
        assert_eq!(HashAlgorithm::parse(" ring"), None);
        assert_eq!(HashAlgorithm::parse("RabbitMQ"), Some(HashAlgorithm::RabbitMq));
        assert_eq!(HashAlgorithm::parse("rabbitmqs"), None);
        assert_eq!(HashAlgorithm::default(), HashAlgorithm::RabbitMq);
        assert_eq!(HashAlgorithm::Jump.name(), "jump");
        assert_eq!(HashAlgorithm::RabbitMq.name(), "rabbitmq");
    }

    #[test]
    fn rabbitmq_weights_and_arguments_are_checked_as_rabbitmq_does() {
        let rabbitmq = HashAlgorithm::RabbitMq;
        assert_eq!(check_weight(rabbitmq, "3"), Ok(3));
        assert_eq!(check_weight(rabbitmq, "10000"), Ok(10_000));
        assert_eq!(
            check_weight(rabbitmq, "10001"),
            Err("The binding key must not exceed 10000".into())
        );
        assert_eq!(
            check_weight(rabbitmq, "0"),
            Err("The binding key must be greater than 0".into())
        );
        assert_eq!(
            check_weight(rabbitmq, "x"),
            Err("The binding key must be an integer: <<\"x\">>".into())
        );
        assert_eq!(check_weight(HashAlgorithm::Ring, "0"), Ok(0));
        assert_eq!(check_weight(HashAlgorithm::Ring, "x"), Err(INVALID_WEIGHT.into()));

        assert_eq!(validate_arguments(&FieldTable::new()), Ok(()));
        let header = table(&[(HASH_HEADER_ARGUMENT, "h".into())]);
        assert_eq!(validate_arguments(&header), Ok(()));
        let both = table(&[
            (HASH_HEADER_ARGUMENT, "h".into()),
            (HASH_PROPERTY_ARGUMENT, "message_id".into()),
        ]);
        assert!(validate_arguments(&both).is_err());
        let unknown = table(&[(HASH_PROPERTY_ARGUMENT, "app_id".into())]);
        assert_eq!(validate_arguments(&unknown), Err("Unsupported property: app_id".into()));
    }

    #[test]
    fn hash_input_follows_rabbitmq_arguments() {
        let mut scratch = [0u8; 20];
        let props = BasicProperties {
            message_id: Some("m-1".into()),
            timestamp: Some(1_700_000_000),
            headers: Some(table(&[
                ("n", FieldValue::I32(7)),
                ("s", "v".into()),
                ("t", FieldValue::Timestamp(2)),
            ])),
            ..Default::default()
        };
        let input = |args: &FieldTable, scratch: &mut [u8; 20]| {
            HashSource::from_arguments(args)
                .input("rk", &props, scratch)
                .map(|t| format!("{t:?}"))
        };
        let of = |k: &str, v: &str| table(&[(k, v.into())]);
        assert_eq!(
            input(&FieldTable::new(), &mut scratch),
            Ok(format!("{:?}", Term::Binary(b"rk")))
        );
        assert_eq!(
            input(&of(HASH_HEADER_ARGUMENT, "n"), &mut scratch),
            Ok("Integer(7)".into())
        );
        assert_eq!(
            input(&of(HASH_HEADER_ARGUMENT, "t"), &mut scratch),
            Ok("Integer(2000)".into())
        );
        assert_eq!(
            input(&of(HASH_HEADER_ARGUMENT, "s"), &mut scratch),
            Ok(format!("{:?}", Term::Binary(b"v")))
        );
        assert_eq!(
            input(&of(HASH_HEADER_ARGUMENT, "none"), &mut scratch),
            Ok("Undefined".into())
        );
        assert_eq!(
            input(&of(HASH_PROPERTY_ARGUMENT, "message_id"), &mut scratch),
            Ok(format!("{:?}", Term::Binary(b"m-1")))
        );
        assert_eq!(
            input(&of(HASH_PROPERTY_ARGUMENT, "correlation_id"), &mut scratch),
            Ok("Undefined".into())
        );
        assert_eq!(
            input(&of(HASH_PROPERTY_ARGUMENT, "timestamp"), &mut scratch),
            Ok(format!("{:?}", Term::Binary(b"1700000000")))
        );
    }

    #[test]
    fn lavinmq_exchanges_keep_the_ring() {
        let mut args = serde_json::Value::Null;
        pin_lavinmq_algorithm("x-consistent-hash", &mut args);
        assert_eq!(args, serde_json::json!({"x-algorithm": "ring"}));
        let mut jump = serde_json::json!({"x-algorithm": "jump"});
        pin_lavinmq_algorithm("x-consistent-hash", &mut jump);
        assert_eq!(jump, serde_json::json!({"x-algorithm": "jump"}));
        let mut other = serde_json::json!({});
        pin_lavinmq_algorithm("direct", &mut other);
        assert_eq!(other, serde_json::json!({}));
    }

    #[test]
    fn algorithm_from_arguments_falls_back_to_default() {
        let jump = table(&[(ALGORITHM_ARGUMENT, "jump".into())]);
        let bad = table(&[(ALGORITHM_ARGUMENT, "juump".into())]);
        let not_string = table(&[(ALGORITHM_ARGUMENT, FieldValue::I32(1))]);
        let none = FieldTable::new();
        assert_eq!(
            HashAlgorithm::from_arguments(&jump, HashAlgorithm::Ring),
            HashAlgorithm::Jump
        );
        assert_eq!(
            HashAlgorithm::from_arguments(&bad, HashAlgorithm::Ring),
            HashAlgorithm::Ring
        );
        assert_eq!(
            HashAlgorithm::from_arguments(&not_string, HashAlgorithm::Jump),
            HashAlgorithm::Jump
        );
        assert_eq!(
            HashAlgorithm::from_arguments(&none, HashAlgorithm::Ring),
            HashAlgorithm::Ring
        );
        assert_eq!(
            ConsistentHasher::<u8>::new(HashAlgorithm::Jump).algorithm(),
            HashAlgorithm::Jump
        );
    }

    #[test]
    fn weight_parsing_matches_crystal_to_u32() {
        assert_eq!(parse_weight("3"), Some(3));
        assert_eq!(parse_weight("0"), Some(0));
        assert_eq!(parse_weight("007"), Some(7));
        assert_eq!(parse_weight("+3"), Some(3));
        assert_eq!(parse_weight(" 3\t"), Some(3));
        assert_eq!(parse_weight("\u{3000}3\u{2029}"), Some(3));
        assert_eq!(parse_weight("4294967295"), Some(u32::MAX));
        assert_eq!(parse_weight("3\0junk"), Some(3));
        for bad in [
            "non-numeric",
            "",
            " ",
            "+",
            "-0",
            "-3",
            "+-3",
            "3.0",
            "1_000",
            "0x10",
            "3 4",
            "3x",
            "4294967296",
            "99999999999",
            "\u{85}3",
        ] {
            assert_eq!(parse_weight(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn hash_key_uses_routing_key_without_hash_on() {
        let headers = table(&[("cluster", "a".into())]);
        assert_eq!(
            HashSource::from_arguments(&FieldTable::new()).lavinmq_key("rk", Some(&headers)),
            Ok(&b"rk"[..])
        );
        let not_string = table(&[(HASH_ON_ARGUMENT, FieldValue::I32(1))]);
        assert_eq!(
            HashSource::from_arguments(&not_string).lavinmq_key("rk", Some(&headers)),
            Ok(&b"rk"[..])
        );
    }

    #[test]
    fn hash_key_reads_the_named_header() {
        let args = table(&[(HASH_ON_ARGUMENT, "cluster".into())]);
        let set = table(&[("cluster", "r1".into())]);
        let other = table(&[("other", "r1".into())]);
        let void = table(&[("cluster", FieldValue::Void)]);
        let number = table(&[("cluster", FieldValue::I32(123))]);
        let raw = table(&[("cluster", FieldValue::LongStr(Bytes::from_static(b"\xff\x00")))]);
        assert_eq!(
            HashSource::from_arguments(&args).lavinmq_key("abc", Some(&set)),
            Ok(&b"r1"[..])
        );
        assert_eq!(HashSource::from_arguments(&args).lavinmq_key("abc", None), Ok(&b""[..]));
        assert_eq!(
            HashSource::from_arguments(&args).lavinmq_key("abc", Some(&other)),
            Ok(&b""[..])
        );
        assert_eq!(
            HashSource::from_arguments(&args).lavinmq_key("abc", Some(&void)),
            Ok(&b""[..])
        );
        assert_eq!(
            HashSource::from_arguments(&args).lavinmq_key("abc", Some(&number)),
            Err(NON_STRING_HASH_HEADER)
        );
        assert_eq!(
            HashSource::from_arguments(&args).lavinmq_key("abc", Some(&raw)),
            Ok(&b"\xff\x00"[..])
        );
        let non_utf8_name = table(&[(HASH_ON_ARGUMENT, FieldValue::LongStr(Bytes::from_static(b"\xff")))]);
        assert_eq!(
            HashSource::from_arguments(&non_utf8_name).lavinmq_key("abc", Some(&set)),
            Ok(&b""[..])
        );
    }

    #[test]
    fn point_hash_formats_like_string_interpolation() {
        for (key, i) in [("1", 0), ("queue", 7), ("q", 10), ("", 4_294_967_295)] {
            assert_eq!(point_hash(key, i), crc32fast::hash(format!("{key}.{i}").as_bytes()));
        }
    }

    // LavinMQ spec: RingConsistentHasher "should be consistent (test 2)"; the
    // spec comment lists these CRC32 values of the points and routing keys.
    #[test]
    fn ring_point_and_key_hashes_match_lavinmq_spec() {
        let points = [
            ("1.2", 423_104_025u32),
            ("3.2", 448_584_311),
            ("2.2", 461_287_488),
            ("1.1", 2_150_719_395),
            ("2.1", 2_188_894_714),
            ("3.1", 2_209_713_101),
            ("3.0", 4_105_354_075),
            ("2.0", 4_117_811_564),
            ("1.0", 4_147_539_765),
        ];
        for (name, hash) in points {
            assert_eq!(crc32fast::hash(name.as_bytes()), hash, "{name}");
        }
        assert_eq!(crc32fast::hash(b"r1"), 219_023_793);
        assert_eq!(crc32fast::hash(b"r2"), 2_483_509_259);
        assert_eq!(crc32fast::hash(b"r3"), 3_808_454_813);
    }

    #[test]
    fn ring_routes_like_lavinmq_spec() {
        let ch = ring3();
        assert_eq!(ch.get("r1"), Some(&"first"));
        assert_eq!(ch.get("r2"), Some(&"third"));
        assert_eq!(ch.get("r3"), Some(&"third"));
    }

    #[test]
    fn ring_is_consistent_after_delete() {
        let mut ch = ring3();
        ch.remove("2", 3, &"second");
        assert_eq!(ch.get("r1"), Some(&"first"));
        assert_eq!(ch.get("r2"), Some(&"third"));
        assert_eq!(ch.get("r3"), Some(&"third"));
        assert!(!ch.is_empty());
    }

    #[test]
    fn ring_keeps_a_key_when_destinations_are_added() {
        let mut ch = ConsistentHasher::new(HashAlgorithm::Ring);
        ch.add("1", 3, "first");
        let v = ch.get("q1").copied();
        ch.add("2", 3, "second");
        assert_eq!(ch.get("q1").copied(), v);
        ch.add("3", 3, "third");
        assert_eq!(ch.get("q1").copied(), v);
    }

    // LavinMQ spec: exchange with x-hash-on = "cluster" and queues "1" and "2"
    // bound with "3": no header and "" go to "1", "1" goes to "2".
    #[test]
    fn ring_routes_header_values_like_lavinmq_spec() {
        let mut ch = ConsistentHasher::new(HashAlgorithm::Ring);
        ch.add("1", 3, "1");
        ch.add("2", 3, "2");
        assert_eq!(ch.get(""), Some(&"1"));
        assert_eq!(ch.get("1"), Some(&"2"));
        ch.add("3", 3, "3");
        assert_eq!(ch.get("r1"), Some(&"1"));
        assert_eq!(ch.get("r2"), Some(&"3"));
        assert_eq!(ch.get("r3"), Some(&"3"));
    }

    #[test]
    fn ring_empty_and_single() {
        let mut ch = ConsistentHasher::new(HashAlgorithm::Ring);
        assert_eq!(ch.get("1"), None);
        assert!(ch.is_empty());
        ch.add("zero", 0, "zero");
        assert_eq!(ch.get("1"), None);
        assert!(ch.is_empty());
        ch.add("first", 1, "first");
        assert_eq!(ch.get("any key"), Some(&"first"));
    }

    /// A key whose CRC32 lies above every point of `ch`'s points named by
    /// `names` with `weight` points each.
    fn key_above(names: &[&str], weight: u32) -> String {
        let max = names
            .iter()
            .flat_map(|n| (0..weight).map(move |i| point_hash(n, i)))
            .max()
            .unwrap_or(0);
        (0..)
            .map(|i| format!("k{i}"))
            .find(|k| crc32fast::hash(k.as_bytes()) > max)
            .unwrap_or_default()
    }

    #[test]
    fn ring_wraps_to_the_oldest_point_not_the_lowest() {
        // "2" is added first, so "2.0" (4117811564) is the oldest point while
        // "1.2" (423104025) is the lowest. LavinMQ wraps to the oldest.
        let mut ch = ConsistentHasher::new(HashAlgorithm::Ring);
        ch.add("2", 3, "second");
        ch.add("1", 3, "first");
        let key = key_above(&["1", "2"], 3);
        assert_eq!(ch.get(&key), Some(&"second"));
        // Once "2"'s points are gone the oldest surviving point is "1.0".
        ch.remove("2", 3, &"second");
        assert_eq!(ch.get(&key), Some(&"first"));
        // Re-adding "2" puts its points behind "1"'s in age.
        ch.add("2", 3, "second");
        assert_eq!(ch.get(&key), Some(&"first"));
    }

    #[test]
    fn ring_readd_takes_over_points_and_keeps_their_age() {
        let mut ch = ConsistentHasher::new(HashAlgorithm::Ring);
        ch.add("x", 2, "old");
        ch.add("y", 2, "y");
        ch.add("x", 2, "new");
        // x's points stay older than y's, so the wrap-around still lands on x.
        let key = key_above(&["x", "y"], 2);
        assert_eq!(ch.get(&key), Some(&"new"));
        assert_eq!(ch.points_for_test(), 4);
        assert!(!ch.get_all_for_test().contains(&"old"));
    }

    #[test]
    fn ring_remove_only_touches_points_of_that_destination() {
        let mut ch = ConsistentHasher::new(HashAlgorithm::Ring);
        ch.add("same", 2, "queue");
        ch.add("same", 2, "exchange");
        ch.remove("same", 2, &"queue");
        assert_eq!(ch.get("k"), Some(&"exchange"));
        ch.remove("same", 2, &"exchange");
        assert_eq!(ch.get("k"), None);
    }

    #[test]
    fn ring_overlapping_weights_share_points() {
        // Binding the same queue with "3" and "5" gives points q.0..q.4;
        // removing the "3" binding leaves q.3 and q.4, as in LavinMQ.
        let mut ch = ConsistentHasher::new(HashAlgorithm::Ring);
        ch.add("q", 3, "q");
        ch.add("q", 5, "q");
        assert_eq!(ch.points_for_test(), 5);
        ch.remove("q", 3, &"q");
        assert_eq!(ch.points_for_test(), 2);
    }

    #[test]
    fn ring_distribution_follows_weights() {
        let mut ch = ConsistentHasher::new(HashAlgorithm::Ring);
        for q in ["a", "b", "c", "d"] {
            ch.add(q, 100, q);
        }
        let mut counts = std::collections::HashMap::new();
        for i in 0..10_000 {
            *counts
                .entry(*ch.get(&format!("key{i}")).unwrap_or(&"none"))
                .or_insert(0) += 1;
        }
        for q in ["a", "b", "c", "d"] {
            let n = counts.get(q).copied().unwrap_or(0);
            assert!((1_500..=3_500).contains(&n), "{q}: {n}");
        }
    }

    #[test]
    fn ring_adding_a_destination_only_moves_keys_to_it() {
        let mut ch = ConsistentHasher::new(HashAlgorithm::Ring);
        ch.add("a", 10, "a");
        ch.add("b", 10, "b");
        let before: Vec<_> = (0..2_000).map(|i| ch.get(&format!("key{i}")).copied()).collect();
        ch.add("c", 10, "c");
        let mut moved = 0;
        for (i, old) in before.iter().enumerate() {
            let new = ch.get(&format!("key{i}")).copied();
            if new != *old {
                assert_eq!(new, Some("c"));
                moved += 1;
            }
        }
        assert!(moved > 0);
        ch.remove("c", 10, &"c");
        let after: Vec<_> = (0..2_000).map(|i| ch.get(&format!("key{i}")).copied()).collect();
        assert_eq!(before, after);
    }

    // Reference values of the published jump consistent hash algorithm.
    #[test]
    fn jump_hash_reference_values() {
        assert_eq!(jump_hash(1, 1), 0);
        assert_eq!(jump_hash(42, 57), 43);
        assert_eq!(jump_hash(0xDEAD_10CC, 1), 0);
        assert_eq!(jump_hash(0xDEAD_10CC, 666), 361);
        assert_eq!(jump_hash(256, 1024), 520);
    }

    #[test]
    fn jump_key_is_two_crc32s() {
        assert_eq!(hash_key64(b"r1"), 0x0d0e_09b1_3d41_ad85);
        assert_eq!(
            hash_key64(b"abc"),
            (u64::from(crc32fast::hash(b"abc")) << 32) | u64::from(crc32fast::hash(b"abc_salt"))
        );
    }

    #[test]
    fn jump_placements_are_pinned() {
        let ch = jump3();
        let got: Vec<_> = (0..10)
            .map(|i| *ch.get(&format!("key{i}")).unwrap_or(&"none"))
            .collect();
        assert_eq!(
            got,
            [
                "first", "second", "second", "first", "third", "third", "second", "first", "second", "third"
            ]
        );
        let got: Vec<_> = ["r1", "r2", "r3", "", "test_key"]
            .iter()
            .map(|k| *ch.get(k).unwrap_or(&"none"))
            .collect();
        assert_eq!(got, ["third", "third", "first", "second", "first"]);

        let mut weighted = ConsistentHasher::new(HashAlgorithm::Jump);
        weighted.add("1", 3, "first");
        weighted.add("2", 1, "second");
        let got: Vec<_> = (0..10)
            .map(|i| *weighted.get(&format!("key{i}")).unwrap_or(&"none"))
            .collect();
        assert_eq!(
            got,
            [
                "first", "first", "first", "first", "first", "first", "second", "first", "second", "first"
            ]
        );
    }

    #[test]
    fn jump_empty_and_single() {
        let mut ch = ConsistentHasher::new(HashAlgorithm::Jump);
        assert_eq!(ch.get("1"), None);
        ch.add("zero", 0, "zero");
        assert_eq!(ch.get("1"), None);
        assert!(ch.is_empty());
        ch.add("first", 1, "first");
        assert_eq!(ch.get("any key"), Some(&"first"));
    }

    // LavinMQ spec: JumpConsistentHasher "should distribute keys across targets".
    #[test]
    fn jump_distributes_evenly() {
        let ch = jump3();
        let mut counts = std::collections::HashMap::new();
        for i in 0..1000 {
            *counts
                .entry(*ch.get(&format!("key{i}")).unwrap_or(&"none"))
                .or_insert(0) += 1;
        }
        assert_eq!(counts.len(), 3);
        for n in counts.values() {
            assert!((*n as f64 - 1000.0 / 3.0).abs() <= 1000.0 / 3.0 * 0.15, "{counts:?}");
        }
    }

    // LavinMQ spec: "should minimize remapping when target is added".
    #[test]
    fn jump_moves_only_a_third_to_a_new_target() {
        let mut ch = ConsistentHasher::new(HashAlgorithm::Jump);
        ch.add("1", 1, "first");
        ch.add("2", 1, "second");
        let before: Vec<_> = (0..100).map(|i| ch.get(&format!("key{i}")).copied()).collect();
        ch.add("3", 1, "third");
        let (mut moved, mut stayed) = (0, 0);
        for (i, old) in before.iter().enumerate() {
            let new = ch.get(&format!("key{i}")).copied();
            if new == Some("third") {
                moved += 1;
            } else {
                assert_eq!(new, *old);
                stayed += 1;
            }
        }
        assert!((18..=48).contains(&moved), "{moved}");
        assert!((52..=82).contains(&stayed), "{stayed}");
    }

    // LavinMQ spec: "should get the same messages after adding a target and
    // then remove it" and "should handle target removal".
    #[test]
    fn jump_add_then_remove_restores_placement() {
        let mut ch = ConsistentHasher::new(HashAlgorithm::Jump);
        ch.add("1", 1, "first");
        ch.add("2", 1, "second");
        let before: Vec<_> = (0..1000).map(|i| ch.get(&format!("key{i}")).copied()).collect();
        ch.add("3", 1, "third");
        for (i, old) in before.iter().enumerate() {
            let new = ch.get(&format!("key{i}")).copied();
            if new != Some("third") {
                assert_eq!(new, *old);
            }
        }
        ch.remove("3", 1, &"third");
        let after: Vec<_> = (0..1000).map(|i| ch.get(&format!("key{i}")).copied()).collect();
        assert_eq!(before, after);

        let mut ch = jump3();
        ch.remove("2", 1, &"second");
        for i in 0..100 {
            let got = ch.get(&format!("key{i}")).copied();
            assert!(got == Some("first") || got == Some("third"));
        }
    }

    // LavinMQ spec: "should respect weight for distribution".
    #[test]
    fn jump_respects_weights() {
        let mut ch = ConsistentHasher::new(HashAlgorithm::Jump);
        ch.add("1", 3, "first");
        ch.add("2", 1, "second");
        let (mut first, mut second) = (0.0f64, 0.0f64);
        for i in 0..1000 {
            match ch.get(&format!("key{i}")) {
                Some(&"first") => first += 1.0,
                Some(&"second") => second += 1.0,
                other => panic!("{other:?}"),
            }
        }
        assert!((first / second - 3.0).abs() <= 0.5, "{first} / {second}");
    }

    #[test]
    fn jump_duplicate_adds_count_twice_and_remove_takes_all() {
        let mut ch = ConsistentHasher::new(HashAlgorithm::Jump);
        ch.add("q", 3, "q");
        ch.add("q", 3, "q");
        ch.add("r", 3, "r");
        assert_eq!(ch.total_weight_for_test(), 9);
        ch.remove("q", 3, &"q");
        assert_eq!(ch.total_weight_for_test(), 3);
        assert_eq!(ch.get("anything"), Some(&"r"));
        // A different destination under the same name is left alone.
        ch.add("r", 3, "other");
        ch.remove("r", 3, &"other");
        assert_eq!(ch.total_weight_for_test(), 3);
        assert_eq!(ch.get("anything"), Some(&"r"));
    }

    #[test]
    fn jump_hash_stays_in_range_for_large_bucket_counts() {
        for key in [0u64, 1, u64::MAX, 0x0123_4567_89ab_cdef] {
            for n in [2u64, 3, 1000, 1 << 31, u64::from(u32::MAX) * 3] {
                assert!(jump_hash(key, n) < n);
            }
        }
    }

    impl<T: Clone + PartialEq> ConsistentHasher<T> {
        fn points_for_test(&self) -> usize {
            match &self.inner {
                Inner::Ring(r) => r.points.len(),
                Inner::Jump(_) | Inner::RabbitMq(_) => 0,
            }
        }

        fn total_weight_for_test(&self) -> u64 {
            match &self.inner {
                Inner::Ring(_) => 0,
                Inner::Jump(j) => j.total_weight(),
                Inner::RabbitMq(m) => m.buckets(),
            }
        }

        fn get_all_for_test(&self) -> Vec<T> {
            match &self.inner {
                Inner::Ring(r) => r.points.values().map(|p| p.dest.clone()).collect(),
                Inner::Jump(j) => j.entries.iter().map(|e| e.dest.clone()).collect(),
                Inner::RabbitMq(_) => Vec::new(),
            }
        }
    }
}
