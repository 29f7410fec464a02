//! Users and their credentials, stored in `users.json` with RabbitMQ-compatible
//! password hashes so that definitions move between brokers unchanged.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::limits::NamedLimits;
use super::password::{self, Algorithm, PasswordError};
use super::topic_permissions::{TopicPermissions, TopicRules, Variables};
use super::{Error, Result};
use crate::store::definitions;

/// Configure, write and read permission patterns of a user in one vhost.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Permissions {
    /// Regex of names the user may declare and delete.
    pub configure: String,
    /// Regex of names the user may publish to / bind from.
    pub write: String,
    /// Regex of names the user may consume from / bind to.
    pub read: String,
}

impl Permissions {
    /// Checks that the three patterns are valid regular expressions.
    pub fn validate(&self) -> std::result::Result<(), String> {
        for re in [&self.configure, &self.write, &self.read] {
            regex::Regex::new(re).map_err(|e| format!("invalid regex '{re}': {e}"))?;
        }
        Ok(())
    }

    /// Full access.
    pub fn all() -> Self {
        Permissions {
            configure: ".*".into(),
            write: ".*".into(),
            read: ".*".into(),
        }
    }
}

/// A broker user.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct User {
    /// User name.
    pub name: String,
    /// The password hash in the format of `hashing_algorithm`: base64 of salt
    /// followed by the digest (as RabbitMQ stores it), or a bcrypt string.
    pub password_hash: String,
    /// RabbitMQ's (or, for bcrypt, LavinMQ's) name of the hashing algorithm.
    pub hashing_algorithm: String,
    /// Tags such as `administrator`.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Permissions per vhost.
    #[serde(default)]
    pub permissions: HashMap<String, Permissions>,
    /// Topic permissions per vhost, by exchange.
    #[serde(default, skip_serializing_if = "HashMap::is_empty")]
    pub topic_permissions: HashMap<String, TopicPermissions>,
    /// Limits on what the user may hold open (`/api/user-limits`).
    #[serde(default, skip_serializing_if = "UserLimits::is_empty")]
    pub limits: UserLimits,
}

/// The limits of a user, as set with `/api/user-limits` (RabbitMQ's user
/// limits): counted over all of the user's connections, in every vhost. A
/// value is kept as given; a negative one means no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserLimits {
    /// Most client connections open at once.
    #[serde(rename = "max-connections", default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<i64>,
    /// Most channels open at once, over all connections.
    #[serde(rename = "max-channels", default, skip_serializing_if = "Option::is_none")]
    pub max_channels: Option<i64>,
}

impl UserLimits {
    /// The limit names RabbitMQ knows.
    pub const NAMES: [&'static str; 2] = ["max-connections", "max-channels"];

    /// True when no limit is set.
    pub fn is_empty(&self) -> bool {
        self.max_connections.is_none() && self.max_channels.is_none()
    }
}

impl NamedLimits for UserLimits {
    const TERMS: &'static str = "user limits";

