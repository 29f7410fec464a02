//! RabbitMQ's definitions import: a file exported from RabbitMQ, LavinMQ or
//! here, loaded into the broker (`POST /api/definitions`, `load_definitions`
//! at start-up, the takeover of a data dir).
//!
//! Import creates what is missing and leaves existing queues and exchanges as
//! they are, so importing the same file twice changes nothing. Users are
//! created or updated (password hash and tags), permissions, topic
//! permissions and policies set. User tags are read from a list or a
//! comma-separated string (older exports). Vhost limits come as RabbitMQ keeps
//! them (a `parameters` item of component `vhost-limits`) or in the vhost
//! item; the source broker's `internal_cluster_id` global parameter names
//! that broker and is not taken over. Every item is checked first: if any
//! would fail, nothing is applied.

use std::collections::HashSet;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::Error;
use super::broker::Broker;
use super::definition_json;
use super::definitions_export::VHOST_LIMITS;
use super::exchange_declaration::{ExchangeDeclaration, yes};
use super::limits::NamedLimits;
use super::policy::Policy;
use super::table_json::json_to_table;
use super::topic_permissions::TopicPermission;
use super::user::{self, Permissions, User, UserLimits};
use super::vhost::{QueueOptions, VHost};

/// Why definitions were not imported.
#[derive(Debug, thiserror::Error)]
pub enum DefinitionsError {
    /// The file, or an item in it, cannot be imported (nothing was).
    #[error("{0}")]
    Invalid(String),
    /// The broker failed to apply a checked item.
    #[error("{0}")]
    Internal(String),
}

/// What an import step gives.
type Result<T> = std::result::Result<T, DefinitionsError>;

impl DefinitionsError {
    fn invalid(reason: impl Into<String>) -> Self {
        DefinitionsError::Invalid(reason.into())
    }
}

/// A definitions file; every part is optional.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Definitions {
    users: Vec<UserDef>,
    vhosts: Vec<VHostDef>,
    permissions: Vec<PermissionDef>,
    topic_permissions: Vec<TopicPermissionDef>,
    policies: Vec<Value>,
    operator_policies: Vec<Value>,
    queues: Vec<QueueDef>,
    exchanges: Vec<ExchangeDef>,
    bindings: Vec<BindingDef>,
    parameters: Vec<ParameterDef>,
    global_parameters: Vec<GlobalParameterDef>,
    /// Present in LavinMQ's exports only.
    lavinmq_version: Option<Value>,
}

#[derive(Deserialize)]
struct ParameterDef {
    vhost: Option<String>,
    component: String,
    name: String,
    value: Value,
}

#[derive(Deserialize)]
struct GlobalParameterDef {
    name: String,
    value: Value,
}

#[derive(Deserialize)]
struct UserDef {
    name: String,
    password_hash: Option<String>,
    password: Option<String>,
    hashing_algorithm: Option<String>,
    #[serde(default)]
    tags: Value,
    /// RabbitMQ exports user limits here (an empty object when none).
    #[serde(default)]
    limits: Option<UserLimits>,
}

#[derive(Deserialize)]
struct VHostDef {
    name: String,
    description: Option<String>,
    tags: Option<Value>,
    default_queue_type: Option<String>,
    #[serde(default)]
    metadata: Value,
    #[serde(default)]
    limits: Value,
}

#[derive(Deserialize)]
struct PermissionDef {
    user: String,
    vhost: String,
    configure: String,
    write: String,
    read: String,
}

impl PermissionDef {
    fn permissions(&self) -> Permissions {
        Permissions {
            configure: self.configure.clone(),
            write: self.write.clone(),
            read: self.read.clone(),
        }
    }
}

#[derive(Deserialize)]
struct TopicPermissionDef {
    user: String,
    vhost: String,
    exchange: String,
    write: String,
    read: String,
}

impl TopicPermissionDef {
    fn permission(&self) -> TopicPermission {
        TopicPermission {
            write: self.write.clone(),
            read: self.read.clone(),
        }
    }

    fn what(&self) -> String {
        format!(
            "topic permissions of user '{}' in vhost '{}' on exchange '{}'",
            self.user, self.vhost, self.exchange
        )
    }
}

#[derive(Deserialize)]
struct QueueDef {
    name: String,
    vhost: Option<String>,
    #[serde(default = "yes")]
    durable: bool,
    #[serde(default)]
    auto_delete: bool,
    #[serde(default)]
    arguments: Value,
    #[serde(rename = "type")]
    kind: Option<String>,
}

