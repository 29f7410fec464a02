//! The definitions of a data dir read without a broker (`lavinmqctl
//! definitions <datadir>`, as in LavinMQ): the same JSON as
//! `GET /api/definitions`, read from the dir's files only.
//!
//! Opening the dir as a broker does would write to it (it compacts the
//! definitions logs, recovers and creates queue segments, writes `.vhost`
//! files, creates the default user), so nothing is opened: `users.json`,
//! `vhosts.json`, `parameters.json` and each vhost's `definitions.log` are
//! read and replayed in memory the way a start-up would restore them. The
//! dir is never written; a broker running on it (holding `.lock`) is refused
//! rather than read while it writes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::binding_list::{BindingView, sort_explicit};
use super::definition_json::{binding_def_json, exchange_definition_json, queue_def_json};
use super::definitions::compact;
use super::definitions_export::{VhostPart, global_parameters_json, render_all};
use super::policy::Policy;
use super::queue_settings::QueueSettings;
use super::table_json::{json_to_table, table_to_json};
use super::user::User;
use super::vhost::{DEFAULT_EXCHANGES, Parameter, VHostLimits, dir_name, exchange_of_definition};
use crate::data_dir_lock::DataDirReadLock;

/// Why the definitions of a data dir could not be read.
#[derive(Debug, thiserror::Error)]
pub enum OfflineExportError {
    /// The dir lacks a file every data dir has (LavinMQ's wording).
    #[error("{file} not found. Is {} a data directory?", dir.display())]
    NotADataDir {
        /// The dir given.
        dir: PathBuf,
        /// The missing file.
        file: &'static str,
    },
    /// A broker runs on the dir.
    #[error("{0}")]
    InUse(String),
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file is not the JSON it should be.
    #[error("cannot parse {}: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: serde_json::Error,
    },
}

/// The whole-broker definitions export of the data dir `dir`.
pub fn export_data_dir(dir: &Path) -> Result<Value, OfflineExportError> {
    for file in ["vhosts.json", "users.json"] {
        if !dir.join(file).is_file() {
            return Err(OfflineExportError::NotADataDir {
                dir: dir.to_path_buf(),
                file,
            });
        }
    }
    let _lock = DataDirReadLock::acquire(dir).map_err(OfflineExportError::InUse)?;
    let mut users: Vec<User> = parse(&dir.join("users.json"))?;
    users.sort_by(|a, b| a.name.cmp(&b.name));
    let records: Vec<Value> = parse(&dir.join("vhosts.json"))?;
    let mut vhosts = BTreeMap::new();
    for rec in &records {
        if let Some(name) = rec["name"].as_str() {
            vhosts.insert(name.to_string(), vhost_part(dir, name, rec)?);
        }
    }
    let global = global_parameters(&dir.join("parameters.json"))?;
    Ok(render_all(
        &users,
        vhosts.into_values().collect(),
        global_parameters_json(&global),
    ))
}

