//! Copying a LavinMQ vhost's messages into the converted broker: each
//! durable queue's unacked messages (every priority level of a priority
//! queue), a stream's messages with its offsets and tracked consumer
//! offsets, the messages a delayed exchange still holds, and MQTT retained
//! messages.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use serde_json::Value;

use super::segments::{self, Skipped, StoredMessage};
use super::source::{SOURCE_NAME, SourceVHost, is_mqtt_session, stream_offsets};
use super::{ConvertError, Report};
use crate::core::broker::Broker;
use crate::core::message::Message;
use crate::core::{BasicProperties, Error};

/// The messages converted into one queue (or delayed exchange).
#[derive(Debug, Clone)]
pub struct QueueReport {
    /// Vhost.
    pub vhost: String,
    /// Queue name, or `exchange <name>` for a delayed exchange's held messages.
    pub name: String,
    /// Messages converted.
    pub messages: u64,
    /// What could not be read.
    pub skipped: Vec<Skipped>,
}

fn of_vhost<'a>(doc: &'a Value, kind: &str, vhost: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    doc[kind]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(move |q| q["vhost"] == vhost)
}

fn is_stream(queue: &Value) -> bool {
    queue["arguments"]["x-queue-type"] == "stream"
}

/// A stored message as the core publishes it, with its original timestamp.
fn message(m: StoredMessage) -> Result<Message, ConvertError> {
    let properties = BasicProperties::decode(&mut m.properties.clone())
        .map_err(|e| ConvertError::Broker(format!("message properties: {e}")))?;
    Ok(Message {
        timestamp: m.timestamp,
        exchange: m.exchange.as_str().into(),
        routing_key: m.routing_key.as_str().into(),
        properties: Box::new(properties),
        raw_properties: Some(m.properties),
        body: m.body,
    })
}

/// Publishes every message of the stores of `dirs` with `publish`, and
/// reports them.
fn copy_stores(
    vhost: &str,
    name: String,
    dirs: &[std::path::PathBuf],
    mut publish: impl FnMut(&Message, &mut BytesMut) -> Result<(), Error>,
) -> Result<QueueReport, ConvertError> {
    let mut report = QueueReport {
        vhost: vhost.to_string(),
        name,
        messages: 0,
        skipped: Vec::new(),
    };
    let mut scratch = BytesMut::new();
    for dir in dirs {
        let skipped = segments::for_each_message(dir, |m| {
            let msg = message(m)?;
            publish(&msg, &mut scratch)?;
            report.messages += 1;
            Ok::<_, ConvertError>(())
        })?;
        report.skipped.extend(skipped);
    }
    Ok(report)
}

/// Copies the messages of vhost `v` into the broker's vhost of that name.
pub fn copy_vhost(broker: &Broker, v: &SourceVHost, doc: &Value, report: &mut Report) -> Result<(), ConvertError> {
    let vhost = broker
        .vhost(&v.name)
        .ok_or_else(|| ConvertError::Broker(format!("vhost '{}' was not created", v.name)))?;
    for q in of_vhost(doc, "queues", &v.name) {
        let name = q["name"].as_str().unwrap_or_default();
        let source_name = q[SOURCE_NAME].as_str().unwrap_or(name);
        let (Some(dir), Some(queue)) = (v.queue_dir(source_name), vhost.queue(name)) else {
            continue;
        };
        let session = is_mqtt_session(q);
        let stores = if is_stream(q) {
            let (first, offsets) = stream_offsets(&dir);
            if let Some(stream) = queue.lock().stream.as_mut() {
                stream.seed(first, offsets)?;
            }
            vec![dir.clone()]
        } else {
            SourceVHost::stores(&dir)
        };
        let r = copy_stores(&v.name, name.to_string(), &stores, |msg, scratch| {
            if session {
                // LavinMQ routes MQTT messages by topic; this broker by its
                // AMQP form, through amq.topic.
                let mut msg = msg.clone();
                msg.exchange = crate::mqtt::session::TOPIC_EXCHANGE.into();
                msg.routing_key = crate::mqtt::topic_map::topic_to_routing_key(&msg.routing_key)
                    .as_ref()
                    .into();
                return queue.publish(&msg, scratch).map(|_| ());
            }
            queue.publish(msg, scratch).map(|_| ())
        })?;
        if dir.join("paused").exists() {
            queue.set_paused(true)?;
        }
        report.queues.push(r);
    }
    for x in of_vhost(doc, "exchanges", &v.name) {
        let name = x["name"].as_str().unwrap_or_default();
        let held = vhost.exchange(name).and_then(|e| e.delayed.clone());
        let (Some(dir), Some(held)) = (v.delayed_dir(name), held) else {
            continue;
        };
        let r = copy_stores(&v.name, format!("exchange {name}"), &[dir], |msg, scratch| {
            let delay = crate::core::delayed::delay_of(msg.properties.headers.as_ref()).unwrap_or(0);
            held.push(msg, delay, scratch)
        })?;
        report.queues.push(r);
    }
    report.retained += copy_retained(&vhost, v)?;
    Ok(())
}

fn copy_retained(vhost: &Arc<crate::core::vhost::VHost>, v: &SourceVHost) -> Result<usize, ConvertError> {
    let retained = v.retained();
    if retained.is_empty() {
        return Ok(0);
    }
    let store = crate::mqtt::retained::RetainedStore::open(vhost.data_dir(), true)
        .map_err(|e| ConvertError::Broker(e.to_string()))?;
    let mut n = 0;
    for (topic, file) in retained {
        let payload = match std::fs::read(&file) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(topic, file = %file.display(), "retained message not converted: {e}");
                continue;
            }
        };
        // LavinMQ keeps no QoS with a retained message; QoS 1 lets a QoS 1
        // subscriber receive it reliably.
        store
            .set(&topic, crate::mqtt::codec::QoS::AtLeastOnce, Bytes::from(payload), None)
            .map_err(|e| ConvertError::Broker(e.to_string()))?;
        n += 1;
    }
    Ok(n)
}
