//! Broker configuration: defaults, the ini file, environment variables and
//! command-line flags, merged with LavinMQ 2.x semantics.
//!
//! Sources are applied in increasing precedence:
//! built-in defaults < ini file < environment variables < command-line flags.
//! [`Config::load`] does the whole merge; [`Config::from_ini_str`] applies
//! only an ini document on top of the defaults.

mod cli;
mod clustering;
mod env;
mod error;
mod ini_file;
mod oauth;
mod reload;
mod tcp_keepalive;
mod tls;
mod value;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use clustering::ClusteringConfig;
pub use error::ConfigError;
pub use oauth::{OAuthConfig, SignOnUrl};
pub use tcp_keepalive::TcpKeepalive;
pub use tls::{SniConfig, TlsKeys, TlsProtocol};

/// Name of the config file looked up inside a configuration directory.
pub const CONFIG_FILE_NAME: &str = "lavinmq.ini";

/// Directory searched for [`CONFIG_FILE_NAME`] when neither `-c` nor a
/// configuration-directory environment variable is given (as packaged
/// installs put the file there).
pub const SYSTEM_CONFIG_DIR: &str = "/etc/lavinmq";

/// Smallest `frame_max` AMQP 0-9-1 allows a broker to advertise.
pub const MIN_FRAME_MAX: u32 = 4096;

/// SHA256 password hash of `guest`, the default user's default password.
pub const DEFAULT_PASSWORD_HASH: &str = "+pHuxkR9fCyrrwXjOD4BP4XbzO3l8LJr8YkThMgJ0yVHFRE+";

/// Raw `key = value` pairs of a section whose keys are not yet interpreted.
pub type RawSection = BTreeMap<String, String>;

/// The complete broker configuration, one field group per ini section.
///
/// This is the single source of settings for every broker subsystem, so it is
/// built once at start-up (see [`Config::load`]) and then passed around.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// Settings from `[main]`: storage, logging, TLS, default user.
    pub main: MainConfig,
    /// Settings from `[amqp]`: AMQP listeners and protocol limits.
    pub amqp: AmqpConfig,
    /// Settings from `[mqtt]`: MQTT listeners and protocol limits.
    pub mqtt: MqttConfig,
    /// Settings from `[mgmt]` (or the deprecated `[http]`): the HTTP API.
    pub mgmt: MgmtConfig,
    /// Settings from `[stream]`: RabbitMQ's stream protocol listeners.
    pub stream: StreamConfig,
    /// Settings from `[clustering]`: etcd-coordinated leader election and
    /// replication to followers.
    pub clustering: ClusteringConfig,
    /// Settings from `[oauth]`: logins with access tokens from an identity
    /// provider.
    pub oauth: OAuthConfig,
    /// `[experimental]` keys, kept raw until they are implemented.
    pub experimental: RawSection,
    /// `[sni:HOSTNAME]` sections keyed by lower-cased hostname (which may be
    /// a wildcard such as `*.example.com`): the TLS settings for clients that
    /// ask for that name.
    pub sni: BTreeMap<String, SniConfig>,
}

