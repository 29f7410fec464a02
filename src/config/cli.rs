//! LavinMQ's command-line flags.
//!
//! Every setting flag is an `Option` (or a presence-only switch) so that a
//! flag that was not given leaves the ini/environment value alone.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};

use super::value;
use super::{Config, ConfigError};

/// Parsed command line; see `lavinmq --help`.
#[derive(Debug, Parser)]
#[command(
    name = "lavinmq",
    version,
    about = "LavinMQ message broker",
    disable_version_flag = true
)]
pub(crate) struct Cli {
    /// Config file (INI format)
    #[arg(short = 'c', long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// Data directory
    #[arg(short = 'D', long, value_name = "DATADIR")]
    data_dir: Option<PathBuf>,

    /// Convert the LavinMQ 2.x data dir SRC (left untouched) into the data
    /// directory (-D, which must be empty), then exit
    #[arg(long, value_name = "SRC")]
    convert_lavinmq_data_dir: Option<PathBuf>,

    /// Log level: trace, debug, info, notice, warn, error, fatal, none (default: info)
    #[arg(short = 'l', long, value_name = "LEVEL", value_parser = value::log_level_flag)]
    log_level: Option<String>,

    /// Verbose logging (same as --log-level=debug, which it overrides)
    #[arg(short = 'd', long)]
    debug: bool,

    /// Write the process ID to FILE on startup
    #[arg(long, value_name = "FILE")]
    pidfile: Option<PathBuf>,

    /// The node's name in the management API (default: lavinmq@localhost)
    #[arg(long, value_name = "NAME")]
    node_name: Option<String>,

    /// Don't fsync writes to disk
    #[arg(long)]
    no_sync: bool,

    /// Default consumer prefetch (default: 65535)
    #[arg(long, value_name = "NUMBER")]
    default_consumer_prefetch: Option<u16>,

    /// Hashed password for the default user (default: hash of 'guest')
    #[arg(long, value_name = "PASSWORD-HASH")]
    default_password_hash: Option<String>,

    /// (Deprecated) Same as --default-password-hash
    #[arg(long, value_name = "PASSWORD-HASH", hide = true)]
    default_password: Option<String>,

    /// Default user (default: guest)
    #[arg(long, value_name = "USER")]
    default_user: Option<String>,

    /// Only let the default user connect from loopback addresses (default: true)
    #[arg(long, value_name = "BOOL", value_parser = value::bool_flag)]
    default_user_only_loopback: Option<bool>,

    /// (Deprecated) Same as --default-user-only-loopback
    #[arg(long, value_name = "BOOL", value_parser = value::bool_flag)]
    guest_only_loopback: Option<bool>,

    /// Don't put a file lock in the data directory
    #[arg(long)]
    no_data_dir_lock: bool,

    /// IP address the AMQP, MQTT and HTTP servers listen on (default: 127.0.0.1)
    #[arg(short = 'b', long, value_name = "BIND")]
    bind: Option<String>,

    /// IP address the AMQP server listens on (overrides --bind)
    #[arg(long, value_name = "BIND")]
    amqp_bind: Option<String>,

    /// AMQP port to listen on, 0 for any free port (default: 5672)
    #[arg(short = 'p', long, value_name = "PORT")]
    amqp_port: Option<u16>,

    /// AMQPS port to listen on (default: 5671); -1 to disable
    #[arg(long, value_name = "PORT", allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-1..=65535))]
    amqps_port: Option<i32>,

    /// AMQP UNIX socket path to listen on
    #[arg(long, value_name = "PATH")]
    amqp_unix_path: Option<PathBuf>,

    /// IP address the MQTT server listens on (overrides --bind)
    #[arg(long, value_name = "BIND")]
    mqtt_bind: Option<String>,

    /// MQTT port to listen on (default: 1883)
    #[arg(long, value_name = "PORT")]
    mqtt_port: Option<u16>,

    /// MQTTS port to listen on (default: 8883); -1 to disable
    #[arg(long, value_name = "PORT", allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-1..=65535))]
    mqtts_port: Option<i32>,

    /// MQTT UNIX socket path to listen on
    #[arg(long, value_name = "PATH")]
    mqtt_unix_path: Option<PathBuf>,

    /// IP address the stream protocol listens on (overrides --bind)
    #[arg(long, value_name = "BIND")]
    stream_bind: Option<String>,

    /// Stream protocol port to listen on (default: 5552); -1 to disable
    #[arg(long, value_name = "PORT", allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-1..=65535))]
    stream_port: Option<i32>,

    /// Stream protocol TLS port to listen on (default: 5551); -1 to disable
    #[arg(long, value_name = "PORT", allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-1..=65535))]
    stream_tls_port: Option<i32>,

    /// IP address the HTTP server listens on (overrides --bind)
    #[arg(long, value_name = "BIND")]
    http_bind: Option<String>,

