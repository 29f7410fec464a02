//! Applying a LavinMQ ini document to a [`Config`].

use std::path::PathBuf;
use std::time::Duration;

use ini::{Ini, ParseOption, Properties};

use super::value::{self, IntValue};
use super::{Config, ConfigError, RawSection};

/// Parses `text` and applies every recognised key to `config`, pushing
/// non-fatal findings (unknown or deprecated keys and sections) to `warnings`.
pub(crate) fn apply(config: &mut Config, text: &str, warnings: &mut Vec<String>) -> Result<(), ConfigError> {
    // Values are taken literally, as LavinMQ does: no quote or backslash
    // processing, so paths and password hashes survive unchanged.
    let options = ParseOption {
        enabled_quote: false,
        enabled_escape: false,
        ..ParseOption::default()
    };
    // rust-ini treats an indented `# comment` as the start of a key, so drop
    // leading whitespace first; with multi-line values disabled it carries no
    // meaning. Line numbers in syntax errors stay correct.
    let text: String = text.lines().map(str::trim_start).collect::<Vec<_>>().join("\n");
    let ini = Ini::load_from_str_opt(&text, options).map_err(|e| ConfigError::IniSyntax {
        line: e.line,
        column: e.col,
        message: e.msg.into_owned(),
    })?;

    for (section, props) in ini.iter() {
        match section {
            None => {
                if let Some((key, _)) = props.iter().next() {
                    return Err(ConfigError::KeyOutsideSection { key: key.to_owned() });
                }
            }
            Some(name) => apply_section(config, name, props, warnings)?,
        }
    }
    Ok(())
}

/// Signature shared by the handlers of sections with typed keys.
type KeyHandler = fn(&mut Config, &Entry<'_>, &mut Vec<String>) -> Result<(), ConfigError>;

/// Dispatches one `[section]` to the handler for its keys.
fn apply_section(
    config: &mut Config,
    name: &str,
    props: &Properties,
    warnings: &mut Vec<String>,
) -> Result<(), ConfigError> {
    let handler: KeyHandler = match name {
        "main" => apply_main,
        "amqp" => apply_amqp,
        "mqtt" => apply_mqtt,
        "mgmt" => apply_mgmt,
        "stream" => apply_stream,
        "clustering" => apply_clustering,
        "oauth" => apply_oauth,
        "http" => {
            warnings.push("section [http] is deprecated, use [mgmt] instead".to_owned());
            apply_mgmt
        }
        _ => {
            if let Some(host) = name.strip_prefix("sni:").filter(|host| !host.is_empty()) {
                return apply_sni(config, name, host, props, warnings);
            }
            let raw = raw_section(config, name)?;
            extend_raw(raw, props);
            if let Some(why) = raw_section_no_effect(name) {
                for (key, _) in props.iter() {
                    warnings.push(format!("'{key}' in section [{name}] has no effect here: {why}"));
                }
            }
            return Ok(());
        }
    };
    for (key, value) in props.iter() {
        let entry = Entry {
            section: name,
            key,
            value,
        };
        handler(config, &entry, warnings)?;
    }
    Ok(())
}

/// Finds where a section whose keys are kept uninterpreted is stored, or
/// rejects the section as unknown.
fn raw_section<'c>(config: &'c mut Config, name: &str) -> Result<&'c mut RawSection, ConfigError> {
    match name {
        "experimental" => Ok(&mut config.experimental),
        "replication" => Err(ConfigError::UnknownSection {
            section: name.to_owned(),
            hint: " ([replication] was replaced by [clustering])",
        }),
        _ => Err(ConfigError::UnknownSection {
            section: name.to_owned(),
            hint: "",
        }),
    }
}

/// Why the keys of a section kept raw do nothing yet.
fn raw_section_no_effect(name: &str) -> Option<&'static str> {
    match name {
        // LavinMQ's scheduler tuning: tokio schedules fairly by itself.
        "experimental" => Some("the runtime's scheduler already yields between clients"),
        _ => None,
    }
}

