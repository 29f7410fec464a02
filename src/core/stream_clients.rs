//! The stream protocol's publishers and consumers, as the management API
//! lists them (RabbitMQ's `/api/stream/publishers` and
//! `/api/stream/consumers`): who they are, on which stream, and their
//! counters. The adapter registers them; the counters are atomics it bumps
//! per publish frame and per delivery.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

/// Which connection a publisher or consumer belongs to.
#[derive(Debug, Clone)]
pub struct ClientOf {
    /// The connection's name in the connection registry.
    pub connection: String,
    /// The vhost.
    pub vhost: String,
    /// The stream.
    pub stream: String,
}

/// A publisher and its counters.
#[derive(Debug)]
pub struct PublisherStats {
    /// Where it belongs.
    pub of: ClientOf,
    /// The client's id for it.
    pub publisher_id: u8,
    /// Its name, when deduplicated.
    pub reference: Option<String>,
    /// Messages it sent.
    pub published: AtomicU64,
    /// Messages confirmed to it.
    pub confirmed: AtomicU64,
    /// Messages refused.
    pub errored: AtomicU64,
}

/// A consumer (subscription) and its counters.
#[derive(Debug)]
pub struct ConsumerStats {
    /// Where it belongs.
    pub of: ClientOf,
    /// The client's id for it.
    pub subscription_id: u8,
    /// The subscription's properties.
    pub properties: Vec<(String, String)>,
    /// Messages delivered to it.
    pub consumed: AtomicU64,
    /// The offset of the last message delivered (`u64::MAX`: none yet).
    pub offset: AtomicU64,
    /// Reading now (false for a waiting single active consumer).
    pub active: AtomicBool,
    /// Chunks the client will still take (its credit).
    pub credits: AtomicU64,
}

impl ConsumerStats {
    /// The last offset delivered, if any.
    pub fn last_offset(&self) -> Option<u64> {
        Some(self.offset.load(Ordering::Relaxed)).filter(|o| *o != u64::MAX)
    }

    /// Its lag behind a stream whose next offset is `next_offset`: the
    /// messages stored after the last one delivered to it.
    pub fn offset_lag(&self, next_offset: u64) -> u64 {
        next_offset.saturating_sub(self.last_offset().map_or(0, |o| o + 1))
    }
}

/// Every stream-protocol publisher and consumer of the broker, by
/// connection id and the client's id.
#[derive(Default)]
pub struct StreamClients {
    publishers: Mutex<BTreeMap<(u64, u8), Arc<PublisherStats>>>,
    consumers: Mutex<BTreeMap<(u64, u8), Arc<ConsumerStats>>>,
}

impl StreamClients {
    /// Registers publisher `id` of connection `conn`.
    pub fn add_publisher(&self, conn: u64, of: ClientOf, id: u8, reference: Option<String>) -> Arc<PublisherStats> {
        let p = Arc::new(PublisherStats {
            of,
            publisher_id: id,
            reference,
            published: AtomicU64::new(0),
            confirmed: AtomicU64::new(0),
            errored: AtomicU64::new(0),
        });
        self.publishers.lock().insert((conn, id), p.clone());
        p
    }

    /// Removes publisher `id` of connection `conn`.
    pub fn remove_publisher(&self, conn: u64, id: u8) {
        self.publishers.lock().remove(&(conn, id));
    }

    /// Registers subscription `id` of connection `conn`.
    pub fn add_consumer(
        &self,
        conn: u64,
        of: ClientOf,
        id: u8,
        properties: Vec<(String, String)>,
        active: bool,
    ) -> Arc<ConsumerStats> {
        let c = Arc::new(ConsumerStats {
            of,
            subscription_id: id,
            properties,
            consumed: AtomicU64::new(0),
            offset: AtomicU64::new(u64::MAX),
            active: AtomicBool::new(active),
            credits: AtomicU64::new(0),
        });
        self.consumers.lock().insert((conn, id), c.clone());
        c
    }

    /// Removes subscription `id` of connection `conn`.
    pub fn remove_consumer(&self, conn: u64, id: u8) {
        self.consumers.lock().remove(&(conn, id));
    }

    /// Forgets everything of connection `conn` (it closed).
    pub fn remove_connection(&self, conn: u64) {
        self.publishers.lock().retain(|(c, _), _| *c != conn);
        self.consumers.lock().retain(|(c, _), _| *c != conn);
    }

    /// Every publisher.
    pub fn publishers(&self) -> Vec<Arc<PublisherStats>> {
        self.publishers.lock().values().cloned().collect()
    }

    /// Every consumer.
    pub fn consumers(&self) -> Vec<Arc<ConsumerStats>> {
        self.consumers.lock().values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_consumer_lags_by_the_messages_stored_after_its_last_delivery() {
        let clients = StreamClients::default();
        let of = ClientOf {
            connection: "c".into(),
            vhost: "/".into(),
            stream: "s".into(),
        };
        let c = clients.add_consumer(1, of, 0, Vec::new(), true);
        assert_eq!(c.offset_lag(10), 10, "nothing delivered yet");
        c.offset.store(4, Ordering::Relaxed);
        assert_eq!(c.offset_lag(10), 5);
        c.offset.store(9, Ordering::Relaxed);
        assert_eq!(c.offset_lag(10), 0);
        assert_eq!(c.offset_lag(3), 0, "a truncated stream lags nothing");
    }
}
