//! The durable definitions of a vhost (exchanges, queues, bindings) as a log of
//! changes, one JSON document per line, and the replay that turns the log back
//! into the current set at start-up.
//!
//! Line shapes: `{"exchange": {...}}`, `{"delete_exchange": "name"}`,
//! `{"queue": {...}}`, `{"delete_queue": "name"}`, `{"bind": {...}}`,
//! `{"unbind": {...}}`, `{"policy": {...}}`, `{"delete_policy": "name"}` (and the
//! same for `operator_policy`), `{"parameter": {"component", "name", "value"}}`,
//! `{"delete_parameter": {"component", "name"}}`, where the objects use RabbitMQ's definitions-export
//! field names (`name`, `type`, `durable`, `auto_delete`, `internal`,
//! `arguments`, `source`, `destination`, `destination_type`, `routing_key`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// A line recording an exchange declaration.
pub fn exchange(name: &str, kind: &str, auto_delete: bool, internal: bool, arguments: Value) -> Value {
    json!({"exchange": {"name": name, "type": kind, "durable": true, "auto_delete": auto_delete,
                        "internal": internal, "arguments": arguments}})
}

/// A line recording a queue declaration.
pub fn queue(name: &str, auto_delete: bool, arguments: Value) -> Value {
    json!({"queue": {"name": name, "durable": true, "auto_delete": auto_delete, "arguments": arguments}})
}

/// A line recording a deletion (`what` is `exchange` or `queue`).
pub fn delete(what: &str, name: &str) -> Value {
    json!({ format!("delete_{what}"): name })
}

/// A line recording a binding (`op` is `bind` or `unbind`).
pub fn binding(
    op: &str,
    source: &str,
    destination: &str,
    to_queue: bool,
    routing_key: &str,
    arguments: Value,
) -> Value {
    json!({ op: {"source": source, "destination": destination,
                 "destination_type": if to_queue { "queue" } else { "exchange" },
                 "routing_key": routing_key, "arguments": arguments}})
}

fn binding_key(b: &Value) -> (String, String, String, String, String) {
    let s = |k: &str| b[k].as_str().unwrap_or_default().to_string();
    (
        s("source"),
        s("destination"),
        s("destination_type"),
        s("routing_key"),
        b["arguments"].to_string(),
    )
}

/// Replays a log into the definitions that are current: exchanges, then queues,
/// then bindings, each once. Lines of unknown shape are skipped with a warning.
pub fn compact(lines: Vec<Value>, vhost: &str) -> Vec<Value> {
    let mut exchanges: BTreeMap<String, Value> = BTreeMap::new();
    let mut queues: BTreeMap<String, Value> = BTreeMap::new();
    let mut bindings: Vec<Value> = Vec::new();
    let mut policies: BTreeMap<(String, String), Value> = BTreeMap::new();
    let mut parameters: BTreeMap<(String, String), Value> = BTreeMap::new();
    for line in lines {
        let Some((op, body)) = line.as_object().and_then(|o| o.iter().next()) else {
            tracing::warn!(vhost, "skipping definitions line that is not an object: {line}");
            continue;
        };
        let name = body.get("name").and_then(Value::as_str).or_else(|| body.as_str());
        match (op.as_str(), name) {
            ("exchange", Some(n)) => {
                exchanges.insert(n.to_string(), line.clone());
            }
            ("queue", Some(n)) => {
                queues.insert(n.to_string(), line.clone());
            }
            ("delete_exchange", Some(n)) => {
                exchanges.remove(n);
                bindings.retain(|b| {
                    let (s, d, t, _, _) = binding_key(&b["bind"]);
                    s != n && !(d == n && t == "exchange")
                });
            }
            ("delete_queue", Some(n)) => {
                queues.remove(n);
                bindings.retain(|b| {
                    let (_, d, t, _, _) = binding_key(&b["bind"]);
                    !(d == n && t == "queue")
                });
            }
            ("policy" | "operator_policy", Some(n)) => {
                policies.insert((op.clone(), n.to_string()), line.clone());
            }
            ("delete_policy", Some(n)) => {
                policies.remove(&("policy".to_string(), n.to_string()));
            }
            ("delete_operator_policy", Some(n)) => {
                policies.remove(&("operator_policy".to_string(), n.to_string()));
            }
            ("parameter" | "delete_parameter", Some(n)) => {
                let component = body["component"].as_str().unwrap_or_default().to_string();
                if op == "parameter" {
                    parameters.insert((component, n.to_string()), line.clone());
                } else {
                    parameters.remove(&(component, n.to_string()));
                }
            }
            ("bind", _) => {
                let key = binding_key(body);
                if !bindings.iter().any(|b| binding_key(&b["bind"]) == key) {
                    bindings.push(line.clone());
                }
            }
            ("unbind", _) => {
                let key = binding_key(body);
                bindings.retain(|b| binding_key(&b["bind"]) != key);
            }
            _ => tracing::warn!(vhost, "skipping unknown definitions line: {line}"),
        }
    }
    exchanges
        .into_values()
        .chain(queues.into_values())
        .chain(bindings)
        .chain(policies.into_values())
        .chain(parameters.into_values())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_keeps_the_last_value_of_each_parameter() {
        let p = |c: &str, n: &str, v: i64| json!({"parameter": {"component": c, "name": n, "value": v}});
        let lines = vec![
            p("shovel", "a", 1),
            p("shovel", "a", 2),
            p("federation-upstream", "a", 3),
            p("shovel", "b", 4),
            json!({"delete_parameter": {"component": "shovel", "name": "b"}}),
        ];
        let out = compact(lines, "/");
        assert_eq!(out, vec![p("federation-upstream", "a", 3), p("shovel", "a", 2)]);
    }

    #[test]
    fn replay_keeps_only_what_is_current() {
        let lines = vec![
            exchange("e", "topic", false, false, json!({})),
            queue("q1", false, json!({})),
            queue("q2", false, json!({})),
            binding("bind", "e", "q1", true, "a.#", json!({})),
            binding("bind", "e", "q2", true, "b", json!({})),
            binding("bind", "e", "q2", true, "b", json!({})),
            delete("queue", "q1"),
            binding("bind", "e", "q2", true, "c", json!({})),
            binding("unbind", "e", "q2", true, "c", json!({})),
            json!({"nonsense": 1}),
        ];
        let out = compact(lines, "/");
        assert_eq!(out.len(), 3, "{out:?}");
        assert!(out[0].get("exchange").is_some());
        assert_eq!(out[1]["queue"]["name"], "q2");
        assert_eq!(out[2]["bind"]["routing_key"], "b");
    }
}
