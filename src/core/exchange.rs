//! Exchanges: named routers that hold bindings and pick destinations for a message.

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwapOption;
use parking_lot::RwLock;
use serde_json::{Map, Value};

use super::binding_table::BindingTable;
use super::consistent_hash::{self, ConsistentHasher, HashAlgorithm, HashSource};
use super::dedup::{DedupCache, DedupSettings};
use super::delayed::{self, DelayedMessages};
use super::headers::headers_match;
use super::queue::Queue;
use super::topic::TopicTrie;
use super::{BasicProperties, FieldTable, Result};

/// The routing algorithm of an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExchangeKind {
    /// Exact routing-key match.
    Direct,
    /// Every binding.
    Fanout,
    /// Dotted-word patterns with `*` and `#`.
    Topic,
    /// Message headers against binding arguments.
    Headers,
    /// One destination per message, picked by hashing the routing key (or a
    /// header) onto the destinations weighted by their binding keys.
    ConsistentHash,
    /// The exchange a downstream broker's federation link declares here:
    /// every binding, unless the message already crossed `x-max-hops` links
    /// (counted by its `x-received-from` header).
    FederationUpstream,
}

impl ExchangeKind {
    /// Parses a type name as clients send it.
    pub fn parse(name: &str) -> Option<ExchangeKind> {
        match name {
            "direct" => Some(ExchangeKind::Direct),
            "fanout" => Some(ExchangeKind::Fanout),
            "topic" => Some(ExchangeKind::Topic),
            "headers" => Some(ExchangeKind::Headers),
            "x-consistent-hash" => Some(ExchangeKind::ConsistentHash),
            "x-federation-upstream" => Some(ExchangeKind::FederationUpstream),
            _ => None,
        }
    }

    /// The type name as clients and the management API know it.
    pub fn name(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
            ExchangeKind::ConsistentHash => "x-consistent-hash",
            ExchangeKind::FederationUpstream => "x-federation-upstream",
        }
    }
}

/// How many federation links a message crossed: the entries of its
/// `x-received-from` header.
pub fn received_from_hops(headers: Option<&FieldTable>) -> i64 {
    match headers.and_then(|h| h.get("x-received-from")) {
        Some(super::FieldValue::Array(list)) => list.len() as i64,
        _ => 0,
    }
}

/// Where a binding leads.
#[derive(Clone)]
pub enum Destination {
    /// A queue.
    Queue(Arc<Queue>),
    /// Another exchange (exchange-to-exchange binding).
    Exchange(Arc<Exchange>),
}

impl Destination {
    /// Name of the queue or exchange.
    pub fn name(&self) -> &str {
        match self {
            Destination::Queue(q) => &q.name,
            Destination::Exchange(e) => &e.name,
        }
    }

    /// True for a queue.
    pub fn is_queue(&self) -> bool {
        matches!(self, Destination::Queue(_))
    }

    /// What equality compares: the address of the queue or exchange (a
    /// queue and an exchange never share one).
    pub fn identity(&self) -> usize {
        match self {
            Destination::Queue(q) => Arc::as_ptr(q) as *const () as usize,
            Destination::Exchange(e) => Arc::as_ptr(e) as *const () as usize,
        }
    }
}

impl PartialEq for Destination {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Destination::Queue(a), Destination::Queue(b)) => Arc::ptr_eq(a, b),
            (Destination::Exchange(a), Destination::Exchange(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl std::fmt::Debug for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Destination::Queue(q) => write!(f, "queue {:?}", q.name),
            Destination::Exchange(e) => write!(f, "exchange {:?}", e.name),
        }
    }
}

/// One binding from an exchange.
#[derive(Debug, Clone)]
pub struct Binding {
    /// Target of the binding.
    pub destination: Destination,
    /// Binding key.
    pub routing_key: String,
    /// Binding arguments (used by headers exchanges).
    pub arguments: FieldTable,
}

#[derive(Debug, Default)]
struct Bindings {
    all: BindingTable,
    direct: HashMap<String, Vec<Destination>>,
    topic: TopicTrie<Destination>,
    hash: Option<ConsistentHasher<Destination>>,
    /// Counts changes, so that a watcher compares bindings only when they changed.
    generation: u64,
}