/// Reads and parses a JSON file.
fn parse<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, OfflineExportError> {
    let bytes = std::fs::read(path).map_err(|source| OfflineExportError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| OfflineExportError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// The global parameters (`parameters.json`, absent when none was ever set),
/// by name as the broker keeps them.
fn global_parameters(path: &Path) -> Result<Vec<(String, Value)>, OfflineExportError> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let list: Vec<Value> = parse(path)?;
    let by_name: BTreeMap<String, Value> = list
        .into_iter()
        .filter_map(|p| Some((p["name"].as_str()?.to_string(), p["value"].clone())))
        .collect();
    Ok(by_name.into_iter().collect())
}

/// One vhost's part of the export: its `vhosts.json` record and its
/// replayed definitions log.
fn vhost_part(dir: &Path, name: &str, rec: &Value) -> Result<VhostPart, OfflineExportError> {
    let log = dir.join(dir_name(name)).join("definitions.log");
    let lines =
        crate::store::json_log::read_lines(&log).map_err(|source| OfflineExportError::Read { path: log, source })?;
    let (entities, parameters) = Restored::replay(name, compact(lines, name)).into_parts();
    Ok(VhostPart {
        name: name.to_string(),
        meta: crate::core::broker::meta_of_record(rec),
        limits: VHostLimits::from_json(&rec["limits"]),
        parameters,
        entities,
    })
}

/// What a start-up would restore from a vhost's definitions log, kept as the
/// export needs it.
#[derive(Default)]
struct Restored {
    vhost: String,
    /// Exported exchanges (not the default ones) by name, as JSON.
    exchanges: BTreeMap<String, Value>,
    /// Every exchange name a binding may refer to, default ones included.
    exchange_names: BTreeSet<String>,
    /// Queues by name, as JSON.
    queues: BTreeMap<String, Value>,
    bindings: Vec<BindingView>,
    policies: BTreeMap<String, Policy>,
    operator_policies: BTreeMap<String, Policy>,
    parameters: Vec<Parameter>,
}

impl Restored {
    /// Replays the compacted lines of vhost `vhost` (exchanges, queues,
    /// bindings, policies, parameters, in that order) as
    /// [`crate::core::vhost::VHost::open`] restores them: what it would
    /// refuse is left out.
    fn replay(vhost: &str, lines: Vec<Value>) -> Restored {
        let mut r = Restored {
            vhost: vhost.to_string(),
            exchange_names: DEFAULT_EXCHANGES.iter().map(|(n, _)| n.to_string()).collect(),
            ..Restored::default()
        };
        for line in lines {
            let Some((op, d)) = line.as_object().and_then(|o| o.iter().next()) else {
                continue;
            };
            match op.as_str() {
                "exchange" => r.exchange(d),
                "queue" => r.queue(d),
                "bind" => r.binding(d),
                "policy" | "operator_policy" => r.policy(d, op == "operator_policy"),
                "parameter" => r.parameters.push(Parameter {
                    component: d["component"].as_str().unwrap_or_default().to_string(),
                    name: d["name"].as_str().unwrap_or_default().to_string(),
                    value: d["value"].clone(),
                }),
                _ => {}
            }
        }
        r
    }

    fn exchange(&mut self, d: &Value) {
        let name = d["name"].as_str().unwrap_or_default();
        let flag = |k: &str| d[k].as_bool().unwrap_or(false);
        let kind = d["type"].as_str().unwrap_or_default();
        let arguments = json_to_table(&d["arguments"]);
        let Ok(ex) = exchange_of_definition(name, kind, flag("auto_delete"), flag("internal"), arguments) else {
            return;
        };
        self.exchange_names.insert(name.to_string());
        if !name.is_empty() && !name.starts_with("amq.") {
            let json = exchange_definition_json(&self.vhost, &ex);
            self.exchanges.insert(name.to_string(), json);
        }
    }

    fn queue(&mut self, d: &Value) {
        let name = d["name"].as_str().unwrap_or_default();
        let arguments = json_to_table(&d["arguments"]);
        let settings = QueueSettings::from_arguments(&arguments).unwrap_or_default();
        let auto_delete = d["auto_delete"].as_bool().unwrap_or(false);
        let json = queue_def_json(&self.vhost, name, settings.queue_type.name(), auto_delete, &arguments);
        self.queues.insert(name.to_string(), json);
    }

    fn binding(&mut self, d: &Value) {
        let s = |k: &str| d[k].as_str().unwrap_or_default().to_string();
        let (source, destination) = (s("source"), s("destination"));
        let to_queue = s("destination_type") == "queue";
        // The default exchange can be neither bound from nor to.
        let ends_exist = !source.is_empty()
            && self.exchange_names.contains(&source)
            && if to_queue {
                self.queues.contains_key(&destination)
            } else {
                !destination.is_empty() && self.exchange_names.contains(&destination)
            };
        if ends_exist {
            self.bindings.push(BindingView {
                vhost: self.vhost.clone(),
                source,
                destination,
                to_queue,
                routing_key: s("routing_key"),
                arguments: table_to_json(&json_to_table(&d["arguments"])),
                durable: true,
                implicit: false,
            });
        }
    }

    fn policy(&mut self, d: &Value, operator: bool) {
        if let Ok(p) = Policy::from_json(d, operator) {
            let map = if operator {
                &mut self.operator_policies
            } else {
                &mut self.policies
            };
            map.insert(p.name.clone(), p);
        }
    }

    /// `(policies, operator_policies, queues, exchanges, bindings)` in the
    /// order of the live export, and the runtime parameters.
    fn into_parts(mut self) -> ([Vec<Value>; 5], Vec<Parameter>) {
        let vhost = &self.vhost;
        let policies = self.policies.values().map(|p| p.to_json(vhost)).collect();
        let operator = self.operator_policies.values().map(|p| p.to_json(vhost)).collect();
        sort_explicit(&mut self.bindings);
        let bindings = self.bindings.iter().map(binding_def_json).collect();
        let queues = self.queues.into_values().collect();
        let exchanges = self.exchanges.into_values().collect();
        ([policies, operator, queues, exchanges, bindings], self.parameters)
    }
}
