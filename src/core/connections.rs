//! The client connections of every protocol, as the management API lists and
//! closes them. Adapters register a connection when it is open and drop its
//! [`Registration`] when it ends.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap;
use tokio_util::sync::CancellationToken;

use super::PackedTable;
use super::stats::{ChannelCounters, ChurnCounters, Counter, Rates};

/// What a connection told the broker when it opened; fixed for its lifetime.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    /// Broker-wide connection id.
    pub id: u64,
    /// Protocol, e.g. `AMQP 0-9-1`.
    pub protocol: &'static str,
    /// Authenticated user.
    pub user: String,
    /// Vhost in use.
    pub vhost: String,
    /// The client's address.
    pub peer: SocketAddr,
    /// The broker's address the client connected to.
    pub local: SocketAddr,
    /// Authentication mechanism used (`PLAIN`, ...).
    pub auth_mechanism: String,
    /// Properties the client announced (product, version, capabilities, ...),
    /// packed: they are read only when the management API lists connections.
    pub client_properties: PackedTable,
    /// Negotiated frame size limit.
    pub frame_max: u32,
    /// Negotiated channel limit.
    pub channel_max: u16,
    /// Negotiated heartbeat in seconds.
    pub heartbeat: u16,
    /// What the TLS handshake settled, when the connection is encrypted.
    pub tls: Option<TlsInfo>,
}

/// The facts of an encrypted connection the management API shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsInfo {
    /// Protocol version, as RabbitMQ names it (`tlsv1.3`).
    pub protocol: &'static str,
    /// Negotiated cipher suite, by its IANA name.
    pub cipher: &'static str,
    /// Subject CN of the verified client certificate, if one was presented.
    pub peer_cn: Option<String>,
}

/// What the management API shows of a channel at one moment.
#[derive(Debug, Clone, Default)]
pub struct ChannelDetails {
    /// Per-consumer prefetch for new consumers (0 = unlimited).
    pub prefetch_count: u32,
    /// Channel-wide prefetch (0 = unlimited).
    pub global_prefetch_count: u32,
    /// In publisher-confirm mode.
    pub confirm: bool,
    /// In transaction mode.
    pub transactional: bool,
    /// Deliveries not yet settled.
    pub unacked: u64,
    /// Messages published and not yet confirmed.
    pub unconfirmed: u64,
    /// False while the client paused deliveries.
    pub flow_active: bool,
}

/// What the management API shows of a consumer.
#[derive(Debug, Clone)]
pub struct ConsumerDetails {
    /// The consumer tag.
    pub tag: String,
    /// Queue consumed from.
    pub queue: String,
    /// Messages must be acknowledged.
    pub ack_required: bool,
    /// The only consumer allowed on the queue.
    pub exclusive: bool,
    /// Per-consumer prefetch (0 = unlimited).
    pub prefetch_count: u32,
    /// Consumer priority.
    pub priority: i32,
    /// Receiving now: false for a single active consumer that waits its turn.
    pub active: bool,
}

/// A delivery not yet settled, as the API lists it per queue.
#[derive(Debug, Clone)]
pub struct UnackedDetails {
    /// The channel's delivery tag.
    pub delivery_tag: u64,
    /// Queue the message came from.
    pub queue: String,
    /// The consumer it went to; `None` for basic.get.
    pub consumer_tag: Option<String>,
    /// When it was delivered (ms since the epoch).
    pub delivered_at: i64,
}

/// One channel of a connection, as the API sees it; the protocol adapter
/// implements it over its own channel state.
pub trait ChannelView: Send + Sync {
    /// The channel number.
    fn number(&self) -> u16;
    /// Settings and figures now.
    fn details(&self) -> ChannelDetails;
    /// Consumers on the channel.
    fn consumers(&self) -> Vec<ConsumerDetails>;
    /// Sets the prefetch of the channel's consumers and of those it creates
    /// from now on (LavinMQ's `PUT /api/channels/{name}`); false when the
    /// protocol has no such setting.
    fn set_prefetch(&self, prefetch: u16) -> bool;
    /// Cancels consumer `tag` from the broker's side (the client is told when
    /// it understands server cancels); false when there is no such consumer.
    fn cancel_consumer(&self, tag: &str) -> bool;
    /// Deliveries from queue `queue` not yet settled.
    fn unacked(&self, queue: &str) -> Vec<UnackedDetails>;
    /// Message counts.
    fn counters(&self) -> &ChannelCounters;
    /// Rates of the counts.
    fn rates(&self) -> &Rates;
}