/// A declared exchange.
pub struct Exchange {
    /// Exchange name ("" for the default exchange).
    pub name: String,
    /// Routing algorithm.
    pub kind: ExchangeKind,
    /// Survives a restart.
    pub durable: bool,
    /// Deleted when its last binding goes.
    pub auto_delete: bool,
    /// Clients may not publish to it directly.
    pub internal: bool,
    /// Declaration arguments.
    pub arguments: FieldTable,
    /// What places a message, for a consistent-hash exchange.
    hash_source: Option<HashSource>,
    bindings: RwLock<Bindings>,
    /// Changes whenever what a message routes to through this exchange alone
    /// may change (a binding, the policy's alternate exchange), so that
    /// publishers can keep their last route ([`super::route_cache::RouteCache`]).
    route_generation: std::sync::atomic::AtomicU64,
    deleted: std::sync::atomic::AtomicBool,
    /// The alternate exchange a policy sets (the argument wins over it).
    policy_alternate_exchange: RwLock<Option<String>>,
    /// The policy in force (name and definition), as the management API shows it.
    policy: RwLock<Option<(String, Map<String, Value>)>>,
    /// A `delayed-message: true` policy is in force (LavinMQ's policy key):
    /// messages with an `x-delay` wait in [`Exchange::policy_delayed`].
    policy_delaying: AtomicBool,
    /// The held messages of a delayed-message policy. Kept once opened, also
    /// after the policy goes, so that the messages it holds are still released.
    policy_delayed: ArcSwapOption<DelayedMessages>,
    /// Recently seen message ids, with `x-message-deduplication`.
    dedup: Option<parking_lot::Mutex<DedupCache>>,
    /// The type as declared (`x-delayed-message` for a delayed exchange of the
    /// plugin's kind), reported back and compared on redeclaration.
    pub declared_type: String,
    /// Where messages with an `x-delay` wait, for an exchange delayed by its
    /// type or arguments.
    pub delayed: Option<Arc<DelayedMessages>>,
    /// Messages in and out.
    pub counters: super::stats::ExchangeCounters,
    /// Per-second rates of the counters, sampled by the broker.
    pub rates: super::stats::Rates,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .finish()
    }
}

impl Exchange {
    /// Creates an exchange without bindings.
    pub fn new(
        name: &str,
        kind: ExchangeKind,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: FieldTable,
    ) -> Self {
        let bindings = Bindings {
            hash: (kind == ExchangeKind::ConsistentHash)
                .then(|| ConsistentHasher::new(HashAlgorithm::from_arguments(&arguments, HashAlgorithm::Ring))),
            ..Default::default()
        };
        // Declaration validated the arguments; bad ones restored from disk are ignored.
        let dedup = DedupSettings::from_arguments(&arguments)
            .ok()
            .flatten()
            .map(|s| parking_lot::Mutex::new(DedupCache::new(s)));
        Exchange {
            name: name.to_string(),
            kind,
            durable,
            auto_delete,
            internal,
            hash_source: (kind == ExchangeKind::ConsistentHash).then(|| HashSource::from_arguments(&arguments)),
            arguments,
            bindings: RwLock::new(bindings),
            route_generation: std::sync::atomic::AtomicU64::new(super::route_cache::next_generation()),
            deleted: std::sync::atomic::AtomicBool::new(false),
            policy_alternate_exchange: RwLock::new(None),
            policy: RwLock::new(None),
            policy_delaying: AtomicBool::new(false),
            policy_delayed: ArcSwapOption::empty(),
            dedup,
            declared_type: kind.name().to_string(),
            delayed: None,
            counters: Default::default(),
            rates: Default::default(),
        }
    }

    /// Sets the placement algorithm of a consistent-hash exchange that has no
    /// `x-algorithm` argument (before any binding is made).
    pub fn use_hash_algorithm(&mut self, default: HashAlgorithm) {
        let algorithm = HashAlgorithm::from_arguments(&self.arguments, default);
        self.bindings.get_mut().hash = Some(ConsistentHasher::new(algorithm));
    }

    /// Refuses a message the exchange cannot route by its type's rules: for a
    /// consistent-hash exchange hashing on a header, a header that is not a string
    /// (as LavinMQ refuses it).
    pub fn check_message(&self, routing_key: &str, headers: Option<&FieldTable>) -> Result<()> {
        if let Some(source) = &self.hash_source {
            source
                .lavinmq_key(routing_key, headers)
                .map_err(|e| super::Error::PreconditionFailed(e.to_string()))?;
        }
        Ok(())
    }

    /// The placement algorithm of a consistent-hash exchange.
    pub fn hash_algorithm(&self) -> Option<HashAlgorithm> {
        self.bindings.read().hash.as_ref().map(ConsistentHasher::algorithm)
    }

    /// Checks declaration arguments that the exchange interprets.
    pub fn validate_arguments(arguments: &FieldTable) -> std::result::Result<(), String> {
        DedupSettings::from_arguments(arguments).map(|_| ())
    }

    /// With deduplication on: true when this message was seen recently (it is
    /// then not routed, and counted); otherwise remembers it.
    pub fn is_duplicate(&self, headers: Option<&FieldTable>, now_ms: i64) -> bool {
        let duplicate = match &self.dedup {
            Some(cache) => cache.lock().is_duplicate(headers, now_ms),
            None => false,
        };
        if duplicate {
            self.counters.dedup.incr();
        }
        duplicate
    }

