//! The broker: every vhost and the user store, independent of any protocol.
//!
//! `vhosts.json` lists the vhosts with their metadata and limits
//! (`[{"name", "description", "tags", "default_queue_type", "limits"}]`);
//! `parameters.json` holds the global parameters (`[{"name", "value"}]`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};

use super::alarms::ResourceAlarms;
use super::disk::DiskMonitor;
use super::memory::MemoryMonitor;
use super::user::UserStore;
use super::vhost::{StoreSettings, VHost, VHostLimits, VHostMeta};
use super::{Error, Result};
use crate::store::{GroupSync, definitions};

/// Shared broker state.
pub struct Broker {
    data_dir: PathBuf,
    settings: StoreSettings,
    vhosts: RwLock<HashMap<String, Arc<VHost>>>,
    /// Users and their permissions.
    pub users: UserStore,
    /// Failed logins by source address, for every protocol.
    pub logins: super::login_throttle::LoginThrottle,
    /// The login backends (`auth_backends`): the user store, access tokens.
    pub auth: crate::auth::Authenticator,
    /// Group commit of the data directory.
    pub sync: GroupSync,
    /// The resource alarms in effect, which block publishers.
    pub alarms: Arc<ResourceAlarms>,
    /// The free-disk-space alarm.
    pub disk: DiskMonitor,
    /// The memory high-watermark alarm.
    pub memory: MemoryMonitor,
    /// Open client connections of every protocol.
    pub connections: Arc<super::connections::ConnectionRegistry>,
    /// Totals and rates sampled every `stats_interval`.
    pub stats: super::stats_sampler::StatsSampler,
    /// The stream protocol's publishers and consumers.
    pub stream_clients: super::stream_clients::StreamClients,
    /// Global runtime parameters by name.
    global_parameters: RwLock<BTreeMap<String, Value>>,
    /// Serialises writes of `vhosts.json` and `parameters.json` (they share
    /// nothing else, but each write goes through one temporary file).
    save_lock: Mutex<()>,
    /// Serialises read-modify-write changes of vhost metadata and limits.
    update_lock: Mutex<()>,
}

/// A vhost's entry in `vhosts.json`: its metadata and limits.
fn vhost_record(v: &VHost) -> Value {
    let meta = v.meta();
    let mut rec = json!({"name": v.name, "description": meta.description, "tags": meta.tags,
                         "limits": v.limits().to_json()});
    if let Some(t) = meta.default_queue_type {
        rec["default_queue_type"] = json!(t);
    }
    rec
}

