//! Virtual hosts: isolated sets of exchanges, queues and bindings, with the
//! operations clients perform on them and the routing of published messages.

// Names are short and chosen by clients we already authenticated: a fast
// non-keyed hash beats SipHash on the per-message lookups.
use crate::store::replication;
use rustc_hash::FxHashMap as HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::dead_letter::{self, DeadLetter};
use super::definitions;
use super::definitions_log::DefinitionsLog;
use super::exchange::{Destination, Exchange, ExchangeKind};
use super::headers::tables_equivalent;
use super::limits::{self, NamedLimits};
use super::message::Message;
use super::policy::{self, ApplyTo, Policy};
use super::queue::{ConnectionId, Queue, QueueSpec};
use super::queue_settings::{QueueSettings, QueueType};
use super::route_cache::RouteCache;
use super::stats::ChurnCounters;
use super::table_json::{json_to_table, table_to_json};
use super::{BasicProperties, Error, FieldTable, FieldValue, Result};
use crate::store::json_log::JsonLog;

/// Storage settings a vhost passes on to its queues.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// Size of new segment files.
    pub segment_size: u64,
    /// Whether definition changes are synced to disk.
    pub sync: bool,
    /// How the group commit syncs (`sync_method`).
    pub sync_method: crate::store::SyncMethod,
    /// Publishers are blocked when free disk space falls below this or 3
    /// segments, whichever is more (`free_disk_min`).
    pub free_disk_min: u64,
    /// A warning is logged when free disk space falls below this or 6
    /// segments, whichever is more (`free_disk_warn`).
    pub free_disk_warn: u64,
    /// Deletions (of queues, exchanges, bindings, policies, parameters) the
    /// definitions log may collect before it is compacted while running
    /// (`max_deleted_definitions`); shared by every vhost so a reload changes it.
    pub max_deleted_definitions: Arc<std::sync::atomic::AtomicUsize>,
    /// Placement of `x-consistent-hash` exchanges without `x-algorithm`.
    pub consistent_hash_algorithm: super::consistent_hash::HashAlgorithm,
}

impl Default for StoreSettings {
    /// LavinMQ's defaults: 8 MiB segments, synced, no extra disk thresholds.
    fn default() -> Self {
        StoreSettings {
            segment_size: 8 * 1024 * 1024,
            sync: true,
            sync_method: Default::default(),
            free_disk_min: 0,
            free_disk_warn: 0,
            max_deleted_definitions: Arc::new(std::sync::atomic::AtomicUsize::new(8192)),
            consistent_hash_algorithm: Default::default(),
        }
    }
}

/// The exchanges every vhost has.
/// The exchanges every vhost has from the start.
pub const DEFAULT_EXCHANGES: [(&str, ExchangeKind); 6] = [
    ("", ExchangeKind::Direct),
    ("amq.direct", ExchangeKind::Direct),
    ("amq.fanout", ExchangeKind::Fanout),
    ("amq.topic", ExchangeKind::Topic),
    ("amq.headers", ExchangeKind::Headers),
    ("amq.match", ExchangeKind::Headers),
];

/// A virtual host.
pub struct VHost {
    /// Queues declared, created and deleted in this vhost.
    pub churn: ChurnCounters,
    /// Vhost name.
    pub name: String,
    dir: PathBuf,
    settings: StoreSettings,
    exchanges: RwLock<HashMap<String, Arc<Exchange>>>,
    queues: RwLock<HashMap<String, Arc<Queue>>>,
    /// Counts additions to and removals from `queues`: a publisher's
    /// remembered default-exchange route ([`DefaultRoute`]) is good while it
    /// is unchanged.
    queues_generation: std::sync::atomic::AtomicU64,
    /// The log of durable definition changes (absent while replaying it).
    definitions: Mutex<Option<DefinitionsLog>>,
    /// Changes written to the definitions log since the vhost opened: a reply
    /// that follows a change waits for the sync that covers it.
    definition_changes: std::sync::atomic::AtomicU64,
    /// Serialises queue creation, so that two connections declaring the same new
    /// queue at once create it once.
    declare_lock: Mutex<()>,
    /// Policies by name.
    policies: RwLock<std::collections::BTreeMap<String, Policy>>,
    /// Operator policies by name.
    operator_policies: RwLock<std::collections::BTreeMap<String, Policy>>,
    /// This vhost, for the queues it creates (they dead-letter through it).
    me: std::sync::Weak<VHost>,
    /// Set once the stored definitions are restored: timers that expire or
    /// release messages start only then, so that they find every binding.
    ready: std::sync::atomic::AtomicBool,
    /// Description, tags and default queue type given by an administrator.
    meta: RwLock<VHostMeta>,
    /// `max-connections` and `max-queues`.
    limits: RwLock<VHostLimits>,
    /// Runtime parameters by component and name.
    parameters: RwLock<std::collections::BTreeMap<(String, String), serde_json::Value>>,
    /// Who set each runtime parameter, when known: a shovel with a host-less
    /// URI acts as that user on this broker.
    parameter_owners: RwLock<HashMap<(String, String), String>>,
    /// Single active consumer groups of the vhost's streams.
    pub stream_groups: super::stream_groups::StreamGroups,
    /// Called after a queue is removed (see [`Self::remove_queue`]).
    pub queue_removed: super::queue_removed::QueueRemovedHooks,
}

/// What administrators say about a vhost (RabbitMQ's vhost metadata): shown by
/// the management API and carried in definitions exports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VHostMeta {
    /// Free text.
    pub description: String,
    /// Labels.
    pub tags: Vec<String>,
    /// The queue type clients are meant to get by default, when one was given.
    pub default_queue_type: Option<String>,
}

/// The limits of a vhost, as set with `/api/vhost-limits`. A value is kept as
/// given; a negative one means no limit, as in RabbitMQ.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VHostLimits {
    /// Most client connections open at once.
    pub max_connections: Option<i64>,
    /// Most queues that may exist.
    pub max_queues: Option<i64>,
}

impl VHostLimits {
    /// The limit names RabbitMQ and LavinMQ know.
    pub const NAMES: [&'static str; 2] = ["max-connections", "max-queues"];

    /// True when no limit is set.
    pub fn is_empty(&self) -> bool {
        self.max_connections.is_none() && self.max_queues.is_none()
    }

    /// The set limits as RabbitMQ shows them: `{"max-connections": N, ...}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for (name, v) in [
            ("max-connections", self.max_connections),
            ("max-queues", self.max_queues),
        ] {
            if let Some(v) = v {
                m.insert(name.to_string(), v.into());
            }
        }
        serde_json::Value::Object(m)
    }

    /// Reads limits from their JSON object form; unknown names and non-integer
    /// values are skipped.
    pub fn from_json(v: &serde_json::Value) -> Self {
        let mut limits = VHostLimits::default();
        if let Some(m) = v.as_object() {
            for (name, value) in m {
                if let Some(n) = value.as_i64() {
                    let _ = limits.set(name, n);
                }
            }
        }
        limits
    }
}