    /// True once the exchange was deleted (holders of a cached reference must
    /// look it up again).
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Marks the exchange deleted.
    pub fn mark_deleted(&self) {
        self.deleted.store(true, std::sync::atomic::Ordering::Release);
    }

    /// The alternate exchange named in the arguments or, failing that, by a policy.
    pub fn alternate_exchange(&self) -> Option<String> {
        self.arguments
            .get("alternate-exchange")
            .or_else(|| self.arguments.get("x-alternate-exchange"))
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .or_else(|| self.policy_alternate_exchange.read().clone())
    }

    /// Applies the policy (name and definition) that matches this exchange now
    /// (`None`: none). Returns true when the policy makes the exchange delayed
    /// and it has no store for held messages yet: the vhost opens one and hands
    /// it over with [`Exchange::attach_policy_delayed`].
    pub fn apply_policy(&self, policy: Option<(&str, &Map<String, Value>)>) -> bool {
        let definition = policy.map(|p| p.1);
        let ae = definition
            .and_then(|d| d.get("alternate-exchange"))
            .and_then(|v| v.as_str())
            .map(str::to_string);
        *self.policy_alternate_exchange.write() = ae;
        self.routes_changed();
        // As in LavinMQ, only a boolean `true` makes the exchange delayed.
        let delaying = definition.and_then(|d| d.get("delayed-message")) == Some(&Value::Bool(true));
        self.policy_delaying.store(delaying, Ordering::Release);
        *self.policy.write() = policy.map(|(name, d)| (name.to_string(), d.clone()));
        delaying && self.delayed.is_none() && self.policy_delayed.load().is_none()
    }

    /// Takes the store a delayed-message policy holds messages in (opened by
    /// the vhost, which also starts its release task).
    pub fn attach_policy_delayed(&self, store: Arc<DelayedMessages>) {
        self.policy_delayed.store(Some(store));
    }

    /// The name and definition of the policy in force, if any.
    pub fn policy(&self) -> Option<(String, Map<String, Value>)> {
        self.policy.read().clone()
    }

    /// True when the exchange delays messages with an `x-delay` header, by its
    /// type, its arguments or a `delayed-message` policy.
    pub fn is_delayed(&self) -> bool {
        self.delayed.is_some() || self.policy_delaying.load(Ordering::Acquire)
    }

    /// Where a message with `headers` waits before it is routed, and for how
    /// many ms: `None` unless the exchange is delayed and the message asks for a
    /// delay. One flag read for an exchange that is not delayed.
    pub fn hold_for(&self, headers: Option<&FieldTable>) -> Option<(Arc<DelayedMessages>, u64)> {
        let store = match &self.delayed {
            Some(d) => d.clone(),
            None if self.policy_delaying.load(Ordering::Acquire) => self.policy_delayed.load_full()?,
            None => return None,
        };
        delayed::delay_of(headers).map(|ms| (store, ms))
    }

    /// Every store holding delayed messages of this exchange (the declared one
    /// and the one a policy opened), to release, list or remove them.
    pub fn delayed_stores(&self) -> impl Iterator<Item = Arc<DelayedMessages>> + use<> {
        self.delayed.clone().into_iter().chain(self.policy_delayed.load_full())
    }

    /// Adds a binding; false if an identical one exists.
    pub fn bind(&self, destination: Destination, routing_key: &str, arguments: FieldTable) -> Result<bool> {
        let mut b = self.bindings.write();
        if b.all.contains(&destination, routing_key, &arguments) {
            return Ok(false);
        }
        if self.kind == ExchangeKind::ConsistentHash {
            let algorithm = b.hash.as_ref().map(ConsistentHasher::algorithm).unwrap_or_default();
            let weight =
                consistent_hash::check_weight(algorithm, routing_key).map_err(super::Error::PreconditionFailed)?;
            if let Some(h) = b.hash.as_mut() {
                h.add(destination.name(), weight, destination.clone());
            }
        }
        match self.kind {
            ExchangeKind::Direct => b
                .direct
                .entry(routing_key.to_string())
                .or_default()
                .push(destination.clone()),
            ExchangeKind::Topic => b.topic.insert(routing_key, destination.clone()),
            ExchangeKind::Fanout
            | ExchangeKind::Headers
            | ExchangeKind::ConsistentHash
            | ExchangeKind::FederationUpstream => {}
        }
        b.generation += 1;
        self.routes_changed();
        b.all.insert(Binding {
            destination,
            routing_key: routing_key.to_string(),
            arguments,
        });
        Ok(true)
    }