/// Metadata of a `vhosts.json` entry (absent fields are empty).
pub(crate) fn meta_of_record(rec: &Value) -> VHostMeta {
    VHostMeta {
        description: rec["description"].as_str().unwrap_or_default().to_string(),
        tags: rec["tags"]
            .as_array()
            .map(|a| a.iter().filter_map(|t| t.as_str().map(String::from)).collect())
            .unwrap_or_default(),
        default_queue_type: rec["default_queue_type"].as_str().map(String::from),
    }
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
        let alarms = Arc::new(ResourceAlarms::default());
        let disk = DiskMonitor::new(
            data_dir,
            settings.segment_size,
            settings.free_disk_min,
            settings.free_disk_warn,
            alarms.clone(),
        );
        let memory = MemoryMonitor::new(alarms.clone());
        let sync = GroupSync::start(data_dir, settings.sync.then_some(settings.sync_method))
            .map_err(|e| Error::Internal(format!("cannot start the sync thread: {e}")))?;
        let broker = Broker {
            data_dir: data_dir.to_path_buf(),
            settings,
            vhosts: RwLock::default(),
            users,
            logins: Default::default(),
            auth: Default::default(),
            sync,
            alarms,
            disk,
            memory,
            connections: Arc::default(),
            stats: Default::default(),
            stream_clients: Default::default(),
            global_parameters: RwLock::default(),
            save_lock: Mutex::new(()),
            update_lock: Mutex::new(()),
        };
        let path = broker.vhosts_path();
        let records: Vec<Value> = match definitions::read_json(&path) {
            Some(v) => v.as_array().cloned().unwrap_or_default(),
            None => vec![json!({"name": "/"})],
        };
        for rec in &records {
            let Some(name) = rec["name"].as_str() else {
                continue;
            };
            let vhost = VHost::open(name, data_dir, broker.settings.clone())?;
            vhost.set_meta(meta_of_record(rec));
            vhost.set_limits(VHostLimits::from_json(&rec["limits"]));
            broker.vhosts.write().insert(name.to_string(), vhost);
        }
        if let Some(list) = definitions::read_json(&broker.global_parameters_path()) {
            let mut params = broker.global_parameters.write();
            for p in list.as_array().map(Vec::as_slice).unwrap_or_default() {
                if let Some(name) = p["name"].as_str() {
                    params.insert(name.to_string(), p["value"].clone());
                }
            }
        }
        if !path.exists() {
            broker.save_vhosts()?;
        }
        Ok(Arc::new(broker))
    }

    /// The data directory, for state kept beside the vhosts (such as which
    /// shovels are paused).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    fn vhosts_path(&self) -> PathBuf {
        self.data_dir.join("vhosts.json")
    }

    fn global_parameters_path(&self) -> PathBuf {
        self.data_dir.join("parameters.json")
    }

    fn save_vhosts(&self) -> Result<()> {
        let _saving = self.save_lock.lock();
        let mut vhosts: Vec<_> = self.vhosts.read().values().cloned().collect();
        vhosts.sort_by(|a, b| a.name.cmp(&b.name));
        let list: Vec<Value> = vhosts.iter().map(|v| vhost_record(v)).collect();
        definitions::write_json(&self.vhosts_path(), &json!(list), self.settings.sync).map_err(Error::from)
    }

    fn save_global_parameters(&self) -> Result<()> {
        let _saving = self.save_lock.lock();
        let list: Vec<Value> = self
            .global_parameters
            .read()
            .iter()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect();
        definitions::write_json(&self.global_parameters_path(), &json!(list), self.settings.sync).map_err(Error::from)
    }

    /// Replaces the metadata of vhost `name` and persists it; NOT_FOUND if
    /// there is no such vhost.
    pub fn set_vhost_meta(&self, name: &str, meta: VHostMeta) -> Result<()> {
        let _updating = self.update_lock.lock();
        let v = self.existing_vhost(name)?;
        if v.meta() == meta {
            return Ok(());
        }
        v.set_meta(meta);
        self.save_vhosts()
    }

    /// Changes the limits of vhost `name` with `f` and persists them; NOT_FOUND
    /// if there is no such vhost. `f`'s result is returned.
    pub fn update_vhost_limits<R>(&self, name: &str, f: impl FnOnce(&mut VHostLimits) -> Result<R>) -> Result<R> {
        let _updating = self.update_lock.lock();
        let v = self.existing_vhost(name)?;
        let mut limits = v.limits();
        let out = f(&mut limits)?;
        if limits != v.limits() {
            v.set_limits(limits);
            self.save_vhosts()?;
        }
        Ok(out)
    }

    fn existing_vhost(&self, name: &str) -> Result<Arc<VHost>> {
        self.vhost(name)
            .ok_or_else(|| Error::NotFound(format!("no vhost '{name}'")))
    }

    /// Every global parameter, by name.
    pub fn global_parameters(&self) -> Vec<(String, Value)> {
        self.global_parameters
            .read()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The value of global parameter `name`.
    pub fn global_parameter(&self, name: &str) -> Option<Value> {
        self.global_parameters.read().get(name).cloned()
    }

    /// Creates or replaces a global parameter and persists it; true when it existed.
    pub fn set_global_parameter(&self, name: &str, value: Value) -> Result<bool> {
        let existed = self.global_parameters.write().insert(name.to_string(), value).is_some();
        self.save_global_parameters()?;
        Ok(existed)
    }

    /// Removes a global parameter; false when there was none of that name.
    pub fn delete_global_parameter(&self, name: &str) -> Result<bool> {
        if self.global_parameters.write().remove(name).is_none() {
            return Ok(false);
        }
        self.save_global_parameters()?;
        Ok(true)
    }

    /// Applies reloaded store settings: the free-disk thresholds and the
    /// definitions-log compaction limit. The segment size (and so the disk
    /// alarm's built-in floor) stays what it was at start.
    pub fn set_store_limits(&self, free_disk_min: u64, free_disk_warn: u64, max_deleted_definitions: usize) {
        self.disk.set_limits(free_disk_min, free_disk_warn);
        self.settings
            .max_deleted_definitions
            .store(max_deleted_definitions, std::sync::atomic::Ordering::Relaxed);
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
            if u.permissions.contains_key(name) || u.topic_permissions.contains_key(name) {
                self.users.update(&u.name, |u| {
                    u.permissions.remove(name);
                    u.topic_permissions.remove(name);
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