impl NamedLimits for VHostLimits {
    const TERMS: &'static str = "limits";

    fn slot(&mut self, name: &str) -> Option<&mut Option<i64>> {
        match name {
            "max-connections" => Some(&mut self.max_connections),
            "max-queues" => Some(&mut self.max_queues),
            _ => None,
        }
    }
}

/// One runtime parameter of a vhost.
#[derive(Debug, Clone, PartialEq)]
pub struct Parameter {
    /// The component that interprets it (`federation-upstream`, `shovel`, ...).
    pub component: String,
    /// Its name within the component.
    pub name: String,
    /// Its value, verbatim.
    pub value: serde_json::Value,
}

/// What a queue declaration returns.
#[derive(Debug, Clone)]
pub struct QueueDeclared {
    /// Queue name (generated for server-named queues).
    pub name: String,
    /// Ready messages.
    pub message_count: u32,
    /// Attached consumers.
    pub consumer_count: u32,
}

/// Flags of a queue declaration.
#[derive(Debug, Clone, Default)]
pub struct QueueOptions {
    /// Survives restarts.
    pub durable: bool,
    /// Owned by the declaring connection.
    pub exclusive: bool,
    /// Deleted when the last consumer goes.
    pub auto_delete: bool,
    /// Only check that the queue exists.
    pub passive: bool,
}

/// Flags of an exchange declaration.
#[derive(Debug, Clone, Default)]
pub struct ExchangeOptions {
    /// Survives restarts.
    pub durable: bool,
    /// Deleted when its last binding goes.
    pub auto_delete: bool,
    /// Not publishable by clients.
    pub internal: bool,
    /// Only check that the exchange exists.
    pub passive: bool,
}

/// The directory of a vhost (or queue) under its parent: the first 20 bytes
/// of the name's SHA-256 in hex, so that any name is a safe file name.
pub fn dir_name(name: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(name.as_bytes());
    digest.iter().take(20).map(|b| format!("{b:02x}")).collect()
}

/// The default exchange can be neither declared, deleted nor bound.
fn default_exchange_refused() -> Error {
    Error::AccessRefused("operation not permitted on the default exchange".into())
}

fn no_queue(name: &str, vhost: &str) -> Error {
    Error::NotFound(format!("no queue '{name}' in vhost '{vhost}'"))
}

fn no_exchange(name: &str, vhost: &str) -> Error {
    Error::NotFound(format!("no exchange '{name}' in vhost '{vhost}'"))
}

fn inequivalent(
    arg: &str,
    kind: &str,
    name: &str,
    vhost: &str,
    received: impl std::fmt::Display,
    current: impl std::fmt::Display,
) -> Error {
    Error::PreconditionFailed(format!(
        "inequivalent arg '{arg}' for {kind} '{name}' in vhost '{vhost}': received '{received}' but current is '{current}'"
    ))
}

