//! Super streams (partitioned streams) as RabbitMQ models them: a direct
//! exchange named after the super stream, marked `x-super-stream`, bound to
//! one stream queue per partition with the partition's routing key and its
//! place in `x-stream-partition-order`. They are ordinary core objects, so
//! the same super stream is created, listed and used from every protocol
//! and the HTTP API.

use std::sync::Arc;

use super::error::Error;
use super::exchange::{Destination, Exchange};
use super::vhost::{ExchangeOptions, QueueOptions, VHost};
use super::{FieldTable, FieldValue};

/// The exchange argument that marks a super stream.
pub const SUPER_STREAM_ARGUMENT: &str = "x-super-stream";
/// The binding argument that orders the partitions.
pub const PARTITION_ORDER_ARGUMENT: &str = "x-stream-partition-order";

/// Why a super stream operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SuperStreamError {
    /// The super stream, or one of its partitions, exists already.
    #[error("{0} already exists")]
    Exists(String),
    /// No super stream of that name.
    #[error("super stream '{0}' not found")]
    NotFound(String),
    /// Partitions and binding keys do not match up.
    #[error("{0}")]
    Invalid(String),
    /// The core refused a step.
    #[error(transparent)]
    Core(#[from] Error),
}

/// The super stream exchange `name`, if there is one.
fn exchange(vhost: &VHost, name: &str) -> Option<Arc<Exchange>> {
    vhost
        .exchange(name)
        .filter(|x| x.arguments.get(SUPER_STREAM_ARGUMENT).is_some_and(is_true))
}

fn is_true(v: &FieldValue) -> bool {
    matches!(v, FieldValue::Bool(true)) || v.as_str() == Some("true")
}

/// Whether a super stream's name and its partitions' names may be created:
/// none empty, longer than a short string or in the reserved `amq.` space.
/// Checked by each adapter before permissions, as RabbitMQ orders them.
pub fn names_allowed(name: &str, partitions: &[String]) -> bool {
    std::iter::once(name)
        .chain(partitions.iter().map(String::as_str))
        .all(|n| !n.is_empty() && n.len() <= 255 && !n.starts_with("amq."))
}

/// Creates super stream `name` with a partition stream per name in
/// `partitions`, each bound with the key at the same place in
/// `binding_keys`; `arguments` are each partition's stream arguments.
pub fn create(
    vhost: &VHost,
    name: &str,
    partitions: &[String],
    binding_keys: &[String],
    arguments: &FieldTable,
    conn: u64,
) -> Result<(), SuperStreamError> {
    if partitions.is_empty() || partitions.len() != binding_keys.len() {
        return Err(SuperStreamError::Invalid(format!(
            "a super stream needs partitions and as many binding keys ({} and {})",
            partitions.len(),
            binding_keys.len()
        )));
    }
    let mut unique = partitions.to_vec();
    unique.sort();
    unique.dedup();
    if unique.len() != partitions.len() {
        return Err(SuperStreamError::Invalid("partition names must differ".into()));
    }
    if vhost.exchange(name).is_some() {
        return Err(SuperStreamError::Exists(format!("exchange '{name}'")));
    }
    if let Some(p) = partitions.iter().find(|p| vhost.queue(p).is_some()) {
        return Err(SuperStreamError::Exists(format!("stream '{p}'")));
    }
    let mut x_args = FieldTable::default();
    x_args.insert(SUPER_STREAM_ARGUMENT, FieldValue::Bool(true));
    let durable = ExchangeOptions {
        durable: true,
        ..ExchangeOptions::default()
    };
    vhost.declare_exchange(name, "direct", &durable, x_args)?;
    let mut q_args = arguments.clone();
    q_args.insert("x-queue-type", FieldValue::from("stream"));
    let q_opts = QueueOptions {
        durable: true,
        exclusive: false,
        auto_delete: false,
        passive: false,
    };
    let mut created = Vec::new();
    let mut step = || -> Result<(), Error> {
        for (i, (p, key)) in partitions.iter().zip(binding_keys).enumerate() {
            vhost.declare_queue(p, &q_opts, q_args.clone(), conn)?;
            created.push(p.clone());
            let mut b_args = FieldTable::default();
            b_args.insert(PARTITION_ORDER_ARGUMENT, FieldValue::I64(i as i64));
            vhost.bind_queue(p, name, key, b_args, Some(conn))?;
        }
        Ok(())
    };
    if let Err(e) = step() {
        // Nothing of a half-made super stream stays.
        for p in &created {
            let _ = vhost.delete_queue(p, false, false, Some(conn));
        }
        let _ = vhost.delete_exchange(name, false);
        return Err(e.into());
    }
    Ok(())
}