    fn slot(&mut self, name: &str) -> Option<&mut Option<i64>> {
        match name {
            "max-connections" => Some(&mut self.max_connections),
            "max-channels" => Some(&mut self.max_channels),
            _ => None,
        }
    }
}

/// RabbitMQ's default algorithm name, used for passwords set in clear text.
pub const SHA256: &str = "rabbit_password_hashing_sha256";

/// Hashes a password the way RabbitMQ does by default: base64(salt ++ sha256(salt ++ password)).
pub fn hash_password(password: &str) -> String {
    password::hash(password, Algorithm::Sha256)
}

/// Checks a password against a stored hash of the named algorithm (see
/// [`password`] for the formats); an unknown algorithm never matches.
pub fn verify_password(hash: &str, algorithm: &str, password: &str) -> bool {
    password::verify_named(hash, algorithm, password)
}

/// Checks a `password_hash` and its `hashing_algorithm` (guessed from the hash
/// when absent) as given to the API or in definitions, and returns the hash and
/// the canonical algorithm name to store.
pub fn checked_hash(hash: &str, algorithm: Option<&str>) -> std::result::Result<(String, String), PasswordError> {
    let (hash, algorithm) = password::parse(hash, algorithm)?;
    Ok((hash, algorithm.name().to_string()))
}

/// All users, persisted in the data dir.
pub struct UserStore {
    path: PathBuf,
    sync: bool,
    /// Shared with the connections logged in as each user (a change replaces
    /// the user here; open connections keep the one they logged in as).
    users: RwLock<HashMap<String, Arc<User>>>,
    /// Counts changes, so that open connections notice changed permissions.
    generation: std::sync::atomic::AtomicU64,
    /// Passwords recently found right against a bcrypt hash, by user: the hash
    /// and the SHA-256 of the password. HTTP basic auth sends the password with
    /// every request; this spares a deliberately slow bcrypt check for each.
    verified: parking_lot::Mutex<HashMap<String, (String, [u8; 32])>>,
}

impl UserStore {
    /// Loads `users.json`, or creates it with the default user on first start.
    pub fn open(path: PathBuf, default_user: &str, default_hash: &str, sync: bool) -> Result<Self> {
        let users = match definitions::read_json(&path) {
            Some(v) => serde_json::from_value::<Vec<User>>(v)
                .map_err(|e| Error::Internal(format!("cannot parse {}: {e}", path.display())))?
                .into_iter()
                .map(|u| (u.name.clone(), Arc::new(u)))
                .collect(),
            None => HashMap::new(),
        };
        let store = UserStore {
            path,
            sync,
            users: RwLock::new(users),
            generation: std::sync::atomic::AtomicU64::new(1),
            verified: parking_lot::Mutex::default(),
        };
        if !store.path.exists() {
            // The configured hash may be in any supported format; one that is
            // not is kept as given (nobody can log in with it) rather than
            // refusing to start.
            let (password_hash, hashing_algorithm) = checked_hash(default_hash, None).unwrap_or_else(|e| {
                tracing::warn!("default_password_hash: {e}");
                (default_hash.to_string(), SHA256.to_string())
            });
            let user = User {
                name: default_user.to_string(),
                password_hash,
                hashing_algorithm,
                tags: vec!["administrator".into()],
                permissions: HashMap::from([("/".to_string(), Permissions::all())]),
                topic_permissions: HashMap::new(),
                limits: UserLimits::default(),
            };
            store.users.write().insert(user.name.clone(), Arc::new(user));
            store.save()?;
        }
        Ok(store)
    }

    /// The number of changes so far; it changes whenever a user or a permission does.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The compiled permissions of `user` in `vhost` (none if it has none
    /// there), with its topic permissions' variables taken from the user, the
    /// vhost and `client_id` (an MQTT client's identifier).
    pub fn permissions(&self, user: &str, vhost: &str, client_id: Option<&str>) -> super::permissions::Compiled {
        let users = self.users.read();
        let Some(u) = users.get(user) else {
            return super::permissions::Compiled::none();
        };
        let topics = match u.topic_permissions.get(vhost) {
            Some(t) => {
                let vars = Variables {
                    username: user,
                    vhost,
                    client_id,
                };
                TopicRules::compile(t, vars)
            }
            None => TopicRules::default(),
        };
        match u.permissions.get(vhost) {
            Some(p) => super::permissions::Compiled::new(p, topics),
            None => super::permissions::Compiled::none().with_topics(topics),
        }
    }

    fn save(&self) -> Result<()> {
        self.generation.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let v = {
            let users = self.users.read();
            let list: Vec<&User> = users.values().map(|u| &**u).collect();
            serde_json::to_value(list).map_err(|e| Error::Internal(e.to_string()))?
        };
        definitions::write_json(&self.path, &v, self.sync).map_err(Error::from)
    }

    /// The user if the password is right. The hash is checked outside the
    /// lock, since a bcrypt check can take a while.
    pub fn authenticate(&self, name: &str, password: &str) -> Option<Arc<User>> {
        let u = self.users.read().get(name)?.clone();
        if !u.password_hash.starts_with("$2") {
            return verify_password(&u.password_hash, &u.hashing_algorithm, password).then_some(u);
        }
        let digest: [u8; 32] = sha2::Sha256::digest(password.as_bytes()).into();
        let known = self.verified.lock().get(name).is_some_and(|(hash, seen)| {
            *hash == u.password_hash && bool::from(subtle::ConstantTimeEq::ct_eq(&seen[..], &digest[..]))
        });
        if known {
            return Some(u);
        }
        if !verify_password(&u.password_hash, &u.hashing_algorithm, password) {
            return None;
        }
        self.verified
            .lock()
            .insert(name.to_string(), (u.password_hash.clone(), digest));
        Some(u)
    }

