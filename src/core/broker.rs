//! The broker: every vhost and the user store, independent of any protocol.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::json;

use super::disk::DiskMonitor;
use super::user::UserStore;
use super::vhost::{StoreSettings, VHost};
use super::{Error, Result};
use crate::store::{GroupSync, definitions};

/// Shared broker state.
pub struct Broker {
    data_dir: PathBuf,
    settings: StoreSettings,
    vhosts: RwLock<HashMap<String, Arc<VHost>>>,
    /// Users and their permissions.
    pub users: UserStore,
    /// Group commit of the data directory.
    pub sync: GroupSync,
    /// The free-disk-space alarm.
    pub disk: DiskMonitor,
    /// Open client connections of every protocol.
    pub connections: Arc<super::connections::ConnectionRegistry>,
}

impl Broker {
    /// Opens the broker state in `data_dir`, creating vhost `/` and the default user
    /// on first start.
    pub fn open(
        data_dir: &Path,
        settings: StoreSettings,
        default_user: &str,
        default_hash: &str,
    ) -> Result<Arc<Broker>> {
        std::fs::create_dir_all(data_dir)
            .map_err(|e| Error::Internal(format!("cannot create data dir {}: {e}", data_dir.display())))?;
        let users = UserStore::open(data_dir.join("users.json"), default_user, default_hash, settings.sync)?;
        let disk = DiskMonitor::new(data_dir, settings.free_disk_min);
        let sync = GroupSync::start(data_dir, settings.sync)
            .map_err(|e| Error::Internal(format!("cannot start the sync thread: {e}")))?;
        let broker = Broker {
            data_dir: data_dir.to_path_buf(),
            settings,
            vhosts: RwLock::default(),
            users,
            sync,
            disk,
            connections: Arc::default(),
        };
        let path = broker.vhosts_path();
        let names: Vec<String> = match definitions::read_json(&path) {
            Some(v) => v
                .as_array()
                .map(|a| a.iter().filter_map(|x| x["name"].as_str().map(String::from)).collect())
                .unwrap_or_default(),
            None => vec!["/".to_string()],
        };
        for name in &names {
            let vhost = VHost::open(name, data_dir, broker.settings.clone())?;
            broker.vhosts.write().insert(name.clone(), vhost);
        }
        if !path.exists() {
            broker.save_vhosts()?;
        }
        Ok(Arc::new(broker))
    }

    fn vhosts_path(&self) -> PathBuf {
        self.data_dir.join("vhosts.json")
    }

    fn save_vhosts(&self) -> Result<()> {
        let list: Vec<_> = self.vhosts.read().keys().map(|n| json!({"name": n})).collect();
        definitions::write_json(&self.vhosts_path(), &json!(list), self.settings.sync).map_err(Error::from)
    }

    /// Looks up a vhost.
    pub fn vhost(&self, name: &str) -> Option<Arc<VHost>> {
        self.vhosts.read().get(name).cloned()
    }

    /// Creates a vhost if missing.
    pub fn create_vhost(&self, name: &str) -> Result<Arc<VHost>> {
        if let Some(v) = self.vhost(name) {
            return Ok(v);
        }
        let v = VHost::open(name, &self.data_dir, self.settings.clone())?;
        self.vhosts.write().insert(name.to_string(), v.clone());
        self.save_vhosts()?;
        Ok(v)
    }

    /// Deletes a vhost with its queues, exchanges and stored messages; false if
    /// there was none of that name.
    pub fn delete_vhost(&self, name: &str) -> Result<bool> {
        let Some(v) = self.vhosts.write().remove(name) else {
            return Ok(false);
        };
        self.connections.close_vhost(name, "vhost deleted");
        v.delete_all();
        self.save_vhosts()?;
        for u in self.users.list() {
            if u.permissions.contains_key(name) {
                self.users.update(&u.name, |u| {
                    u.permissions.remove(name);
                })?;
            }
        }
        Ok(true)
    }

    /// All vhosts.
    pub fn vhosts(&self) -> Vec<Arc<VHost>> {
        self.vhosts.read().values().cloned().collect()
    }

    /// Writes everything written so far to disk, on the calling thread.
    pub fn sync_now(&self) {
        if let Err(e) = self.sync.sync_now() {
            tracing::error!("sync failed: {e}");
        }
    }
}