impl QueueDef {
    fn options(&self) -> QueueOptions {
        QueueOptions {
            durable: self.durable,
            auto_delete: self.auto_delete,
            exclusive: false,
            passive: false,
        }
    }
}

#[derive(Deserialize)]
struct ExchangeDef {
    name: String,
    vhost: Option<String>,
    #[serde(flatten)]
    declare: ExchangeDeclaration,
}

#[derive(Deserialize)]
struct BindingDef {
    source: String,
    vhost: Option<String>,
    destination: String,
    destination_type: String,
    #[serde(default)]
    routing_key: String,
    #[serde(default)]
    arguments: Value,
}

/// Turns a core error about `what` into a 400 (500 for an internal error).
fn failed(what: String) -> impl FnOnce(Error) -> DefinitionsError {
    move |e| {
        let reason = format!("{what}: {}", e.text());
        match e {
            Error::Internal(_) => DefinitionsError::Internal(reason),
            _ => DefinitionsError::Invalid(reason),
        }
    }
}

fn import_user(broker: &Broker, u: &UserDef) -> Result<()> {
    // The hash keeps its algorithm (RabbitMQ's sha256, sha512 or md5, or
    // bcrypt); an unknown algorithm or a malformed hash fails the import.
    let (hash, algorithm) = match (&u.password_hash, &u.password) {
        (Some(h), _) => user::checked_hash(h, u.hashing_algorithm.as_deref())
            .map_err(|e| DefinitionsError::invalid(format!("user '{}': {e}", u.name)))?,
        (None, Some(p)) => (user::hash_password(p), user::SHA256.to_string()),
        (None, None) => {
            return Err(DefinitionsError::invalid(format!(
                "user '{}': no password_hash",
                u.name
            )));
        }
    };
    let tags = definition_json::parse_tags(&u.tags);
    let what = || format!("user '{}'", u.name);
    if let Some(existing) = broker.users.get(&u.name) {
        let limits = u.limits.unwrap_or(existing.limits);
        if existing.password_hash == hash
            && existing.hashing_algorithm == algorithm
            && existing.tags == tags
            && existing.limits == limits
        {
            return Ok(());
        }
        broker
            .users
            .update(&u.name, |x| {
                x.password_hash = hash;
                x.hashing_algorithm = algorithm;
                x.tags = tags;
                x.limits = limits;
            })
            .map_err(failed(what()))?;
        return Ok(());
    }
    let new = User {
        name: u.name.clone(),
        password_hash: hash,
        hashing_algorithm: algorithm,
        tags,
        permissions: Default::default(),
        topic_permissions: Default::default(),
        limits: u.limits.unwrap_or_default(),
    };
    broker.users.put(new).map_err(failed(what()))
}

fn import_permission(broker: &Broker, p: &PermissionDef) -> Result<()> {
    let what = format!("permissions of user '{}' in vhost '{}'", p.user, p.vhost);
    if broker.vhost(&p.vhost).is_none() {
        return Err(DefinitionsError::invalid(format!("{what}: no such vhost")));
    }
    let perms = p.permissions();
    perms
        .validate()
        .map_err(|e| DefinitionsError::invalid(format!("{what}: {e}")))?;
    let found = broker
        .users
        .update(&p.user, |u| {
            u.permissions.insert(p.vhost.clone(), perms);
        })
        .map_err(failed(what.clone()))?;
    if !found {
        return Err(DefinitionsError::invalid(format!("{what}: no such user")));
    }
    Ok(())
}

fn import_policy(v: &VHost, p: &Value, operator: bool) -> Result<()> {
    let name = p["name"].as_str().unwrap_or_default();
    let what = format!("policy '{name}' in vhost '{}'", v.name);
    if name.is_empty() {
        return Err(DefinitionsError::invalid(format!("{what}: no name")));
    }
    let policy = Policy::from_json(p, operator).map_err(failed(what.clone()))?;
    let current = v.policies(operator).into_iter().find(|x| x.name == name);
    if current.is_some_and(|c| c.to_json(&v.name) == policy.to_json(&v.name)) {
        return Ok(());
    }
    v.set_policy(policy, operator).map_err(failed(what))
}

