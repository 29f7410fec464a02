//! The layout of a LavinMQ 2.x data dir, read-only: where its vhosts,
//! queues, delayed-exchange stores and MQTT retained messages are, and its
//! JSON files turned into RabbitMQ definitions.
//!
//! ```text
//! schema_version  users.json  vhosts.json  parameters.json
//! <sha1(vhost)>/  .vhost  definitions.amqp  policies.json  operator_policies.json
//!                 parameters.json  limits.json  mqtt_retained_store/{index, <md5(topic)>.msg}
//!   <sha1(queue)>/  .queue  paused  msgs.N acks.N meta.N  prio.NNN/  consumer_offsets
//! ```

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::definitions_log;

/// The file whose presence marks a LavinMQ data dir (this broker writes none).
pub const SCHEMA_FILE: &str = "schema_version";

/// The hidden user LavinMQ creates for shovels and federation; not converted.
const DIRECT_USER: &str = "__direct";

/// The exchange LavinMQ binds MQTT sessions to.
const MQTT_EXCHANGE: &str = "mqtt.default";

/// The field of a converted queue's definition naming the queue it came
/// from, when the name changed (MQTT sessions); the import ignores it.
pub const SOURCE_NAME: &str = "lavinmq_name";

/// True for a queue definition converted from a LavinMQ MQTT session.
pub fn is_mqtt_session(queue: &Value) -> bool {
    queue[SOURCE_NAME].is_string()
}

/// Turns LavinMQ's MQTT sessions (durable queues `mqtt.<client id>` of type
/// `mqtt`, bound to `mqtt.default` with topic filters) into this broker's
/// (RabbitMQ's naming: `mqtt-subscription-<client id>qos1`, bound to
/// `amq.topic` with AMQP binding keys).
fn convert_mqtt_sessions(queues: &mut [Value], bindings: &mut Vec<Value>) {
    use crate::mqtt::{session, topic_map};
    for q in queues.iter_mut() {
        let name = q["name"].as_str().unwrap_or_default().to_string();
        let Some(client_id) = name.strip_prefix("mqtt.") else {
            continue;
        };
        if q["arguments"]["x-queue-type"] != "mqtt" {
            continue;
        }
        let new_name = session::queue_name(client_id);
        q[SOURCE_NAME] = json!(name);
        q["name"] = json!(new_name);
        q["auto_delete"] = json!(false);
        q["arguments"] = json!({});
        for b in bindings.iter_mut().filter(|b| b["destination"] == name.as_str()) {
            let filter = b["routing_key"].as_str().unwrap_or_default();
            let qos = b["arguments"]["mqtt.qos"].as_i64().unwrap_or(1);
            *b = json!({"source": session::TOPIC_EXCHANGE, "destination": new_name, "destination_type": "queue",
                        "routing_key": topic_map::filter_to_binding_key(filter), "vhost": b["vhost"],
                        "arguments": {session::QOS_ARGUMENT: qos}});
        }
    }
    // Bindings of LavinMQ's MQTT exchange to anything else have no counterpart.
    bindings.retain(|b| b["source"] != MQTT_EXCHANGE);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex SHA-1 of `name`: the directory LavinMQ gives a vhost or a queue.
pub fn sha1_dir(name: &str) -> String {
    use sha1::Digest;
    hex(&sha1::Sha1::digest(name.as_bytes()))
}

/// A LavinMQ data dir opened for reading.
pub struct Source {
    root: PathBuf,
}

/// One vhost of the source, with its directory.
pub struct SourceVHost {
    /// Vhost name.
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
}

fn read_json(path: &Path) -> io::Result<Option<Value>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    }
}

fn array(v: Option<Value>) -> Vec<Value> {
    match v {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    }
}