/// Deletes super stream `name` with its partition streams.
pub fn delete(vhost: &VHost, name: &str, conn: u64) -> Result<(), SuperStreamError> {
    let partitions = partitions(vhost, name).ok_or_else(|| SuperStreamError::NotFound(name.to_owned()))?;
    vhost.delete_exchange(name, false)?;
    for p in partitions {
        if vhost.queue(&p).is_some() {
            vhost.delete_queue(&p, false, false, Some(conn))?;
        }
    }
    Ok(())
}

/// The partition streams of super stream `name`, in partition order.
pub fn partitions(vhost: &VHost, name: &str) -> Option<Vec<String>> {
    let x = exchange(vhost, name)?;
    let mut bound: Vec<(i64, String)> = x
        .bindings()
        .into_iter()
        .filter_map(|b| match &b.destination {
            Destination::Queue(q) if q.is_stream() => {
                let order = b
                    .arguments
                    .get(PARTITION_ORDER_ARGUMENT)
                    .and_then(FieldValue::as_i64)
                    .unwrap_or(i64::MAX);
                Some((order, q.name.clone()))
            }
            _ => None,
        })
        .collect();
    bound.sort();
    bound.dedup_by(|a, b| a.1 == b.1);
    Some(bound.into_iter().map(|(_, n)| n).collect())
}

/// The partition streams super stream `name` routes `routing_key` to.
pub fn route(vhost: &VHost, name: &str, routing_key: &str) -> Option<Vec<String>> {
    let x = exchange(vhost, name)?;
    let mut out: Vec<String> = x
        .bindings()
        .into_iter()
        .filter(|b| b.routing_key == routing_key)
        .filter_map(|b| match &b.destination {
            Destination::Queue(q) if q.is_stream() => Some(q.name.clone()),
            _ => None,
        })
        .collect();
    out.dedup();
    Some(out)
}

/// The stream queue arguments a stream or super stream creation asks for
/// (over the stream protocol or RabbitMQ's management API): RabbitMQ's stream
/// arguments by their short names, with or without their `x-` prefix, as
/// text.
pub fn stream_arguments(arguments: &[(String, String)]) -> Result<FieldTable, String> {
    let mut t = FieldTable::default();
    t.insert("x-queue-type", FieldValue::from("stream"));
    for (k, v) in arguments {
        let name = k.strip_prefix("x-").unwrap_or(k);
        match name {
            "max-length-bytes" | "stream-max-segment-size-bytes" | "max-length" => {
                let n: i64 = v.parse().map_err(|_| format!("{k} must be a number, not '{v}'"))?;
                t.insert(format!("x-{name}").as_str(), FieldValue::I64(n));
            }
            "max-age" => t.insert("x-max-age", FieldValue::from(v.as_str())),
            "stream-compaction" => t.insert("x-stream-compaction", FieldValue::from(v.as_str())),
            // Replication and placement are the cluster's, not the stream's.
            "initial-cluster-size" | "queue-leader-locator" => {}
            other => tracing::debug!("stream argument '{other}' ignored"),
        }
    }
    Ok(t)
}