/// What the broker knows about one open connection.
pub struct ConnectionEntry {
    /// What the client negotiated: id, protocol, user, vhost, addresses.
    pub info: ConnectionInfo,
    /// Name shown by the API: `client address -> broker address`.
    pub name: String,
    /// Milliseconds since the epoch when it opened.
    pub connected_at: i64,
    /// Open channels, by number.
    channels: RwLock<BTreeMap<u16, Arc<dyn ChannelView>>>,
    /// Bytes received from the client.
    pub recv_oct: Counter,
    /// Bytes sent to the client.
    pub send_oct: Counter,
    /// Socket reads.
    pub recv_cnt: Counter,
    /// Socket writes.
    pub send_cnt: Counter,
    /// Publisher confirms sent by a protocol without channels (MQTT's PUBACK
    /// and PUBREC); channels count their own.
    pub confirm: Counter,
    /// Publisher confirms the connection's closed channels had sent, added
    /// under the channels' lock as each one closes.
    closed_channel_confirms: Counter,
    /// Rates of the byte counts, sampled by the broker.
    pub rates: Rates,
    /// When the connection last waited for slow consumers (ms since the
    /// epoch; 0: never): RabbitMQ's `flow` state.
    paced_at: std::sync::atomic::AtomicI64,
    churn: Arc<ChurnCounters>,
    close: CancellationToken,
    reason: Mutex<Option<String>>,
}

impl ConnectionEntry {
    /// Asks the connection to close, telling the client `reason`.
    pub fn close(&self, reason: &str) {
        *self.reason.lock() = Some(reason.to_string());
        self.close.cancel();
    }

    /// Completes when someone asked the connection to close.
    pub async fn closed(&self) {
        self.close.cancelled().await;
    }

    /// The reason given to [`ConnectionEntry::close`].
    pub fn reason(&self) -> String {
        self.reason
            .lock()
            .clone()
            .unwrap_or_else(|| "closed via management plugin".into())
    }

    /// Number of open channels.
    pub fn channel_count(&self) -> usize {
        self.channels.read().len()
    }

    /// Lists an opened channel.
    pub fn add_channel(&self, channel: Arc<dyn ChannelView>) {
        self.churn.channel_created.incr();
        self.channels.write().insert(channel.number(), channel);
    }

    /// Unlists a closed channel.
    pub fn remove_channel(&self, number: u16) {
        let mut channels = self.channels.write();
        if let Some(ch) = channels.remove(&number) {
            // Kept under the lock, so that `confirms` never sees the count twice or not at all.
            self.closed_channel_confirms.add(ch.counters().confirm.get());
            self.churn.channel_closed.incr();
        }
    }

    /// Publisher confirms sent on the connection so far, by its open and its
    /// closed channels alike.
    pub fn confirms(&self) -> u64 {
        let channels = self.channels.read();
        self.confirms_locked(&channels)
    }

    fn confirms_locked(&self, channels: &BTreeMap<u16, Arc<dyn ChannelView>>) -> u64 {
        let open: u64 = channels.values().map(|ch| ch.counters().confirm.get()).sum();
        self.confirm.get() + self.closed_channel_confirms.get() + open
    }

    /// The open channels, by number.
    pub fn channels(&self) -> Vec<Arc<dyn ChannelView>> {
        self.channels.read().values().cloned().collect()
    }

    /// The channel numbered `number`.
    pub fn channel(&self, number: u16) -> Option<Arc<dyn ChannelView>> {
        self.channels.read().get(&number).cloned()
    }

