//! What a shovel is doing, as the management API shows it.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde_json::{Value, json};

/// A shovel's state, named as RabbitMQ's API names it (`paused` is
/// LavinMQ's addition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Connecting to its source and destination.
    Starting,
    /// Moving messages.
    Running,
    /// Stopped by an operator until resumed.
    Paused,
    /// Stopped after an error (it retries after `reconnect-delay`), or
    /// because its parameter is unusable.
    Terminated,
}

impl State {
    /// The API's name of the state.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Running => "running",
            State::Paused => "paused",
            State::Terminated => "terminated",
        }
    }
}

/// Shared between a running shovel and the API.
#[derive(Debug)]
pub struct Status {
    inner: Mutex<Inner>,
    /// Messages moved to the destination since the shovel was created.
    forwarded: AtomicU64,
}

#[derive(Debug)]
struct Inner {
    state: State,
    /// Why it last stopped or failed.
    reason: Option<String>,
    /// When the state last changed, as RabbitMQ formats it.
    since: String,
}

impl Default for Status {
    fn default() -> Self {
        Status {
            inner: Mutex::new(Inner {
                state: State::Starting,
                reason: None,
                since: now(),
            }),
            forwarded: AtomicU64::new(0),
        }
    }
}

impl Status {
    /// The current state.
    pub fn state(&self) -> State {
        self.inner.lock().state
    }

    /// Moves to `state`; a reason is kept until the shovel runs again.
    pub fn set(&self, state: State, reason: Option<String>) {
        let mut inner = self.inner.lock();
        if state == State::Running {
            inner.reason = None;
        } else if reason.is_some() {
            inner.reason = reason;
        }
        inner.state = state;
        inner.since = now();
    }

    /// Counts one more message moved.
    pub fn forwarded(&self, n: u64) {
        self.forwarded.fetch_add(n, Ordering::Relaxed);
    }

    /// Messages moved so far.
    pub fn forwarded_count(&self) -> u64 {
        self.forwarded.load(Ordering::Relaxed)
    }

    /// The shovel as `/api/shovels` lists it: RabbitMQ's fields (`name`,
    /// `vhost`, `type`, `state`, `timestamp`, `reason`, `node`, `src_uri`, ...)
    /// plus LavinMQ's `error` and `message_count`.
    pub fn to_json(&self, vhost: &str, name: &str, endpoints: &Value) -> Value {
        let inner = self.inner.lock();
        let mut j = json!({
            "name": name,
            "vhost": vhost,
            "type": "dynamic",
            "node": &*crate::core::node::name(),
            "state": inner.state.as_str(),
            "timestamp": inner.since,
            "error": inner.reason,
            "message_count": self.forwarded_count(),
            "forwarded": self.forwarded_count(),
        });
        if let Some(reason) = &inner.reason {
            j["reason"] = json!(reason);
        }
        if let (Some(obj), Some(extra)) = (j.as_object_mut(), endpoints.as_object()) {
            for (k, v) in extra {
                obj.insert(k.clone(), v.clone());
            }
        }
        j
    }
}

/// The time now as RabbitMQ's shovel status shows it (`2026-12-02 15:04:05`, UTC).
fn now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let secs = i64::try_from(secs).unwrap_or_default();
    let (y, m, d) = crate::log_tail::civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