/// Applies an `[sni:HOST]` section: the TLS keys, each optionally prefixed
/// with `amqp_`, `mqtt_` or `http_` to apply to that listener only. A section
/// named twice is merged, later keys winning.
fn apply_sni(
    config: &mut Config,
    section: &str,
    host: &str,
    props: &Properties,
    warnings: &mut Vec<String>,
) -> Result<(), ConfigError> {
    let sni = config.sni.entry(host.to_ascii_lowercase()).or_default();
    for (key, value) in props.iter() {
        let e = Entry { section, key, value };
        let (keys, unprefixed) = sni.keys_for(key);
        match unprefixed {
            "tls_cert" => keys.cert = e.opt_path(),
            "tls_key" => keys.key = e.opt_path(),
            "tls_min_version" => keys.min_version = e.opt_string(),
            "tls_ciphers" => keys.ciphers = e.opt_string(),
            "tls_verify_peer" => keys.verify_peer = Some(e.bool()?),
            "tls_ca_cert" => keys.ca_cert = e.opt_path(),
            "tls_keylog_file" => keys.keylog_file = e.opt_path(),
            _ => warnings.push(e.unknown()),
        }
    }
    Ok(())
}

/// Copies a section's keys verbatim, later keys overriding earlier ones.
fn extend_raw(raw: &mut RawSection, props: &Properties) {
    raw.extend(props.iter().map(|(k, v)| (k.to_owned(), v.to_owned())));
}

/// One `key = value` line together with its section, so value conversions can
/// produce errors and warnings that say exactly where the problem is.
struct Entry<'a> {
    section: &'a str,
    key: &'a str,
    value: &'a str,
}

impl Entry<'_> {
    fn invalid(&self, expected: &'static str) -> ConfigError {
        ConfigError::InvalidIniValue {
            section: self.section.to_owned(),
            key: self.key.to_owned(),
            value: self.value.to_owned(),
            expected,
        }
    }

    fn string(&self) -> String {
        self.value.to_owned()
    }

    fn path(&self) -> PathBuf {
        PathBuf::from(self.value)
    }

    /// An empty value means "unset", as in LavinMQ where "" disables a path.
    fn opt_path(&self) -> Option<PathBuf> {
        (!self.value.is_empty()).then(|| self.path())
    }

    fn opt_string(&self) -> Option<String> {
        (!self.value.is_empty()).then(|| self.string())
    }

    fn seconds(&self) -> Result<Duration, ConfigError> {
        value::parse_seconds(self.value).ok_or_else(|| self.invalid(value::SECONDS_EXPECTED))
    }

    fn bool(&self) -> Result<bool, ConfigError> {
        value::parse_bool(self.value).ok_or_else(|| self.invalid(value::BOOL_EXPECTED))
    }

    fn int<T: IntValue>(&self) -> Result<T, ConfigError> {
        value::parse_int(self.value).ok_or_else(|| self.invalid(T::EXPECTED))
    }

    fn port_or_disabled(&self) -> Result<Option<u16>, ConfigError> {
        value::parse_port_or_disabled(self.value).ok_or_else(|| self.invalid(value::PORT_OR_DISABLED_EXPECTED))
    }

    fn opt_int<T: IntValue>(&self) -> Result<Option<T>, ConfigError> {
        if self.value.is_empty() {
            Ok(None)
        } else {
            self.int().map(Some)
        }
    }

    fn unknown(&self) -> String {
        format!("unknown key '{}' in section [{}]", self.key, self.section)
    }

    /// Warning for a key LavinMQ once used that no longer has any effect.
    fn deprecated_ignored(&self) -> String {
        format!("'{}' in section [{}] is deprecated and ignored", self.key, self.section)
    }

    /// Warning for a key LavinMQ acts on that this broker accepts but ignores.
    fn no_effect(&self, why: &str) -> String {
        format!("'{}' in section [{}] has no effect here: {why}", self.key, self.section)
    }

    fn deprecated(&self, replacement: &str) -> String {
        format!(
            "'{}' in section [{}] is deprecated, use {replacement} instead",
            self.key, self.section
        )
    }
}

