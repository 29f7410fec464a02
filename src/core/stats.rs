//! Message statistics: cumulative counters kept where messages pass, and the
//! per-second rates the management API and metrics show, sampled every
//! `stats_interval`. Counting costs one add (queues count under the lock they
//! already hold); rates are computed only when sampled.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

/// A cumulative count shared between threads.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one.
    #[inline]
    pub fn incr(&self) {
        self.add(1);
    }

    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A cumulative count that only one task updates and any thread reads. Its
/// increment is a plain load and store rather than the locked
/// read-modify-write a [`Counter`] needs: a publish updates several counters,
/// and those instructions were a measurable share of its cost.
#[derive(Debug, Default)]
pub struct OwnedCounter(AtomicU64);

impl OwnedCounter {
    /// Adds one. Only the counter's owner calls this: a second writer could
    /// lose counts (never more than that).
    #[inline]
    pub fn incr(&self) {
        self.0
            .store(self.0.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What happened to a queue's messages since it was created, under RabbitMQ's
/// `message_stats` names.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueCounts {
    /// Messages stored in (or handed straight through) the queue.
    pub publish: u64,
    /// Deliveries to consumers that acknowledge.
    pub deliver: u64,
    /// Deliveries to consumers that do not acknowledge.
    pub deliver_no_ack: u64,
    /// basic.get answered with a message, acknowledging later.
    pub get: u64,
    /// basic.get answered with a message, settled at once.
    pub get_no_ack: u64,
    /// basic.get on an empty queue.
    pub get_empty: u64,
    /// Acknowledged deliveries.
    pub ack: u64,
    /// Deliveries of messages that had been delivered before.
    pub redeliver: u64,
    /// Messages dropped as duplicates (`x-message-deduplication`).
    pub dedup: u64,
}

impl QueueCounts {
    /// Messages that left the queue for a client, whichever way: RabbitMQ's
    /// `deliver_get`.
    pub fn deliver_get(&self) -> u64 {
        self.deliver + self.deliver_no_ack + self.get + self.get_no_ack
    }

    /// The counters as `(name, value)`, with RabbitMQ's derived `deliver_get`.
    pub fn named(&self) -> [(&'static str, u64); 9] {
        [
            ("publish", self.publish),
            ("deliver", self.deliver),
            ("deliver_no_ack", self.deliver_no_ack),
            ("get", self.get),
            ("get_no_ack", self.get_no_ack),
            ("get_empty", self.get_empty),
            ("deliver_get", self.deliver_get()),
            ("ack", self.ack),
            ("redeliver", self.redeliver),
        ]
    }
}

/// Counts of an exchange.
#[derive(Debug, Default)]
pub struct ExchangeCounters {
    /// Messages published to the exchange.
    pub publish_in: Counter,
    /// Messages it routed nowhere.
    pub unroutable: Counter,
    /// Messages dropped as duplicates (`x-message-deduplication`).
    pub dedup: Counter,
}

impl ExchangeCounters {
    /// Messages it routed to at least one queue: every message published to
    /// it is either that, unroutable or a duplicate, so this is derived
    /// rather than counted (one shared counter fewer to update per message).
    pub fn publish_out(&self) -> u64 {
        // The parts first: a message counts in `publish_in` before either.
        let (unroutable, dedup) = (self.unroutable.get(), self.dedup.get());
        self.publish_in.get().saturating_sub(unroutable + dedup)
    }

    /// The counters as `(name, value)`.
    pub fn named(&self) -> [(&'static str, u64); 2] {
        [
            ("publish_in", self.publish_in.get()),
            ("publish_out", self.publish_out()),
        ]
    }
}

/// Counts of a channel (any protocol's unit of publishing and consuming).
#[derive(Debug, Default)]
pub struct ChannelCounters {
    /// Messages published (counted by the channel's own task, as are the
    /// three below).
    pub publish: OwnedCounter,
    /// Publisher confirms sent.
    pub confirm: OwnedCounter,
    /// Unroutable mandatory messages returned.
    pub return_unroutable: OwnedCounter,
    /// Unroutable messages dropped.
    pub drop_unroutable: OwnedCounter,
    /// Deliveries to consumers that acknowledge.
    pub deliver: Counter,
    /// Deliveries to consumers that do not acknowledge.
    pub deliver_no_ack: Counter,
    /// Messages fetched with basic.get.
    pub get: Counter,
    /// Acknowledgements received.
    pub ack: Counter,
    /// Redeliveries.
    pub redeliver: Counter,
}

impl ChannelCounters {
    /// The counters as `(name, value)`, with RabbitMQ's derived `deliver_get`.
    pub fn named(&self) -> [(&'static str, u64); 9] {
        let (deliver, no_ack, get) = (self.deliver.get(), self.deliver_no_ack.get(), self.get.get());
        [
            ("publish", self.publish.get()),
            ("confirm", self.confirm.get()),
            ("return_unroutable", self.return_unroutable.get()),
            ("drop_unroutable", self.drop_unroutable.get()),
            ("deliver", deliver),
            ("deliver_no_ack", no_ack),
            ("get", get),
            ("deliver_get", deliver + no_ack + get),
            ("ack", self.ack.get()),
        ]
    }
}

/// Objects created and closed, RabbitMQ's "churn": counted where they come and go.
#[derive(Debug, Default)]
pub struct ChurnCounters {
    /// Connections opened.
    pub connection_created: Counter,
    /// Connections closed.
    pub connection_closed: Counter,
    /// Channels opened.
    pub channel_created: Counter,
    /// Channels closed.
    pub channel_closed: Counter,
    /// Queue declarations (new or existing).
    pub queue_declared: Counter,
    /// Queues created.
    pub queue_created: Counter,
    /// Queues deleted.
    pub queue_deleted: Counter,
    /// Consumers attached to a queue (kept per vhost; not in [`Self::named`]).
    pub consumer_added: Counter,
    /// Consumers detached from a queue, or gone with it (per vhost, like
    /// `consumer_added`).
    pub consumer_removed: Counter,
}

impl ChurnCounters {
    /// The counters as `(name, value)`, under RabbitMQ's `churn_rates` names.
    pub fn named(&self) -> [(&'static str, u64); 7] {
        [
            ("connection_created", self.connection_created.get()),
            ("connection_closed", self.connection_closed.get()),
            ("channel_created", self.channel_created.get()),
            ("channel_closed", self.channel_closed.get()),
            ("queue_declared", self.queue_declared.get()),
            ("queue_created", self.queue_created.get()),
            ("queue_deleted", self.queue_deleted.get()),
        ]
    }
}

/// Per-second rates of a set of named counters, from the last two samples.
///
/// Every connection, channel and queue has one, so an idle one keeps
/// nothing: while all its counters are zero there are no entries, and the
/// entries of a busy one are updated in place.
#[derive(Debug, Default)]
pub struct Rates {
    inner: Mutex<RatesInner>,
}

#[derive(Debug, Default)]
struct RatesInner {
    /// When the last sample was taken.
    at: Option<Instant>,
    /// Each counter at the last sample and its rate; empty while every
    /// counter sampled so far was zero.
    entries: Vec<RateEntry>,
}

/// One counter's last value and rate.
#[derive(Debug, Clone, Copy)]
struct RateEntry {
    name: &'static str,
    last: u64,
    rate: f64,
}

impl Rates {
    /// Records the counters' values now; the rates become the change since the
    /// previous sample per second.
    pub fn sample(&self, now: Instant, values: &[(&'static str, u64)]) {
        let mut r = self.inner.lock();
        let elapsed = r.at.map(|at| now.saturating_duration_since(at).as_secs_f64());
        let first = r.at.is_none();
        r.at = Some(now);
        if r.entries.is_empty() && values.iter().all(|&(_, v)| v == 0) {
            return;
        }
        let rate = |before: Option<u64>, v: u64| match (elapsed, before) {
            (Some(secs), Some(b)) if secs > 0.0 => v.saturating_sub(b) as f64 / secs,
            _ => 0.0,
        };
        let same_names =
            r.entries.len() == values.len() && r.entries.iter().zip(values).all(|(e, (n, _))| e.name == *n);
        if same_names {
            for (e, &(_, v)) in r.entries.iter_mut().zip(values) {
                e.rate = rate(Some(e.last), v);
                e.last = v;
            }
            return;
        }
        // The first non-zero sample (counters absent before were zero, unless
        // this is the very first sample), or a different set of counters.
        let entries = values
            .iter()
            .map(|&(name, v)| {
                let before = match r.entries.iter().find(|e| e.name == name) {
                    Some(e) => Some(e.last),
                    None if first => None,
                    None => Some(0),
                };
                RateEntry {
                    name,
                    last: v,
                    rate: rate(before, v),
                }
            })
            .collect();
        r.entries = entries;
    }

    /// The rate of counter `name` (0 before two samples).
    pub fn rate(&self, name: &str) -> f64 {
        let r = self.inner.lock();
        r.entries.iter().find(|e| e.name == name).map_or(0.0, |e| e.rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rates_are_change_per_second_between_samples() {
        let r = Rates::default();
        let t0 = Instant::now();
        r.sample(t0, &[("publish", 10)]);
        assert_eq!(r.rate("publish"), 0.0);
        r.sample(t0 + Duration::from_secs(2), &[("publish", 30)]);
        assert_eq!(r.rate("publish"), 10.0);
        assert_eq!(r.rate("deliver"), 0.0);
        r.sample(t0 + Duration::from_secs(4), &[("publish", 30)]);
        assert_eq!(r.rate("publish"), 0.0);
    }

    #[test]
    fn idle_counters_keep_no_entries_until_they_move() {
        let r = Rates::default();
        let t0 = Instant::now();
        r.sample(t0, &[("publish", 0), ("ack", 0)]);
        r.sample(t0 + Duration::from_secs(1), &[("publish", 0), ("ack", 0)]);
        assert!(r.inner.lock().entries.is_empty());
        // Zero at the previous sample, 6 two seconds later.
        r.sample(t0 + Duration::from_secs(3), &[("publish", 6), ("ack", 0)]);
        assert_eq!(r.rate("publish"), 3.0);
        assert_eq!(r.rate("ack"), 0.0);
        r.sample(t0 + Duration::from_secs(4), &[("publish", 6), ("ack", 2)]);
        assert_eq!(r.rate("publish"), 0.0);
        assert_eq!(r.rate("ack"), 2.0);
        assert_eq!(r.inner.lock().entries.len(), 2);
    }

    #[test]
    fn deliver_get_sums_deliveries_and_gets() {
        let c = QueueCounts {
            deliver: 1,
            deliver_no_ack: 2,
            get: 3,
            get_no_ack: 4,
            ..Default::default()
        };
        assert!(c.named().contains(&("deliver_get", 10)));
    }
}
