//! A clustered node's life: hold an etcd lease, follow the leader (replicate
//! its data dir, forward client connections to it) while campaigning, and once
//! elected serve as the broker; lose the lease and it stops serving at once and
//! follows again. Runs until `stop` is cancelled (SIGTERM), when a leader
//! closes its clients and revokes its lease so that another node takes over
//! without waiting for the lease to expire.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::LeaderKey;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::etcd::{Etcd, EtcdError};
use super::follower::{self, FollowerEvents, FollowerSettings, LeaderInfo, StopHandle};
use super::follower_api::FollowerApi;
use super::leader_link::{self, LinkContext};
use super::leader_service::StartLeader;
use super::lease_clock::LeaseClock;
use super::log::{IsrChange, ReplicationLog};
use super::node_id;
use super::proxy::{LeaderTarget, OwnSources, Proxies};
use super::status::{ClusterStatus, Role};
use crate::config::Config;
use crate::data_dir_lock::DataDirLock;
use crate::transport::protocol_listener::Forwarders;

/// Why a clustered node could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The data dir is locked or unusable.
    #[error("{0}")]
    DataDir(String),
    /// Another node runs with this node's id.
    #[error(transparent)]
    DuplicateId(EtcdError),
}

/// Everything a node's phases share.
struct Node {
    config: Config,
    /// The configuration the broker is started with as leader.
    server_config: Config,
    id: u32,
    uri: String,
    clock: Arc<LeaseClock>,
    log: Arc<ReplicationLog>,
    status: Arc<ClusterStatus>,
    /// Where this node's proxies hand held connections to it from.
    own: OwnSources,
    /// Starts the broker when this node is elected.
    start_leader: StartLeader,
}

/// Runs a clustered node until `stop` is cancelled; `start_leader` starts
/// the broker whenever it is elected.
pub async fn run(config: &Config, stop: CancellationToken, start_leader: StartLeader) -> Result<(), NodeError> {
    let data_dir = config.main.data_dir.clone();
    std::fs::create_dir_all(&data_dir).map_err(|e| NodeError::DataDir(format!("cannot create data dir: {e}")))?;
    let _lock = match config.main.data_dir_lock {
        true => Some(DataDirLock::acquire(&data_dir).map_err(NodeError::DataDir)?),
        false => None,
    };
    let id = node_id::load_or_create(&data_dir).map_err(|e| NodeError::DataDir(e.to_string()))?;
    let cc = &config.clustering;
    let clock = Arc::new(LeaseClock::default());
    let log = Arc::new(ReplicationLog::new(&data_dir, cc.ack_timeout, clock.clone()));
    if !crate::store::replication::install(log.clone()) {
        return Err(NodeError::DataDir("one clustered node per process".into()));
    }
    let mut server_config = config.clone();
    // The node holds the lock for its whole life, across role changes.
    server_config.main.data_dir_lock = false;
    let node = Node {
        config: config.clone(),
        server_config,
        id,
        uri: cc.advertised_uri(),
        clock,
        log,
        status: ClusterStatus::global(),
        own: OwnSources::default(),
        start_leader,
    };
    node.status.set_self(id, &node.uri, node.log.clone());
    tracing::info!(
        node = %node_id::format(id),
        "cluster: node {} starting, advertised as {}, etcd {}",
        node_id::format(id),
        node.uri,
        cc.etcd_endpoints
    );
    let mut duplicate_since: Option<std::time::Instant> = None;
    while !stop.is_cancelled() {
        let mut etcd = match Etcd::connect(&cc.etcd_endpoints, &cc.etcd_prefix, id, cc.lease_ttl).await {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("cluster: cannot reach etcd: {e}");
                pause(&stop, Duration::from_secs(1)).await;
                continue;
            }
        };
        match etcd.grant_lease().await {
            Ok(()) => duplicate_since = None,
            Err(e @ EtcdError::DuplicateId(_)) => {
                // Our own lease from before a crash lives until it expires; a
                // lease that outlives two TTLs is held by another live node.
                let since = *duplicate_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > cc.lease_ttl * 2 + Duration::from_secs(1) {
                    return Err(NodeError::DuplicateId(e));
                }
                tracing::info!("cluster: waiting for this node's previous etcd lease to expire");
                pause(&stop, Duration::from_millis(500)).await;
                continue;
            }
            Err(e) => {
                tracing::warn!("cluster: cannot get an etcd lease: {e}");
                pause(&stop, Duration::from_secs(1)).await;
                continue;
            }
        }
        let session = CancellationToken::new();
        tokio::spawn(etcd.clone().keep_alive(node.clock.clone(), session.clone()));
        let secret = match etcd.secret().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cluster: cannot read the cluster secret: {e}");
                session.cancel();
                pause(&stop, Duration::from_secs(1)).await;
                continue;
            }
        };
        if let Some((key, mut proxies)) = node.follow(&mut etcd, &secret, &session, &stop).await {
            node.lead(&mut etcd, key, &secret, &session, &stop, &mut proxies).await;
            proxies.close().await;
        }
        session.cancel();
        node.clock.invalidate();
        if stop.is_cancelled()
            && let Err(e) = etcd.revoke_lease().await
        {
            tracing::warn!("cluster: could not revoke the lease: {e}");
        }
    }
    Ok(())
}

