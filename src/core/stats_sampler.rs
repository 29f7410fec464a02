//! Samples every counter of the broker at `stats_interval`, turning counts into
//! rates, and keeps the per-vhost and broker-wide totals the overview shows.
//! Runs off the hot path: publishers and consumers only ever add to counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap;

use super::broker::Broker;
use super::stats::Rates;

/// Named values, as sampled.
pub type Named = Vec<(&'static str, u64)>;

/// Totals of a group of queues and exchanges (a vhost, or the whole broker) at
/// the last sample, with their rates.
#[derive(Debug, Default)]
pub struct Totals {
    values: Mutex<Named>,
    /// Per-second rates of the values.
    pub rates: Rates,
}

impl Totals {
    /// The values at the last sample.
    pub fn values(&self) -> Named {
        self.values.lock().clone()
    }

    fn set(&self, now: Instant, values: Named) {
        self.rates.sample(now, &values);
        *self.values.lock() = values;
    }
}

/// The broker's sampled statistics.
#[derive(Debug, Default)]
pub struct StatsSampler {
    /// Totals over every vhost.
    pub overview: Totals,
    /// Objects created and closed, broker-wide.
    pub churn: Totals,
    vhosts: RwLock<FxHashMap<String, Arc<Totals>>>,
    /// How long the last [`StatsSampler::sample`] took, in nanoseconds.
    last_duration_ns: AtomicU64,
}

/// Adds `values` into `acc`, by name.
pub fn accumulate<T: Copy + std::ops::AddAssign>(
    acc: &mut Vec<(&'static str, T)>,
    values: impl IntoIterator<Item = (&'static str, T)>,
) {
    for (name, v) in values {
        match acc.iter_mut().find(|(n, _)| *n == name) {
            Some((_, total)) => *total += v,
            None => acc.push((name, v)),
        }
    }
}

impl StatsSampler {
    /// The totals of vhost `name` at the last sample.
    pub fn vhost(&self, name: &str) -> Option<Arc<Totals>> {
        self.vhosts.read().get(name).cloned()
    }

    /// How long the last sample took (zero before the first): LavinMQ's
    /// `stats_rates_collection_duration_seconds`.
    pub fn last_duration(&self) -> Duration {
        Duration::from_nanos(self.last_duration_ns.load(Ordering::Relaxed))
    }

    /// Samples every queue, exchange, connection and channel of `broker`, and
    /// records how long that took.
    pub fn sample(&self, broker: &Broker, now: Instant) {
        let started = Instant::now();
        self.sample_all(broker, now);
        let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_duration_ns.store(took, Ordering::Relaxed);
    }

    fn sample_all(&self, broker: &Broker, now: Instant) {
        let mut overall = Named::new();
        let mut churn: Named = broker.connections.churn.named().to_vec();
        let mut vhosts = FxHashMap::default();
        for v in broker.vhosts() {
            // A vhost counts only its queues' churn; its other counters stay 0.
            accumulate(&mut churn, v.churn.named());
            let mut acc = Named::new();
            for e in v.exchanges() {
                e.rates.sample(now, &e.counters.named());
                accumulate(&mut acc, [("publish", e.counters.publish_in.get())]);
            }
            for q in v.queues() {
                let st = q.stats();
                let mut values: Named = st.counts.named().to_vec();
                values.extend_from_slice(&[
                    ("messages", st.ready + st.unacked),
                    ("messages_ready", st.ready),
                    ("messages_unacknowledged", st.unacked),
                ]);
                q.rates.sample(now, &values);
                // A queue's publishes are already counted by the exchanges.
                accumulate(&mut acc, values.iter().copied().filter(|&(n, _)| n != "publish"));
            }
            accumulate(&mut overall, acc.iter().copied());
            let totals = self.vhost(&v.name).unwrap_or_default();
            totals.set(now, acc);
            vhosts.insert(v.name.clone(), totals);
        }
        *self.vhosts.write() = vhosts;
        self.overview.set(now, overall);
        self.churn.set(now, churn);
        for c in broker.connections.list() {
            c.rates.sample(now, &c.named_counts());
            for ch in c.channels() {
                ch.rates().sample(now, &ch.counters().named());
            }
        }
    }
}