fn apply_main(config: &mut Config, e: &Entry<'_>, warnings: &mut Vec<String>) -> Result<(), ConfigError> {
    let m = &mut config.main;
    match e.key {
        "data_dir" => m.data_dir = e.path(),
        "log_level" => {
            m.log_level = value::parse_log_level(e.value).ok_or_else(|| e.invalid(value::LOG_LEVEL_EXPECTED))?;
        }
        "log_file" => m.log_file = e.opt_path(),
        "node_name" if !e.value.trim().is_empty() => m.node_name = e.value.trim().to_owned(),
        "pidfile" => m.pidfile = e.opt_path(),
        "control_unix_path" => m.control_unix_path = e.path(),
        "tls_cert" => m.tls_cert = e.opt_path(),
        "tls_key" => m.tls_key = e.opt_path(),
        "tls_ciphers" => m.tls_ciphers = e.opt_string(),
        "tls_min_version" => m.tls_min_version = e.opt_string(),
        "tls_keylog_file" => m.tls_keylog_file = e.opt_path(),
        "tls_verify_peer" => m.tls_verify_peer = e.bool()?,
        "tls_ca_cert" => m.tls_ca_cert = e.opt_path(),
        "stats_interval" => m.stats_interval = e.int()?,
        "stats_log_size" => m.stats_log_size = e.int()?,
        "set_timestamp" => m.set_timestamp = e.bool()?,
        "socket_buffer_size" => m.socket_buffer_size = e.int()?,
        "tcp_nodelay" => m.tcp_nodelay = e.bool()?,
        "tcp_keepalive" => {
            m.tcp_keepalive = super::TcpKeepalive::parse(e.value)
                .ok_or_else(|| e.invalid(super::tcp_keepalive::TCP_KEEPALIVE_EXPECTED))?;
        }
        "tcp_recv_buffer_size" => m.tcp_recv_buffer_size = e.opt_int()?,
        "tcp_send_buffer_size" => m.tcp_send_buffer_size = e.opt_int()?,
        "segment_size" => m.segment_size = e.int()?,
        "sync" => m.sync = e.bool()?,
        "sync_method" => {
            m.sync_method = crate::store::SyncMethod::parse(e.value)
                .ok_or_else(|| e.invalid(crate::store::sync_method::SYNC_METHOD_EXPECTED))?;
        }
        "free_disk_min" => m.free_disk_min = e.int()?,
        "free_disk_warn" => m.free_disk_warn = e.int()?,
        "vm_memory_high_watermark" | "vm_memory_high_watermark.relative" => {
            m.vm_memory_high_watermark = crate::core::memory::Watermark::parse_fraction(e.value)
                .ok_or_else(|| e.invalid(crate::core::memory::FRACTION_EXPECTED))?;
        }
        "vm_memory_high_watermark.absolute" => {
            m.vm_memory_high_watermark = crate::core::memory::Watermark::parse_bytes(e.value)
                .ok_or_else(|| e.invalid(crate::core::memory::BYTES_EXPECTED))?;
        }
        "connection_max" | "max_connections" => {
            m.connection_max = if e.value.trim() == "infinity" {
                None
            } else {
                e.opt_int()?
            };
        }
        "connection_rate_limit" => m.connection_rate_limit = e.int()?,
        "log_exchange" => m.log_exchange = e.bool()?,
        "load_definitions" => m.load_definitions = e.opt_path(),
        "max_deleted_definitions" => m.max_deleted_definitions = e.int()?,
        "consumer_timeout" => m.consumer_timeout = e.opt_int()?,
        "consumer_timeout_loop_interval" => m.consumer_timeout_loop_interval = e.int()?,
        "default_consumer_prefetch" => m.default_consumer_prefetch = e.int()?,
        "default_user" => m.default_user = e.string(),
        "default_password_hash" => m.default_password_hash = e.string(),
        "default_password" => {
            warnings.push(e.deprecated("'default_password_hash'"));
            m.default_password_hash = e.string();
        }
        "default_user_only_loopback" => m.default_user_only_loopback = e.bool()?,
        "anonymous_login_user" => {
            m.anonymous_login_user = e.opt_string().filter(|u| !u.eq_ignore_ascii_case("none"));
        }
        "anonymous_login_pass" => m.anonymous_login_pass = e.string(),
        "guest_only_loopback" => {
            warnings.push(e.deprecated("'default_user_only_loopback'"));
            m.default_user_only_loopback = e.bool()?;
        }
        "login_throttle" => m.login_throttle = e.bool()?,
        "login_throttle_max_failures" => m.login_throttle_max_failures = e.int()?,
        "login_throttle_block_time" => m.login_throttle_block_time = e.int()?,
        "login_throttle_trusted_networks" => m.login_throttle_trusted_networks = e.string(),
        "data_dir_lock" => m.data_dir_lock = e.bool()?,
        "metrics_http_bind" => m.metrics_http_bind = e.string(),
        "metrics_http_port" => m.metrics_http_port = e.port_or_disabled()?,
        "tls_ktls" => {
            if e.bool()? {
                warnings.push(e.no_effect("TLS is done in user space (rustls)"));
            }
        }
        "auth_backends" => {
            let backends = super::oauth::list(e.value);
            if backends.iter().any(|b| !matches!(b.as_str(), "local" | "oauth")) {
                return Err(e.invalid("a list of local and oauth"));
            }
            m.auth_backends = backends;
        }
        "default_consistent_hash_algorithm" => {
            m.default_consistent_hash_algorithm =
                value::parse_hash_algorithm(e.value).ok_or_else(|| e.invalid(value::HASH_ALGORITHM_EXPECTED))?;
        }
        _ => warnings.push(e.unknown()),
    }
    Ok(())
}