/// `[main]` settings: those not tied to one protocol listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MainConfig {
    /// Where messages and definitions are stored
    /// (`data_dir`, `-D/--data-dir`, `LAVINMQ_DATADIR`, `STATE_DIRECTORY`).
    pub data_dir: PathBuf,
    /// Lower-cased log level: trace, debug, info, notice, warn, error, fatal
    /// or none (`log_level`, `-l/--log-level`, `-d/--debug`).
    pub log_level: String,
    /// Log to this file instead of stdout (`log_file`).
    pub log_file: Option<PathBuf>,
    /// Write the process id here at start-up (`pidfile`, `--pidfile`).
    pub pidfile: Option<PathBuf>,
    /// The node's name in the management API, RabbitMQ's `rabbit@host`
    /// (`node_name`, `--node-name`).
    pub node_name: String,
    /// Unix socket `lavinmqctl` talks to
    /// (`control_unix_path`, `--control-unix-path`, `LAVINMQ_CONTROL_UNIX_PATH`).
    pub control_unix_path: PathBuf,
    /// TLS certificate chain for all TLS listeners
    /// (`tls_cert`, `--cert`, `LAVINMQ_TLS_CERT_PATH`).
    pub tls_cert: Option<PathBuf>,
    /// Private key for [`MainConfig::tls_cert`]
    /// (`tls_key`, `--key`, `LAVINMQ_TLS_KEY_PATH`).
    pub tls_key: Option<PathBuf>,
    /// OpenSSL cipher list (`tls_ciphers`, `--ciphers`, `LAVINMQ_TLS_CIPHERS`).
    pub tls_ciphers: Option<String>,
    /// Minimum TLS version, e.g. `1.2`
    /// (`tls_min_version`, `--tls-min-version`, `LAVINMQ_TLS_MIN_VERSION`).
    pub tls_min_version: Option<String>,
    /// File to append TLS secrets to in NSS key log format, so captured
    /// traffic can be decrypted while debugging (`tls_keylog_file`; the
    /// `SSLKEYLOGFILE` environment variable when unset).
    pub tls_keylog_file: Option<PathBuf>,
    /// Require TLS clients to present a certificate that chains to
    /// [`MainConfig::tls_ca_cert`] (`tls_verify_peer`).
    pub tls_verify_peer: bool,
    /// CA certificates (PEM) that client certificates are verified against
    /// (`tls_ca_cert`).
    pub tls_ca_cert: Option<PathBuf>,
    /// Milliseconds between statistics samples (`stats_interval`).
    pub stats_interval: u64,
    /// Number of statistics samples kept (`stats_log_size`).
    pub stats_log_size: usize,
    /// Add a `timestamp_in_ms` header to published messages (`set_timestamp`).
    pub set_timestamp: bool,
    /// Socket read/write buffer size in bytes (`socket_buffer_size`).
    pub socket_buffer_size: usize,
    /// Disable Nagle's algorithm on client sockets (`tcp_nodelay`). On by
    /// default here, unlike LavinMQ: connections coalesce their own writes,
    /// so Nagle's algorithm would only add latency to replies.
    pub tcp_nodelay: bool,
    /// TCP keepalive probes on client sockets (`tcp_keepalive`,
    /// `idle:interval:count` in seconds, default `60:10:3`; `false` turns
    /// them off).
    pub tcp_keepalive: Option<TcpKeepalive>,
    /// Kernel receive buffer of client sockets in bytes
    /// (`tcp_recv_buffer_size`; unset leaves the OS default).
    pub tcp_recv_buffer_size: Option<usize>,
    /// Kernel send buffer of client sockets in bytes
    /// (`tcp_send_buffer_size`; unset leaves the OS default).
    pub tcp_send_buffer_size: Option<usize>,
    /// Size in bytes of each message-store segment file (`segment_size`).
    pub segment_size: u64,
    /// fsync writes to disk (`sync`, `--no-sync`, `LAVINMQ_SYNC`).
    pub sync: bool,
    /// How the data is synced (`sync_method`): one `syncfs` of the data
    /// directory's filesystem (the default), or an fsync of each file, for
    /// filesystems that do not pass `syncfs` on (FUSE, some network ones).
    pub sync_method: crate::store::SyncMethod,
    /// Stop accepting publishes below this many free bytes (`free_disk_min`).
    pub free_disk_min: u64,
    /// Warn below this many free bytes (`free_disk_warn`).
    pub free_disk_warn: u64,
    /// Block publishers while the broker's memory use is above this share
    /// of the memory it may use, or this size (`vm_memory_high_watermark`,
    /// `.relative` or `.absolute`, as in RabbitMQ; 0.6 by default).
    pub vm_memory_high_watermark: crate::core::memory::Watermark,
    /// Most client connections of all protocols on this node; `None`
    /// (unset, or `infinity`) is unlimited (`connection_max`, RabbitMQ's
    /// name; `max_connections` is accepted too).
    pub connection_max: Option<u64>,
    /// Most new client connections accepted per second, node-wide, with a
    /// burst of as many; 0 is unlimited (`connection_rate_limit`).
    pub connection_rate_limit: u32,
    /// Publish log lines to the `amq.lavinmq.log` exchange (`log_exchange`).
    pub log_exchange: bool,
    /// Definitions file to import at start-up (`load_definitions`).
    pub load_definitions: Option<PathBuf>,
    /// A LavinMQ data dir to convert into `data_dir` instead of starting
    /// (`--convert-lavinmq-data-dir`, command line only).
    pub convert_lavinmq_data_dir: Option<PathBuf>,
    /// Deleted definitions tolerated before the definitions file is compacted
    /// (`max_deleted_definitions`).
    pub max_deleted_definitions: usize,
    /// Close consumers that hold unacked messages longer than this many
    /// milliseconds; `None` disables the check (`consumer_timeout`).
    pub consumer_timeout: Option<u64>,
    /// Seconds between consumer-timeout checks (`consumer_timeout_loop_interval`).
    pub consumer_timeout_loop_interval: u64,
    /// Prefetch applied to consumers that never send `basic.qos`
    /// (`default_consumer_prefetch`, `--default-consumer-prefetch`,
    /// `LAVINMQ_DEFAULT_CONSUMER_PREFETCH`).
    pub default_consumer_prefetch: u16,
    /// User created when the data directory is new
    /// (`default_user`, `--default-user`, `LAVINMQ_DEFAULT_USER`).
    pub default_user: String,
    /// Password hash of [`MainConfig::default_user`]
    /// (`default_password_hash`, `--default-password-hash`,
    /// `LAVINMQ_DEFAULT_PASSWORD`; deprecated `default_password`).
    pub default_password_hash: String,
    /// Only allow the default user to connect from loopback
    /// (`default_user_only_loopback`, `--default-user-only-loopback`;
    /// deprecated `guest_only_loopback`).
    pub default_user_only_loopback: bool,
    /// User that AMQP 1.0 clients choosing SASL ANONYMOUS log in as, with
    /// [`MainConfig::anonymous_login_pass`]; ANONYMOUS is offered only when
    /// set (`anonymous_login_user`, RabbitMQ's name; `none` or empty: off).
    pub anonymous_login_user: Option<String>,
    /// Password of [`MainConfig::anonymous_login_user`], checked like any
    /// login (`anonymous_login_pass`).
    pub anonymous_login_pass: String,
    /// Slow down and then refuse an address after repeated failed logins
    /// on any protocol (`login_throttle`).
    pub login_throttle: bool,
    /// Failed logins in a row after which an address is refused
    /// (`login_throttle_max_failures`).
    pub login_throttle_max_failures: u32,
    /// Seconds a refused address stays refused, and failures are remembered
    /// (`login_throttle_block_time`).
    pub login_throttle_block_time: u64,
    /// Addresses and CIDR ranges, separated by commas or spaces, never
    /// throttled (`login_throttle_trusted_networks`; loopback by default).
    pub login_throttle_trusted_networks: String,
    /// Where logins are checked, in order: `local` (the user store) and
    /// `oauth` (access tokens, see [`OAuthConfig`]) (`auth_backends`;
    /// `local` by default, and when set empty).
    pub auth_backends: Vec<String>,
    /// Take a file lock in the data directory so two brokers cannot share it
    /// (`data_dir_lock`, `--no-data-dir-lock`).
    pub data_dir_lock: bool,
    /// Algorithm for `x-consistent-hash` exchanges: `rabbitmq`, `ring` or `jump`
    /// (`default_consistent_hash_algorithm`).
    pub default_consistent_hash_algorithm: String,
    /// Address of the unauthenticated Prometheus metrics listener
    /// (`metrics_http_bind`, `--metrics-http-bind`).
    pub metrics_http_bind: String,
    /// Port of the Prometheus metrics listener; `None` (written `-1`) disables
    /// it and 0 picks a free port (`metrics_http_port`, `--metrics-http-port`).
    pub metrics_http_port: Option<u16>,
}