async fn pause(stop: &CancellationToken, d: Duration) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = stop.cancelled() => {}
    }
}

/// Runs `command` with `sh -c`, without waiting for it.
fn run_hook(what: &str, command: &Option<String>) {
    let Some(cmd) = command.as_deref().filter(|c| !c.trim().is_empty()) else {
        return;
    };
    match tokio::process::Command::new("sh").arg("-c").arg(cmd).spawn() {
        Ok(mut child) => {
            tokio::spawn(async move {
                let _ = child.wait().await;
            });
        }
        Err(e) => tracing::error!("cluster: cannot run {what} hook: {e}"),
    }
}

/// `tcp://host:port` → `host:port`.
fn uri_addr(uri: &str) -> &str {
    let rest = uri.split_once("://").map_or(uri, |(_, r)| r);
    rest.trim_end_matches('/')
}

/// The host part of an advertised URI.
fn uri_host(uri: &str) -> String {
    let addr = uri_addr(uri);
    match addr.rsplit_once(':') {
        Some((host, _)) => host.trim_start_matches('[').trim_end_matches(']').to_string(),
        None => addr.to_string(),
    }
}

/// A running follower thread and how to stop it.
struct Replica {
    leader: String,
    stop: StopHandle,
    thread: std::thread::JoinHandle<()>,
}

impl Replica {
    async fn stop(self) {
        self.stop.stop();
        let _ = tokio::task::spawn_blocking(move || self.thread.join()).await;
    }
}

/// What the follower thread reports, passed on to the log and the proxies.
struct Events {
    leader_uri: String,
    proxies_target: tokio::sync::watch::Sender<Option<LeaderTarget>>,
    status: Arc<ClusterStatus>,
}

impl FollowerEvents for Events {
    fn connected(&self, info: &LeaderInfo) {
        let _ = self.proxies_target.send(Some(LeaderTarget {
            host: uri_host(&self.leader_uri),
            info: info.clone(),
        }));
    }

    fn snapshot_applied(&self, fetched: usize, total: usize) {
        tracing::info!(
            "cluster: following leader at {}: {fetched} of {total} files fetched",
            self.leader_uri
        );
    }

    fn in_sync(&self) {
        tracing::info!("cluster: in sync with leader at {}", self.leader_uri);
        self.status.set_in_sync(true);
    }

    fn applied(&self, offset: u64) {
        self.status.set_applied(offset);
    }
}