fn import_exchange(v: &VHost, e: &ExchangeDef) -> Result<()> {
    if e.name.is_empty() || v.exchange(&e.name).is_some() {
        return Ok(());
    }
    if e.name.starts_with("amq.") {
        tracing::warn!(vhost = %v.name, "definitions import: exchange '{}' skipped (reserved name)", e.name);
        return Ok(());
    }
    e.declare
        .declare_in(v, &e.name)
        .map_err(failed(format!("exchange '{}' in vhost '{}'", e.name, v.name)))
}

fn import_queue(v: &VHost, q: &QueueDef) -> Result<()> {
    if v.queue(&q.name).is_some() {
        return Ok(());
    }
    if q.name.is_empty() || q.name.starts_with("amq.") {
        tracing::warn!(vhost = %v.name, "definitions import: queue '{}' skipped (reserved name)", q.name);
        return Ok(());
    }
    let arguments = queue_arguments(q);
    let opts = q.options();
    v.declare_queue(&q.name, &opts, arguments, 0)
        .map(|_| ())
        .map_err(failed(format!("queue '{}' in vhost '{}'", q.name, v.name)))
}

/// A queue item's arguments, with its `type` when the arguments lack one.
fn queue_arguments(q: &QueueDef) -> crate::core::FieldTable {
    let mut arguments = json_to_table(&q.arguments);
    // RabbitMQ exports the queue type beside the arguments; a hand-written file
    // may give only the type.
    if let Some(kind) = q.kind.as_deref().filter(|k| matches!(*k, "quorum" | "stream"))
        && arguments.get("x-queue-type").is_none()
    {
        arguments.insert(
            crate::core::ShortStr::from("x-queue-type"),
            crate::core::table_json::json_to_value(&json!(kind)),
        );
    }
    arguments
}

fn import_binding(v: &VHost, b: &BindingDef) -> Result<()> {
    if b.source.is_empty() {
        return Ok(());
    }
    let what = format!(
        "binding from '{}' to {} '{}' in vhost '{}'",
        b.source, b.destination_type, b.destination, v.name
    );
    let args = json_to_table(&b.arguments);
    let result = match b.destination_type.as_str() {
        "queue" => v.bind_queue(&b.destination, &b.source, &b.routing_key, args, None),
        "exchange" => v.bind_exchange(&b.destination, &b.source, &b.routing_key, args),
        other => {
            return Err(DefinitionsError::invalid(format!(
                "{what}: unknown destination_type '{other}'"
            )));
        }
    };
    result.map_err(failed(what))
}

/// Sets the metadata and limits a vhost item carries (the top-level fields
/// win over those in `metadata`); a vhost item with neither changes nothing.
fn import_vhost_details(broker: &Broker, d: &VHostDef) -> Result<()> {
    let what = || format!("vhost '{}'", d.name);
    let Some(v) = broker.vhost(&d.name) else {
        return Ok(());
    };
    let md = &d.metadata;
    let description = d
        .description
        .clone()
        .or_else(|| md["description"].as_str().map(String::from));
    let tags = d.tags.as_ref().or_else(|| md.get("tags")).filter(|t| !t.is_null());
    let queue_type = d
        .default_queue_type
        .clone()
        .or_else(|| md["default_queue_type"].as_str().map(String::from))
        .filter(|t| !t.is_empty() && t != "undefined");
    if description.is_some() || tags.is_some() || queue_type.is_some() {
        let current = v.meta();
        let meta = crate::core::vhost::VHostMeta {
            description: description.unwrap_or(current.description),
            tags: tags.map(definition_json::parse_tags).unwrap_or(current.tags),
            default_queue_type: queue_type.or(current.default_queue_type),
        };
        broker.set_vhost_meta(&d.name, meta).map_err(failed(what()))?;
    }
    import_limits(broker, &v, &d.limits)
}

/// Sets the limits in a `{"max-connections": N, ...}` object (anything else,
/// such as RabbitMQ's `[]` for none, sets nothing).
fn import_limits(broker: &Broker, v: &VHost, limits: &Value) -> Result<()> {
    let Some(m) = limits.as_object() else {
        return Ok(());
    };
    let what = || format!("limits of vhost '{}'", v.name);
    broker
        .update_vhost_limits(&v.name, |l| {
            for (name, value) in m {
                let n = value
                    .as_i64()
                    .ok_or_else(|| Error::PreconditionFailed(format!("limit '{name}' must be an integer")))?;
                l.set(name, n)?;
            }
            Ok(())
        })
        .map_err(failed(what()))
}