/// Handles keys that older LavinMQ versions accepted outside `[main]` and
/// that now live there; returns `false` if `e` is not such a key.
fn apply_moved_to_main(
    config: &mut Config,
    e: &Entry<'_>,
    warnings: &mut Vec<String>,
    allowed: &[&str],
) -> Result<bool, ConfigError> {
    if !allowed.contains(&e.key) {
        return Ok(false);
    }
    warnings.push(e.deprecated(&format!("'{}' in section [main]", e.key)));
    apply_main(config, e, warnings)?;
    Ok(true)
}

fn apply_amqp(config: &mut Config, e: &Entry<'_>, warnings: &mut Vec<String>) -> Result<(), ConfigError> {
    const MOVED: &[&str] = &[
        "tls_cert",
        "tls_key",
        "set_timestamp",
        "consumer_timeout",
        "default_consumer_prefetch",
    ];
    if apply_moved_to_main(config, e, warnings, MOVED)? {
        return Ok(());
    }
    let a = &mut config.amqp;
    match e.key {
        "bind" => a.bind = e.string(),
        "port" => a.port = e.int()?,
        "tls_port" => a.tls_port = e.port_or_disabled()?,
        "unix_path" => a.unix_path = e.opt_path(),
        // LavinMQ also takes the version it expects; both are accepted here.
        "tcp_proxy_protocol" => a.tcp_proxy_protocol = e.value.trim() == "2" || e.bool()?,
        "proxy_protocol_trusted_sources" => a.proxy_protocol_trusted_sources = e.string(),
        "heartbeat" => a.heartbeat = e.int()?,
        "frame_max" => a.frame_max = e.int()?,
        "channel_max" => a.channel_max = e.int()?,
        "max_message_size" => a.max_message_size = e.int()?,
        "max_consumers_per_channel" => a.max_consumers_per_channel = e.int()?,
        "channel_rate_limit" => a.channel_rate_limit = e.int()?,
        // LavinMQ declares it but never uses it either.
        "amqp_systemd_socket_name" => warnings.push(e.no_effect("socket activation is not supported")),
        _ => warnings.push(e.unknown()),
    }
    Ok(())
}

fn apply_mqtt(config: &mut Config, e: &Entry<'_>, warnings: &mut Vec<String>) -> Result<(), ConfigError> {
    let m = &mut config.mqtt;
    match e.key {
        "bind" => m.bind = e.string(),
        "port" => m.port = e.int()?,
        "tls_port" => m.tls_port = e.port_or_disabled()?,
        "unix_path" => m.unix_path = e.opt_path(),
        "permission_check_enabled" => m.permission_check_enabled = e.bool()?,
        "client_id_validation" => m.client_id_validation = e.string(),
        "max_packet_size" => m.max_packet_size = e.int()?,
        "max_inflight_messages" => m.max_inflight_messages = e.int()?,
        "max_keep_alive" => m.max_keep_alive = e.int()?,
        "default_vhost" => m.default_vhost = e.string(),
        _ => warnings.push(e.unknown()),
    }
    Ok(())
}

