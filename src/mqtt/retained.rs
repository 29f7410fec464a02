//! Retained messages: the last message published with the RETAIN flag on each
//! topic of a vhost, handed to every new subscription whose filter matches it.
//!
//! Each vhost keeps its own store in memory and in an append-only JSON log in
//! the vhost's directory (`mqtt_retained.jsonl`, compacted at start), so
//! retained messages survive restarts; the group commit syncs the log, and a
//! QoS 1 or 2 retained publish is acknowledged only after it. An empty payload
//! clears a topic. An MQTT 5 retained message keeps its properties (as their
//! MQTT encoding) for the subscribers that get it later.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use base64::Engine;
use bytes::Bytes;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use serde_json::{Value, json};

use super::codec::QoS;
use super::codec::topic::matches;
use crate::core::vhost::VHost;
use crate::store::json_log::JsonLog;

/// Name of the log file in the vhost's directory.
const FILE_NAME: &str = "mqtt_retained.jsonl";

/// One retained message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retained {
    /// Topic it was published to.
    pub topic: String,
    /// QoS it was published with.
    pub qos: QoS,
    /// The application message.
    pub payload: Bytes,
    /// MQTT 5 properties it was published with, MQTT-encoded (without the
    /// property length).
    pub properties: Option<Bytes>,
    /// When it was published (ms since the epoch), for its message expiry.
    pub published_ms: i64,
}

/// What is kept per topic: QoS, payload, encoded MQTT 5 properties and the
/// time it was published.
type Entry = (QoS, Bytes, Option<Bytes>, i64);

/// The retained messages of one vhost.
pub struct RetainedStore {
    messages: Mutex<BTreeMap<String, Entry>>,
    log: Mutex<JsonLog>,
}

/// Why the retained store could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("retained message store {path}: {source}")]
pub struct RetainedError {
    path: String,
    source: std::io::Error,
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// Reads one log line; `None` for a line that is not a retained message.
fn parse_line(v: &Value) -> Option<(String, Entry)> {
    let topic = v["topic"].as_str()?.to_string();
    let qos = QoS::from_bits(u8::try_from(v["qos"].as_u64()?).ok()?)?;
    let payload = b64().decode(v["payload"].as_str()?).ok()?;
    let properties = match v.get("properties") {
        Some(p) => Some(Bytes::from(b64().decode(p.as_str()?).ok()?)),
        None => None,
    };
    // Logs written before the time was recorded: as if published now.
    let published = v["ts"].as_i64().unwrap_or_else(crate::core::message::Message::now_ms);
    Some((topic, (qos, Bytes::from(payload), properties, published)))
}

fn line(topic: &str, entry: &Entry) -> Value {
    let (qos, payload, properties, published) = entry;
    let mut v = json!({"topic": topic, "qos": qos.bits(), "payload": b64().encode(payload), "ts": published});
    if let Some(p) = properties {
        v["properties"] = Value::String(b64().encode(p));
    }
    v
}

impl RetainedStore {
    /// Opens (and compacts) the store of the vhost whose directory is `dir`.
    pub fn open(dir: &std::path::Path, sync: bool) -> Result<RetainedStore, RetainedError> {
        let path = dir.join(FILE_NAME);
        let mut messages = BTreeMap::new();
        let log = JsonLog::open(&path, sync, |lines| {
            for v in &lines {
                match parse_line(v) {
                    Some((topic, (_, payload, _, _))) if payload.is_empty() => {
                        messages.remove(&topic);
                    }
                    Some((topic, entry)) => {
                        messages.insert(topic, entry);
                    }
                    None => tracing::warn!(file = %path.display(), "skipping unreadable retained message"),
                }
            }
            messages.iter().map(|(topic, entry)| line(topic, entry)).collect()
        })
        .map_err(|source| RetainedError {
            path: path.display().to_string(),
            source,
        })?
        .synced_by_group_commit();
        Ok(RetainedStore {
            messages: Mutex::new(messages),
            log: Mutex::new(log),
        })
    }

    /// Keeps `payload` (with its encoded MQTT 5 `properties`) as the retained
    /// message of `topic`, or clears the topic when `payload` is empty.
    /// Written to the log before it takes effect.
    pub fn set(&self, topic: &str, qos: QoS, payload: Bytes, properties: Option<Bytes>) -> Result<(), RetainedError> {
        let mut log = self.log.lock();
        if payload.is_empty() && !self.messages.lock().contains_key(topic) {
            return Ok(());
        }
        let entry = (qos, payload, properties, crate::core::message::Message::now_ms());
        log.append(&line(topic, &entry)).map_err(|source| RetainedError {
            path: log.path().display().to_string(),
            source,
        })?;
        let mut messages = self.messages.lock();
        if entry.1.is_empty() {
            messages.remove(topic);
        } else {
            messages.insert(topic.to_string(), entry);
        }
        Ok(())
    }

