//! The node's view of etcd, the cluster's coordinator: its lease and the
//! keep-alive that holds it, the shared secret, the leader election, and the
//! in-sync replica set (ISR), which only the elected leader writes, in a
//! transaction that fails once it is no longer leader (fencing).
//!
//! Keys, under the prefix (`lavinmq` by default), as LavinMQ names them:
//! `<prefix>/leader` (the election; the value is the leader's advertised URI),
//! `<prefix>/isr` (comma-separated base-36 node ids),
//! `<prefix>/clustering_secret` (created once by the first node).

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, LeaderKey, LeaseGrantOptions, ResignOptions, Txn, TxnOp,
};
use tokio_util::sync::CancellationToken;

use super::lease_clock::LeaseClock;
use super::node_id;

/// How long one etcd request may take before the node treats etcd as
/// unreachable.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Why an etcd operation failed.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// etcd answered with an error or could not be reached.
    #[error("etcd: {0}")]
    Client(#[from] etcd_client::Error),
    /// etcd did not answer in time.
    #[error("etcd did not answer within {0:?}")]
    Timeout(Duration),
    /// Another live node holds this node's id.
    #[error("another node with id {0} is running (its etcd lease exists)")]
    DuplicateId(String),
    /// `etcd_endpoints` names no endpoint.
    #[error("no etcd endpoint configured")]
    NoEndpoints,
}

async fn timed<T>(fut: impl Future<Output = Result<T, etcd_client::Error>>) -> Result<T, EtcdError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Ok(r) => r.map_err(EtcdError::from),
        Err(_) => Err(EtcdError::Timeout(REQUEST_TIMEOUT)),
    }
}

/// Splits `etcd_endpoints` (`host:port,...`, each optionally `user:pass@`) into
/// URLs and credentials.
pub fn parse_endpoints(spec: &str) -> (Vec<String>, Option<(String, String)>) {
    let mut urls = Vec::new();
    let mut user = None;
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (scheme, rest) = match part.split_once("://") {
            Some((s, r)) => (s, r),
            None => ("http", part),
        };
        let host = match rest.rsplit_once('@') {
            Some((creds, host)) => {
                if let Some((u, p)) = creds.split_once(':') {
                    user = Some((u.to_string(), p.to_string()));
                }
                host
            }
            None => rest,
        };
        urls.push(format!("{scheme}://{host}"));
    }
    (urls, user)
}

/// A connection to etcd on behalf of one node.
#[derive(Clone)]
pub struct Etcd {
    client: Client,
    prefix: String,
    id: u32,
    ttl: Duration,
}

