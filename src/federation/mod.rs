//! Federation: exchanges and queues of this broker that receive messages
//! from the same-named exchanges and queues of other brokers (upstreams),
//! as RabbitMQ and LavinMQ define it.
//!
//! Upstreams are `federation-upstream` runtime parameters, grouped by
//! `federation-upstream-set` parameters; a policy with the
//! `federation-upstream` or `federation-upstream-set` key (`all` names every
//! upstream) federates the exchanges and queues it matches. [`Federation`]
//! keeps one task per (exchange or queue, upstream) pair, started, restarted
//! and stopped as parameters, policies and entities change; each task runs
//! [`link::Link`] sessions over the shovels' transfer loop, reconnecting
//! after `reconnect-delay` whenever one breaks.

pub mod config;
pub mod link;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::amqp::context::AmqpContext;
use crate::core::vhost::VHost;
use crate::shovel::status::{State, Status};
use crate::shovel::transfer::{self, LinkError, redact};
use config::Upstream;
use link::{Kind, Link};

/// The runtime parameter component upstreams are defined under.
pub const UPSTREAM: &str = "federation-upstream";
/// The runtime parameter component upstream sets are defined under.
pub const UPSTREAM_SET: &str = "federation-upstream-set";
/// How often links are compared with parameters, policies and entities
/// even without a change notification (declared and deleted exchanges and
/// queues, policies applied to them).
const RECONCILE_EVERY: Duration = Duration::from_secs(1);

/// A link: vhost, kind, federated exchange or queue, upstream.
type Key = (String, Kind, String, String);

/// One link known to the broker.
struct Entry {
    upstream: Upstream,
    owner: Option<String>,
    status: Arc<Status>,
    stop: CancellationToken,
}

/// Every federation link of the broker.
pub struct Federation {
    ctx: Arc<AmqpContext>,
    /// Who links act as when an upstream's creator is unknown (it came from
    /// a definitions file loaded at start).
    default_user: String,
    entries: Mutex<BTreeMap<Key, Entry>>,
    changed: Notify,
}

impl Federation {
    /// Starts the links of every vhost, and keeps them in step until the
    /// broker shuts down.
    pub fn start(ctx: Arc<AmqpContext>, default_user: &str) -> Arc<Federation> {
        let federation = Arc::new(Federation {
            ctx: ctx.clone(),
            default_user: default_user.to_owned(),
            entries: Mutex::default(),
            changed: Notify::new(),
        });
        let weak = Arc::downgrade(&federation);
        let shutdown = ctx.shutdown.clone();
        tokio::spawn(async move {
            loop {
                let Some(federation) = weak.upgrade() else { return };
                federation.reconcile();
                tokio::select! {
                    _ = shutdown.cancelled() => {
                        for e in federation.entries.lock().values() {
                            e.stop.cancel();
                        }
                        return;
                    }
                    _ = federation.changed.notified() => {}
                    _ = tokio::time::sleep(RECONCILE_EVERY) => {}
                }
            }
        });
        federation
    }

    /// Says that upstreams or policies may have changed.
    pub fn changed(&self) {
        self.changed.notify_one();
    }

    /// The links the parameters and policies ask for now.
    fn wanted(&self) -> BTreeMap<Key, (Upstream, Option<String>)> {
        let mut wanted = BTreeMap::new();
        for vhost in self.ctx.broker.vhosts() {
            let upstreams = upstreams_of(&vhost);
            if upstreams.is_empty() {
                continue;
            }
            let mut add = |kind: Kind, resource: &str, policy: &Map<String, Value>| {
                for (upstream, owner) in resolve(&vhost, &upstreams, policy) {
                    let key = (vhost.name.clone(), kind, resource.to_owned(), upstream.name.clone());
                    wanted.insert(key, (upstream, owner));
                }
            };
            for x in vhost.exchanges() {
                if x.name.is_empty() {
                    continue;
                }
                if let Some((_, policy)) = x.policy() {
                    add(Kind::Exchange, &x.name, &policy);
                }
            }
            for q in vhost.queues() {
                let policy = q.policies().effective;
                add(Kind::Queue, &q.name, &policy);
            }
        }
        wanted
    }

    /// Starts, restarts and stops links to match what is wanted.
    fn reconcile(self: &Arc<Self>) {
        let mut wanted = self.wanted();
        let mut entries = self.entries.lock();
        entries.retain(|key, e| {
            let keep = wanted.get(key).is_some_and(|(u, o)| *u == e.upstream && *o == e.owner);
            if !keep {
                e.stop.cancel();
                // A link no longer wanted (not one whose settings changed)
                // removes what it created upstream.
                if key.1 == Kind::Exchange && !wanted.contains_key(key) && !self.ctx.shutdown.is_cancelled() {
                    tokio::spawn(self.clone().clean_up(key.clone(), e.upstream.clone(), e.owner.clone()));
                }
            }
            keep
        });
        wanted.retain(|k, _| !entries.contains_key(k));
        for (key, (upstream, owner)) in wanted {
            let status = Arc::new(Status::default());
            let stop = self.ctx.shutdown.child_token();
            tokio::spawn(self.clone().drive(
                key.clone(),
                upstream.clone(),
                owner.clone(),
                status.clone(),
                stop.clone(),
            ));
            entries.insert(
                key,
                Entry {
                    upstream,
                    owner,
                    status,
                    stop,
                },
            );
        }
    }