    /// HTTP port to listen on (default: 15672)
    #[arg(long, value_name = "PORT")]
    http_port: Option<u16>,

    /// HTTPS port to listen on (default: 15671); -1 to disable
    #[arg(long, value_name = "PORT", allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-1..=65535))]
    https_port: Option<i32>,

    /// HTTP UNIX socket path to listen on
    #[arg(long, value_name = "PATH")]
    http_unix_path: Option<PathBuf>,

    /// UNIX socket lavinmqctl connects to (default: /tmp/lavinmqctl.sock)
    #[arg(long, value_name = "PATH")]
    control_unix_path: Option<PathBuf>,

    /// TLS certificate (including chain)
    #[arg(long, value_name = "FILE")]
    cert: Option<PathBuf>,

    /// Private key for the TLS certificate
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,

    /// List of TLS ciphers to allow
    #[arg(long, value_name = "CIPHERS")]
    ciphers: Option<String>,

    /// Minimum allowed TLS version
    #[arg(long, value_name = "VERSION")]
    tls_min_version: Option<String>,

    /// IP address the Prometheus metrics server listens on (default: 127.0.0.1)
    #[arg(long, value_name = "BIND")]
    metrics_http_bind: Option<String>,

    /// Port of the Prometheus metrics server, -1 to disable, 0 for any free port (default: 15692)
    #[arg(long, value_name = "PORT", allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-1..=65535))]
    metrics_http_port: Option<i32>,

    /// Enable clustering
    #[arg(long)]
    clustering: bool,

    /// IP address to listen on for clustering followers (default: 127.0.0.1)
    #[arg(long, value_name = "BIND")]
    clustering_bind: Option<String>,

    /// Port to listen on for clustering followers (default: 5679)
    #[arg(long, value_name = "PORT")]
    clustering_port: Option<u16>,

    /// URI followers connect to when this node leads (default: tcp://<hostname>:<clustering port>)
    #[arg(long, value_name = "URI")]
    clustering_advertised_uri: Option<String>,

    /// Comma-separated etcd host:port pairs, each optionally prefixed by user:password@ (default: localhost:2379)
    #[arg(long, value_name = "URIs")]
    clustering_etcd_endpoints: Option<String>,

    /// Key prefix used in etcd (default: lavinmq)
    #[arg(long, value_name = "KEY")]
    clustering_etcd_prefix: Option<String>,

    /// Shell command to execute when elected leader
    #[arg(long, value_name = "COMMAND")]
    clustering_on_leader_elected: Option<String>,

    /// Shell command to execute when losing leadership
    #[arg(long, value_name = "COMMAND")]
    clustering_on_leader_lost: Option<String>,

    /// Seconds a leader keeps its etcd lease without renewing it, at least 1 (default: 3)
    #[arg(long, value_name = "SECONDS", value_parser = value::seconds_flag)]
    clustering_lease_ttl: Option<Duration>,

    /// Seconds an in-sync follower may leave data unacknowledged before it is dropped from the in-sync set (default: 3)
    #[arg(long, value_name = "SECONDS", value_parser = value::seconds_flag)]
    clustering_ack_timeout: Option<Duration>,

    /// Seconds a follower holds a client connection while no leader can take it (default: 30)
    #[arg(long, value_name = "SECONDS", value_parser = value::seconds_flag)]
    clustering_client_hold_timeout: Option<Duration>,

    /// (Deprecated) Ignored; accepted for compatibility with LavinMQ
    #[arg(long, value_name = "ACTIONS", hide = true)]
    clustering_max_unsynced_actions: Option<String>,

    /// Kernel TLS offload (accepted for compatibility with LavinMQ; TLS is
    /// done in user space here, so it has no effect)
    #[arg(long, value_name = "BOOL", value_parser = value::bool_flag)]
    tls_ktls: Option<bool>,

    /// (LavinMQ's garbage-collector warnings; no effect here, as there is no
    /// garbage collector)
    #[arg(long)]
    raise_gc_warn: bool,

    /// Print the version, the compiler and the enabled features, then exit
    #[arg(long)]
    build_info: bool,

    /// Print version
    #[arg(short = 'v', short_alias = 'V', long, action = ArgAction::Version)]
    version: (),
}

impl Cli {
    /// Parses `args` (including argv[0]) without exiting the process.
    pub(crate) fn parse_args<I, T>(args: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        Ok(Self::try_parse_from(args)?)
    }