impl Etcd {
    /// Connects to the endpoints `spec` (see [`parse_endpoints`]).
    pub async fn connect(spec: &str, prefix: &str, id: u32, ttl: Duration) -> Result<Etcd, EtcdError> {
        let (urls, user) = parse_endpoints(spec);
        if urls.is_empty() {
            return Err(EtcdError::NoEndpoints);
        }
        let mut options = ConnectOptions::new()
            .with_connect_timeout(REQUEST_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(Duration::from_secs(1), REQUEST_TIMEOUT);
        if let Some((u, p)) = user {
            options = options.with_user(u, p);
        }
        let client = timed(Client::connect(urls, Some(options))).await?;
        Ok(Etcd {
            client,
            prefix: prefix.trim_end_matches('/').to_string(),
            id,
            ttl,
        })
    }

    fn key(&self, name: &str) -> String {
        format!("{}/{name}", self.prefix)
    }

    /// The election's name.
    pub fn election(&self) -> String {
        self.key("leader")
    }

    /// Grants the node's lease (its id is the lease id). Fails with
    /// [`EtcdError::DuplicateId`] while a lease with that id exists: another
    /// node with this id, or this node's own before a restart, until it expires.
    pub async fn grant_lease(&mut self) -> Result<(), EtcdError> {
        let ttl = self.ttl.as_secs().max(1) as i64;
        let options = LeaseGrantOptions::new().with_id(i64::from(self.id));
        match timed(self.client.lease_grant(ttl, Some(options))).await {
            Ok(_) => Ok(()),
            Err(EtcdError::Client(etcd_client::Error::GRpcStatus(s)))
                if s.message().contains("lease already exists") =>
            {
                Err(EtcdError::DuplicateId(node_id::format(self.id)))
            }
            Err(e) => Err(e),
        }
    }

    /// Revokes the node's lease: its election key goes at once, so another
    /// node takes over without waiting for the lease to expire.
    pub async fn revoke_lease(&mut self) -> Result<(), EtcdError> {
        timed(self.client.lease_revoke(i64::from(self.id))).await.map(|_| ())
    }

    /// Keeps the lease alive until `session` is cancelled; cancels `session`
    /// itself once the lease can no longer be held (expired, or etcd out of
    /// reach for longer than the lease).
    pub async fn keep_alive(mut self, clock: Arc<LeaseClock>, session: CancellationToken) {
        let interval = (self.ttl / 3).max(Duration::from_millis(100));
        clock.renewed(Instant::now(), self.ttl);
        'reconnect: while !session.is_cancelled() && clock.valid() {
            let Ok((mut keeper, mut stream)) = timed(self.client.lease_keep_alive(i64::from(self.id))).await else {
                tokio::time::sleep(interval.min(clock.remaining())).await;
                continue;
            };
            loop {
                let sent = Instant::now();
                let answer = async {
                    keeper.keep_alive().await?;
                    stream.message().await
                };
                match tokio::time::timeout(interval, answer).await {
                    Ok(Ok(Some(resp))) if resp.ttl() > 0 => {
                        clock.renewed(sent, Duration::from_secs(resp.ttl() as u64));
                    }
                    Ok(Ok(Some(_))) => {
                        tracing::error!("cluster: the etcd lease expired");
                        clock.invalidate();
                        break 'reconnect;
                    }
                    _ => {
                        if !clock.valid() {
                            break 'reconnect;
                        }
                        tracing::warn!("cluster: etcd keep-alive failed, retrying");
                        continue 'reconnect;
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = session.cancelled() => return,
                }
                if !clock.valid() {
                    break 'reconnect;
                }
            }
        }
        clock.invalidate();
        session.cancel();
    }

    /// The cluster secret, created by the first node to ask.
    pub async fn secret(&mut self) -> Result<String, EtcdError> {
        let key = self.key("clustering_secret");
        let fresh: String = {
            use base64::Engine;
            let bytes: [u8; 32] = rand::random();
            base64::engine::general_purpose::STANDARD.encode(bytes)
        };
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), fresh, None)]);
        timed(self.client.txn(txn)).await?;
        let resp = timed(self.client.get(key, None)).await?;
        Ok(resp
            .kvs()
            .first()
            .and_then(|kv| kv.value_str().ok())
            .unwrap_or_default()
            .to_string())
    }

    /// The current leader's advertised URI, if there is a leader.
    pub async fn leader(&mut self) -> Result<Option<String>, EtcdError> {
        let name = self.election();
        match timed(self.client.leader(name)).await {
            Ok(resp) => Ok(resp.kv().and_then(|kv| kv.value_str().ok()).map(String::from)),
            Err(EtcdError::Client(etcd_client::Error::GRpcStatus(s)))
                if s.message().contains("no leader") || s.message().contains("election: no leader") =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The in-sync replica set, `None` when it was never written (a new cluster).
    pub async fn isr(&mut self) -> Result<Option<Vec<u32>>, EtcdError> {
        let resp = timed(self.client.get(self.key("isr"), None)).await?;
        Ok(resp.kvs().first().map(|kv| {
            kv.value_str()
                .unwrap_or_default()
                .split(',')
                .filter_map(node_id::parse)
                .collect()
        }))
    }

    /// Campaigns for leadership with `uri` as the value; returns once elected
    /// (this blocks for as long as another node leads).
    pub async fn campaign(&mut self, uri: &str) -> Result<LeaderKey, EtcdError> {
        let resp = self
            .client
            .campaign(self.election(), uri, i64::from(self.id))
            .await
            .map_err(EtcdError::from)?;
        resp.leader()
            .cloned()
            .ok_or_else(|| EtcdError::Client(etcd_client::Error::ElectError("no leader key".into())))
    }

    /// Gives up leadership (or a place in the election's queue).
    pub async fn resign(&mut self, key: LeaderKey) -> Result<(), EtcdError> {
        timed(self.client.resign(Some(ResignOptions::new().with_leader(key))))
            .await
            .map(|_| ())
    }

    /// Writes the ISR, but only while `key` is still the elected leader's
    /// key: a deposed leader's write fails (`Ok(false)`).
    pub async fn write_isr(&mut self, key: &LeaderKey, ids: &[u32]) -> Result<bool, EtcdError> {
        let value = ids.iter().map(|id| node_id::format(*id)).collect::<Vec<_>>().join(",");
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.key().to_vec(),
                CompareOp::Equal,
                key.rev(),
            )])
            .and_then([TxnOp::put(self.key("isr"), value, None)]);
        Ok(timed(self.client.txn(txn)).await?.succeeded())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_with_credentials_and_schemes() {
        let (urls, user) = parse_endpoints("localhost:2379, u:p@10.0.0.2:2379,https://e:2379");
        assert_eq!(
            urls,
            vec!["http://localhost:2379", "http://10.0.0.2:2379", "https://e:2379"]
        );
        assert_eq!(user, Some(("u".to_string(), "p".to_string())));
        assert!(parse_endpoints(" , ").0.is_empty());
    }
}