    /// Notes that the connection's reads wait for the consumers of a queue it
    /// publishes to (see [`crate::core::queue::Queue::deliver_or_wake`]).
    pub fn note_paced(&self, now_ms: i64) {
        self.paced_at.store(now_ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// RabbitMQ's connection state: `flow` when the connection was paced in
    /// the last second, else `running`.
    pub fn state(&self, now_ms: i64) -> &'static str {
        let at = self.paced_at.load(std::sync::atomic::Ordering::Relaxed);
        if at > 0 && now_ms - at < 1000 {
            "flow"
        } else {
            "running"
        }
    }

    /// Counts one socket read of `n` bytes.
    pub fn count_read(&self, n: usize) {
        self.recv_oct.add(n as u64);
        self.recv_cnt.incr();
    }

    /// Counts one socket write of `n` bytes.
    pub fn count_write(&self, n: usize) {
        self.send_oct.add(n as u64);
        self.send_cnt.incr();
    }

    /// The byte counters as `(name, value)`, under RabbitMQ's names.
    pub fn named_counts(&self) -> [(&'static str, u64); 4] {
        [
            ("recv_oct", self.recv_oct.get()),
            ("send_oct", self.send_oct.get()),
            ("recv_cnt", self.recv_cnt.get()),
            ("send_cnt", self.send_cnt.get()),
        ]
    }
}

/// Every open connection.
pub struct ConnectionRegistry {
    entries: RwLock<FxHashMap<u64, Arc<ConnectionEntry>>>,
    /// The last id handed out by [`ConnectionRegistry::next_id`].
    last_id: std::sync::atomic::AtomicU64,
    /// Connections, channels and queues created and closed, broker-wide.
    pub churn: Arc<ChurnCounters>,
    /// Publisher confirms sent on closed connections, per vhost; changed
    /// only under the `entries` write lock.
    closed_confirms: Mutex<FxHashMap<String, u64>>,
    /// The node's connection limit (`connection_max`); `u64::MAX` when
    /// there is none.
    node_max: std::sync::atomic::AtomicU64,
    /// New connections per second (`connection_rate_limit`), taken before
    /// a login is checked.
    pub creation_rate: super::rate_limit::RateLimiter,
}

impl Default for ConnectionRegistry {
    fn default() -> Self {
        ConnectionRegistry {
            entries: RwLock::default(),
            last_id: Default::default(),
            churn: Arc::default(),
            closed_confirms: Mutex::default(),
            node_max: std::sync::atomic::AtomicU64::new(u64::MAX),
            creation_rate: Default::default(),
        }
    }
}

/// The connection limits a new connection is checked against.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConnectionLimits {
    /// The vhost's `max-connections`.
    pub vhost: Option<u64>,
    /// The user's `max-connections`.
    pub user: Option<u64>,
}

/// Which limit refused a connection, with its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitReached {
    /// The node has this many connections (`connection_max`).
    Node(u64),
    /// The vhost has this many connections.
    Vhost(u64),
    /// The user has this many connections.
    User(u64),
}

impl LimitReached {
    /// The refusal as clients and the log are told it.
    pub fn describe(self, vhost: &str, user: &str) -> String {
        match self {
            LimitReached::Node(max) => format!("connection refused: node connection limit ({max}) is reached"),
            LimitReached::Vhost(max) => {
                format!("access to vhost '{vhost}' refused for user '{user}': connection limit ({max}) is reached")
            }
            LimitReached::User(max) => {
                format!("connection refused for user '{user}': user connection limit ({max}) is reached")
            }
        }
    }
}

/// Keeps a connection listed; dropping it removes the entry.
pub struct Registration {
    registry: Arc<ConnectionRegistry>,
    /// The entry, for the adapter to update and watch.
    pub entry: Arc<ConnectionEntry>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let open = {
            let mut entries = self.registry.entries.write();
            entries.remove(&self.entry.info.id);
            // Moved to the vhost's total in one step with the removal, so a
            // concurrent `ConnectionRegistry::confirms` counts them once.
            let channels = self.entry.channels.read();
            let confirms = self.entry.confirms_locked(&channels);
            let mut closed = self.registry.closed_confirms.lock();
            match closed.get_mut(&self.entry.info.vhost) {
                Some(total) => *total += confirms,
                None => {
                    closed.insert(self.entry.info.vhost.clone(), confirms);
                }
            }
            channels.len() as u64
        };
        self.registry.churn.connection_closed.incr();
        self.registry.churn.channel_closed.add(open);
    }
}

impl ConnectionRegistry {
    /// A process-unique id for connections and consumers of every protocol
    /// (connection ids own exclusive queues, so protocols must not share one).
    pub fn next_id(&self) -> u64 {
        self.last_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
    }