/// `[amqp]` settings: AMQP 0-9-1 listeners and protocol limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpConfig {
    /// Address of the AMQP listeners (`bind`, `--amqp-bind`, `-b`, `LAVINMQ_AMQP_BIND`).
    pub bind: String,
    /// Plain AMQP port; 0 picks an ephemeral port
    /// (`port`, `-p/--amqp-port`, `LAVINMQ_AMQP_PORT`).
    pub port: u16,
    /// AMQPS port, used when a certificate is configured
    /// (`tls_port`, `--amqps-port`, `LAVINMQ_AMQPS_PORT`); `-1` (`None`)
    /// leaves it unbound.
    pub tls_port: Option<u16>,
    /// Also listen on this Unix socket (`unix_path`, `--amqp-unix-path`).
    pub unix_path: Option<PathBuf>,
    /// Expect a PROXY protocol header (v1 or v2) before anything else on
    /// AMQP and AMQPS TCP connections (`tcp_proxy_protocol`: a boolean, or
    /// `1`/`2` as LavinMQ accepts).
    pub tcp_proxy_protocol: bool,
    /// Addresses and CIDR ranges, separated by commas or spaces, allowed to
    /// send PROXY headers (`proxy_protocol_trusted_sources`); empty trusts
    /// every source.
    pub proxy_protocol_trusted_sources: String,
    /// Heartbeat interval in seconds offered to clients (`heartbeat`).
    pub heartbeat: u16,
    /// Largest frame in bytes offered to clients, at least [`MIN_FRAME_MAX`]
    /// (`frame_max`).
    pub frame_max: u32,
    /// Most channels per connection offered to clients (`channel_max`).
    pub channel_max: u16,
    /// Largest accepted message body in bytes (`max_message_size`).
    pub max_message_size: u64,
    /// Most consumers per channel, 0 meaning unlimited (`max_consumers_per_channel`).
    pub max_consumers_per_channel: u32,
    /// Most channels a connection may open per second, with a burst of as
    /// many; 0 is unlimited (`channel_rate_limit`).
    pub channel_rate_limit: u32,
}

