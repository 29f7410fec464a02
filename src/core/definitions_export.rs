//! RabbitMQ's definitions export of the broker or of one vhost, as the HTTP
//! API (`GET /api/definitions`), `lavinmqctl export_definitions` and the
//! offline export of a data dir give it.
//!
//! The export of the whole broker is
//! `{"rabbit_version", "rabbitmq_version", "product_name", "product_version",
//! "users", "vhosts", "permissions", "topic_permissions", "parameters",
//! "global_parameters", "policies", "operator_policies", "queues", "exchanges",
//! "bindings"}`; that of one vhost has neither users, vhosts nor permissions, and
//! its entities carry no `vhost` field. Only what survives a restart is exported:
//! durable, non-exclusive queues; durable exchanges other than the default and
//! `amq.*` ones; bindings between durable ends, without the implicit bindings of
//! the default exchange. User tags are exported as a list (as RabbitMQ 3.10
//! does).
//!
//! Vhosts carry their metadata and limits as RabbitMQ exports them
//! (`{"name", "description", "tags", "default_queue_type", "limits",
//! "metadata": {"description", "tags", "default_queue_type"}}`); limits are
//! also exported the way RabbitMQ keeps them: as a `parameters` item of
//! component `vhost-limits` named `limits`. Runtime parameters and global
//! parameters are exported too.

use serde_json::{Value, json};

use super::binding_list;
use super::broker::Broker;
use super::definition_json;
use super::user::User;
use super::vhost::{Parameter, VHost, VHostLimits, VHostMeta};

/// The RabbitMQ version the export claims (the one `/api/overview` reports).
const RABBIT_VERSION: &str = "3.10.0";

/// The durable queues, exchanges and bindings and the policies of a vhost, as
/// `(policies, operator_policies, queues, exchanges, bindings)`.
fn vhost_entities(v: &VHost) -> [Vec<Value>; 5] {
    let policies = v.policies(false).iter().map(|p| p.to_json(&v.name)).collect();
    let operator = v.policies(true).iter().map(|p| p.to_json(&v.name)).collect();
    let mut queues = v.queues();
    queues.retain(|q| q.durable && q.exclusive_owner.is_none());
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    let queues = queues
        .iter()
        .map(|q| definition_json::queue_def_json(&v.name, &q.name, q.queue_type.name(), q.auto_delete, &q.arguments()))
        .collect();
    let mut exchanges = v.exchanges();
    exchanges.retain(|e| e.durable && !e.name.is_empty() && !e.name.starts_with("amq."));
    exchanges.sort_by(|a, b| a.name.cmp(&b.name));
    let exchanges = exchanges
        .iter()
        .map(|e| definition_json::exchange_definition_json(&v.name, e))
        .collect();
    let bindings = binding_list::of_vhost(v)
        .into_iter()
        .filter(|b| b.durable && !b.implicit)
        .map(|b| definition_json::binding_def_json(&b))
        .collect();
    [policies, operator, queues, exchanges, bindings]
}

fn header() -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("rabbit_version".into(), json!(RABBIT_VERSION));
    m.insert("rabbitmq_version".into(), json!(RABBIT_VERSION));
    m.insert("product_name".into(), json!("LavinMQ"));
    m.insert("product_version".into(), json!(env!("CARGO_PKG_VERSION")));
    m.insert("parameters".into(), json!([]));
    m
}

const ENTITY_KEYS: [&str; 5] = ["policies", "operator_policies", "queues", "exchanges", "bindings"];

/// One vhost's part of the whole-broker export, gathered from a running
/// vhost or read from a data dir (`lavinmqctl definitions`), so that both
/// exports come out of one renderer.
pub(super) struct VhostPart {
    /// The vhost's name.
    pub name: String,
    /// Its description, tags and default queue type.
    pub meta: VHostMeta,
    /// Its limits.
    pub limits: VHostLimits,
    /// Its runtime parameters, in the vhost's order.
    pub parameters: Vec<Parameter>,
    /// `(policies, operator_policies, queues, exchanges, bindings)`, as exported.
    pub entities: [Vec<Value>; 5],
}

impl VhostPart {
    fn of(v: &VHost) -> VhostPart {
        VhostPart {
            name: v.name.clone(),
            meta: v.meta(),
            limits: v.limits(),
            parameters: v.parameters(),
            entities: vhost_entities(v),
        }
    }
}