impl Source {
    /// Opens `root`, checking that it is a LavinMQ data dir of schema 4.
    pub fn open(root: &Path) -> io::Result<Source> {
        let schema = std::fs::read_to_string(root.join(SCHEMA_FILE)).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{} is not a LavinMQ data dir: {}: {e}", root.display(), SCHEMA_FILE),
            )
        })?;
        if schema.trim() != "4" {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: schema version {:?}; only LavinMQ 2.x data dirs (schema 4) can be converted: start LavinMQ 2.x on it once first",
                    root.display(),
                    schema.trim()
                ),
            ));
        }
        Ok(Source {
            root: root.to_path_buf(),
        })
    }

    /// The vhosts listed in `vhosts.json`, each with its directory.
    pub fn vhosts(&self) -> io::Result<Vec<SourceVHost>> {
        Ok(array(read_json(&self.root.join("vhosts.json"))?)
            .iter()
            .filter_map(|v| v["name"].as_str())
            .map(|name| SourceVHost {
                name: name.to_string(),
                dir: self.root.join(sha1_dir(name)),
            })
            .collect())
    }

    /// The whole broker's definitions in RabbitMQ's format (users,
    /// vhosts, permissions, policies, parameters, exchanges, queues,
    /// bindings), and the damage found in definition logs, by vhost.
    pub fn definitions(&self) -> io::Result<(Value, Vec<String>)> {
        let mut users = Vec::new();
        let mut permissions = Vec::new();
        for u in array(read_json(&self.root.join("users.json"))?) {
            let Some(name) = u["name"].as_str() else { continue };
            if name == DIRECT_USER {
                continue;
            }
            let mut user = json!({"name": name, "password_hash": u["password_hash"].as_str().unwrap_or(""),
                                  "tags": u["tags"].clone()});
            // LavinMQ reads a hash without an algorithm as MD5.
            user["hashing_algorithm"] = match u["hashing_algorithm"].as_str() {
                Some(a) => json!(a),
                None => json!("rabbit_password_hashing_md5"),
            };
            users.push(user);
            if let Some(perms) = u["permissions"].as_object() {
                for (vhost, p) in perms {
                    permissions.push(json!({"user": name, "vhost": vhost,
                        "configure": p["config"].as_str().unwrap_or("^$"),
                        "write": p["write"].as_str().unwrap_or("^$"),
                        "read": p["read"].as_str().unwrap_or("^$")}));
                }
            }
        }
        let global_parameters: Vec<Value> = array(read_json(&self.root.join("parameters.json"))?)
            .into_iter()
            .filter(|p| p["name"].is_string())
            .map(|p| json!({"name": p["name"], "value": p["value"]}))
            .collect();
        let mut doc = json!({"users": users, "permissions": permissions, "global_parameters": global_parameters});
        let (mut vhosts, mut policies, mut operator_policies, mut parameters) = (vec![], vec![], vec![], vec![]);
        let (mut exchanges, mut queues, mut bindings) = (vec![], vec![], vec![]);
        let mut damage = Vec::new();
        let listed = array(read_json(&self.root.join("vhosts.json"))?);
        for v in self.vhosts()? {
            let meta = listed
                .iter()
                .find(|m| m["name"] == v.name.as_str())
                .cloned()
                .unwrap_or_default();
            let limits = read_json(&v.dir.join("limits.json"))?.unwrap_or_else(|| json!({}));
            vhosts.push(
                json!({"name": v.name, "description": meta["description"].as_str().unwrap_or(""),
                               "tags": meta["tags"].as_array().cloned().unwrap_or_default(), "limits": limits}),
            );
            let with_vhost = |mut p: Value| {
                p["vhost"] = json!(v.name);
                p
            };
            policies.extend(
                array(read_json(&v.dir.join("policies.json"))?)
                    .into_iter()
                    .map(with_vhost),
            );
            operator_policies.extend(
                array(read_json(&v.dir.join("operator_policies.json"))?)
                    .into_iter()
                    .map(with_vhost),
            );
            parameters.extend(
                array(read_json(&v.dir.join("parameters.json"))?)
                    .into_iter()
                    .filter(|p| p["component"].is_string())
                    .map(with_vhost),
            );
            let log = match std::fs::read(v.dir.join("definitions.amqp")) {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(e),
            };
            let mut entities = definitions_log::replay(&v.name, &log);
            convert_mqtt_sessions(&mut entities.queues, &mut entities.bindings);
            if let Some(d) = entities.damage {
                damage.push(format!("vhost '{}': definitions.amqp {d}", v.name));
            }
            // The default exchange and the amq.* ones exist in every vhost here.
            exchanges.extend(entities.exchanges.into_iter().filter(|e| {
                let name = e["name"].as_str().unwrap_or("");
                !name.is_empty() && !name.starts_with("amq.")
            }));
            queues.extend(entities.queues);
            bindings.extend(entities.bindings.into_iter().filter(|b| b["source"] != ""));
        }
        doc["vhosts"] = json!(vhosts);
        doc["policies"] = json!(policies);
        doc["operator_policies"] = json!(operator_policies);
        doc["parameters"] = json!(parameters);
        doc["exchanges"] = json!(exchanges);
        doc["queues"] = json!(queues);
        doc["bindings"] = json!(bindings);
        Ok((doc, damage))
    }
}

