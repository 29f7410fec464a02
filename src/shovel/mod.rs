//! Shovels: links that move messages from a queue (or an exchange) on one
//! broker to a queue or exchange on another, or on this one, defined by
//! `shovel` runtime parameters as in RabbitMQ and LavinMQ.
//!
//! [`Shovels`] keeps one task per parameter: it starts one when a parameter
//! appears, restarts it when its value changes and stops it when the
//! parameter goes. Each task runs [`link::Link`] sessions, reconnecting after
//! `reconnect-delay` whenever one breaks.

pub mod config;
pub mod link;
pub mod status;
pub mod transfer;
pub mod webhook;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::amqp::context::AmqpContext;
use config::{Destination, ShovelConfig, Source};
use link::Link;
use status::{State, Status};
use transfer::{LinkError, Outcome};

/// The runtime parameter component shovels are defined under.
pub const COMPONENT: &str = "shovel";
/// How often the parameters are compared with the running shovels even
/// without a change notification (catches vhost deletion and replays).
const RECONCILE_EVERY: Duration = Duration::from_secs(2);
/// The file (in the data dir) listing paused shovels.
const PAUSED_FILE: &str = "shovels_paused.json";

/// A shovel by vhost and name.
type Key = (String, String);

/// One shovel known to the broker.
struct Entry {
    /// The parameter value it was started with.
    value: Value,
    /// Who set the parameter.
    owner: Option<String>,
    /// Its endpoints as the API shows them, read from the value once.
    endpoints: Value,
    status: Arc<Status>,
    stop: CancellationToken,
}

/// Why a pause, resume or restart was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ControlError {
    /// No such shovel.
    #[error("no shovel '{1}' in vhost '{0}'")]
    NotFound(String, String),
    /// The shovel is not in a state that allows it.
    #[error("shovel '{name}' is {state}")]
    WrongState {
        /// The shovel.
        name: String,
        /// Its state.
        state: &'static str,
    },
}

/// Every shovel of the broker.
pub struct Shovels {
    ctx: Arc<AmqpContext>,
    /// Who a host-less URI acts as when the parameter's creator is unknown
    /// (it came from a definitions file loaded at start).
    default_user: String,
    entries: Mutex<BTreeMap<Key, Entry>>,
    paused: Mutex<BTreeSet<Key>>,
    changed: Notify,
}