fn import_parameter(broker: &Broker, v: &VHost, p: &ParameterDef) -> Result<()> {
    if p.component == VHOST_LIMITS {
        return import_limits(broker, v, &p.value);
    }
    let what = format!(
        "parameter '{}' of component '{}' in vhost '{}'",
        p.name, p.component, v.name
    );
    if p.component.is_empty() || p.name.is_empty() || p.value.is_null() {
        return Err(DefinitionsError::invalid(format!(
            "{what}: component, name and value are required"
        )));
    }
    if v.parameter(&p.component, &p.name).as_ref() == Some(&p.value) {
        return Ok(());
    }
    v.set_parameter(&p.component, &p.name, p.value.clone(), None)
        .map(|_| ())
        .map_err(failed(what))
}

fn import_global_parameter(broker: &Broker, p: &GlobalParameterDef) -> Result<()> {
    if p.name == "internal_cluster_id" || broker.global_parameter(&p.name).as_ref() == Some(&p.value) {
        return Ok(());
    }
    if p.name.is_empty() || p.value.is_null() {
        return Err(DefinitionsError::invalid(
            "global parameter: name and value are required",
        ));
    }
    broker
        .set_global_parameter(&p.name, p.value.clone())
        .map(|_| ())
        .map_err(failed(format!("global parameter '{}'", p.name)))
}