impl SourceVHost {
    /// The directory of durable queue `name`: its SHA-1 name, or else the
    /// directory whose `.queue` file names it.
    pub fn queue_dir(&self, name: &str) -> Option<PathBuf> {
        let dir = self.dir.join(sha1_dir(name));
        if dir.is_dir() {
            return Some(dir);
        }
        std::fs::read_dir(&self.dir)
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| std::fs::read_to_string(p.join(".queue")).is_ok_and(|n| n == name))
    }

    /// The message stores of the queue in `dir`: the queue's own, or one per
    /// priority level (`prio.NNN`), highest first.
    pub fn stores(dir: &Path) -> Vec<PathBuf> {
        let mut levels: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with("prio.")))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default();
        if levels.is_empty() {
            return vec![dir.to_path_buf()];
        }
        levels.sort();
        levels.reverse();
        levels
    }

    /// The store of delayed exchange `exchange`'s held messages.
    pub fn delayed_dir(&self, exchange: &str) -> Option<PathBuf> {
        [format!("amq.delayed-{exchange}"), format!("amq.delayed.{exchange}")]
            .iter()
            .map(|q| self.dir.join(sha1_dir(q)))
            .find(|d| d.is_dir())
    }

    /// The MQTT retained messages: (topic, payload file).
    pub fn retained(&self) -> Vec<(String, PathBuf)> {
        use md5::Digest;
        let dir = self.dir.join("mqtt_retained_store");
        let Ok(index) = std::fs::read_to_string(dir.join("index")) else {
            return Vec::new();
        };
        index
            .lines()
            .filter(|t| !t.is_empty())
            .map(|topic| {
                let hash = hex(&md5::Md5::digest(topic.as_bytes()));
                (topic.to_string(), dir.join(format!("{hash}.msg")))
            })
            .collect()
    }
}

/// A stream's first offset and its tracked consumer offsets, from the stream
/// store in `dir`. LavinMQ numbers a stream's messages from 1 and stores, per
/// consumer tag, the offset to read next; the map holds the last offset read
/// (the next one minus one), as this broker tracks it.
pub fn stream_offsets(dir: &Path) -> (u64, BTreeMap<String, u64>) {
    let first_segment = super::segments::segment_ids(dir)
        .ok()
        .and_then(|ids| ids.first().copied());
    let first = first_segment
        .and_then(|id| std::fs::read(dir.join(format!("meta.{id:010}"))).ok())
        .filter(|m| m.len() >= 12)
        .map(|m| i64::from_le_bytes([m[4], m[5], m[6], m[7], m[8], m[9], m[10], m[11]]))
        .filter(|&o| o > 0)
        .map_or(1, |o| o as u64);
    let mut offsets = BTreeMap::new();
    if let Ok(data) = std::fs::read(dir.join("consumer_offsets")) {
        let mut pos = 0;
        while let Some(&len) = data.get(pos) {
            let len = usize::from(len);
            if len == 0 {
                break;
            }
            let (Some(tag), Some(raw)) = (data.get(pos + 1..pos + 1 + len), data.get(pos + 1 + len..pos + 9 + len))
            else {
                break;
            };
            let mut n = [0u8; 8];
            n.copy_from_slice(raw);
            if let Ok(tag) = std::str::from_utf8(tag) {
                offsets.insert(tag.to_string(), (i64::from_le_bytes(n).max(1) - 1) as u64);
            }
            pos += 9 + len;
        }
    }
    (first, offsets)
}