/// `[mqtt]` settings: MQTT listeners and protocol limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MqttConfig {
    /// Address of the MQTT listeners (`bind`, `--mqtt-bind`, `-b`).
    pub bind: String,
    /// Plain MQTT port; 0 picks an ephemeral port (`port`, `--mqtt-port`).
    pub port: u16,
    /// MQTTS port (`tls_port`, `--mqtts-port`); `-1` (`None`) leaves it
    /// unbound.
    pub tls_port: Option<u16>,
    /// Also listen on this Unix socket (`unix_path`, `--mqtt-unix-path`).
    pub unix_path: Option<PathBuf>,
    /// Enforce vhost permissions for MQTT clients (`permission_check_enabled`).
    pub permission_check_enabled: bool,
    /// How client ids are validated (`client_id_validation`).
    pub client_id_validation: String,
    /// Largest accepted MQTT packet in bytes (`max_packet_size`).
    pub max_packet_size: u32,
    /// Most unacknowledged messages per session (`max_inflight_messages`).
    pub max_inflight_messages: u16,
    /// Longest keep alive in seconds an MQTT 5 client may ask for; one that
    /// asks for none or more is told this in CONNACK (`max_keep_alive`, 0:
    /// no limit).
    pub max_keep_alive: u16,
    /// Vhost MQTT clients land in (`default_vhost`).
    pub default_vhost: String,
}

/// `[stream]` settings: the listeners of RabbitMQ's stream protocol, which
/// RabbitMQ's stream clients speak (its port 5552), and the address its
/// metadata answers name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamConfig {
    /// Address of the stream listeners (`bind`, `--stream-bind`, `-b`).
    pub bind: String,
    /// Plain port (`port`, `--stream-port`); 0 picks an ephemeral port,
    /// `-1` (`None`) leaves it unbound.
    pub port: Option<u16>,
    /// TLS port (`tls_port`, `--stream-tls-port`), bound when TLS is
    /// configured; unset or `-1` (`None`, the default, as in RabbitMQ where
    /// stream TLS is opt-in) leaves it unbound.
    pub tls_port: Option<u16>,
    /// The host clients are told to connect to for a stream
    /// (`advertised_host`); by default the bind address, or the machine's
    /// host name when bound to every address.
    pub advertised_host: Option<String>,
    /// The port clients are told to connect to (`advertised_port`); by
    /// default the bound port.
    pub advertised_port: Option<u16>,
    /// Largest frame accepted, told to clients in the tune (`frame_max`).
    pub frame_max: u32,
    /// Heartbeat interval in seconds proposed to clients (`heartbeat`).
    pub heartbeat: u32,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1".to_owned(),
            port: Some(5552),
            tls_port: None,
            advertised_host: None,
            advertised_port: None,
            frame_max: 1_048_576,
            heartbeat: 60,
        }
    }
}