impl Node {
    /// Follows whoever leads while campaigning. Returns the leader key once
    /// this node is elected (and in the ISR), with the client proxies, which
    /// hold new connections until this node serves them; `None` when the
    /// session or the node stopped.
    async fn follow(
        &self,
        etcd: &mut Etcd,
        secret: &str,
        session: &CancellationToken,
        stop: &CancellationToken,
    ) -> Option<(LeaderKey, Proxies)> {
        self.status.set_role(Role::Follower, None);
        let proxies = Proxies::bind(&self.config).await;
        let api = FollowerApi::start(&self.config, self.status.clone()).await;
        crate::systemd::ready();
        let (target_tx, mut target_rx) = tokio::sync::watch::channel(None);
        let mut replica: Option<Replica> = None;
        let (won_tx, mut won_rx) = tokio::sync::mpsc::channel(1);
        let campaign = tokio::spawn(campaign_loop(etcd.clone(), self.id, self.uri.clone(), won_tx));
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let elected = loop {
            tokio::select! {
                _ = session.cancelled() => break None,
                _ = stop.cancelled() => break None,
                won = won_rx.recv() => break won,
                _ = target_rx.changed() => {
                    proxies.set_target(target_rx.borrow().clone());
                }
                _ = tick.tick() => {
                    let leader = match etcd.leader().await {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::debug!("cluster: cannot read the leader: {e}");
                            continue;
                        }
                    };
                    let leader = leader.filter(|l| *l != self.uri);
                    let current = replica.as_ref().map(|r| r.leader.clone());
                    let finished = replica.as_ref().is_some_and(|r| r.thread.is_finished());
                    if leader != current || finished {
                        if let Some(r) = replica.take() {
                            r.stop().await;
                        }
                        if leader != current {
                            proxies.set_target(None);
                            self.status.set_role(Role::Follower, leader.clone());
                        }
                        if let Some(l) = leader {
                            replica = Some(self.start_replica(&l, secret, target_tx.clone()));
                        }
                    }
                }
            }
        };
        campaign.abort();
        if let Some(r) = replica.take() {
            r.stop().await;
        }
        api.close().await;
        match elected {
            Some(key) => {
                // Held until this node's own listeners take over.
                proxies.set_target(None);
                Some((key, proxies))
            }
            None => {
                proxies.close().await;
                None
            }
        }
    }

    fn start_replica(
        &self,
        leader: &str,
        secret: &str,
        target: tokio::sync::watch::Sender<Option<LeaderTarget>>,
    ) -> Replica {
        let stop = StopHandle::default();
        let settings = FollowerSettings {
            data_dir: self.config.main.data_dir.clone(),
            secret: secret.to_string(),
            id: self.id,
        };
        let events = Events {
            leader_uri: leader.to_string(),
            proxies_target: target,
            status: self.status.clone(),
        };
        let addr = uri_addr(leader).to_string();
        let handle = stop.clone();
        self.status.set_in_sync(false);
        let thread = std::thread::Builder::new()
            .name("lavinmq-follower".into())
            .spawn(move || {
                if let Err(e) = follower::follow(&addr, &settings, &events, &handle) {
                    tracing::warn!("cluster: replication from {addr} stopped: {e}");
                    std::thread::sleep(Duration::from_millis(500));
                }
                events.status.set_in_sync(false);
            });
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                tracing::error!("cluster: cannot start the follower thread: {e}");
                std::thread::spawn(|| {})
            }
        };
        Replica {
            leader: leader.to_string(),
            stop,
            thread,
        }
    }

    /// Serves as the leader until the lease is lost or the node stops.
    /// `proxies` (this node's, from following) free the client ports just
    /// before the broker binds them, and then hand what they hold to it.
    async fn lead(
        &self,
        etcd: &mut Etcd,
        key: LeaderKey,
        secret: &str,
        session: &CancellationToken,
        stop: &CancellationToken,
        proxies: &mut Proxies,
    ) {
        match etcd.write_isr(&key, &[self.id]).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!("cluster: lost the election before taking over");
                return;
            }
            Err(e) => {
                tracing::warn!("cluster: cannot write the in-sync replica set: {e}");
                let _ = etcd.resign(key).await;
                return;
            }
        }
        let (isr_tx, isr_rx) = tokio::sync::mpsc::unbounded_channel();
        self.log.start_leading(isr_tx);
        let isr_task = tokio::spawn(isr_loop(etcd.clone(), key.clone(), self.id, isr_rx, session.clone()));
        let log = self.log.clone();
        let own = self.own.clone();
        let forwarders = Forwarders(Arc::new(move |ip| log.is_follower_address(ip) || own.contains(ip)));
        proxies.stop_accepting().await;
        let server = match (self.start_leader)(self.server_config.clone(), forwarders).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("cluster: cannot start the broker as leader: {e}");
                self.log.stop_leading();
                isr_task.abort();
                let _ = etcd.resign(key).await;
                pause(stop, Duration::from_secs(1)).await;
                return;
            }
        };
        crate::systemd::ready();
        let info = LeaderInfo {
            id: node_id::format(self.id),
            ..server.client_ports()
        };
        // What the proxies held goes to this node's own listeners, with the
        // client named in a PROXY header that the broker trusts from there.
        let host = uri_host(&self.uri);
        if let Ok(addrs) = tokio::net::lookup_host((host.as_str(), info.amqp_port)).await {
            addrs.for_each(|a| self.own.learn_route_to(a));
        }
        proxies.set_target(Some(LeaderTarget {
            host,
            info: info.clone(),
        }));
        let ctx = Arc::new(LinkContext {
            log: self.log.clone(),
            secret: secret.to_string(),
            info: serde_json::to_vec(&info).unwrap_or_default(),
        });
        let listen = CancellationToken::new();
        let cc = &self.config.clustering;
        match bind_replication(&cc.bind, cc.port).await {
            Ok((listener, addr)) => {
                tracing::info!("cluster: replication listening on {addr}");
                tokio::spawn(accept_followers(listener, ctx, listen.clone()));
            }
            Err(e) => tracing::error!("cluster: cannot bind the replication port: {e}"),
        }
        self.status.set_role(Role::Leader, Some(self.uri.clone()));
        tracing::info!("cluster: elected leader ({})", self.uri);
        run_hook("on_leader_elected", &cc.on_leader_elected);
        let broker = Arc::downgrade(server.broker());
        tokio::select! {
            _ = session.cancelled() => {
                // Confirm nothing more, then close every client.
                self.log.stop_leading();
                tracing::error!("cluster: leadership lost (the etcd lease could not be renewed); closing all clients");
                listen.cancel();
                server.shutdown().await;
                run_hook("on_leader_lost", &cc.on_leader_lost);
            }
            _ = stop.cancelled() => {
                listen.cancel();
                server.shutdown().await;
                self.log.stop_leading();
                let _ = etcd.resign(key).await;
                tracing::info!("cluster: stepped down as leader");
            }
        }
        isr_task.abort();
        // The follower thread is about to write into the data dir: nothing
        // of the old broker (queue timers, delayed-message loops) may still
        // touch it.
        let mut waited = Duration::ZERO;
        while broker.strong_count() > 0 && waited < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            waited += Duration::from_millis(50);
        }
        if broker.strong_count() > 0 {
            tracing::warn!("cluster: the stopped broker is still referenced; following anyway");
        }
    }
}