    /// The limits of user `name` (none for an unknown user).
    pub fn limits(&self, name: &str) -> UserLimits {
        self.users.read().get(name).map(|u| u.limits).unwrap_or_default()
    }

    /// Looks a user up, for changing it.
    pub fn get(&self, name: &str) -> Option<User> {
        self.users.read().get(name).map(|u| User::clone(u))
    }

    /// Looks a user up, shared: what a connection keeps of the user it
    /// logged in as (one copy for all of them).
    pub fn shared(&self, name: &str) -> Option<Arc<User>> {
        self.users.read().get(name).cloned()
    }

    /// Creates or replaces a user.
    pub fn put(&self, user: User) -> Result<()> {
        self.users.write().insert(user.name.clone(), Arc::new(user));
        self.save()
    }

    /// Every user, sorted by name.
    pub fn list(&self) -> Vec<User> {
        let mut all: Vec<User> = self.users.read().values().map(|u| User::clone(u)).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Removes a user; false if there was none of that name.
    pub fn delete(&self, name: &str) -> Result<bool> {
        if self.users.write().remove(name).is_none() {
            return Ok(false);
        }
        self.save()?;
        Ok(true)
    }

    /// Changes a user in place; false if there is none of that name.
    pub fn update(&self, name: &str, f: impl FnOnce(&mut User)) -> Result<bool> {
        match self.users.write().get_mut(name) {
            Some(u) => f(Arc::make_mut(u)),
            None => return Ok(false),
        }
        self.save()?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rabbitmq_guest_hash_verifies() {
        assert!(verify_password(
            "+pHuxkR9fCyrrwXjOD4BP4XbzO3l8LJr8YkThMgJ0yVHFRE+",
            SHA256,
            "guest"
        ));
        assert!(!verify_password(
            "+pHuxkR9fCyrrwXjOD4BP4XbzO3l8LJr8YkThMgJ0yVHFRE+",
            SHA256,
            "guesT"
        ));
        let h = hash_password("s3cret");
        assert!(verify_password(&h, SHA256, "s3cret"));
    }

    #[test]
    fn checked_hash_names_the_algorithm() {
        let h = password::hash("pw", Algorithm::Sha512);
        assert_eq!(
            checked_hash(&h, Some("SHA512")),
            Ok((h.clone(), "rabbit_password_hashing_sha512".to_string()))
        );
        assert!(matches!(
            checked_hash(&h, Some("whirlpool")),
            Err(PasswordError::UnknownAlgorithm(_))
        ));
    }

    #[test]
    fn default_user_hash_in_another_format_logs_in() {
        let dir = tempfile::tempdir().expect("tempdir");
        let h = password::hash("pw", Algorithm::Bcrypt);
        let store = UserStore::open(dir.path().join("users.json"), "admin", &h, false).expect("opens");
        let u = store.authenticate("admin", "pw").expect("logs in");
        assert_eq!(u.hashing_algorithm, "lavinmq_bcrypt");
        assert!(store.authenticate("admin", "px").is_none());
    }

    #[test]
    fn a_verified_bcrypt_password_is_remembered_until_the_hash_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let h = password::hash("pw", Algorithm::Bcrypt);
        let store = UserStore::open(dir.path().join("users.json"), "admin", &h, false).expect("opens");
        assert!(store.authenticate("admin", "pw").is_some());
        assert!(store.verified.lock().contains_key("admin"));
        // From the cache, and a wrong password is still refused.
        assert!(store.authenticate("admin", "pw").is_some());
        assert!(store.authenticate("admin", "px").is_none());
        // A new password replaces the hash: the remembered one no longer counts.
        let mut u = store.get("admin").expect("user");
        u.password_hash = password::hash("new", Algorithm::Bcrypt);
        store.put(u).expect("saved");
        assert!(store.authenticate("admin", "pw").is_none());
        assert!(store.authenticate("admin", "new").is_some());
    }
}