fn server_generated_name() -> String {
    use base64::Engine;
    let mut bytes = [0u8; 18];
    rand::fill(&mut bytes);
    format!(
        "amq.gen-{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

impl VHost {
    /// Opens a vhost stored under `data_dir`, restoring its durable definitions and
    /// messages, and creating the default exchanges.
    pub fn open(name: &str, data_dir: &Path, settings: StoreSettings) -> Result<Arc<VHost>> {
        let dir = data_dir.join(dir_name(name));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(".vhost"), name)?;
        replication::replaced(&dir.join(".vhost"), name.as_bytes());
        let transient = dir.join("transient");
        if transient.exists() {
            std::fs::remove_dir_all(&transient)?;
        }
        let vhost = Arc::new_cyclic(|me| VHost {
            name: name.to_string(),
            dir,
            settings,
            exchanges: RwLock::default(),
            queues: RwLock::default(),
            queues_generation: std::sync::atomic::AtomicU64::new(super::route_cache::next_generation()),
            definitions: Mutex::new(None),
            definition_changes: std::sync::atomic::AtomicU64::new(0),
            declare_lock: Mutex::new(()),
            policies: RwLock::default(),
            operator_policies: RwLock::default(),
            me: me.clone(),
            ready: std::sync::atomic::AtomicBool::new(false),
            meta: RwLock::default(),
            limits: RwLock::default(),
            parameters: RwLock::default(),
            parameter_owners: RwLock::default(),
            stream_groups: Default::default(),
            queue_removed: Default::default(),
            churn: ChurnCounters::default(),
        });
        {
            let mut ex = vhost.exchanges.write();
            for (n, kind) in DEFAULT_EXCHANGES {
                ex.insert(
                    n.to_string(),
                    Arc::new(Exchange::new(n, kind, true, false, false, FieldTable::default())),
                );
            }
        }
        let mut current = Vec::new();
        // Definition changes are many small appends (bind churn): one fsync each
        // would bound them to the disk's sync rate, so the group commit covers them.
        let log = JsonLog::open(&vhost.dir.join("definitions.log"), vhost.settings.sync, |lines| {
            current = definitions::compact(lines, name);
            current.clone()
        })?
        .synced_by_group_commit();
        vhost.apply_definitions(current);
        *vhost.definitions.lock() = Some(DefinitionsLog::new(
            log,
            name,
            vhost.settings.max_deleted_definitions.clone(),
        ));
        vhost.apply_policies();
        vhost.ready.store(true, std::sync::atomic::Ordering::Release);
        for q in vhost.queues() {
            q.start_timers();
        }
        for e in vhost.exchanges() {
            for d in e.delayed_stores() {
                d.spawn(vhost.me.clone(), Arc::downgrade(&e));
            }
        }
        Ok(vhost)
    }

    /// The vhost's own directory in the data dir, for state that adapters keep
    /// per vhost (MQTT's retained messages).
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// True once the stored definitions are restored.
    pub fn is_ready(&self) -> bool {
        self.ready.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Creates the entities of a replayed definitions log.
    fn apply_definitions(&self, lines: Vec<serde_json::Value>) {
        for line in lines {
            let Some((op, d)) = line.as_object().and_then(|o| o.iter().next()) else {
                continue;
            };
            let flag = |k: &str| d[k].as_bool().unwrap_or(false);
            let name = d["name"].as_str().unwrap_or_default();
            let result = match op.as_str() {
                "exchange" => {
                    let opts = ExchangeOptions {
                        durable: true,
                        auto_delete: flag("auto_delete"),
                        internal: flag("internal"),
                        passive: false,
                    };
                    let kind = d["type"].as_str().unwrap_or_default();
                    self.new_exchange(name, kind, &opts, json_to_table(&d["arguments"]))
                        .map(|ex| {
                            self.exchanges.write().insert(name.to_string(), ex);
                        })
                }
                "queue" => {
                    let dir = self.queue_dir(name, true);
                    let arguments = json_to_table(&d["arguments"]);
                    let declared = QueueSettings::from_arguments(&arguments).unwrap_or_else(|e| {
                        tracing::warn!(vhost = %self.name, "queue '{name}': {}", e.describe(name, &self.name));
                        QueueSettings::default()
                    });
                    // A later line for a queue already open records changed
                    // arguments (see `set_queue_argument`).
                    if let Some(q) = self.queue(name) {
                        q.redeclare(arguments, declared);
                    } else {
                        let spec = QueueSpec {
                            name: name.to_string(),
                            durable: true,
                            auto_delete: flag("auto_delete"),
                            exclusive_owner: None,
                            arguments,
                            declared,
                        };
                        // A queue whose files cannot be opened stays, closed, with
                        // its definition and files, until an operator restarts it.
                        let q = Queue::open_or_closed(spec, self, self.me.clone(), &dir, self.settings.segment_size);
                        self.queues.write().insert(name.to_string(), q);
                        self.queues_changed();
                    }
                    Ok(())
                }
                "policy" | "operator_policy" => {
                    let operator = op == "operator_policy";
                    Policy::from_json(d, operator).map(|p| {
                        self.policy_map(operator).write().insert(p.name.clone(), p);
                    })
                }
                "parameter" => {
                    let component = d["component"].as_str().unwrap_or_default().to_string();
                    let key = (component, name.to_string());
                    match d["owner"].as_str() {
                        Some(owner) => self.parameter_owners.write().insert(key.clone(), owner.to_string()),
                        None => self.parameter_owners.write().remove(&key),
                    };
                    self.parameters.write().insert(key, d["value"].clone());
                    Ok(())
                }
                "bind" => {
                    let s = |k: &str| d[k].as_str().unwrap_or_default();
                    let args = json_to_table(&d["arguments"]);
                    if s("destination_type") == "queue" {
                        self.bind_queue(s("destination"), s("source"), s("routing_key"), args, None)
                    } else {
                        self.bind_exchange(s("destination"), s("source"), s("routing_key"), args)
                    }
                }
                _ => Ok(()),
            };
            if let Err(e) = result {
                tracing::error!(vhost = %self.name, "cannot restore {op} {d}: {e}");
            }
        }
    }

    /// Records a change of the durable definitions in their log (synced by
    /// the next group commit) and counts it in [`Self::definition_changes`].
    fn log_change(&self, line: serde_json::Value) -> Result<()> {
        match self.definitions.lock().as_mut() {
            Some(log) => {
                log.append(&line)
                    .map_err(|e| Error::Internal(format!("cannot write definitions of vhost '{}': {e}", self.name)))?;
                self.definition_changes
                    .fetch_add(1, std::sync::atomic::Ordering::Release);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// How many changes the definitions log has taken since the vhost opened.
    /// A protocol adapter reads it before and after a change: when it moved,
    /// the change's reply waits for the group commit, so that a client that
    /// saw `declare-ok` finds its queue after a power loss.
    pub fn definition_changes(&self) -> u64 {
        self.definition_changes.load(std::sync::atomic::Ordering::Acquire)
    }

    fn open_queue(&self, spec: QueueSpec, dir: &Path) -> Result<Arc<Queue>> {
        Queue::open(spec, self, self.me.clone(), dir, self.settings.segment_size)
    }

    /// Reopens a closed queue from its files (LavinMQ's queue restart). False
    /// when the queue was not closed.
    pub fn restart_queue(&self, name: &str) -> Result<bool> {
        self.get_queue(name)?.restart(self.settings.segment_size)
    }

    fn queue_dir(&self, name: &str, durable: bool) -> PathBuf {
        if durable {
            self.dir.join(dir_name(name))
        } else {
            self.dir.join("transient").join(dir_name(name))
        }
    }

    /// Looks up an exchange.
    pub fn exchange(&self, name: &str) -> Option<Arc<Exchange>> {
        self.exchanges.read().get(name).cloned()
    }

    /// Looks up a queue.
    pub fn queue(&self, name: &str) -> Option<Arc<Queue>> {
        self.queues.read().get(name).cloned()
    }

    /// Looks up a queue, failing with NOT_FOUND.
    pub fn get_queue(&self, name: &str) -> Result<Arc<Queue>> {
        self.queue(name).ok_or_else(|| no_queue(name, &self.name))
    }

    /// Looks up an exchange, failing with NOT_FOUND.
    pub fn get_exchange(&self, name: &str) -> Result<Arc<Exchange>> {
        self.exchange(name).ok_or_else(|| no_exchange(name, &self.name))
    }

    /// All exchanges.
    pub fn exchanges(&self) -> Vec<Arc<Exchange>> {
        self.exchanges.read().values().cloned().collect()
    }

    /// Removes every queue and the vhost's files (the vhost is being deleted).
    pub fn delete_all(&self) {
        for q in self.queues() {
            q.delete();
            if q.is_stream() {
                self.stream_groups.drop_stream(&q.name);
            }
        }
        self.queues.write().clear();
        self.queues_changed();
        for e in self.exchanges() {
            e.mark_deleted();
        }
        self.exchanges.write().clear();
        *self.definitions.lock() = None;
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(vhost = %self.name, "cannot remove the vhost's files: {e}");
        }
        replication::removed(&self.dir);
    }

    /// All queues.
    pub fn queues(&self) -> Vec<Arc<Queue>> {
        self.queues.read().values().cloned().collect()
    }

    /// Declares (or checks) an exchange.
    pub fn declare_exchange(
        &self,
        name: &str,
        kind: &str,
        opts: &ExchangeOptions,
        arguments: FieldTable,
    ) -> Result<()> {
        self.declare_exchange_checked(name, kind, opts, arguments, false)
    }

    /// Declares an exchange that the broker itself owns (`amq.lavinmq.log`):
    /// as [`Self::declare_exchange`], but the reserved `amq.` prefix is allowed.
    pub fn declare_broker_exchange(
        &self,
        name: &str,
        kind: &str,
        opts: &ExchangeOptions,
        arguments: FieldTable,
    ) -> Result<()> {
        self.declare_exchange_checked(name, kind, opts, arguments, true)
    }

    fn declare_exchange_checked(
        &self,
        name: &str,
        kind: &str,
        opts: &ExchangeOptions,
        arguments: FieldTable,
        reserved_allowed: bool,
    ) -> Result<()> {
        if opts.passive {
            return self.get_exchange(name).map(|_| ());
        }
        if name.is_empty() {
            return Err(default_exchange_refused());
        }
        check_exchange_declaration(kind, &arguments)?;
        if let Some(existing) = self.exchange(name) {
            let v = &self.name;
            if existing.declared_type != kind {
                return Err(inequivalent("type", "exchange", name, v, kind, &existing.declared_type));
            }
            if existing.durable != opts.durable {
                return Err(inequivalent(
                    "durable",
                    "exchange",
                    name,
                    v,
                    opts.durable,
                    existing.durable,
                ));
            }
            if existing.auto_delete != opts.auto_delete {
                return Err(inequivalent(
                    "auto_delete",
                    "exchange",
                    name,
                    v,
                    opts.auto_delete,
                    existing.auto_delete,
                ));
            }
            if existing.internal != opts.internal {
                return Err(inequivalent(
                    "internal",
                    "exchange",
                    name,
                    v,
                    opts.internal,
                    existing.internal,
                ));
            }
            if !tables_equivalent(&existing.arguments, &arguments) {
                return Err(Error::PreconditionFailed(format!(
                    "inequivalent arguments for exchange '{name}' in vhost '{v}'"
                )));
            }
            return Ok(());
        }
        // As in RabbitMQ, the reserved prefix only stops creating new exchanges:
        // redeclaring a predefined one with its own properties is fine.
        if name.starts_with("amq.") && !reserved_allowed {
            return Err(Error::AccessRefused(format!(
                "exchange name '{name}' contains reserved prefix 'amq.*'"
            )));
        }
        let args_json = opts.durable.then(|| table_to_json(&arguments));
        let ex = self.new_exchange(name, kind, opts, arguments)?;
        self.apply_policies_to_exchange(&ex);
        self.exchanges.write().entry(name.to_string()).or_insert(ex);
        if let Some(args) = args_json {
            self.log_change(definitions::exchange(name, kind, opts.auto_delete, opts.internal, args))?;
        }
        Ok(())
    }

    fn delayed_dir(&self, name: &str, durable: bool) -> PathBuf {
        let base = if durable {
            self.dir.clone()
        } else {
            self.dir.join("transient")
        };
        base.join(format!("delayed.{}", dir_name(name)))
    }

    /// Builds an exchange of declared type `kind`, with its delayed-message store
    /// when it is a delayed exchange.
    fn new_exchange(
        &self,
        name: &str,
        kind: &str,
        opts: &ExchangeOptions,
        arguments: FieldTable,
    ) -> Result<Arc<Exchange>> {
        let (base, delayed) = resolve_type(kind, &arguments)?;
        let mut ex = Exchange::new(name, base, opts.durable, opts.auto_delete, opts.internal, arguments);
        if base == ExchangeKind::ConsistentHash {
            ex.use_hash_algorithm(self.settings.consistent_hash_algorithm);
        }
        ex.declared_type = kind.to_string();
        let dir = self.delayed_dir(name, opts.durable);
        if delayed {
            ex.delayed = Some(super::delayed::DelayedMessages::open(
                &dir,
                name,
                self.settings.segment_size,
            )?);
        } else if dir.exists() {
            // Held by a delayed-message policy before a restart: released even if
            // the policy is gone now.
            let store = super::delayed::DelayedMessages::open(&dir, name, self.settings.segment_size)?;
            ex.attach_policy_delayed(store);
        }
        let ex = Arc::new(ex);
        if self.is_ready() {
            for d in ex.delayed_stores() {
                d.spawn(self.me.clone(), Arc::downgrade(&ex));
            }
        }
        Ok(ex)
    }

    /// Opens the store of an exchange a `delayed-message` policy made delayed
    /// and starts releasing from it.
    fn open_policy_delayed(&self, ex: &Arc<Exchange>) {
        let dir = self.delayed_dir(&ex.name, ex.durable);
        match super::delayed::DelayedMessages::open(&dir, &ex.name, self.settings.segment_size) {
            Ok(store) => {
                ex.attach_policy_delayed(store.clone());
                if self.is_ready() {
                    store.spawn(self.me.clone(), Arc::downgrade(ex));
                }
            }
            Err(e) => tracing::error!(
                vhost = %self.name,
                exchange = %ex.name,
                "cannot open the store of a delayed-message policy: {e}"
            ),
        }
    }

    /// Routes a message through `exchange` (no deduplication, no delay: it is
    /// being released) and stores it in the queues it reaches.
    pub fn publish_routed(&self, exchange: &Exchange, msg: &Message, scratch: &mut bytes::BytesMut) {
        let mut queues = Vec::new();
        self.route_unchecked(exchange, msg, &[], &mut queues);
        for q in queues {
            match q.publish(msg, scratch) {
                Ok(p) if p.woke => q.wake_consumers(),
                Ok(_) => {}
                Err(e) => tracing::error!(vhost = %self.name, "cannot publish into '{}': {e}", q.name),
            }
        }
    }

    /// Deletes an exchange; deleting a missing one succeeds, as in RabbitMQ.
    pub fn delete_exchange(&self, name: &str, if_unused: bool) -> Result<()> {
        if name.is_empty() {
            return Err(default_exchange_refused());
        }
        if name.starts_with("amq.") {
            return Err(Error::AccessRefused(format!(
                "deletion of system exchange '{name}' in vhost '{}' not allowed",
                self.name
            )));
        }
        let Some(ex) = self.exchange(name) else {
            return Ok(());
        };
        if if_unused && ex.has_bindings() {
            return Err(Error::PreconditionFailed(format!(
                "exchange '{name}' in vhost '{}' in use",
                self.name
            )));
        }
        self.exchanges.write().remove(name);
        ex.mark_deleted();
        if ex.delayed_stores().next().is_some() {
            let dir = self.delayed_dir(name, ex.durable);
            let _ = std::fs::remove_dir_all(&dir);
            replication::removed(&dir);
        }
        let dest = Destination::Exchange(ex.clone());
        for other in self.exchanges.read().values() {
            other.unbind_destination(&dest);
        }
        for b in ex.bindings() {
            ex.unbind(&b.destination, &b.routing_key, &b.arguments);
        }
        if ex.durable {
            self.log_change(definitions::delete("exchange", name))?;
        }
        Ok(())
    }

    /// Declares (or checks) a queue for connection `conn`.
    pub fn declare_queue(
        &self,
        name: &str,
        opts: &QueueOptions,
        arguments: FieldTable,
        conn: ConnectionId,
    ) -> Result<QueueDeclared> {
        if opts.passive {
            let q = self.get_queue(name)?;
            q.check_owner(conn)?;
            // As in RabbitMQ, any declare (passive too) counts as use for x-expires.
            q.touch();
            let (m, c) = q.counts();
            return Ok(QueueDeclared {
                name: q.name.clone(),
                message_count: m as u32,
                consumer_count: c,
            });
        }
        let generated;
        let name = if name.is_empty() {
            generated = server_generated_name();
            generated.as_str()
        } else {
            if name.starts_with("amq.") {
                return Err(Error::AccessRefused(format!(
                    "queue name '{name}' contains reserved prefix 'amq.*'"
                )));
            }
            name
        };
        let _creating = self.declare_lock.lock();
        self.churn.queue_declared.incr();
        if let Some(q) = self.queue(name) {
            q.check_owner(conn)?;
            let v = &self.name;
            if q.durable != opts.durable {
                return Err(inequivalent("durable", "queue", name, v, opts.durable, q.durable));
            }
            if q.exclusive_owner.is_some() != opts.exclusive {
                // RabbitMQ reports this as a lock conflict, not an inequivalent argument.
                return Err(Error::ResourceLocked(format!(
                    "cannot obtain exclusive access to locked queue '{name}' in vhost '{v}'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
                )));
            }
            if q.auto_delete != opts.auto_delete {
                return Err(inequivalent(
                    "auto_delete",
                    "queue",
                    name,
                    v,
                    opts.auto_delete,
                    q.auto_delete,
                ));
            }
            super::queue_settings::check_equivalent(&q.arguments(), &arguments, name, v)
                .map_err(Error::PreconditionFailed)?;
            q.touch();
            let (m, c) = q.counts();
            return Ok(QueueDeclared {
                name: name.to_string(),
                message_count: m as u32,
                consumer_count: c,
            });
        }
        if let Some(max) = limits::in_force(self.limits.read().max_queues)
            && self.queues.read().len() as u64 >= max
        {
            return Err(Error::PreconditionFailed(format!(
                "cannot declare queue '{name}': queue limit in virtual host '{}' is reached",
                self.name
            )));
        }
        let declared = check_new_queue(&self.name, name, opts, &arguments)?;
        let owner = opts.exclusive.then_some(conn);
        let persistent = opts.durable && !opts.exclusive;
        let dir = self.queue_dir(name, persistent);
        if dir.exists() {
            // Left over from a queue of the same name deleted while the broker was down.
            std::fs::remove_dir_all(&dir)?;
            replication::removed(&dir);
        }
        let spec = QueueSpec {
            name: name.to_string(),
            durable: opts.durable,
            auto_delete: opts.auto_delete,
            exclusive_owner: owner,
            arguments,
            declared,
        };
        let q = self.open_queue(spec, &dir)?;
        self.apply_policies_to_queue(&q);
        self.queues.write().insert(name.to_string(), q.clone());
        self.queues_changed();
        self.churn.queue_created.incr();
        // Every queue is bound to the default exchange implicitly (routed by name).
        if persistent {
            self.log_change(definitions::queue(
                name,
                opts.auto_delete,
                table_to_json(&q.arguments()),
            ))?;
        }
        Ok(QueueDeclared {
            name: name.to_string(),
            message_count: 0,
            consumer_count: 0,
        })
    }

    /// Sets (`Some`) or removes (`None`) declaration argument `key` of an
    /// existing queue, and records the change with a durable queue's
    /// definition. For arguments that take effect at once, such as
    /// `x-expires`, which an MQTT 5 client changes when it reconnects or
    /// disconnects with another session expiry interval.
    pub fn set_queue_argument(&self, q: &Queue, key: &str, value: Option<FieldValue>) -> Result<()> {
        let mut arguments = q.arguments();
        match value {
            Some(v) => arguments.insert(key, v),
            None => {
                arguments.remove(key);
            }
        }
        let settings = QueueSettings::from_arguments(&arguments)
            .map_err(|e| Error::PreconditionFailed(e.describe(&q.name, &self.name)))?;
        if settings.queue_type != q.queue_type {
            return Err(Error::PreconditionFailed(format!(
                "the type of queue '{}' in vhost '{}' cannot change",
                q.name, self.name
            )));
        }
        let json = table_to_json(&arguments);
        q.redeclare(arguments, settings);
        self.apply_policies_to_queue(q);
        q.touch();
        if q.durable && q.exclusive_owner.is_none() {
            self.log_change(definitions::queue(&q.name, q.auto_delete, json))?;
        }
        Ok(())
    }

    /// Deletes a queue, returning the number of messages it held.
    pub fn delete_queue(&self, name: &str, if_unused: bool, if_empty: bool, conn: Option<ConnectionId>) -> Result<u64> {
        let Some(q) = self.queue(name) else {
            return Ok(0);
        };
        if let Some(conn) = conn {
            q.check_owner(conn)?;
        }
        let (messages, consumers) = q.counts();
        if if_unused && consumers > 0 {
            return Err(Error::PreconditionFailed(format!(
                "queue '{name}' in vhost '{}' in use",
                self.name
            )));
        }
        if if_empty && messages > 0 {
            return Err(Error::PreconditionFailed(format!(
                "queue '{name}' in vhost '{}' not empty",
                self.name
            )));
        }
        Ok(self.remove_queue(&q))
    }

    /// Removes a queue and its bindings without any checks, then tells the
    /// [`Self::queue_removed`] hooks.
    pub fn remove_queue(&self, q: &Arc<Queue>) -> u64 {
        {
            let mut queues = self.queues.write();
            match queues.get(&q.name) {
                Some(current) if Arc::ptr_eq(current, q) => {
                    queues.remove(&q.name);
                    self.queues_changed();
                    self.churn.queue_deleted.incr();
                }
                _ => return 0,
            }
        }
        let dest = Destination::Queue(q.clone());
        let mut emptied = Vec::new();
        for ex in self.exchanges.read().values() {
            if ex.unbind_destination(&dest) > 0 && ex.auto_delete && !ex.has_bindings() {
                emptied.push(ex.name.clone());
            }
        }
        let count = q.delete();
        if q.is_stream() {
            self.stream_groups.drop_stream(&q.name);
        }
        for name in emptied {
            let _ = self.delete_exchange(&name, true);
        }
        if q.durable
            && q.exclusive_owner.is_none()
            && let Err(e) = self.log_change(definitions::delete("queue", &q.name))
        {
            tracing::error!(vhost = %self.name, "{e}");
        }
        self.queue_removed.notify(self, q);
        count
    }

    /// Purges a queue's ready messages.
    pub fn purge_queue(&self, name: &str, conn: ConnectionId) -> Result<u64> {
        let q = self.get_queue(name)?;
        q.check_owner(conn)?;
        q.purge()
    }

    /// Binds queue `queue` to exchange `exchange`.
    pub fn bind_queue(
        &self,
        queue: &str,
        exchange: &str,
        routing_key: &str,
        arguments: FieldTable,
        conn: Option<ConnectionId>,
    ) -> Result<()> {
        if exchange.is_empty() {
            return Err(default_exchange_refused());
        }
        let q = self.get_queue(queue)?;
        if let Some(conn) = conn {
            q.check_owner(conn)?;
        }
        let ex = self.get_exchange(exchange)?;
        check_binding_args(&ex, &arguments)?;
        let durable = ex.durable && q.durable && q.exclusive_owner.is_none();
        let line = durable
            .then(|| definitions::binding("bind", exchange, queue, true, routing_key, table_to_json(&arguments)));
        if ex.bind(Destination::Queue(q), routing_key, arguments)?
            && let Some(line) = line
        {
            self.log_change(line)?;
        }
        Ok(())
    }

    /// Removes a queue binding; a missing binding is not an error.
    pub fn unbind_queue(
        &self,
        queue: &str,
        exchange: &str,
        routing_key: &str,
        arguments: &FieldTable,
        conn: ConnectionId,
    ) -> Result<()> {
        self.remove_binding(exchange, queue, true, routing_key, arguments, Some(conn))
            .map(|_| ())
    }

    /// Binds exchange `destination` to exchange `source`.
    pub fn bind_exchange(
        &self,
        destination: &str,
        source: &str,
        routing_key: &str,
        arguments: FieldTable,
    ) -> Result<()> {
        if source.is_empty() || destination.is_empty() {
            return Err(default_exchange_refused());
        }
        let dst = self.get_exchange(destination)?;
        let src = self.get_exchange(source)?;
        check_binding_args(&src, &arguments)?;
        let line = (src.durable && dst.durable).then(|| {
            definitions::binding(
                "bind",
                source,
                destination,
                false,
                routing_key,
                table_to_json(&arguments),
            )
        });
        if src.bind(Destination::Exchange(dst), routing_key, arguments)?
            && let Some(line) = line
        {
            self.log_change(line)?;
        }
        Ok(())
    }

    /// Removes an exchange-to-exchange binding.
    pub fn unbind_exchange(
        &self,
        destination: &str,
        source: &str,
        routing_key: &str,
        arguments: &FieldTable,
    ) -> Result<()> {
        self.remove_binding(source, destination, false, routing_key, arguments, None)
            .map(|_| ())
    }

    /// Removes exactly one binding, named by its routing key and arguments as in
    /// RabbitMQ (queue.unbind, exchange.unbind and the management API); false if
    /// there was none. `conn`, when given, must own an exclusive destination queue.
    pub fn remove_binding(
        &self,
        source: &str,
        destination: &str,
        to_queue: bool,
        routing_key: &str,
        arguments: &FieldTable,
        conn: Option<ConnectionId>,
    ) -> Result<bool> {
        if source.is_empty() || (!to_queue && destination.is_empty()) {
            return Err(default_exchange_refused());
        }
        let (dest, dest_durable) = if to_queue {
            let q = self.get_queue(destination)?;
            if let Some(conn) = conn {
                q.check_owner(conn)?;
            }
            let durable = q.durable && q.exclusive_owner.is_none();
            (Destination::Queue(q), durable)
        } else {
            let d = self.get_exchange(destination)?;
            let durable = d.durable;
            (Destination::Exchange(d), durable)
        };
        let src = self.get_exchange(source)?;
        let durable = src.durable && dest_durable;
        if !src.unbind(&dest, routing_key, arguments) {
            return Ok(false);
        }
        let line = definitions::binding(
            "unbind",
            source,
            destination,
            to_queue,
            routing_key,
            table_to_json(arguments),
        );
        self.after_unbind(&src, durable.then_some(line))?;
        Ok(true)
    }

    /// Logs a removed binding and deletes its auto-delete source once unbound.
    fn after_unbind(&self, source: &Arc<Exchange>, line: Option<serde_json::Value>) -> Result<()> {
        if let Some(line) = line {
            self.log_change(line)?;
        }
        if source.auto_delete && !source.has_bindings() {
            return self.delete_exchange(&source.name, true);
        }
        Ok(())
    }

    /// Finds the queues a message published to `exchange` reaches, following
    /// exchange-to-exchange bindings and alternate exchanges. `out` is cleared first
    /// and holds each queue once.
    pub fn route(&self, exchange: &Exchange, msg: &Message, extra_keys: &[&str], out: &mut Vec<Arc<Queue>>) {
        self.route_cached(exchange, msg, extra_keys, out, None);
    }

    /// As [`Self::route`], for a publisher that keeps `cache`: a message
    /// (without CC/BCC keys) with the routing key of the one before finds the
    /// same queues without routing, while nothing they were found from changed
    /// (see [`RouteCache`]).
    pub fn route_cached(
        &self,
        exchange: &Exchange,
        msg: &Message,
        extra_keys: &[&str],
        out: &mut Vec<Arc<Queue>>,
        cache: Option<&mut RouteCache>,
    ) {
        out.clear();
        exchange.counters.publish_in.incr();
        if exchange.is_duplicate(msg.properties.headers.as_ref(), msg.timestamp) {
            return;
        }
        match cache {
            // With CC/BCC keys each message routes several keys: nothing to remember.
            Some(cache) if extra_keys.is_empty() => self.route_remembered(exchange, msg, out, cache),
            _ => self.route_unchecked(exchange, msg, extra_keys, out),
        }
        if out.is_empty() {
            exchange.counters.unroutable.incr();
        }
    }

    /// Routes `msg` through `cache`: the default exchange's queue lookup
    /// (also when it finds nothing), and routes of direct, topic and fanout
    /// exchanges that reached queues bound to the exchange itself. A route that
    /// reached nothing, or went on through other exchanges, is not kept: it
    /// depends on more than the exchange's own bindings.
    fn route_remembered(&self, exchange: &Exchange, msg: &Message, out: &mut Vec<Arc<Queue>>, cache: &mut RouteCache) {
        let key = &*msg.routing_key;
        // Read before routing: a change after it makes the next message route again.
        if exchange.name.is_empty() {
            let generation = self.queues_generation.load(std::sync::atomic::Ordering::Acquire);
            if cache.get(0, key, generation, out) {
                return;
            }
            out.extend(self.queues.read().get(key).cloned());
            cache.set(0, key, generation, out);
            return;
        }
        if !exchange.routes_by_key() {
            return self.route_unchecked(exchange, msg, &[], out);
        }
        let source = exchange as *const Exchange as usize;
        let generation = exchange.route_generation();
        if cache.get(source, key, generation, out) {
            return;
        }
        let mut visited: smallvec::SmallVec<[*const Exchange; 8]> = smallvec::SmallVec::new();
        self.route_from(exchange, key, &msg.properties, out, &mut visited);
        dedup(out);
        if !out.is_empty() && visited.len() == 1 {
            cache.set(source, key, generation, out);
        }
    }

    /// Counts a change of the queue map (after it).
    fn queues_changed(&self) {
        self.queues_generation.store(
            super::route_cache::next_generation(),
            std::sync::atomic::Ordering::Release,
        );
    }

    fn route_unchecked(&self, exchange: &Exchange, msg: &Message, extra_keys: &[&str], out: &mut Vec<Arc<Queue>>) {
        let mut visited: smallvec::SmallVec<[*const Exchange; 8]> = smallvec::SmallVec::new();
        let keys = std::iter::once(&*msg.routing_key).chain(extra_keys.iter().copied());
        for key in keys {
            if exchange.name.is_empty() {
                out.extend(self.queues.read().get(key).cloned());
                continue;
            }
            visited.clear();
            self.route_from(exchange, key, &msg.properties, out, &mut visited);
        }
        dedup(out);
    }

    fn route_from(
        &self,
        exchange: &Exchange,
        key: &str,
        properties: &BasicProperties,
        out: &mut Vec<Arc<Queue>>,
        visited: &mut smallvec::SmallVec<[*const Exchange; 8]>,
    ) {
        if visited.contains(&(exchange as *const Exchange)) {
            return;
        }
        visited.push(exchange as *const Exchange);
        let before = out.len();
        let mut nested: smallvec::SmallVec<[Arc<Exchange>; 4]> = smallvec::SmallVec::new();
        exchange.route(key, properties, &mut |d| match d {
            Destination::Queue(q) => out.push(q.clone()),
            Destination::Exchange(e) => nested.push(e.clone()),
        });
        for e in nested {
            self.route_from(&e, key, properties, out, visited);
        }
        if out.len() == before
            && let Some(ae) = exchange.alternate_exchange().and_then(|n| self.exchange(&n))
        {
            self.route_from(&ae, key, properties, out, visited);
        }
    }

    fn policy_map(&self, operator: bool) -> &RwLock<std::collections::BTreeMap<String, Policy>> {
        if operator {
            &self.operator_policies
        } else {
            &self.policies
        }
    }

    /// Creates or replaces a policy (`operator`: an operator policy) and applies
    /// it to the existing queues and exchanges at once.
    pub fn set_policy(&self, policy: Policy, operator: bool) -> Result<()> {
        let line =
            serde_json::json!({ if operator { "operator_policy" } else { "policy" }: policy.to_json(&self.name) });
        self.policy_map(operator).write().insert(policy.name.clone(), policy);
        self.log_change(line)?;
        self.apply_policies();
        Ok(())
    }

    /// Removes a policy; NOT_FOUND if there is none of that name.
    pub fn delete_policy(&self, name: &str, operator: bool) -> Result<()> {
        if self.policy_map(operator).write().remove(name).is_none() {
            return Err(Error::NotFound(format!("no policy '{name}' in vhost '{}'", self.name)));
        }
        self.log_change(definitions::delete(
            if operator { "operator_policy" } else { "policy" },
            name,
        ))?;
        self.apply_policies();
        Ok(())
    }

    /// The policies (or operator policies), by name.
    pub fn policies(&self, operator: bool) -> Vec<Policy> {
        self.policy_map(operator).read().values().cloned().collect()
    }

    /// Re-evaluates which policies apply to every queue and exchange.
    fn apply_policies(&self) {
        for q in self.queues() {
            self.apply_policies_to_queue(&q);
        }
        let exchanges: Vec<_> = self.exchanges.read().values().cloned().collect();
        for e in exchanges {
            self.apply_policies_to_exchange(&e);
        }
    }

    fn apply_policies_to_queue(&self, q: &Queue) {
        let kind = q.queue_type.name();
        let policies = self.policies.read();
        let operators = self.operator_policies.read();
        let p = policy::select(policies.values(), &q.name, |t| t.covers_queue(kind));
        let o = policy::select(operators.values(), &q.name, |t| t.covers_queue(kind));
        q.apply_policies(
            p.map(|p| (p.name.as_str(), &p.definition)),
            o.map(|p| (p.name.as_str(), &p.definition)),
        );
    }

    fn apply_policies_to_exchange(&self, e: &Arc<Exchange>) {
        let needs_store = {
            let policies = self.policies.read();
            let p = policy::select(policies.values(), &e.name, ApplyTo::covers_exchanges);
            e.apply_policy(p.map(|p| (p.name.as_str(), &p.definition)))
        };
        if needs_store {
            self.open_policy_delayed(e);
        }
    }

    /// Routes messages queues dropped to their dead-letter exchanges. A missing
    /// exchange drops the message; so does a cycle without a rejection in it.
    pub fn publish_dead_letters(&self, dead: Vec<DeadLetter>) {
        let mut queues = Vec::new();
        let mut scratch = bytes::BytesMut::new();
        for dl in dead {
            let Some(ex) = self.exchange(&dl.message.exchange) else {
                continue;
            };
            let extra: smallvec::SmallVec<[&str; 2]> = dl.extra_keys.iter().map(String::as_str).collect();
            self.route(&ex, &dl.message, &extra, &mut queues);
            for q in queues.drain(..) {
                if dead_letter::is_cycle(&dl.message, dl.reason, &q.name) {
                    tracing::debug!(queue = %q.name, "dead-letter cycle, message dropped");
                    continue;
                }
                match q.publish(&dl.message, &mut scratch) {
                    Ok(p) if p.woke => q.wake_consumers(),
                    Ok(_) => {}
                    Err(e) => tracing::error!(vhost = %self.name, "cannot dead-letter into '{}': {e}", q.name),
                }
            }
        }
    }

    /// Deletes the exclusive queues owned by a closing connection.
    pub fn connection_closed(&self, conn: ConnectionId) {
        let owned: Vec<_> = self
            .queues
            .read()
            .values()
            .filter(|q| q.exclusive_owner == Some(conn))
            .cloned()
            .collect();
        for q in owned {
            self.remove_queue(&q);
        }
    }

    /// The vhost's description, tags and default queue type.
    pub fn meta(&self) -> VHostMeta {
        self.meta.read().clone()
    }

    /// Replaces the vhost's metadata (the broker persists it with the vhost list).
    pub fn set_meta(&self, meta: VHostMeta) {
        *self.meta.write() = meta;
    }

    /// The vhost's limits as set.
    pub fn limits(&self) -> VHostLimits {
        *self.limits.read()
    }

    /// Replaces the vhost's limits (the broker persists them with the vhost list).
    pub fn set_limits(&self, limits: VHostLimits) {
        *self.limits.write() = limits;
    }

    /// The connection limit in force, if any.
    pub fn max_connections(&self) -> Option<u64> {
        limits::in_force(self.limits.read().max_connections)
    }

    /// Every runtime parameter, by component and name.
    pub fn parameters(&self) -> Vec<Parameter> {
        self.parameters
            .read()
            .iter()
            .map(|((component, name), value)| Parameter {
                component: component.clone(),
                name: name.clone(),
                value: value.clone(),
            })
            .collect()
    }

    /// The value of parameter `name` of `component`.
    pub fn parameter(&self, component: &str, name: &str) -> Option<serde_json::Value> {
        self.parameters
            .read()
            .get(&(component.to_string(), name.to_string()))
            .cloned()
    }

    /// The user who set parameter `name` of `component`, when known.
    pub fn parameter_owner(&self, component: &str, name: &str) -> Option<String> {
        self.parameter_owners
            .read()
            .get(&(component.to_string(), name.to_string()))
            .cloned()
    }

    /// Creates or replaces a runtime parameter, durably, set by `owner`
    /// (when a user did it); true when it existed.
    pub fn set_parameter(
        &self,
        component: &str,
        name: &str,
        value: serde_json::Value,
        owner: Option<&str>,
    ) -> Result<bool> {
        let mut line = serde_json::json!({"component": component, "name": name, "value": value});
        if let Some(owner) = owner {
            line["owner"] = serde_json::json!(owner);
        }
        let key = (component.to_string(), name.to_string());
        match owner {
            Some(owner) => self.parameter_owners.write().insert(key.clone(), owner.to_string()),
            None => self.parameter_owners.write().remove(&key),
        };
        let existed = self.parameters.write().insert(key, value).is_some();
        self.log_change(serde_json::json!({ "parameter": line }))?;
        Ok(existed)
    }

    /// Removes a runtime parameter, durably; NOT_FOUND if there is none.
    pub fn delete_parameter(&self, component: &str, name: &str) -> Result<()> {
        let key = (component.to_string(), name.to_string());
        self.parameter_owners.write().remove(&key);
        if self.parameters.write().remove(&key).is_none() {
            return Err(Error::NotFound(format!(
                "no parameter '{name}' of component '{component}' in vhost '{}'",
                self.name
            )));
        }
        self.log_change(serde_json::json!({"delete_parameter": {"component": component, "name": name}}))
    }
}

fn check_binding_args(ex: &Exchange, arguments: &FieldTable) -> Result<()> {
    if ex.kind == ExchangeKind::Headers && super::headers::MatchMode::from_arguments(arguments).is_none() {
        return Err(Error::PreconditionFailed(
            "invalid x-match field value; expected one of [all, any, all-with-x, any-with-x]".into(),
        ));
    }
    Ok(())
}

/// Quorum queues and streams must be durable and shared, as in RabbitMQ.
fn check_queue_type(settings: &QueueSettings, opts: &QueueOptions, name: &str, vhost: &str) -> Result<()> {
    let kind = settings.queue_type;
    if kind == QueueType::Classic {
        return Ok(());
    }
    let bad = if !opts.durable {
        Some("non-durable")
    } else if opts.exclusive {
        Some("exclusive-owner")
    } else if opts.auto_delete {
        Some("auto-delete")
    } else {
        None
    };
    if let Some(prop) = bad {
        return Err(Error::PreconditionFailed(format!(
            "invalid property '{prop}' for queue '{name}' in vhost '{vhost}'"
        )));
    }
    Ok(())
}

/// Checks what a new queue's declaration asks for (its arguments, and the
/// flags its type allows) without declaring it, so that a definitions import
/// can find every problem before it changes anything. Returns the settings.
pub fn check_new_queue(vhost: &str, name: &str, opts: &QueueOptions, arguments: &FieldTable) -> Result<QueueSettings> {
    let declared =
        QueueSettings::from_arguments(arguments).map_err(|e| Error::PreconditionFailed(e.describe(name, vhost)))?;
    super::dedup::DedupSettings::validate_arguments(arguments).map_err(Error::PreconditionFailed)?;
    check_queue_type(&declared, opts, name, vhost)?;
    if declared.queue_type == QueueType::Stream
        && let Some(arg) = super::stream::FORBIDDEN_ARGUMENTS
            .iter()
            .find(|a| arguments.get(a).is_some())
    {
        return Err(Error::PreconditionFailed(format!(
            "invalid arg '{arg}' for queue '{name}' in vhost '{vhost}' of queue type rabbit_stream_queue"
        )));
    }
    Ok(declared)
}

/// Checks an exchange declaration's type and arguments without declaring it.
pub fn check_exchange_declaration(kind: &str, arguments: &FieldTable) -> Result<()> {
    if resolve_type(kind, arguments)?.0 == ExchangeKind::ConsistentHash {
        super::consistent_hash::validate_arguments(arguments).map_err(Error::PreconditionFailed)?;
    }
    Exchange::validate_arguments(arguments).map_err(Error::PreconditionFailed)
}

/// The routing kind of a declared exchange type, and whether it delays messages:
/// RabbitMQ's `x-delayed-message` takes its kind from `x-delayed-type`; LavinMQ
/// marks any type delayed with `x-delayed-exchange: true`.
/// An exchange as a definitions-log line declares it, without the store of
/// a delayed exchange and without timers: for reading the definitions of a
/// data dir that is not opened (`lavinmqctl definitions`). Fails as a
/// restore would for an unknown type.
pub fn exchange_of_definition(
    name: &str,
    kind: &str,
    auto_delete: bool,
    internal: bool,
    arguments: FieldTable,
) -> Result<Exchange> {
    let (base, _delayed) = resolve_type(kind, &arguments)?;
    let mut ex = Exchange::new(name, base, true, auto_delete, internal, arguments);
    ex.declared_type = kind.to_string();
    Ok(ex)
}

fn resolve_type(kind: &str, arguments: &FieldTable) -> Result<(ExchangeKind, bool)> {
    if kind == "x-delayed-message" {
        return arguments
            .get("x-delayed-type")
            .and_then(|v| v.as_str())
            .and_then(ExchangeKind::parse)
            .map(|k| (k, true))
            .ok_or_else(|| {
                Error::PreconditionFailed("Invalid argument, 'x-delayed-type' must be an existing exchange type".into())
            });
    }
    let Some(parsed) = ExchangeKind::parse(kind) else {
        return Err(Error::CommandInvalid(format!("unknown exchange type '{kind}'")));
    };
    let delayed = arguments.get("x-delayed-exchange").and_then(|v| v.as_bool()) == Some(true);
    Ok((parsed, delayed))
}

/// Leaves each queue once in `out` (a route may reach one through several bindings).
fn dedup(out: &mut Vec<Arc<Queue>>) {
    if out.len() > 1 {
        out.sort_unstable_by_key(Arc::as_ptr);
        out.dedup_by(|a, b| Arc::ptr_eq(a, b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_changes_written_to_the_definitions_log_are_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vhost = VHost::open("counted", dir.path(), StoreSettings::default()).expect("open");
        let durable = QueueOptions {
            durable: true,
            ..Default::default()
        };
        let before = vhost.definition_changes();
        vhost
            .declare_queue("transient", &QueueOptions::default(), FieldTable::default(), 1)
            .expect("declare");
        assert_eq!(vhost.definition_changes(), before, "a transient queue is not logged");
        vhost
            .declare_queue("kept", &durable, FieldTable::default(), 1)
            .expect("declare");
        let declared = vhost.definition_changes();
        assert!(declared > before, "a durable queue is logged");
        vhost
            .declare_queue("kept", &durable, FieldTable::default(), 1)
            .expect("redeclare");
        assert_eq!(vhost.definition_changes(), declared, "a redeclaration writes nothing");
        vhost.delete_queue("kept", false, false, None).expect("delete");
        assert!(vhost.definition_changes() > declared, "a deletion is logged");
    }
}
