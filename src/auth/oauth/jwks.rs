//! The identity provider's signing keys: found through OpenID discovery
//! (`<issuer>/.well-known/openid-configuration` names the `jwks_uri`),
//! fetched, and kept for `jwks_cache_ttl`. A token signed with a key id not
//! among them makes the broker fetch them again (at most once a second, so
//! that forged tokens cannot make it flood the provider), which picks up a
//! rotated key without waiting for the cache to expire.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::DecodingKey;
use jsonwebtoken::jwk::Jwk;
use serde_json::Value;

use super::TokenError;
use super::discovery::{Discovery, FETCH_LIMIT, FETCH_TIMEOUT};

/// Least time between two fetches asked for by unknown key ids.
const MIN_REFETCH: Duration = Duration::from_secs(1);

/// One signing key: the decoding key and the algorithm the provider says
/// it is for, if it says.
pub struct SigningKey {
    /// The public key.
    pub key: DecodingKey,
    /// The `alg` of the JWK, when given.
    pub algorithm: Option<jsonwebtoken::Algorithm>,
}

/// The keys fetched at one time, by key id (`""` for a key without one).
struct KeySet {
    keys: HashMap<String, Arc<SigningKey>>,
    fetched: Instant,
}

/// The provider's signing keys, cached.
pub struct Jwks {
    issuer: String,
    ttl: Duration,
    cached: parking_lot::RwLock<Option<Arc<KeySet>>>,
    /// The discovery document of the last successful fetch.
    discovery: parking_lot::RwLock<Option<Arc<Discovery>>>,
    /// Held while fetching, so that concurrent logins wait for one fetch;
    /// it holds when the last fetch was tried, whatever its outcome, so that
    /// while the provider is down the logins waiting do not each try again.
    fetching: tokio::sync::Mutex<Option<Instant>>,
}

impl Jwks {
    /// Keys of the provider at `issuer`, kept for `ttl`.
    pub fn new(issuer: &str, ttl: Duration) -> Self {
        Jwks {
            issuer: issuer.trim_end_matches('/').to_owned(),
            ttl,
            cached: parking_lot::RwLock::new(None),
            discovery: parking_lot::RwLock::new(None),
            fetching: tokio::sync::Mutex::new(None),
        }
    }

    /// The key `kid` names (or the only key, for a token without a key
    /// id), fetching the keys first when none are cached, the cache has
    /// expired, or `kid` is not among them.
    pub async fn key(&self, kid: Option<&str>) -> Result<Arc<SigningKey>, TokenError> {
        let current = self.cached.read().clone();
        if let Some(set) = &current
            && set.fetched.elapsed() < self.ttl
            && let Some(k) = pick(set, kid)
        {
            return Ok(k);
        }
        let mut last_try = self.fetching.lock().await;
        // Another login may have fetched (or tried to) while this one waited.
        let latest = self.cached.read().clone();
        let tried_lately = last_try.is_some_and(|at| at.elapsed() < MIN_REFETCH);
        let set = match latest {
            Some(set) if tried_lately => set,
            None if tried_lately => {
                return Err(TokenError::Provider("unreachable at the last try, a moment ago".into()));
            }
            stale => {
                *last_try = Some(Instant::now());
                match self.fetch().await {
                    Ok(set) => {
                        let set = Arc::new(set);
                        *self.cached.write() = Some(set.clone());
                        set
                    }
                    Err(e) => {
                        // Keys that have merely aged still verify while the
                        // provider cannot be reached.
                        tracing::warn!(issuer = %self.issuer, "cannot fetch the signing keys: {e}");
                        stale.ok_or(e)?
                    }
                }
            }
        };
        pick(&set, kid).ok_or_else(|| TokenError::UnknownKey(kid.unwrap_or_default().to_owned()))
    }

    /// The provider's discovery document: the one of the last key fetch,
    /// else fetched now.
    pub async fn discovery(&self) -> Result<Arc<Discovery>, TokenError> {
        if let Some(d) = self.discovery.read().clone() {
            return Ok(d);
        }
        let d = Arc::new(Discovery::fetch(&self.issuer).await?);
        *self.discovery.write() = Some(d.clone());
        Ok(d)
    }

    /// Discovery, then the key set.
    async fn fetch(&self) -> Result<KeySet, TokenError> {
        let discovery = Arc::new(Discovery::fetch(&self.issuer).await?);
        *self.discovery.write() = Some(discovery.clone());
        let jwks_uri = &discovery.jwks_uri;
        let set = crate::client::http::get_json(jwks_uri, FETCH_TIMEOUT, FETCH_LIMIT)
            .await
            .map_err(|e| TokenError::Provider(format!("{jwks_uri}: {e}")))?;
        let keys = parse_keys(&set);
        tracing::info!(issuer = %self.issuer, keys = keys.len(), "fetched the signing keys");
        Ok(KeySet {
            keys,
            fetched: Instant::now(),
        })
    }
}

/// The key for `kid`; without one, the only key there is.
fn pick(set: &KeySet, kid: Option<&str>) -> Option<Arc<SigningKey>> {
    match kid {
        Some(kid) => set.keys.get(kid).cloned(),
        None if set.keys.len() == 1 => set.keys.values().next().cloned(),
        None => None,
    }
}

/// The usable signing keys of a JWK set; encryption keys and keys of types
/// that cannot verify a token are skipped.
fn parse_keys(set: &Value) -> HashMap<String, Arc<SigningKey>> {
    let mut out = HashMap::new();
    for v in set.get("keys").and_then(Value::as_array).into_iter().flatten() {
        if v.get("use").and_then(Value::as_str).is_some_and(|u| u != "sig") {
            continue;
        }
        let Ok(jwk) = serde_json::from_value::<Jwk>(v.clone()) else {
            continue;
        };
        let Ok(key) = DecodingKey::from_jwk(&jwk) else {
            continue;
        };
        let algorithm = jwk
            .common
            .key_algorithm
            .and_then(|a| a.to_string().parse::<jsonwebtoken::Algorithm>().ok());
        let kid = jwk.common.key_id.clone().unwrap_or_default();
        out.insert(kid, Arc::new(SigningKey { key, algorithm }));
    }
    out
}