/// Campaigns whenever this node may lead: it is in the ISR, or no ISR exists
/// yet (a new cluster). Sends the leader key once elected and confirmed in
/// the ISR; an elected node that is not in the ISR resigns and waits.
async fn campaign_loop(mut etcd: Etcd, id: u32, uri: String, won: tokio::sync::mpsc::Sender<LeaderKey>) {
    loop {
        let eligible = match etcd.isr().await {
            Ok(None) => true,
            Ok(Some(isr)) => isr.contains(&id),
            Err(_) => false,
        };
        if !eligible {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        match etcd.campaign(&uri).await {
            Ok(key) => {
                let still = match etcd.isr().await {
                    Ok(None) => true,
                    Ok(Some(isr)) => isr.contains(&id),
                    Err(_) => false,
                };
                if still {
                    let _ = won.send(key).await;
                    return;
                }
                tracing::info!("cluster: elected but not in the in-sync replica set; resigning");
                let _ = etcd.resign(key).await;
            }
            Err(e) => {
                tracing::debug!("cluster: campaign failed: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Applies ISR changes asked by the replication log, writing each to etcd
/// under the leader key before answering.
async fn isr_loop(
    mut etcd: Etcd,
    key: LeaderKey,
    id: u32,
    mut changes: tokio::sync::mpsc::UnboundedReceiver<IsrChange>,
    session: CancellationToken,
) {
    let mut isr = vec![id];
    while let Some(change) = changes.recv().await {
        let mut next = isr.clone();
        next.retain(|n| !change.remove.contains(n));
        for a in &change.add {
            if !next.contains(a) {
                next.push(*a);
            }
        }
        let ok = match etcd.write_isr(&key, &next).await {
            Ok(true) => true,
            Ok(false) => {
                tracing::error!("cluster: the in-sync replica set could not be written: no longer leader");
                session.cancel();
                false
            }
            Err(e) => {
                tracing::error!("cluster: cannot write the in-sync replica set: {e}");
                false
            }
        };
        if ok {
            isr = next;
            let names: Vec<String> = isr.iter().map(|n| node_id::format(*n)).collect();
            tracing::info!("cluster: in-sync replica set is now {}", names.join(","));
        }
        let _ = change.reply.send(ok);
    }
}

async fn bind_replication(bind: &str, port: u16) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(crate::transport::listen_address(bind, port)).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

/// Hands each follower connection to its own thread until `stop`.
async fn accept_followers(listener: TcpListener, ctx: Arc<LinkContext>, stop: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.cancelled() => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let Ok(stream) = stream.into_std() else { continue };
        if stream.set_nonblocking(false).is_err() {
            continue;
        }
        let ctx = ctx.clone();
        let spawned = std::thread::Builder::new()
            .name("lavinmq-leader-link".into())
            .spawn(move || leader_link::serve(stream, ctx));
        if let Err(e) = spawned {
            tracing::error!("cluster: cannot start a replication thread: {e}");
        }
    }
}