    /// Overrides `config` with every flag that was given.
    pub(crate) fn apply(self, config: &mut Config, warnings: &mut Vec<String>) {
        let main = &mut config.main;
        set(&mut main.data_dir, self.data_dir);
        main.convert_lavinmq_data_dir = self.convert_lavinmq_data_dir;
        set(&mut main.log_level, self.log_level);
        if self.debug {
            main.log_level = "debug".to_owned();
        }
        set_opt(&mut main.pidfile, self.pidfile);
        set(&mut main.node_name, self.node_name);
        if self.no_sync {
            main.sync = false;
        }
        set(&mut main.default_consumer_prefetch, self.default_consumer_prefetch);
        if self.default_password.is_some() {
            warnings.push("'--default-password' is deprecated, use '--default-password-hash' instead".to_owned());
        }
        set(
            &mut main.default_password_hash,
            self.default_password_hash.or(self.default_password),
        );
        set(&mut main.default_user, self.default_user);
        if self.guest_only_loopback.is_some() {
            warnings
                .push("'--guest-only-loopback' is deprecated, use '--default-user-only-loopback' instead".to_owned());
        }
        set(
            &mut main.default_user_only_loopback,
            self.default_user_only_loopback.or(self.guest_only_loopback),
        );
        if self.no_data_dir_lock {
            main.data_dir_lock = false;
        }
        set(&mut main.control_unix_path, self.control_unix_path);
        set_opt(&mut main.tls_cert, self.cert);
        set_opt(&mut main.tls_key, self.key);
        set_opt(&mut main.tls_ciphers, self.ciphers);
        set_opt(&mut main.tls_min_version, self.tls_min_version);
        set(&mut main.metrics_http_bind, self.metrics_http_bind);
        if let Some(port) = self.metrics_http_port {
            // The parser admits -1..=65535, so only -1 fails the conversion.
            main.metrics_http_port = u16::try_from(port).ok();
        }

        let amqp = &mut config.amqp;
        set(&mut amqp.bind, self.amqp_bind.or_else(|| self.bind.clone()));
        set(&mut amqp.port, self.amqp_port);
        set(&mut amqp.tls_port, self.amqps_port.map(|p| u16::try_from(p).ok()));
        set_opt(&mut amqp.unix_path, self.amqp_unix_path);

        let mqtt = &mut config.mqtt;
        set(&mut mqtt.bind, self.mqtt_bind.or_else(|| self.bind.clone()));
        set(&mut mqtt.port, self.mqtt_port);
        set(&mut mqtt.tls_port, self.mqtts_port.map(|p| u16::try_from(p).ok()));
        set_opt(&mut mqtt.unix_path, self.mqtt_unix_path);

        let stream = &mut config.stream;
        set(&mut stream.bind, self.stream_bind.or_else(|| self.bind.clone()));
        set(&mut stream.port, self.stream_port.map(|p| u16::try_from(p).ok()));
        set(
            &mut stream.tls_port,
            self.stream_tls_port.map(|p| u16::try_from(p).ok()),
        );

        let mgmt = &mut config.mgmt;
        set(&mut mgmt.bind, self.http_bind.or(self.bind));
        set(&mut mgmt.port, self.http_port);
        set(&mut mgmt.tls_port, self.https_port.map(|p| u16::try_from(p).ok()));
        set_opt(&mut mgmt.unix_path, self.http_unix_path);

        let clustering = &mut config.clustering;
        if self.clustering {
            clustering.enabled = true;
        }
        set(&mut clustering.bind, self.clustering_bind);
        set(&mut clustering.port, self.clustering_port);
        set_opt(&mut clustering.advertised_uri, self.clustering_advertised_uri);
        set(&mut clustering.etcd_endpoints, self.clustering_etcd_endpoints);
        set(&mut clustering.etcd_prefix, self.clustering_etcd_prefix);
        set_opt(&mut clustering.on_leader_elected, self.clustering_on_leader_elected);
        set_opt(&mut clustering.on_leader_lost, self.clustering_on_leader_lost);
        set(&mut clustering.lease_ttl, self.clustering_lease_ttl);
        set(&mut clustering.ack_timeout, self.clustering_ack_timeout);
        set(&mut clustering.client_hold_timeout, self.clustering_client_hold_timeout);
        if self.tls_ktls == Some(true) {
            warnings.push("'--tls-ktls' has no effect: TLS is done in user space (rustls)".to_owned());
        }
        if self.raise_gc_warn {
            warnings.push("'--raise-gc-warn' has no effect: there is no garbage collector".to_owned());
        }
        if self.clustering_max_unsynced_actions.is_some() {
            warnings.push("'--clustering-max-unsynced-actions' is deprecated and ignored".to_owned());
        }
    }
}

/// Overwrites `target` if the flag was given.
fn set<T>(target: &mut T, flag: Option<T>) {
    if let Some(v) = flag {
        *target = v;
    }
}

/// Overwrites an optional setting if the flag was given.
fn set_opt<T>(target: &mut Option<T>, flag: Option<T>) {
    if flag.is_some() {
        *target = flag;
    }
}