/// What the broker will hold once a definitions file is applied, as far as
/// the file's own items can refer to each other (a binding to a queue the same
/// file declares), for checking every item before anything is applied.
struct Plan<'a> {
    broker: &'a Broker,
    only: Option<&'a Arc<VHost>>,
    vhosts: HashSet<&'a str>,
    users: HashSet<&'a str>,
    /// (vhost, name) of the exchanges and queues the file declares.
    exchanges: HashSet<(String, &'a str)>,
    queues: HashSet<(String, &'a str)>,
}

impl<'a> Plan<'a> {
    fn new(broker: &'a Broker, defs: &'a Definitions, only: Option<&'a Arc<VHost>>) -> Self {
        let mut plan = Plan {
            broker,
            only,
            vhosts: defs.vhosts.iter().map(|v| v.name.as_str()).collect(),
            users: defs.users.iter().map(|u| u.name.as_str()).collect(),
            exchanges: HashSet::new(),
            queues: HashSet::new(),
        };
        plan.exchanges = defs
            .exchanges
            .iter()
            .map(|e| (plan.vhost_of(e.vhost.as_deref()), e.name.as_str()))
            .collect();
        plan.queues = defs
            .queues
            .iter()
            .map(|q| (plan.vhost_of(q.vhost.as_deref()), q.name.as_str()))
            .collect();
        plan
    }

    /// The vhost an item goes to.
    fn vhost_of(&self, vhost: Option<&str>) -> String {
        match self.only {
            Some(v) => v.name.clone(),
            None => vhost.unwrap_or("/").to_string(),
        }
    }

    fn vhost_exists(&self, name: &str) -> bool {
        self.only.is_some() || self.vhosts.contains(name) || self.broker.vhost(name).is_some()
    }

    fn user_exists(&self, name: &str) -> bool {
        self.users.contains(name) || self.broker.users.get(name).is_some()
    }

    fn exchange_exists(&self, vhost: &str, name: &str) -> bool {
        self.exchanges.contains(&(vhost.to_string(), name))
            || self.broker.vhost(vhost).is_some_and(|v| v.exchange(name).is_some())
            || (self.broker.vhost(vhost).is_none() && name.starts_with("amq."))
    }

    fn queue_exists(&self, vhost: &str, name: &str) -> bool {
        self.queues.contains(&(vhost.to_string(), name))
            || self.broker.vhost(vhost).is_some_and(|v| v.queue(name).is_some())
    }

    /// Checks a vhost's `{"max-connections": N, ...}` limits.
    fn check_limits(&self, vhost: &str, limits: &Value, problems: &mut Vec<String>) {
        let Some(m) = limits.as_object() else { return };
        let mut scratch = crate::core::vhost::VHostLimits::default();
        for (name, value) in m {
            let ok = value.as_i64().is_some_and(|n| scratch.set(name, n).is_ok());
            if !ok {
                problems.push(format!("limits of vhost '{vhost}': invalid limit '{name}': {value}"));
            }
        }
    }

    /// Every problem applying `defs` would meet, in the file's order.
    fn problems(&self, defs: &Definitions) -> Vec<String> {
        let mut out = Vec::new();
        let vhost_missing = |vhost: &str, what: &dyn Fn() -> String, out: &mut Vec<String>| {
            let missing = !self.vhost_exists(vhost);
            if missing {
                out.push(format!("{}: vhost '{vhost}' does not exist", what()));
            }
            missing
        };
        if self.only.is_none() {
            for v in &defs.vhosts {
                if v.name.is_empty() {
                    out.push("vhost: empty name".into());
                }
                self.check_limits(&v.name, &v.limits, &mut out);
            }
            for u in &defs.users {
                match (&u.password_hash, &u.password) {
                    (Some(h), _) => {
                        if let Err(e) = user::checked_hash(h, u.hashing_algorithm.as_deref()) {
                            out.push(format!("user '{}': {e}", u.name));
                        }
                    }
                    (None, Some(_)) => {}
                    (None, None) => out.push(format!("user '{}': no password_hash", u.name)),
                }
            }
            for p in &defs.permissions {
                let what = || format!("permissions of user '{}' in vhost '{}'", p.user, p.vhost);
                vhost_missing(&p.vhost, &what, &mut out);
                if !self.user_exists(&p.user) {
                    out.push(format!("{}: no such user", what()));
                }
                let perms = p.permissions();
                if let Err(e) = perms.validate() {
                    out.push(format!("{}: {e}", what()));
                }
            }
            for p in &defs.topic_permissions {
                let what = || p.what();
                vhost_missing(&p.vhost, &what, &mut out);
                if !self.user_exists(&p.user) {
                    out.push(format!("{}: no such user", what()));
                }
                if let Err(e) = p.permission().validate() {
                    out.push(format!("{}: {e}", what()));
                }
            }
            for p in &defs.global_parameters {
                if p.name != "internal_cluster_id" && (p.name.is_empty() || p.value.is_null()) {
                    out.push("global parameter: name and value are required".into());
                }
            }
        }
        for p in &defs.parameters {
            let vhost = self.vhost_of(p.vhost.as_deref());
            let what = || {
                format!(
                    "parameter '{}' of component '{}' in vhost '{vhost}'",
                    p.name, p.component
                )
            };
            if vhost_missing(&vhost, &what, &mut out) {
                continue;
            }
            if p.component == VHOST_LIMITS {
                self.check_limits(&vhost, &p.value, &mut out);
            } else if p.component.is_empty() || p.name.is_empty() || p.value.is_null() {
                out.push(format!("{}: component, name and value are required", what()));
            }
        }
        for (list, operator) in [(&defs.policies, false), (&defs.operator_policies, true)] {
            for p in list {
                let vhost = self.vhost_of(p["vhost"].as_str());
                let name = p["name"].as_str().unwrap_or_default();
                let what = || format!("policy '{name}' in vhost '{vhost}'");
                vhost_missing(&vhost, &what, &mut out);
                if name.is_empty() {
                    out.push(format!("{}: no name", what()));
                } else if let Err(e) = Policy::from_json(p, operator) {
                    out.push(format!("{}: {}", what(), e.text()));
                }
            }
        }
        for e in &defs.exchanges {
            let vhost = self.vhost_of(e.vhost.as_deref());
            let what = || format!("exchange '{}' in vhost '{vhost}'", e.name);
            if vhost_missing(&vhost, &what, &mut out) || e.name.is_empty() || e.name.starts_with("amq.") {
                continue;
            }
            let exists = self.broker.vhost(&vhost).is_some_and(|v| v.exchange(&e.name).is_some());
            if let (false, Err(err)) = (exists, e.declare.check()) {
                out.push(format!("{}: {}", what(), err.text()));
            }
        }
        for q in &defs.queues {
            let vhost = self.vhost_of(q.vhost.as_deref());
            let what = || format!("queue '{}' in vhost '{vhost}'", q.name);
            if vhost_missing(&vhost, &what, &mut out) || q.name.is_empty() || q.name.starts_with("amq.") {
                continue;
            }
            if self.broker.vhost(&vhost).is_some_and(|v| v.queue(&q.name).is_some()) {
                continue;
            }
            let opts = q.options();
            if let Err(err) = crate::core::vhost::check_new_queue(&vhost, &q.name, &opts, &queue_arguments(q)) {
                out.push(format!("{}: {}", what(), err.text()));
            }
        }
        for b in &defs.bindings {
            let vhost = self.vhost_of(b.vhost.as_deref());
            let what = || {
                format!(
                    "binding from '{}' to {} '{}' in vhost '{vhost}'",
                    b.source, b.destination_type, b.destination
                )
            };
            if vhost_missing(&vhost, &what, &mut out) || b.source.is_empty() {
                continue;
            }
            if !self.exchange_exists(&vhost, &b.source) {
                out.push(format!("{}: no exchange '{}'", what(), b.source));
            }
            let destination_exists = match b.destination_type.as_str() {
                "queue" => self.queue_exists(&vhost, &b.destination),
                "exchange" => self.exchange_exists(&vhost, &b.destination),
                other => {
                    out.push(format!("{}: unknown destination_type '{other}'", what()));
                    continue;
                }
            };
            if !destination_exists {
                out.push(format!("{}: no {} '{}'", what(), b.destination_type, b.destination));
            }
        }
        out
    }
}

/// Imports `defs`: into vhost `only` (every `vhost` field ignored, users, vhosts
/// and permissions skipped), or into the whole broker. Every item is checked
/// first: if any would fail, nothing is applied and the error names them all.
pub fn import(broker: &Broker, defs: &Definitions, only: Option<&Arc<VHost>>) -> Result<()> {
    let problems = Plan::new(broker, defs, only).problems(defs);
    if !problems.is_empty() {
        return Err(DefinitionsError::invalid(format!(
            "nothing was imported: {} problem{} found: {}",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" },
            problems.join("; ")
        )));
    }
    apply(broker, defs, only)
}

/// Applies checked definitions (see [`import`]).
fn apply(broker: &Broker, defs: &Definitions, only: Option<&Arc<VHost>>) -> Result<()> {
    if only.is_none() {
        for v in &defs.vhosts {
            broker
                .create_vhost(&v.name)
                .map_err(failed(format!("vhost '{}'", v.name)))?;
            import_vhost_details(broker, v)?;
        }
        for u in &defs.users {
            import_user(broker, u)?;
        }
        for p in &defs.permissions {
            import_permission(broker, p)?;
        }
        for p in &defs.topic_permissions {
            super::topic_permissions::set_for_user(broker, &p.user, &p.vhost, p.exchange.clone(), p.permission())
                .map_err(|e| DefinitionsError::invalid(format!("{}: {}", p.what(), e.text())))?;
        }
    }
    let target = |vhost: Option<&str>| -> Result<Arc<VHost>> {
        if let Some(v) = only {
            return Ok(v.clone());
        }
        let name = vhost.unwrap_or("/");
        broker
            .vhost(name)
            .ok_or_else(|| DefinitionsError::invalid(format!("vhost '{name}' does not exist")))
    };
    if only.is_none() {
        for p in &defs.global_parameters {
            import_global_parameter(broker, p)?;
        }
    }
    for p in &defs.parameters {
        import_parameter(broker, &*target(p.vhost.as_deref())?, p)?;
    }
    for (list, operator) in [(&defs.policies, false), (&defs.operator_policies, true)] {
        for p in list {
            import_policy(&*target(p["vhost"].as_str())?, p, operator)?;
        }
    }
    for e in &defs.exchanges {
        import_exchange(&*target(e.vhost.as_deref())?, e)?;
    }
    for q in &defs.queues {
        import_queue(&*target(q.vhost.as_deref())?, q)?;
    }
    for b in &defs.bindings {
        import_binding(&*target(b.vhost.as_deref())?, b)?;
    }
    Ok(())
}

/// Imports a definitions document (RabbitMQ's JSON) into the whole broker, as
/// `POST /api/definitions` does; the broker calls it at start-up for
/// `load_definitions` and the takeover of a data dir, outside any HTTP
/// request.
pub fn import_document(broker: &Broker, body: &[u8]) -> Result<()> {
    parse(body).and_then(|defs| import(broker, &defs, None))
}

/// Reads a definitions document; LavinMQ's exports keep LavinMQ's
/// consistent-hash placement.
pub fn parse(body: &[u8]) -> Result<Definitions> {
    let mut defs: Definitions =
        serde_json::from_slice(body).map_err(|e| DefinitionsError::invalid(format!("invalid definitions: {e}")))?;
    if defs.lavinmq_version.is_some() {
        // Exported by LavinMQ: its consistent-hash exchanges keep LavinMQ's placement.
        for e in &mut defs.exchanges {
            e.declare.pin_lavinmq_algorithm();
        }
    }
    Ok(defs)
}