/// `[mgmt]` settings: the HTTP management API and UI listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MgmtConfig {
    /// Address of the HTTP listeners (`bind`, `--http-bind`, `-b`, `LAVINMQ_HTTP_BIND`).
    pub bind: String,
    /// Plain HTTP port; 0 picks an ephemeral port
    /// (`port`, `--http-port`, `LAVINMQ_HTTP_PORT`).
    pub port: u16,
    /// HTTPS port (`tls_port`, `--https-port`, `LAVINMQ_HTTPS_PORT`); `-1`
    /// (`None`) leaves it unbound.
    pub tls_port: Option<u16>,
    /// Also listen on this Unix socket (`unix_path`, `--http-unix-path`).
    pub unix_path: Option<PathBuf>,
}

/// The result of [`Config::load`]: the merged configuration plus what the
/// caller should tell the operator about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedConfig {
    /// The merged configuration.
    pub config: Config,
    /// Non-fatal problems (unknown keys, deprecated keys, flags or sections),
    /// returned rather than logged because logging is configured from
    /// `config` and so is not set up yet.
    pub warnings: Vec<String>,
    /// The ini file that was read, if any, so the broker can re-read it on
    /// reload.
    pub config_file: Option<PathBuf>,
}

impl Default for MainConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("/var/lib/lavinmq"),
            log_level: "info".to_owned(),
            log_file: None,
            pidfile: None,
            node_name: crate::core::node::DEFAULT_NAME.to_owned(),
            control_unix_path: PathBuf::from("/tmp/lavinmqctl.sock"),
            tls_cert: None,
            tls_key: None,
            tls_ciphers: None,
            tls_min_version: None,
            tls_keylog_file: None,
            tls_verify_peer: false,
            tls_ca_cert: None,
            stats_interval: 5000,
            stats_log_size: 120,
            set_timestamp: false,
            socket_buffer_size: 16384,
            tcp_nodelay: true,
            tcp_keepalive: Some(TcpKeepalive::default()),
            tcp_recv_buffer_size: None,
            tcp_send_buffer_size: None,
            segment_size: 8 * 1024 * 1024,
            sync: true,
            sync_method: crate::store::SyncMethod::Filesystem,
            free_disk_min: 0,
            free_disk_warn: 0,
            vm_memory_high_watermark: crate::core::memory::Watermark::default(),
            connection_max: None,
            connection_rate_limit: 0,
            log_exchange: false,
            load_definitions: None,
            convert_lavinmq_data_dir: None,
            max_deleted_definitions: 8192,
            consumer_timeout: None,
            consumer_timeout_loop_interval: 60,
            default_consumer_prefetch: u16::MAX,
            default_user: "guest".to_owned(),
            default_password_hash: DEFAULT_PASSWORD_HASH.to_owned(),
            default_user_only_loopback: true,
            anonymous_login_user: None,
            anonymous_login_pass: String::new(),
            login_throttle: true,
            login_throttle_max_failures: 20,
            login_throttle_block_time: 60,
            login_throttle_trusted_networks: crate::core::login_throttle::DEFAULT_TRUSTED.to_string(),
            auth_backends: vec!["local".into()],
            data_dir_lock: true,
            default_consistent_hash_algorithm: "rabbitmq".to_owned(),
            metrics_http_bind: "127.0.0.1".to_owned(),
            metrics_http_port: Some(15692),
        }
    }
}

impl Default for AmqpConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1".to_owned(),
            port: 5672,
            tls_port: Some(5671),
            unix_path: None,
            tcp_proxy_protocol: false,
            proxy_protocol_trusted_sources: String::new(),
            heartbeat: 300,
            frame_max: 131_072,
            channel_max: 2047,
            max_message_size: 128 * 1024 * 1024,
            max_consumers_per_channel: 0,
            channel_rate_limit: 0,
        }
    }
}

impl Default for MqttConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1".to_owned(),
            port: 1883,
            tls_port: Some(8883),
            unix_path: None,
            permission_check_enabled: false,
            client_id_validation: "none".to_owned(),
            max_packet_size: 268_435_455,
            max_inflight_messages: u16::MAX,
            max_keep_alive: 0,
            default_vhost: "/".to_owned(),
        }
    }
}

impl Default for MgmtConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1".to_owned(),
            port: 15672,
            tls_port: Some(15671),
            unix_path: None,
        }
    }
}

