//! The lifetime of a shared subscription group's queue (see
//! [`super::shared_subscription`]).
//!
//! A group's queue lives as long as a session of the group does: while a
//! member is connected (it consumes from the queue) or while a stored session
//! (MQTT 5 session expiry above 0, MQTT 3.1.1 clean session off) records the
//! membership in its queue's arguments. Messages for the group keep going into
//! its queue while every member is away, QoS 0 ones included, and the first
//! member to come back, whichever it is, takes them. The queue is deleted when
//! the last member leaves it (disconnects with a session that ends with the
//! connection, unsubscribes) and no stored session is a member, or when the
//! last stored member's session goes (expiry, clean start, deletion): the
//! vhost's [`queue_removed`](crate::core::vhost::VHost::queue_removed) hook
//! says so. It is durable when a stored session created it, so that it
//! survives restarts with what it holds.

use std::collections::HashSet;
use std::sync::Arc;

use super::session::{TOPIC_EXCHANGE, stored_shared_filters};
use super::shared_subscription::{QUEUE_PREFIX, SharedFilter, parse, queue_name};
use super::topic_map::filter_to_binding_key;
use crate::core::FieldTable;
use crate::core::queue::Queue;
use crate::core::vhost::{QueueOptions, VHost};

/// The name of the vhost hook that ends groups with their last session.
const HOOK: &str = "mqtt-shared-subscriptions";

/// The group's queue, declared (durable when `durable`) and bound when it
/// does not exist yet.
pub fn join(vhost: &VHost, shared: &SharedFilter<'_>, conn_id: u64, durable: bool) -> crate::core::Result<Arc<Queue>> {
    let name = queue_name(shared);
    if name.len() > 255 {
        return Err(crate::core::Error::PreconditionFailed(format!(
            "shared subscription name of {} bytes is too long",
            name.len()
        )));
    }
    watch(vhost);
    if vhost.queue(&name).is_none() {
        let opts = QueueOptions {
            durable,
            ..QueueOptions::default()
        };
        // Another member may declare it meanwhile, with the other durability.
        if let Err(e) = vhost.declare_queue(&name, &opts, FieldTable::new(), conn_id)
            && vhost.queue(&name).is_none()
        {
            return Err(e);
        }
    }
    vhost.bind_queue(
        &name,
        TOPIC_EXCHANGE,
        &filter_to_binding_key(shared.filter),
        FieldTable::new(),
        None,
    )?;
    vhost.get_queue(&name)
}

/// Deletes group queue `name` when no member consumes from it and no stored
/// session is a member: the group has no session left, so what it holds
/// and what is published for it later has nobody to go to.
pub fn release_if_unused(vhost: &VHost, name: &str) {
    let Some(queue) = vhost.queue(name) else {
        return;
    };
    if queue.counts().1 > 0 || has_stored_member(vhost, name) {
        return;
    }
    match vhost.delete_queue(name, true, false, None) {
        Ok(dropped) => tracing::info!(
            vhost = %vhost.name,
            queue = name,
            dropped,
            "shared subscription group has no session left: its queue is deleted"
        ),
        // A member joined meanwhile.
        Err(e) => tracing::debug!(queue = name, "group queue kept: {e}"),
    }
}

/// Makes the vhost end groups with their last stored session.
pub fn watch(vhost: &VHost) {
    vhost.queue_removed.register(HOOK, on_queue_removed);
}

/// At start: groups whose stored members outlived their queue (it was not
/// durable) get it back, so that messages for them are kept until a member
/// returns; group queues without a session left are deleted.
pub fn restore(vhost: &VHost) {
    watch(vhost);
    let queues = vhost.queues();
    let mut groups = HashSet::new();
    for filter in queues.iter().flat_map(|q| stored_shared_filters(q)) {
        let Ok(Some(shared)) = parse(&filter) else { continue };
        let name = queue_name(&shared);
        if groups.contains(&name) {
            continue;
        }
        if let Err(e) = join(vhost, &shared, 0, true) {
            tracing::warn!(vhost = %vhost.name, filter, "cannot restore the shared subscription's queue: {e}");
        }
        groups.insert(name);
    }
    for q in queues {
        if q.name.starts_with(QUEUE_PREFIX) && !groups.contains(&q.name) {
            release_if_unused(vhost, &q.name);
        }
    }
}

/// The vhost hook: a stored session that was a member of groups is gone, so
/// each of them may have no session left.
fn on_queue_removed(vhost: &VHost, queue: &Arc<Queue>) {
    for filter in stored_shared_filters(queue) {
        if let Ok(Some(shared)) = parse(&filter) {
            release_if_unused(vhost, &queue_name(&shared));
        }
    }
}

/// Whether a stored session of the vhost records membership of the group
/// whose queue is `name`.
fn has_stored_member(vhost: &VHost, name: &str) -> bool {
    vhost.queues().iter().any(|q| {
        stored_shared_filters(q)
            .iter()
            .any(|f| matches!(parse(f), Ok(Some(s)) if queue_name(&s) == name))
    })
}