    /// Drops the retained message of `topic` published at `published_ms`,
    /// whose MQTT 5 message expiry has passed [MQTT-3.3.2-5]; a message
    /// retained on the topic since then stays.
    pub fn expire(&self, topic: &str, published_ms: i64) -> Result<(), RetainedError> {
        let mut log = self.log.lock();
        let current = self.messages.lock().get(topic).map(|e| e.3);
        if current != Some(published_ms) {
            return Ok(());
        }
        log.append(&line(topic, &(QoS::AtMostOnce, Bytes::new(), None, published_ms)))
            .map_err(|source| RetainedError {
                path: log.path().display().to_string(),
                source,
            })?;
        self.messages.lock().remove(topic);
        Ok(())
    }

    /// The retained messages whose topics `filter` matches, in topic order.
    pub fn matching(&self, filter: &str) -> Vec<Retained> {
        self.messages
            .lock()
            .iter()
            .filter(|(topic, _)| matches(filter, topic))
            .map(|(topic, (qos, payload, properties, published_ms))| Retained {
                topic: topic.clone(),
                qos: *qos,
                payload: payload.clone(),
                properties: properties.clone(),
                published_ms: *published_ms,
            })
            .collect()
    }

    /// Number of retained messages.
    pub fn len(&self) -> usize {
        self.messages.lock().len()
    }

    /// True when nothing is retained.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

type OwnedStore = (Weak<VHost>, Arc<RetainedStore>);

/// The retained stores of every vhost, opened on first use.
#[derive(Default)]
pub struct RetainedStores {
    /// By vhost name, with the vhost each store belongs to.
    by_vhost: Mutex<FxHashMap<String, OwnedStore>>,
}

impl RetainedStores {
    /// The store of `vhost`. A vhost deleted and created again under the same
    /// name gets a fresh store.
    pub fn of(&self, vhost: &Arc<VHost>, sync: bool) -> Result<Arc<RetainedStore>, RetainedError> {
        let mut map = self.by_vhost.lock();
        if let Some((owner, store)) = map.get(&vhost.name)
            && owner.upgrade().is_some_and(|v| Arc::ptr_eq(&v, vhost))
        {
            return Ok(store.clone());
        }
        let store = Arc::new(RetainedStore::open(vhost.data_dir(), sync)?);
        map.insert(vhost.name.clone(), (Arc::downgrade(vhost), store.clone()));
        Ok(store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_clear_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = RetainedStore::open(dir.path(), false).unwrap();
        let props = Some(Bytes::from_static(b"\x03\x00\x01x"));
        store
            .set("a/b", QoS::AtLeastOnce, Bytes::from_static(b"one"), props.clone())
            .unwrap();
        store
            .set("a/c", QoS::AtMostOnce, Bytes::from_static(b"two"), None)
            .unwrap();
        store
            .set("$SYS/x", QoS::AtMostOnce, Bytes::from_static(b"sys"), None)
            .unwrap();
        store.set("a/c", QoS::AtMostOnce, Bytes::new(), None).unwrap();
        let found = store.matching("a/#");
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].topic.as_str(), found[0].qos), ("a/b", QoS::AtLeastOnce));
        assert!(store.matching("#").iter().all(|r| !r.topic.starts_with('$')));
        drop(store);
        let store = RetainedStore::open(dir.path(), false).unwrap();
        assert_eq!(store.len(), 2);
        assert_eq!(store.matching("$SYS/#")[0].payload, Bytes::from_static(b"sys"));
        assert!(store.matching("a/c").is_empty());
        assert_eq!(
            store.matching("a/b")[0].properties,
            props,
            "properties survive a reopen"
        );
    }

    #[test]
    fn expiring_drops_only_the_message_published_then() {
        let dir = tempfile::tempdir().unwrap();
        let store = RetainedStore::open(dir.path(), false).unwrap();
        store
            .set("t", QoS::AtMostOnce, Bytes::from_static(b"old"), None)
            .unwrap();
        let old = store.matching("t")[0].published_ms;
        store.expire("t", old - 1).unwrap();
        assert_eq!(store.len(), 1, "a message published at another time stays");
        store.expire("t", old).unwrap();
        assert!(store.is_empty());
        drop(store);
        assert!(
            RetainedStore::open(dir.path(), false).unwrap().is_empty(),
            "and stays gone"
        );
    }

    #[test]
    fn garbled_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(FILE_NAME),
            "{\"topic\":\"t\",\"qos\":1,\"payload\":\"aGk=\"}\nnot json\n{\"topic\":\"u\",\"qos\":7,\"payload\":\"\"}\n",
        )
        .unwrap();
        let store = RetainedStore::open(dir.path(), false).unwrap();
        assert_eq!(store.matching("t")[0].payload, Bytes::from_static(b"hi"));
        assert_eq!(store.len(), 1);
    }
}
