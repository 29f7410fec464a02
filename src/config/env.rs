//! Applying `LAVINMQ_*` (and systemd) environment variables to a [`Config`].

use std::path::PathBuf;
use std::time::Duration;

use super::value::{self, IntValue};
use super::{Config, ConfigError};

/// Reads one variable from the injected environment; empty values count as
/// unset so `VAR=` in a compose file or unit does not clobber the ini file.
fn get(env: &dyn Fn(&str) -> Option<String>, var: &str) -> Option<String> {
    env(var).filter(|v| !v.is_empty())
}

fn int<T: IntValue>(env: &dyn Fn(&str) -> Option<String>, var: &'static str) -> Result<Option<T>, ConfigError> {
    get(env, var)
        .map(|v| {
            value::parse_int(&v).ok_or(ConfigError::InvalidEnvValue {
                var,
                value: v,
                expected: T::EXPECTED,
            })
        })
        .transpose()
}

/// A port variable where `-1` disables the listener.
fn port_or_disabled(
    env: &dyn Fn(&str) -> Option<String>,
    var: &'static str,
) -> Result<Option<Option<u16>>, ConfigError> {
    get(env, var)
        .map(|v| {
            value::parse_port_or_disabled(&v).ok_or(ConfigError::InvalidEnvValue {
                var,
                value: v,
                expected: value::PORT_OR_DISABLED_EXPECTED,
            })
        })
        .transpose()
}

fn boolean(env: &dyn Fn(&str) -> Option<String>, var: &'static str) -> Result<Option<bool>, ConfigError> {
    get(env, var)
        .map(|v| {
            value::parse_bool(&v).ok_or(ConfigError::InvalidEnvValue {
                var,
                value: v,
                expected: value::BOOL_EXPECTED,
            })
        })
        .transpose()
}

/// A duration in seconds, decimals allowed.
fn seconds(env: &dyn Fn(&str) -> Option<String>, var: &'static str) -> Result<Option<Duration>, ConfigError> {
    get(env, var)
        .map(|v| {
            value::parse_seconds(&v).ok_or(ConfigError::InvalidEnvValue {
                var,
                value: v,
                expected: value::SECONDS_EXPECTED,
            })
        })
        .transpose()
}

/// Overrides `config` with every recognised variable that is set.
pub(crate) fn apply(config: &mut Config, env: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
    // LAVINMQ_DATADIR is more specific than systemd's STATE_DIRECTORY.
    if let Some(dir) = get(env, "LAVINMQ_DATADIR").or_else(|| get(env, "STATE_DIRECTORY")) {
        config.main.data_dir = PathBuf::from(dir);
    }
    if let Some(v) = get(env, "LAVINMQ_CONTROL_UNIX_PATH") {
        config.main.control_unix_path = PathBuf::from(v);
    }
    if let Some(v) = get(env, "LAVINMQ_TLS_CERT_PATH") {
        config.main.tls_cert = Some(PathBuf::from(v));
    }
    if let Some(v) = get(env, "LAVINMQ_TLS_KEY_PATH") {
        config.main.tls_key = Some(PathBuf::from(v));
    }
    if let Some(v) = get(env, "LAVINMQ_TLS_CIPHERS") {
        config.main.tls_ciphers = Some(v);
    }
    if let Some(v) = get(env, "LAVINMQ_TLS_MIN_VERSION") {
        config.main.tls_min_version = Some(v);
    }
    if let Some(v) = boolean(env, "LAVINMQ_SYNC")? {
        config.main.sync = v;
    }
    if let Some(v) = get(env, "LAVINMQ_DEFAULT_USER") {
        config.main.default_user = v;
    }
    if let Some(v) = get(env, "LAVINMQ_DEFAULT_PASSWORD") {
        config.main.default_password_hash = v;
    }
    if let Some(v) = int(env, "LAVINMQ_DEFAULT_CONSUMER_PREFETCH")? {
        config.main.default_consumer_prefetch = v;
    }
    if let Some(v) = get(env, "LAVINMQ_AMQP_BIND") {
        config.amqp.bind = v;
    }
    if let Some(v) = int(env, "LAVINMQ_AMQP_PORT")? {
        config.amqp.port = v;
    }
    if let Some(v) = port_or_disabled(env, "LAVINMQ_AMQPS_PORT")? {
        config.amqp.tls_port = v;
    }
    if let Some(v) = get(env, "LAVINMQ_HTTP_BIND") {
        config.mgmt.bind = v;
    }
    if let Some(v) = int(env, "LAVINMQ_HTTP_PORT")? {
        config.mgmt.port = v;
    }
    if let Some(v) = port_or_disabled(env, "LAVINMQ_HTTPS_PORT")? {
        config.mgmt.tls_port = v;
    }
    apply_clustering(config, env)
}

/// The `LAVINMQ_CLUSTERING*` variables, one per `[clustering]` key.
fn apply_clustering(config: &mut Config, env: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
    let c = &mut config.clustering;
    if let Some(v) = boolean(env, "LAVINMQ_CLUSTERING")? {
        c.enabled = v;
    }
    if let Some(v) = get(env, "LAVINMQ_CLUSTERING_BIND") {
        c.bind = v;
    }
    if let Some(v) = int(env, "LAVINMQ_CLUSTERING_PORT")? {
        c.port = v;
    }
    if let Some(v) = get(env, "LAVINMQ_CLUSTERING_ADVERTISED_URI") {
        c.advertised_uri = Some(v);
    }
    if let Some(v) = get(env, "LAVINMQ_CLUSTERING_ETCD_ENDPOINTS") {
        c.etcd_endpoints = v;
    }
    if let Some(v) = get(env, "LAVINMQ_CLUSTERING_ETCD_PREFIX") {
        c.etcd_prefix = v;
    }
    if let Some(v) = get(env, "LAVINMQ_CLUSTERING_ON_LEADER_ELECTED") {
        c.on_leader_elected = Some(v);
    }
    if let Some(v) = get(env, "LAVINMQ_CLUSTERING_ON_LEADER_LOST") {
        c.on_leader_lost = Some(v);
    }
    if let Some(v) = seconds(env, "LAVINMQ_CLUSTERING_LEASE_TTL")? {
        c.lease_ttl = v;
    }
    if let Some(v) = seconds(env, "LAVINMQ_CLUSTERING_ACK_TIMEOUT")? {
        c.ack_timeout = v;
    }
    if let Some(v) = seconds(env, "LAVINMQ_CLUSTERING_CLIENT_HOLD_TIMEOUT")? {
        c.client_hold_timeout = v;
    }
    Ok(())
}
