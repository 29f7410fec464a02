//! The JSON shapes RabbitMQ gives users, permissions, topic permissions,
//! parameters, queues, exchanges and bindings, both in its management API
//! and in its definitions files: one place for the HTTP API and the
//! definitions export to take them from.

use serde_json::{Value, json};

use super::FieldTable;
use super::binding_list::BindingView;
use super::exchange::Exchange;
use super::table_json::table_to_json;
use super::topic_permissions::{TopicPermission, TopicPermissions};
use super::user::{Permissions, User};
use super::vhost::Parameter;

/// A user as the API and definitions show it. It carries the password hash,
/// so only administrators may be shown it (as in RabbitMQ).
pub fn user_json(u: &User) -> Value {
    json!({"name": u.name, "password_hash": u.password_hash, "hashing_algorithm": u.hashing_algorithm,
           "tags": u.tags, "limits": u.limits})
}

/// A permission as the API and definitions show it.
pub fn permission_json(user: &str, vhost: &str, p: &Permissions) -> Value {
    json!({"user": user, "vhost": vhost, "configure": p.configure, "write": p.write, "read": p.read})
}

/// User tags as RabbitMQ accepts them: a comma-separated string or a list.
pub fn parse_tags(v: &Value) -> Vec<String> {
    let tags: Vec<&str> = match v {
        Value::String(s) => s.split(',').collect(),
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    tags.into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

/// One topic permission as the API and definitions show it.
fn topic_permission_json(user: &str, vhost: &str, exchange: &str, p: &TopicPermission) -> Value {
    json!({"user": user, "vhost": vhost, "exchange": exchange, "write": p.write, "read": p.read})
}

/// Every topic permission of `u` (in `vhost` only, when given), vhost by
/// vhost (sorted), then by exchange.
pub fn user_topic_permissions_json(u: &User, vhost: Option<&str>) -> Vec<Value> {
    let mut vhosts: Vec<(&String, &TopicPermissions)> = u
        .topic_permissions
        .iter()
        .filter(|(v, _)| vhost.is_none_or(|only| only == v.as_str()))
        .collect();
    vhosts.sort_by(|a, b| a.0.cmp(b.0));
    vhosts
        .into_iter()
        .flat_map(|(v, by_exchange)| by_exchange.iter().map(|(e, p)| topic_permission_json(&u.name, v, e, p)))
        .collect()
}

/// A vhost parameter as RabbitMQ's API shows it.
pub fn parameter_json(vhost: &str, p: &Parameter) -> Value {
    json!({"name": p.name, "vhost": vhost, "component": p.component, "value": p.value})
}

/// A global parameter as RabbitMQ's API shows it.
pub fn global_parameter_json(name: &str, value: &Value) -> Value {
    json!({"name": name, "value": value})
}

/// A durable queue as exported.
pub fn queue_def_json(vhost: &str, name: &str, queue_type: &str, auto_delete: bool, arguments: &FieldTable) -> Value {
    json!({"name": name, "vhost": vhost, "type": queue_type, "durable": true,
           "auto_delete": auto_delete, "arguments": table_to_json(arguments)})
}

/// An exchange as a definitions export shows it: what it was declared with,
/// without what the broker derives at run time (the policy in force, whether
/// it delays, its statistics), which an export read from the files without a
/// broker could not know.
pub fn exchange_definition_json(vhost: &str, e: &Exchange) -> Value {
    json!({"name": e.name, "vhost": vhost, "type": e.declared_type, "durable": e.durable,
           "auto_delete": e.auto_delete, "internal": e.internal, "arguments": table_to_json(&e.arguments)})
}

/// A binding as exported.
pub fn binding_def_json(b: &BindingView) -> Value {
    json!({"source": b.source, "vhost": b.vhost, "destination": b.destination,
           "destination_type": b.destination_type(), "routing_key": b.routing_key,
           "arguments": b.arguments})
}