/// The definitions of the whole broker.
pub fn export_all(broker: &Broker) -> Value {
    let mut vhosts = broker.vhosts();
    vhosts.sort_by(|a, b| a.name.cmp(&b.name));
    let parts = vhosts.iter().map(|v| VhostPart::of(v)).collect();
    render_all(
        &broker.users.list(),
        parts,
        global_parameters_json(&broker.global_parameters()),
    )
}

/// The whole-broker export of `users` (sorted by name), the vhosts' parts
/// (sorted by name) and the global parameters.
pub(super) fn render_all(users: &[User], vhosts: Vec<VhostPart>, global_parameters: Value) -> Value {
    let mut out = header();
    out.insert("users".into(), users.iter().map(definition_json::user_json).collect());
    out.insert(
        "vhosts".into(),
        vhosts
            .iter()
            .map(|v| vhost_def_json(&v.name, &v.meta, &v.limits))
            .collect(),
    );
    let mut permissions = Vec::new();
    for u in users {
        let mut ps: Vec<_> = u.permissions.iter().collect();
        ps.sort_by(|a, b| a.0.cmp(b.0));
        permissions.extend(
            ps.into_iter()
                .map(|(v, p)| definition_json::permission_json(&u.name, v, p)),
        );
    }
    out.insert("permissions".into(), Value::Array(permissions));
    let topic_permissions: Vec<Value> = users
        .iter()
        .flat_map(|u| definition_json::user_topic_permissions_json(u, None))
        .collect();
    out.insert("topic_permissions".into(), Value::Array(topic_permissions));
    out.insert("global_parameters".into(), global_parameters);
    let parameters = vhosts
        .iter()
        .flat_map(|v| parameters_json(&v.name, &v.limits, v.parameters.clone(), true))
        .collect();
    out.insert("parameters".into(), Value::Array(parameters));
    let mut lists: [Vec<Value>; 5] = Default::default();
    for v in vhosts {
        for (all, part) in lists.iter_mut().zip(v.entities) {
            all.extend(part);
        }
    }
    for (key, list) in ENTITY_KEYS.into_iter().zip(lists) {
        out.insert(key.into(), Value::Array(list));
    }
    Value::Object(out)
}

/// The definitions of one vhost, without `vhost` fields.
pub fn export_vhost(v: &VHost) -> Value {
    let mut out = header();
    for (key, mut list) in ENTITY_KEYS.into_iter().zip(vhost_entities(v)) {
        for item in &mut list {
            if let Some(o) = item.as_object_mut() {
                o.remove("vhost");
            }
        }
        out.insert(key.into(), Value::Array(list));
    }
    out.insert(
        "parameters".into(),
        Value::Array(parameters_json(&v.name, &v.limits(), v.parameters(), false)),
    );
    Value::Object(out)
}

/// A vhost as RabbitMQ exports it: name, metadata (also at the top level, as
/// RabbitMQ 3.11+ has it) and limits (`[]` when none, as RabbitMQ writes it).
fn vhost_def_json(name: &str, meta: &VHostMeta, limits: &VHostLimits) -> Value {
    let mut metadata = json!({"description": meta.description, "tags": meta.tags});
    let mut out = json!({"name": name, "description": meta.description, "tags": meta.tags,
                         "limits": if limits.is_empty() { json!([]) } else { limits.to_json() }});
    if let Some(t) = &meta.default_queue_type {
        metadata["default_queue_type"] = json!(t);
        out["default_queue_type"] = json!(t);
    }
    out["metadata"] = metadata;
    out
}

/// The runtime parameters of a vhost, its limits (component `vhost-limits`)
/// first; `with_vhost` adds the `vhost` field of the whole-broker export.
fn parameters_json(vhost: &str, limits: &VHostLimits, parameters: Vec<Parameter>, with_vhost: bool) -> Vec<Value> {
    let limits = (!limits.is_empty()).then(|| Parameter {
        component: VHOST_LIMITS.into(),
        name: "limits".into(),
        value: limits.to_json(),
    });
    limits
        .into_iter()
        .chain(parameters)
        .map(|p| {
            let mut j = definition_json::parameter_json(vhost, &p);
            if !with_vhost && let Some(o) = j.as_object_mut() {
                o.remove("vhost");
            }
            j
        })
        .collect()
}

/// The global parameters, as exported.
pub(super) fn global_parameters_json(parameters: &[(String, Value)]) -> Value {
    parameters
        .iter()
        .map(|(name, value)| definition_json::global_parameter_json(name, value))
        .collect()
}

/// The component RabbitMQ keeps vhost limits under.
pub(super) const VHOST_LIMITS: &str = "vhost-limits";