    /// Removes the one binding to `destination` with this routing key and these
    /// arguments (a binding's identity in RabbitMQ, whatever the exchange type);
    /// false if there was none.
    pub fn unbind(&self, destination: &Destination, routing_key: &str, arguments: &FieldTable) -> bool {
        let mut b = self.bindings.write();
        if !b.all.remove(destination, routing_key, arguments) {
            return false;
        }
        b.generation += 1;
        self.routes_changed();
        if !b.all.has_key(destination, routing_key) {
            match self.kind {
                ExchangeKind::Direct => {
                    if let Some(v) = b.direct.get_mut(routing_key) {
                        v.retain(|d| d != destination);
                        if v.is_empty() {
                            b.direct.remove(routing_key);
                            let len = b.direct.len();
                            if b.direct.capacity() > 64 && len < b.direct.capacity() / 4 {
                                b.direct.shrink_to(len * 2);
                            }
                        }
                    }
                }
                ExchangeKind::Topic => {
                    b.topic.remove(routing_key, destination);
                }
                ExchangeKind::ConsistentHash => {
                    if let (Some(w), Some(h)) = (consistent_hash::parse_weight(routing_key), b.hash.as_mut()) {
                        h.remove(destination.name(), w, destination);
                    }
                }
                _ => {}
            }
        }
        true
    }

    /// Removes every binding to `destination`; returns how many were removed.
    pub fn unbind_destination(&self, destination: &Destination) -> usize {
        let keys: Vec<(String, FieldTable)> = self
            .bindings
            .read()
            .all
            .iter()
            .filter(|x| x.destination == *destination)
            .map(|x| (x.routing_key.clone(), x.arguments.clone()))
            .collect();
        keys.iter().filter(|(k, a)| self.unbind(destination, k, a)).count()
    }

    /// The arguments of each binding to `destination` with `routing_key`,
    /// found through the index rather than by copying every binding (MQTT
    /// asks on every subscribe and unsubscribe).
    pub fn binding_arguments(&self, destination: &Destination, routing_key: &str) -> Vec<FieldTable> {
        let b = self.bindings.read();
        b.all
            .with_key(destination, routing_key)
            .map(|x| x.arguments.clone())
            .collect()
    }

    /// A copy of the current bindings.
    pub fn bindings(&self) -> Vec<Binding> {
        self.bindings.read().all.to_vec()
    }

    /// A number that changes whenever a binding is added or removed.
    pub fn binding_generation(&self) -> u64 {
        self.bindings.read().generation
    }

    /// How many bindings the exchange has (for totals, without copying them).
    pub fn binding_count(&self) -> usize {
        self.bindings.read().all.len()
    }

    /// True when the exchange has no bindings.
    pub fn has_bindings(&self) -> bool {
        !self.bindings.read().all.is_empty()
    }

    /// The generation of this exchange's routes: equal values mean equal
    /// routes, as far as this exchange's own bindings decide them.
    pub fn route_generation(&self) -> u64 {
        self.route_generation.load(Ordering::Acquire)
    }

    /// Starts a new route generation (after the change).
    fn routes_changed(&self) {
        self.route_generation
            .store(super::route_cache::next_generation(), Ordering::Release);
    }

    /// Whether a route through this exchange depends on the routing key and
    /// the bindings alone (not on headers, a hash ring or hop counts), so that
    /// a publisher may remember it.
    pub fn routes_by_key(&self) -> bool {
        matches!(
            self.kind,
            ExchangeKind::Direct | ExchangeKind::Topic | ExchangeKind::Fanout
        )
    }

    /// Calls `f` for every destination this exchange's bindings select; destinations
    /// may repeat and exchanges are not followed (the caller does that).
    pub fn route(&self, routing_key: &str, properties: &BasicProperties, f: &mut impl FnMut(&Destination)) {
        let headers = properties.headers.as_ref();
        let b = self.bindings.read();
        match self.kind {
            ExchangeKind::Direct => {
                if let Some(v) = b.direct.get(routing_key) {
                    v.iter().for_each(&mut *f);
                }
            }
            ExchangeKind::Fanout => b.all.iter().for_each(|x| f(&x.destination)),
            ExchangeKind::FederationUpstream => {
                let hops = received_from_hops(headers);
                let max = self.arguments.get("x-max-hops").and_then(|v| v.as_i64()).unwrap_or(1);
                if hops < max {
                    b.all.iter().for_each(|x| f(&x.destination));
                }
            }
            ExchangeKind::Topic => b.topic.matches(routing_key, f),
            ExchangeKind::Headers => {
                for x in b.all.iter() {
                    if headers_match(&x.arguments, headers) {
                        f(&x.destination);
                    }
                }
            }
            ExchangeKind::ConsistentHash => {
                // A non-string `x-hash-on` header makes the message unroutable.
                let mut scratch = [0u8; 20];
                if let Some(source) = &self.hash_source
                    && let Ok(input) = source.input(routing_key, properties, &mut scratch)
                    && let Some(d) = b.hash.as_ref().and_then(|h| h.select(input))
                {
                    f(d);
                }
            }
        }
    }
}