    /// Runs one link until it is stopped.
    async fn drive(
        self: Arc<Self>,
        key: Key,
        upstream: Upstream,
        owner: Option<String>,
        status: Arc<Status>,
        stop: CancellationToken,
    ) {
        let (vhost, kind, resource, _) = &key;
        let Some(vh) = self.ctx.broker.vhost(vhost) else { return };
        let failed = |e: &LinkError| {
            tracing::warn!(
                vhost = %vhost,
                upstream = %upstream.name,
                "federation link for {} '{resource}' failed: {e}; retrying in {:?}",
                kind.as_str(),
                upstream.reconnect_delay
            );
            if matches!(e, LinkError::Gone(_)) {
                self.changed();
            }
        };
        let session = |attempt| {
            let link = self.link(&vh, &key, &upstream, &owner, &status, attempt);
            let stop = &stop;
            async move { link.run(stop).await }
        };
        transfer::retrying(&stop, &status, upstream.reconnect_delay, failed, session).await;
    }

    /// Session `attempt` of the link `key`.
    fn link<'a>(
        &'a self,
        vhost: &'a Arc<VHost>,
        (_, kind, resource, _): &'a Key,
        upstream: &'a Upstream,
        owner: &'a Option<String>,
        status: &'a Status,
        attempt: usize,
    ) -> Link<'a> {
        Link {
            vhost,
            kind: *kind,
            resource,
            upstream,
            local: &self.ctx,
            user: owner.as_deref().unwrap_or(&self.default_user),
            status,
            attempt,
        }
    }

    /// Removes what a deleted exchange link created on its upstream.
    async fn clean_up(self: Arc<Self>, key: Key, upstream: Upstream, owner: Option<String>) {
        let Some(vh) = self.ctx.broker.vhost(&key.0) else {
            return;
        };
        let status = Status::default();
        if let Err(e) = link::clean_up(&self.link(&vh, &key, &upstream, &owner, &status, 0)).await {
            tracing::warn!(vhost = %key.0, upstream = %upstream.name, "federation link cleanup failed: {e}");
        }
    }

    /// The links, as `/api/federation-links` lists them (of one vhost, or all).
    pub fn links_json(&self, vhost: Option<&str>) -> Vec<Value> {
        let entries = self.entries.lock();
        entries
            .iter()
            .filter(|((v, ..), _)| vhost.is_none_or(|want| want == v))
            .map(|((v, kind, resource, upstream_name), e)| {
                let inner = e.status.to_json(v, upstream_name, &json!({}));
                let upstream_resource = match kind {
                    Kind::Exchange => e.upstream.exchange.as_deref(),
                    Kind::Queue => e.upstream.queue.as_deref(),
                }
                .unwrap_or(resource);
                let status = match e.status.state() {
                    State::Terminated => "error",
                    s => s.as_str(),
                };
                let mut j = json!({
                    "node": &*crate::core::node::name(),
                    "vhost": v,
                    "upstream": upstream_name,
                    "type": kind.as_str(),
                    "resource": resource,
                    "uri": redact(&e.upstream.uris[0]),
                    "status": status,
                    "timestamp": inner["timestamp"],
                    "error": inner["error"],
                    "consumer-tag": e.upstream.consumer_tag,
                    "id": format!("{v}/{}/{resource}/{upstream_name}", kind.as_str()),
                    "local_connection": format!("Federation link: {upstream_name}/{resource}"),
                    "messages_federated": e.status.forwarded_count(),
                });
                match kind {
                    Kind::Exchange => {
                        j["exchange"] = json!(resource);
                        j["upstream_exchange"] = json!(upstream_resource);
                    }
                    Kind::Queue => {
                        j["queue"] = json!(resource);
                        j["upstream_queue"] = json!(upstream_resource);
                    }
                }
                j
            })
            .collect()
    }
}

/// The valid upstreams of a vhost, with who set each; a bad one is skipped
/// with a log line (it was checked when set, so it came from an old file).
fn upstreams_of(vhost: &VHost) -> BTreeMap<String, (Upstream, Option<String>)> {
    let mut out = BTreeMap::new();
    for p in vhost.parameters().into_iter().filter(|p| p.component == UPSTREAM) {
        match Upstream::from_json(&p.name, &p.value) {
            Ok(u) => {
                let owner = vhost.parameter_owner(UPSTREAM, &p.name);
                out.insert(p.name, (u, owner));
            }
            Err(e) => tracing::debug!(vhost = %vhost.name, "federation upstream '{}' ignored: {e}", p.name),
        }
    }
    out
}

/// The upstreams a policy definition names.
fn resolve(
    vhost: &VHost,
    upstreams: &BTreeMap<String, (Upstream, Option<String>)>,
    policy: &Map<String, Value>,
) -> Vec<(Upstream, Option<String>)> {
    if let Some(name) = policy.get(UPSTREAM).and_then(Value::as_str) {
        return upstreams.get(name).cloned().into_iter().collect();
    }
    let Some(set) = policy.get(UPSTREAM_SET).and_then(Value::as_str) else {
        return Vec::new();
    };
    if set == "all" {
        return upstreams.values().cloned().collect();
    }
    let Some(value) = vhost.parameter(UPSTREAM_SET, set) else {
        return Vec::new();
    };
    let lookup = |n: &str| upstreams.get(n).map(|(u, _)| u.clone());
    config::read_set(&value, &lookup)
        .unwrap_or_default()
        .into_iter()
        .map(|u| {
            let owner = upstreams.get(&u.name).and_then(|(_, o)| o.clone());
            (u, owner)
        })
        .collect()
}