    /// Lists a new connection.
    ///
    /// The connection is refused when its vhost, or its user, already has as
    /// many as `limits` allow: counted and inserted under one lock, so that
    /// clients connecting at the same instant cannot all slip under a limit.
    pub fn register(
        self: &Arc<Self>,
        info: ConnectionInfo,
        connected_at: i64,
        limits: ConnectionLimits,
    ) -> Result<Registration, LimitReached> {
        let entry = Arc::new(ConnectionEntry {
            name: format!("{} -> {}", info.peer, info.local),
            connected_at,
            channels: RwLock::default(),
            recv_oct: Counter::default(),
            send_oct: Counter::default(),
            recv_cnt: Counter::default(),
            send_cnt: Counter::default(),
            confirm: Counter::default(),
            closed_channel_confirms: Counter::default(),
            paced_at: std::sync::atomic::AtomicI64::new(0),
            rates: Rates::default(),
            churn: self.churn.clone(),
            info,
            close: CancellationToken::new(),
            reason: Mutex::new(None),
        });
        {
            let mut entries = self.entries.write();
            let node_max = self.node_max.load(std::sync::atomic::Ordering::Relaxed);
            if entries.len() as u64 >= node_max {
                return Err(LimitReached::Node(node_max));
            }
            let count =
                |same: &dyn Fn(&ConnectionInfo) -> bool| entries.values().filter(|e| same(&e.info)).count() as u64;
            if let Some(max) = limits.vhost
                && count(&|i| i.vhost == entry.info.vhost) >= max
            {
                return Err(LimitReached::Vhost(max));
            }
            if let Some(max) = limits.user
                && count(&|i| i.user == entry.info.user) >= max
            {
                return Err(LimitReached::User(max));
            }
            entries.insert(entry.info.id, entry.clone());
        }
        self.churn.connection_created.incr();
        Ok(Registration {
            registry: self.clone(),
            entry,
        })
    }

    /// Applies `connection_max` (`None` = no limit) and
    /// `connection_rate_limit` (0 = no limit) to new connections.
    pub fn set_node_limits(&self, max: Option<u64>, rate: u32) {
        self.node_max
            .store(max.unwrap_or(u64::MAX), std::sync::atomic::Ordering::Relaxed);
        self.creation_rate.set_rate(rate);
    }

    /// Refuses a new connection over `connection_rate_limit`, with the text
    /// clients and the log are given.
    pub fn admit_new(&self) -> Result<(), String> {
        if self.creation_rate.try_acquire() {
            Ok(())
        } else {
            Err(format!(
                "connection refused: connection rate limit ({}/s) is reached",
                self.creation_rate.rate()
            ))
        }
    }

    /// Channels open over all connections of `user` (for its `max-channels`).
    pub fn user_channel_count(&self, user: &str) -> u64 {
        self.entries
            .read()
            .values()
            .filter(|e| e.info.user == user)
            .map(|e| e.channel_count() as u64)
            .sum()
    }

    /// Every open connection, by name.
    pub fn list(&self) -> Vec<Arc<ConnectionEntry>> {
        let mut all: Vec<_> = self.entries.read().values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Publisher confirms sent to clients of the vhosts `in_vhost` accepts,
    /// over open and closed connections: a count that never goes back, even
    /// while connections and channels close.
    pub fn confirms(&self, in_vhost: impl Fn(&str) -> bool) -> u64 {
        let entries = self.entries.read();
        let closed: u64 = self
            .closed_confirms
            .lock()
            .iter()
            .filter(|(vhost, _)| in_vhost(vhost))
            .map(|(_, n)| n)
            .sum();
        let open: u64 = entries
            .values()
            .filter(|e| in_vhost(&e.info.vhost))
            .map(|e| e.confirms())
            .sum();
        closed + open
    }

    /// The connection named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<ConnectionEntry>> {
        self.entries.read().values().find(|e| e.name == name).cloned()
    }

    /// Closes every connection to `vhost` (it is being deleted).
    pub fn close_vhost(&self, vhost: &str, reason: &str) {
        for e in self.entries.read().values().filter(|e| e.info.vhost == vhost) {
            e.close(reason);
        }
    }
}