impl Config {
    /// Builds the configuration from command-line arguments (including
    /// `argv[0]`) and an environment lookup, e.g. `&|k| std::env::var(k).ok()`.
    ///
    /// The environment is injected so tests and embedders need not mutate
    /// the process environment. `--help` and `--version` come back as
    /// [`ConfigError::Clap`]; call `.exit()` on it to print and exit.
    pub fn load<I, T>(args: I, env: &dyn Fn(&str) -> Option<String>) -> Result<LoadedConfig, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        Self::load_with_system_dir(args, env, Path::new(SYSTEM_CONFIG_DIR))
    }

    /// [`Config::load`] with the fallback config directory made explicit, so
    /// tests are not affected by a real `/etc/lavinmq/lavinmq.ini`.
    pub(crate) fn load_with_system_dir<I, T>(
        args: I,
        env: &dyn Fn(&str) -> Option<String>,
        system_dir: &Path,
    ) -> Result<LoadedConfig, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let cli = cli::Cli::parse_args(args)?;
        let mut warnings = Vec::new();
        let mut config = Config::default();

        let config_file = match &cli.config {
            Some(path) if path.is_file() => Some(path.clone()),
            Some(path) => return Err(ConfigError::ConfigFileNotFound { path: path.clone() }),
            None => find_config_file(env, system_dir, &mut warnings),
        };
        if let Some(path) = &config_file {
            tracing::debug!(path = %path.display(), "reading config file");
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
                path: path.clone(),
                source,
            })?;
            ini_file::apply(&mut config, &text, &mut warnings)?;
        }

        env::apply(&mut config, env)?;
        cli.apply(&mut config, &mut warnings);
        config.validate()?;

        Ok(LoadedConfig {
            config,
            warnings,
            config_file,
        })
    }

    /// Parses an ini document on top of the defaults and validates the
    /// result, returning it with any warnings. Meant for tests and tools
    /// that check a config file without starting the broker.
    pub fn from_ini_str(text: &str) -> Result<(Config, Vec<String>), ConfigError> {
        let mut config = Config::default();
        let mut warnings = Vec::new();
        ini_file::apply(&mut config, text, &mut warnings)?;
        config.validate()?;
        Ok((config, warnings))
    }

    /// Checks rules that no single source can enforce on its own, because a
    /// value may be fine where it is set and still be wrong after merging.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.main.data_dir.as_os_str().is_empty() {
            return Err(ConfigError::Invalid {
                field: "data_dir",
                reason: "must not be empty".to_owned(),
            });
        }
        if self.amqp.frame_max < MIN_FRAME_MAX {
            return Err(ConfigError::Invalid {
                field: "frame_max",
                reason: format!(
                    "{} is below the AMQP minimum of {MIN_FRAME_MAX} bytes",
                    self.amqp.frame_max
                ),
            });
        }
        if self.main.tls_verify_peer && self.main.tls_ca_cert.is_none() {
            return Err(ConfigError::Invalid {
                field: "tls_verify_peer",
                reason: "needs tls_ca_cert, the CA client certificates must chain to".to_owned(),
            });
        }
        self.clustering.validate()?;
        for (host, sni) in &self.sni {
            sni.validate(host)?;
        }
        Ok(())
    }
}

/// Picks the ini file to read when `-c` was not given: `lavinmq.ini` in
/// `$LAVINMQ_CONFIGURATION_DIRECTORY`, else `$CONFIGURATION_DIRECTORY`
/// (set by systemd), else `system_dir`, and only if that file exists.
fn find_config_file(
    env: &dyn Fn(&str) -> Option<String>,
    system_dir: &Path,
    warnings: &mut Vec<String>,
) -> Option<PathBuf> {
    let from_env = ["LAVINMQ_CONFIGURATION_DIRECTORY", "CONFIGURATION_DIRECTORY"]
        .into_iter()
        .find_map(|var| env(var).filter(|dir| !dir.is_empty()).map(|dir| (var, dir)));
    match from_env {
        Some((var, dir)) => {
            let path = Path::new(&dir).join(CONFIG_FILE_NAME);
            if path.is_file() {
                Some(path)
            } else {
                warnings.push(format!(
                    "{var} is set but '{}' does not exist; using no config file",
                    path.display()
                ));
                None
            }
        }
        None => Some(system_dir.join(CONFIG_FILE_NAME)).filter(|path| path.is_file()),
    }
}