fn apply_stream(config: &mut Config, e: &Entry<'_>, warnings: &mut Vec<String>) -> Result<(), ConfigError> {
    let s = &mut config.stream;
    match e.key {
        "bind" => s.bind = e.string(),
        "port" => s.port = e.port_or_disabled()?,
        "tls_port" => s.tls_port = e.port_or_disabled()?,
        "advertised_host" => s.advertised_host = e.opt_string(),
        "advertised_port" => {
            s.advertised_port = match e.value.trim() {
                "" => None,
                _ => Some(e.int()?),
            }
        }
        "frame_max" => s.frame_max = e.int()?,
        "heartbeat" => s.heartbeat = e.int()?,
        _ => warnings.push(e.unknown()),
    }
    Ok(())
}

fn apply_mgmt(config: &mut Config, e: &Entry<'_>, warnings: &mut Vec<String>) -> Result<(), ConfigError> {
    if apply_moved_to_main(config, e, warnings, &["tls_cert", "tls_key"])? {
        return Ok(());
    }
    let m = &mut config.mgmt;
    match e.key {
        "bind" => m.bind = e.string(),
        "port" => m.port = e.int()?,
        "tls_port" => m.tls_port = e.port_or_disabled()?,
        "unix_path" => m.unix_path = e.opt_path(),
        // LavinMQ declares it but never uses it either.
        "http_systemd_socket_name" => warnings.push(e.no_effect("socket activation is not supported")),
        _ => warnings.push(e.unknown()),
    }
    Ok(())
}

fn apply_oauth(config: &mut Config, e: &Entry<'_>, warnings: &mut Vec<String>) -> Result<(), ConfigError> {
    let o = &mut config.oauth;
    match e.key {
        "issuer" => o.issuer = e.opt_string(),
        "resource_server_id" => o.resource_server_id = e.opt_string(),
        "preferred_username_claims" => o.preferred_username_claims = super::oauth::list(e.value),
        "additional_scopes_keys" => o.additional_scopes_keys = super::oauth::list(e.value),
        "scope_prefix" => o.scope_prefix = e.opt_string(),
        "verify_aud" => o.verify_aud = e.bool()?,
        "audience" => o.audience = e.opt_string(),
        "jwks_cache_ttl" => o.jwks_cache_ttl = e.seconds()?,
        "client_id" => o.client_id = e.opt_string(),
        "mgmt_base_url" => o.mgmt_base_url = e.opt_string(),
        "mgmt_scopes" => o.mgmt_scopes = e.string(),
        _ => warnings.push(e.unknown()),
    }
    Ok(())
}

fn apply_clustering(config: &mut Config, e: &Entry<'_>, warnings: &mut Vec<String>) -> Result<(), ConfigError> {
    let c = &mut config.clustering;
    match e.key {
        "enabled" => c.enabled = e.bool()?,
        "bind" => c.bind = e.string(),
        "port" => c.port = e.int()?,
        "advertised_uri" => c.advertised_uri = e.opt_string(),
        "etcd_endpoints" => c.etcd_endpoints = e.string(),
        "etcd_prefix" => c.etcd_prefix = e.string(),
        "on_leader_elected" => c.on_leader_elected = e.opt_string(),
        "on_leader_lost" => c.on_leader_lost = e.opt_string(),
        "lease_ttl" => c.lease_ttl = e.seconds()?,
        "ack_timeout" => c.ack_timeout = e.seconds()?,
        "client_hold_timeout" => c.client_hold_timeout = e.seconds()?,
        // LavinMQ capped each follower's backlog by a count of actions; how
        // far a follower may lag is now bounded by `ack_timeout` instead.
        "max_unsynced_actions" => warnings.push(e.deprecated_ignored()),
        _ => warnings.push(e.unknown()),
    }
    Ok(())
}