impl Shovels {
    /// Starts the shovels of every vhost, and keeps them in step with the
    /// parameters until the broker shuts down.
    pub fn start(ctx: Arc<AmqpContext>, default_user: &str) -> Arc<Shovels> {
        let paused = crate::store::definitions::read_json(&paused_path(&ctx))
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|p| Some((p["vhost"].as_str()?.to_owned(), p["name"].as_str()?.to_owned())))
            .collect();
        let shovels = Arc::new(Shovels {
            ctx: ctx.clone(),
            default_user: default_user.to_owned(),
            entries: Mutex::default(),
            paused: Mutex::new(paused),
            changed: Notify::new(),
        });
        let weak = Arc::downgrade(&shovels);
        let shutdown = ctx.shutdown.clone();
        tokio::spawn(async move {
            loop {
                let Some(shovels) = weak.upgrade() else { return };
                shovels.reconcile();
                tokio::select! {
                    _ = shutdown.cancelled() => {
                        shovels.stop_all();
                        return;
                    }
                    _ = shovels.changed.notified() => {}
                    _ = tokio::time::sleep(RECONCILE_EVERY) => {}
                }
            }
        });
        shovels
    }

    /// Says that shovel parameters may have changed.
    pub fn changed(&self) {
        self.changed.notify_one();
    }

    /// Starts, restarts and stops shovels to match the parameters.
    fn reconcile(self: &Arc<Self>) {
        let mut wanted: BTreeMap<Key, (Value, Option<String>)> = BTreeMap::new();
        for vhost in self.ctx.broker.vhosts() {
            for p in vhost.parameters().into_iter().filter(|p| p.component == COMPONENT) {
                let owner = vhost.parameter_owner(COMPONENT, &p.name);
                wanted.insert((vhost.name.clone(), p.name), (p.value, owner));
            }
        }
        let mut entries = self.entries.lock();
        entries.retain(|key, e| {
            let keep = wanted.get(key).is_some_and(|(v, o)| *v == e.value && *o == e.owner);
            if !keep {
                e.stop.cancel();
            }
            keep
        });
        {
            let mut paused = self.paused.lock();
            let before = paused.len();
            paused.retain(|k| wanted.contains_key(k));
            if paused.len() != before {
                self.save_paused(&paused);
            }
        }
        for (key, (value, owner)) in wanted {
            if entries.contains_key(&key) {
                continue;
            }
            let config = ShovelConfig::from_json(&value);
            let endpoints = config.as_ref().map_or_else(|_| json!({}), endpoints);
            let status = Arc::new(Status::default());
            let stop = self.ctx.shutdown.child_token();
            if self.paused.lock().contains(&key) {
                status.set(State::Paused, None);
            } else {
                tokio::spawn(self.clone().drive(
                    key.clone(),
                    value.clone(),
                    config,
                    owner.clone(),
                    status.clone(),
                    stop.clone(),
                ));
            }
            entries.insert(
                key,
                Entry {
                    value,
                    owner,
                    endpoints,
                    status,
                    stop,
                },
            );
        }
    }

    /// Runs one shovel until it is stopped or done.
    async fn drive(
        self: Arc<Self>,
        (vhost, name): Key,
        value: Value,
        config: Result<ShovelConfig, config::ConfigError>,
        owner: Option<String>,
        status: Arc<Status>,
        stop: CancellationToken,
    ) {
        let config = match config {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(shovel = %name, vhost = %vhost, "shovel not started: {e}");
                status.set(State::Terminated, Some(e.to_string()));
                return;
            }
        };
        let user = owner.as_deref().unwrap_or(&self.default_user);
        let failed = |e: &LinkError| {
            tracing::warn!(shovel = %name, vhost = %vhost, "shovel failed: {e}; retrying in {:?}", config.reconnect_delay);
        };
        let session = |attempt| {
            let link = Link {
                name: &name,
                vhost: &vhost,
                config: &config,
                local: &self.ctx,
                user,
                status: &status,
                attempt,
            };
            let stop = &stop;
            async move { link.run(stop).await }
        };
        let outcome = transfer::retrying(&stop, &status, config.reconnect_delay, failed, session).await;
        if outcome == Outcome::Finished {
            tracing::info!(shovel = %name, vhost = %vhost, "shovel finished; deleting it");
            status.set(State::Terminated, Some("finished".into()));
            if let Some(v) = self.ctx.broker.vhost(&vhost)
                && v.parameter(COMPONENT, &name).as_ref() == Some(&value)
            {
                let _ = v.delete_parameter(COMPONENT, &name);
            }
            self.changed();
        }
    }

    fn stop_all(&self) {
        for e in self.entries.lock().values() {
            e.stop.cancel();
        }
    }

    /// The shovels of `vhost` (all when `None`), as `/api/shovels` lists them.
    pub fn list(&self, vhost: Option<&str>) -> Vec<Value> {
        self.entries
            .lock()
            .iter()
            .filter(|((v, _), _)| vhost.is_none_or(|want| want == v))
            .map(|((v, n), e)| e.status.to_json(v, n, &e.endpoints))
            .collect()
    }

    /// One shovel, as `/api/shovels/{vhost}/{name}` shows it.
    pub fn get(&self, vhost: &str, name: &str) -> Option<Value> {
        let key = (vhost.to_owned(), name.to_owned());
        let entries = self.entries.lock();
        let e = entries.get(&key)?;
        Some(e.status.to_json(vhost, name, &e.endpoints))
    }

    /// Stops a running shovel until it is resumed, also across restarts.
    pub fn pause(&self, vhost: &str, name: &str) -> Result<(), ControlError> {
        let key = (vhost.to_owned(), name.to_owned());
        let entries = self.entries.lock();
        let e = entries
            .get(&key)
            .ok_or_else(|| ControlError::NotFound(key.0.clone(), key.1.clone()))?;
        if e.status.state() == State::Paused {
            return Err(ControlError::WrongState {
                name: name.to_owned(),
                state: "paused",
            });
        }
        e.stop.cancel();
        e.status.set(State::Paused, None);
        let mut paused = self.paused.lock();
        paused.insert(key);
        self.save_paused(&paused);
        Ok(())
    }

    /// Starts a paused shovel again.
    pub fn resume(&self, vhost: &str, name: &str) -> Result<(), ControlError> {
        let key = (vhost.to_owned(), name.to_owned());
        let mut entries = self.entries.lock();
        let e = entries
            .get(&key)
            .ok_or_else(|| ControlError::NotFound(key.0.clone(), key.1.clone()))?;
        let state = e.status.state();
        if state != State::Paused {
            return Err(ControlError::WrongState {
                name: name.to_owned(),
                state: state.as_str(),
            });
        }
        entries.remove(&key);
        let mut paused = self.paused.lock();
        paused.remove(&key);
        self.save_paused(&paused);
        self.changed();
        Ok(())
    }

    /// Stops a shovel and starts it again (RabbitMQ's restart).
    pub fn restart(&self, vhost: &str, name: &str) -> Result<(), ControlError> {
        let key = (vhost.to_owned(), name.to_owned());
        let e = self
            .entries
            .lock()
            .remove(&key)
            .ok_or_else(|| ControlError::NotFound(key.0.clone(), key.1.clone()))?;
        e.stop.cancel();
        self.changed();
        Ok(())
    }

    fn save_paused(&self, paused: &BTreeSet<Key>) {
        let list: Vec<Value> = paused.iter().map(|(v, n)| json!({"vhost": v, "name": n})).collect();
        if let Err(e) = crate::store::definitions::write_json(&paused_path(&self.ctx), &json!(list), true) {
            tracing::error!("cannot save which shovels are paused: {e}");
        }
    }
}

fn paused_path(ctx: &AmqpContext) -> PathBuf {
    ctx.broker.data_dir().join(PAUSED_FILE)
}

/// The endpoint fields RabbitMQ shows for a shovel (`src_uri`, `src_queue`,
/// `dest_uri`, ...), passwords hidden; nothing for an unusable value.
fn endpoints(c: &ShovelConfig) -> Value {
    let mut j = json!({
        "src_protocol": "amqp091",
        "src_uri": transfer::redact(&c.src_uris[0]),
        "dest_uri": transfer::redact(&c.dest_uris[0]),
        "dest_protocol": if c.destination == Destination::Http { "http" } else { "amqp091" },
        "ack_mode": match c.ack_mode {
            config::AckMode::OnConfirm => "on-confirm",
            config::AckMode::OnPublish => "on-publish",
            config::AckMode::NoAck => "no-ack",
        },
    });
    match &c.source {
        Source::Queue(q) => j["src_queue"] = json!(q),
        Source::Exchange { exchange, key } => {
            j["src_exchange"] = json!(exchange);
            j["src_exchange_key"] = json!(key);
        }
    }
    if let Destination::Amqp { queue, exchange, key } = &c.destination {
        for (k, v) in [
            ("dest_queue", queue),
            ("dest_exchange", exchange),
            ("dest_exchange_key", key),
        ] {
            if let Some(v) = v {
                j[k] = json!(v);
            }
        }
    }
    j
}
