//! Tests for loading and merging the configuration.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;

/// A temporary directory removed on drop, so tests need no extra crate.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("lavinmq-config-test-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write temp file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An injected environment built from pairs.
fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |key| map.get(key).cloned()
}

/// Runs `Config::load` with a system config dir that never exists, so a real
/// /etc/lavinmq/lavinmq.ini on the test machine cannot leak in.
fn load(args: &[&str], env: &[(&str, &str)]) -> Result<LoadedConfig, ConfigError> {
    let mut argv = vec!["lavinmq"];
    argv.extend_from_slice(args);
    Config::load_with_system_dir(argv, &env_of(env), Path::new("/nonexistent/lavinmq-test"))
}

fn ini(text: &str) -> (Config, Vec<String>) {
    Config::from_ini_str(text).expect("valid ini")
}

fn ini_err(text: &str) -> String {
    Config::from_ini_str(text).expect_err("invalid ini").to_string()
}

#[test]
fn defaults_match_lavinmq() {
    let c = Config::default();
    assert_eq!(c.main.data_dir, PathBuf::from("/var/lib/lavinmq"));
    assert_eq!(c.main.log_level, "info");
    assert_eq!(c.main.log_file, None);
    assert_eq!(c.main.pidfile, None);
    assert_eq!(c.main.node_name, "lavinmq@localhost");
    assert_eq!(c.main.control_unix_path, PathBuf::from("/tmp/lavinmqctl.sock"));
    assert_eq!(c.main.tls_cert, None);
    assert_eq!(c.main.stats_interval, 5000);
    assert_eq!(c.main.stats_log_size, 120);
    assert!(!c.main.set_timestamp);
    assert_eq!(c.main.socket_buffer_size, 16384);
    assert!(c.main.tcp_nodelay);
    assert_eq!(c.main.tcp_keepalive, Some(crate::config::TcpKeepalive::default()));
    assert_eq!((c.main.tcp_recv_buffer_size, c.main.tcp_send_buffer_size), (None, None));
    assert_eq!(c.main.segment_size, 8_388_608);
    assert!(c.main.sync);
    assert_eq!(c.main.free_disk_min, 0);
    assert_eq!(c.main.free_disk_warn, 0);
    assert!(!c.main.log_exchange);
    assert_eq!(c.main.load_definitions, None);
    assert_eq!(c.main.max_deleted_definitions, 8192);
    assert_eq!(c.main.consumer_timeout, None);
    assert_eq!(c.main.consumer_timeout_loop_interval, 60);
    assert_eq!(c.main.default_consumer_prefetch, 65535);
    assert_eq!(c.main.default_user, "guest");
    assert_eq!(
        c.main.default_password_hash,
        "+pHuxkR9fCyrrwXjOD4BP4XbzO3l8LJr8YkThMgJ0yVHFRE+"
    );
    assert!(c.main.default_user_only_loopback);
    assert!(c.main.data_dir_lock);
    assert_eq!(c.main.default_consistent_hash_algorithm, "rabbitmq");

    assert_eq!(c.amqp.bind, "127.0.0.1");
    assert_eq!((c.amqp.port, c.amqp.tls_port), (5672, Some(5671)));
    assert_eq!(c.amqp.unix_path, None);
    assert!(!c.amqp.tcp_proxy_protocol);
    assert_eq!(c.amqp.proxy_protocol_trusted_sources, "");
    assert_eq!(c.amqp.heartbeat, 300);
    assert_eq!(c.amqp.frame_max, 131_072);
    assert_eq!(c.amqp.channel_max, 2047);
    assert_eq!(c.amqp.max_message_size, 134_217_728);
    assert_eq!(c.amqp.max_consumers_per_channel, 0);

    assert_eq!(c.mqtt.bind, "127.0.0.1");
    assert_eq!((c.mqtt.port, c.mqtt.tls_port), (1883, Some(8883)));
    assert!(!c.mqtt.permission_check_enabled);
    assert_eq!(c.mqtt.client_id_validation, "none");
    assert_eq!(c.mqtt.max_packet_size, 268_435_455);
    assert_eq!(c.mqtt.max_inflight_messages, 65535);
    assert_eq!(c.mqtt.default_vhost, "/");

    assert_eq!(c.mgmt.bind, "127.0.0.1");
    assert_eq!((c.mgmt.port, c.mgmt.tls_port), (15672, Some(15671)));
    assert_eq!(c.mgmt.unix_path, None);
    assert!(c.validate().is_ok());
}

#[test]
fn load_without_args_or_files_gives_defaults() {
    let loaded = load(&[], &[]).expect("load");
    assert_eq!(loaded.config, Config::default());
    assert!(loaded.warnings.is_empty());
    assert_eq!(loaded.config_file, None);
}

#[test]
fn ini_overrides_defaults() {
    let (c, warnings) = ini("\
[main]
data_dir = /data
log_level = WARN
log_file = /var/log/lavinmq.log
pidfile = /run/lavinmq.pid
node_name = rabbit@mq1
control_unix_path = /run/ctl.sock
tls_cert = /c.pem
tls_key = /k.pem
tls_ciphers = ECDHE
tls_min_version = 1.3
stats_interval = 1000
stats_log_size = 10
set_timestamp = true
socket_buffer_size = 4096
tcp_nodelay = no
tcp_keepalive = 30:5:2
tcp_recv_buffer_size = 65536
tcp_send_buffer_size = 131072
segment_size = 1048576
sync = false
sync_method = fsync
free_disk_min = 100
free_disk_warn = 200
log_exchange = on
load_definitions = /defs.json
max_deleted_definitions = 10
consumer_timeout = 30000
consumer_timeout_loop_interval = 5
default_consumer_prefetch = 100
default_user = admin
default_password_hash = abc
default_user_only_loopback = false
data_dir_lock = no
default_consistent_hash_algorithm = jump

[amqp]
bind = ::
port = 5673
tls_port = 5674
unix_path = /run/amqp.sock
tcp_proxy_protocol = true
proxy_protocol_trusted_sources = 10.0.0.1, 192.168.0.0/24
heartbeat = 0
frame_max = 4096
channel_max = 0
max_message_size = 1024
max_consumers_per_channel = 5

[mqtt]
bind = 0.0.0.0
port = 1884
tls_port = 8884
unix_path = /run/mqtt.sock
permission_check_enabled = true
client_id_validation = strict
max_packet_size = 1000
max_inflight_messages = 10
default_vhost = mqtt

[mgmt]
bind = ::1
port = 8080
tls_port = 8443
unix_path = /run/http.sock
");
    assert!(warnings.is_empty(), "{warnings:?}");
    let m = &c.main;
    assert_eq!(m.data_dir, PathBuf::from("/data"));
    assert_eq!(m.log_level, "warn");
    assert_eq!(m.log_file, Some(PathBuf::from("/var/log/lavinmq.log")));
    assert_eq!(m.pidfile, Some(PathBuf::from("/run/lavinmq.pid")));
    assert_eq!(m.node_name, "rabbit@mq1");
    assert_eq!(m.control_unix_path, PathBuf::from("/run/ctl.sock"));
    assert_eq!(m.tls_cert, Some(PathBuf::from("/c.pem")));
    assert_eq!(m.tls_key, Some(PathBuf::from("/k.pem")));
    assert_eq!(m.tls_ciphers.as_deref(), Some("ECDHE"));
    assert_eq!(m.tls_min_version.as_deref(), Some("1.3"));
    assert_eq!((m.stats_interval, m.stats_log_size), (1000, 10));
    assert!(m.set_timestamp && !m.tcp_nodelay && m.log_exchange);
    let keepalive = m.tcp_keepalive.expect("keepalive on");
    assert_eq!(
        (keepalive.idle.as_secs(), keepalive.interval.as_secs(), keepalive.count),
        (30, 5, 2)
    );
    assert_eq!(
        (m.tcp_recv_buffer_size, m.tcp_send_buffer_size),
        (Some(65536), Some(131072))
    );
    assert!(!m.sync && !m.default_user_only_loopback && !m.data_dir_lock);
    assert_eq!(m.sync_method, crate::store::SyncMethod::EachFile);
    assert_eq!(m.socket_buffer_size, 4096);
    assert_eq!(m.segment_size, 1_048_576);
    assert_eq!((m.free_disk_min, m.free_disk_warn), (100, 200));
    assert_eq!(m.load_definitions, Some(PathBuf::from("/defs.json")));
    assert_eq!(m.max_deleted_definitions, 10);
    assert_eq!(m.consumer_timeout, Some(30000));
    assert_eq!(m.consumer_timeout_loop_interval, 5);
    assert_eq!(m.default_consumer_prefetch, 100);
    assert_eq!(m.default_user, "admin");
    assert_eq!(m.default_password_hash, "abc");
    assert_eq!(m.default_consistent_hash_algorithm, "jump");

    let a = &c.amqp;
    assert_eq!(a.bind, "::");
    assert_eq!((a.port, a.tls_port), (5673, Some(5674)));
    assert_eq!(a.unix_path, Some(PathBuf::from("/run/amqp.sock")));
    assert!(a.tcp_proxy_protocol);
    assert_eq!(a.proxy_protocol_trusted_sources, "10.0.0.1, 192.168.0.0/24");
    assert_eq!((a.heartbeat, a.frame_max, a.channel_max), (0, 4096, 0));
    assert_eq!((a.max_message_size, a.max_consumers_per_channel), (1024, 5));

    let q = &c.mqtt;
    assert_eq!(q.bind, "0.0.0.0");
    assert_eq!((q.port, q.tls_port), (1884, Some(8884)));
    assert_eq!(q.unix_path, Some(PathBuf::from("/run/mqtt.sock")));
    assert!(q.permission_check_enabled);
    assert_eq!(q.client_id_validation, "strict");
    assert_eq!((q.max_packet_size, q.max_inflight_messages), (1000, 10));
    assert_eq!(q.default_vhost, "mqtt");

    assert_eq!(c.mgmt.bind, "::1");
    assert_eq!((c.mgmt.port, c.mgmt.tls_port), (8080, Some(8443)));
    assert_eq!(c.mgmt.unix_path, Some(PathBuf::from("/run/http.sock")));
}

#[test]
fn empty_value_unsets_optional_settings() {
    let (c, _) = ini("[main]\ntls_cert =\nconsumer_timeout =\n[amqp]\nunix_path =\n");
    assert_eq!(c.main.tls_cert, None);
    assert_eq!(c.main.consumer_timeout, None);
    assert_eq!(c.amqp.unix_path, None);
}

#[test]
fn indented_lines_and_comments_are_understood() {
    let (c, warnings) = ini("[amqp]\n  # indented comment\n  ; another\n  port = 1\n\t[mgmt]\n\tport = 2\n");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!((c.amqp.port, c.mgmt.port), (1, 2));
    // Like LavinMQ, no inline comments: the rest of the line is the value.
    assert!(ini_err("[amqp]\nport = 1 # comment\n").contains("'port'"));
}

#[test]
fn ini_syntax_error_is_reported() {
    let err = Config::from_ini_str("[main]\ndata_dir = /x\n[amqp").expect_err("bad syntax");
    assert!(matches!(err, ConfigError::IniSyntax { line: 3, .. }), "{err}");
}

#[test]
fn later_duplicate_key_wins() {
    let (c, _) = ini("[amqp]\nport = 1\n[amqp]\nport = 2\n");
    assert_eq!(c.amqp.port, 2);
}

const PRECEDENCE_INI: &str = "\
[main]
data_dir = /ini/data
default_user = ini-user
sync = true
tls_cert = /ini/cert.pem
[amqp]
bind = 10.0.0.1
port = 1111
tls_port = 1112
[mgmt]
bind = 10.0.0.2
port = 2222
";

const PRECEDENCE_ENV: &[(&str, &str)] = &[
    ("LAVINMQ_DATADIR", "/env/data"),
    ("LAVINMQ_DEFAULT_USER", "env-user"),
    ("LAVINMQ_SYNC", "false"),
    ("LAVINMQ_TLS_CERT_PATH", "/env/cert.pem"),
    ("LAVINMQ_AMQP_BIND", "10.1.1.1"),
    ("LAVINMQ_AMQP_PORT", "3333"),
    ("LAVINMQ_HTTP_PORT", "4444"),
];

#[test]
fn env_overrides_ini() {
    let dir = TempDir::new();
    let file = dir.write("lavinmq.ini", PRECEDENCE_INI);
    let file = file.to_str().expect("utf-8 path");
    let c = load(&["-c", file], PRECEDENCE_ENV).expect("load").config;
    assert_eq!(c.main.data_dir, PathBuf::from("/env/data"));
    assert_eq!(c.main.default_user, "env-user");
    assert!(!c.main.sync);
    assert_eq!(c.main.tls_cert, Some(PathBuf::from("/env/cert.pem")));
    assert_eq!(c.amqp.bind, "10.1.1.1");
    assert_eq!(c.amqp.port, 3333);
    assert_eq!(c.mgmt.port, 4444);
    // Not set in the environment, so the ini value stays.
    assert_eq!(c.amqp.tls_port, Some(1112));
    assert_eq!(c.mgmt.bind, "10.0.0.2");
}

#[test]
fn flags_override_env() {
    let dir = TempDir::new();
    let file = dir.write("lavinmq.ini", PRECEDENCE_INI);
    let file = file.to_str().expect("utf-8 path");
    let args = [
        "-c",
        file,
        "-D",
        "/cli/data",
        "--default-user",
        "cli-user",
        "--cert",
        "/cli/cert.pem",
        "--amqp-bind",
        "10.2.2.2",
        "-p",
        "5555",
    ];
    let c = load(&args, PRECEDENCE_ENV).expect("load").config;
    assert_eq!(c.main.data_dir, PathBuf::from("/cli/data"));
    assert_eq!(c.main.default_user, "cli-user");
    assert_eq!(c.main.tls_cert, Some(PathBuf::from("/cli/cert.pem")));
    assert_eq!(c.amqp.bind, "10.2.2.2");
    assert_eq!(c.amqp.port, 5555);
    // Not given as flags: the env values stay.
    assert_eq!(c.mgmt.port, 4444);
    assert!(!c.main.sync);
}

#[test]
fn every_env_var_is_read() {
    let env = [
        ("STATE_DIRECTORY", "/state"),
        ("LAVINMQ_AMQP_PORT", "1"),
        ("LAVINMQ_AMQP_BIND", "1.1.1.1"),
        ("LAVINMQ_AMQPS_PORT", "2"),
        ("LAVINMQ_HTTP_BIND", "2.2.2.2"),
        ("LAVINMQ_HTTP_PORT", "3"),
        ("LAVINMQ_HTTPS_PORT", "4"),
        ("LAVINMQ_CONTROL_UNIX_PATH", "/ctl.sock"),
        ("LAVINMQ_TLS_CERT_PATH", "/cert"),
        ("LAVINMQ_TLS_KEY_PATH", "/key"),
        ("LAVINMQ_TLS_CIPHERS", "C"),
        ("LAVINMQ_TLS_MIN_VERSION", "1.3"),
        ("LAVINMQ_SYNC", "no"),
        ("LAVINMQ_DEFAULT_USER", "u"),
        ("LAVINMQ_DEFAULT_PASSWORD", "hash"),
        ("LAVINMQ_DEFAULT_CONSUMER_PREFETCH", "7"),
    ];
    let c = load(&[], &env).expect("load").config;
    assert_eq!(c.main.data_dir, PathBuf::from("/state"));
    assert_eq!(
        (c.amqp.bind.as_str(), c.amqp.port, c.amqp.tls_port),
        ("1.1.1.1", 1, Some(2))
    );
    assert_eq!(
        (c.mgmt.bind.as_str(), c.mgmt.port, c.mgmt.tls_port),
        ("2.2.2.2", 3, Some(4))
    );
    assert_eq!(c.main.control_unix_path, PathBuf::from("/ctl.sock"));
    assert_eq!(c.main.tls_cert, Some(PathBuf::from("/cert")));
    assert_eq!(c.main.tls_key, Some(PathBuf::from("/key")));
    assert_eq!(c.main.tls_ciphers.as_deref(), Some("C"));
    assert_eq!(c.main.tls_min_version.as_deref(), Some("1.3"));
    assert!(!c.main.sync);
    assert_eq!(c.main.default_user, "u");
    assert_eq!(c.main.default_password_hash, "hash");
    assert_eq!(c.main.default_consumer_prefetch, 7);
}

#[test]
fn lavinmq_datadir_beats_state_directory_and_empty_env_is_unset() {
    let env = [
        ("STATE_DIRECTORY", "/state"),
        ("LAVINMQ_DATADIR", "/lavin"),
        ("LAVINMQ_AMQP_PORT", ""),
    ];
    let c = load(&[], &env).expect("load").config;
    assert_eq!(c.main.data_dir, PathBuf::from("/lavin"));
    assert_eq!(c.amqp.port, 5672);
}

#[test]
fn bad_env_value_names_variable() {
    let err = load(&[], &[("LAVINMQ_AMQP_PORT", "abc")]).expect_err("bad port");
    let msg = err.to_string();
    assert!(msg.contains("LAVINMQ_AMQP_PORT") && msg.contains("abc"), "{msg}");
    let err = load(&[], &[("LAVINMQ_SYNC", "maybe")]).expect_err("bad bool");
    assert!(matches!(
        err,
        ConfigError::InvalidEnvValue {
            var: "LAVINMQ_SYNC",
            ..
        }
    ));
}

#[test]
fn unknown_section_is_an_error_naming_it() {
    let msg = ini_err("[replication]\nfoo = bar\n");
    assert!(msg.contains("[replication]"), "{msg}");
    assert!(msg.contains("[clustering]"), "{msg}");
    let err = Config::from_ini_str("[bogus]\n").expect_err("unknown section");
    assert!(
        matches!(&err, ConfigError::UnknownSection { section, .. } if section == "bogus"),
        "{err}"
    );
    assert!(ini_err("[sni:]\n").contains("[sni:]"));
}

#[test]
fn key_outside_section_is_an_error() {
    let msg = ini_err("port = 1\n[amqp]\n");
    assert!(msg.contains("'port'"), "{msg}");
}

#[test]
fn unknown_key_is_a_warning() {
    let (c, warnings) = ini("[amqp]\nfoo = 1\nport = 1234\n[main]\nbar = x\n[mgmt]\nbaz = 2\n");
    assert_eq!(c.amqp.port, 1234);
    assert_eq!(
        warnings,
        [
            "unknown key 'foo' in section [amqp]",
            "unknown key 'bar' in section [main]",
            "unknown key 'baz' in section [mgmt]",
        ]
    );
}

#[test]
fn raw_sections_are_kept_with_a_warning_per_key() {
    let (c, warnings) = ini("\
[experimental]
yield_each_received_bytes = 1
");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(c.experimental.len(), 1);
}

#[test]
fn oauth_section_and_auth_backends() {
    let (c, warnings) = ini("\
[main]
auth_backends = local, oauth
[oauth]
issuer = https://id.example/realms/x
resource_server_id = lavinmq
preferred_username_claims = preferred_username,sub
additional_scopes_keys = roles groups
scope_prefix = mq.
verify_aud = false
audience = api
jwks_cache_ttl = 60
client_id = ui
mgmt_base_url = https://mq.example
mgmt_scopes = openid
");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.main.auth_backends, ["local", "oauth"]);
    let o = &c.oauth;
    assert_eq!(o.issuer.as_deref(), Some("https://id.example/realms/x"));
    assert_eq!(o.resource_server_id.as_deref(), Some("lavinmq"));
    assert_eq!(o.preferred_username_claims, ["preferred_username", "sub"]);
    assert_eq!(o.additional_scopes_keys, ["roles", "groups"]);
    assert_eq!(o.scope_prefix.as_deref(), Some("mq."));
    assert!(!o.verify_aud);
    assert_eq!(o.audience.as_deref(), Some("api"));
    assert_eq!(o.jwks_cache_ttl, std::time::Duration::from_secs(60));
    assert_eq!(o.client_id.as_deref(), Some("ui"));
    assert_eq!(o.mgmt_base_url.as_deref(), Some("https://mq.example"));
    assert_eq!(o.mgmt_scopes, "openid");
    let defaults = crate::config::OAuthConfig::default();
    assert_eq!(defaults.preferred_username_claims, ["sub", "client_id"]);
    assert!(defaults.verify_aud);
    assert!(Config::from_ini_str("[main]\nauth_backends = local,ldap\n").is_err());
}

#[test]
fn ui_sign_on_needs_a_client_id_and_a_safe_base_url() {
    let mut o = crate::config::OAuthConfig {
        issuer: Some("https://id.example".into()),
        ..Default::default()
    };
    assert_eq!(o.ui_sign_on(), Ok(None));
    o.client_id = Some("ui".into());
    assert!(o.ui_sign_on().is_err(), "a client id without a base URL");
    o.mgmt_base_url = Some("https://mq.example/lavinmq/".into());
    let url = o.ui_sign_on().expect("enabled").expect("some");
    assert_eq!(url.redirect_uri, "https://mq.example/lavinmq/oauth/callback");
    assert_eq!(url.cookie_path, "/lavinmq");
    assert!(url.secure);
    o.mgmt_base_url = Some("http://localhost:15672".into());
    let url = o.ui_sign_on().expect("enabled").expect("some");
    assert_eq!((url.cookie_path.as_str(), url.secure), ("/", false));
    o.mgmt_base_url = Some("http://mq.example".into());
    assert!(o.ui_sign_on().is_err(), "plain http off loopback");
    o.mgmt_base_url = Some("https://mq.example".into());
    o.issuer = None;
    assert!(o.ui_sign_on().is_err(), "no issuer");
}

#[test]
fn tls_keys_in_main() {
    let (c, warnings) = ini("\
[main]
tls_cert = /c.pem
tls_keylog_file = /tmp/keys.log
tls_verify_peer = true
tls_ca_cert = /ca.pem
");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.main.tls_keylog_file, Some(PathBuf::from("/tmp/keys.log")));
    assert!(c.main.tls_verify_peer);
    assert_eq!(c.main.tls_ca_cert, Some(PathBuf::from("/ca.pem")));
    let keys = c.main.tls_keys().expect("a certificate is configured");
    assert_eq!(keys.cert, Some(PathBuf::from("/c.pem")));
    assert_eq!(keys.key, None);
    assert_eq!(keys.verify_peer, Some(true));
    assert_eq!(keys.keylog_file, Some(PathBuf::from("/tmp/keys.log")));

    let c = Config::default();
    assert_eq!((c.main.tls_keylog_file.as_ref(), c.main.tls_verify_peer), (None, false));
    assert_eq!(c.main.tls_keys(), None);
    assert_eq!(ini("[main]\ntls_keylog_file =\n").0.main.tls_keylog_file, None);

    let err = ini_err("[main]\ntls_cert = /c.pem\ntls_verify_peer = true\n");
    assert!(err.contains("tls_ca_cert"), "{err}");
    let err = ini_err("[main]\ntls_verify_peer = maybe\n");
    assert!(err.contains("tls_verify_peer"), "{err}");
}

#[test]
fn sni_sections_with_protocol_overrides() {
    let (c, warnings) = ini("\
[sni:Example.COM]
tls_cert = /e.pem
tls_key = /e.key
tls_min_version = 1.3
amqp_tls_cert = /amqp.pem
mqtt_tls_verify_peer = true
mqtt_tls_ca_cert = /ca.pem
http_tls_ciphers = ECDHE-RSA-AES128-GCM-SHA256
[sni:*.example.net]
tls_cert = /w.pem
bogus = 1
");
    assert_eq!(warnings, ["unknown key 'bogus' in section [sni:*.example.net]"]);
    let host = c.sni.get("example.com").expect("host names are lower-cased");
    let amqp = host.for_protocol(TlsProtocol::Amqp);
    assert_eq!(amqp.cert, Some(PathBuf::from("/amqp.pem")));
    assert_eq!(amqp.key, Some(PathBuf::from("/e.key")));
    assert_eq!(amqp.min_version.as_deref(), Some("1.3"));
    assert_eq!(amqp.verify_peer, None);
    let mqtt = host.for_protocol(TlsProtocol::Mqtt);
    assert_eq!(mqtt.cert, Some(PathBuf::from("/e.pem")));
    assert_eq!(
        (mqtt.verify_peer, mqtt.ca_cert),
        (Some(true), Some(PathBuf::from("/ca.pem")))
    );
    let http = host.for_protocol(TlsProtocol::Http);
    assert_eq!(http.ciphers.as_deref(), Some("ECDHE-RSA-AES128-GCM-SHA256"));
    assert_eq!(http.ca_cert, None);
    let wildcard = c.sni.get("*.example.net").expect("wildcard section");
    assert_eq!(wildcard.tls.cert, Some(PathBuf::from("/w.pem")));
}

#[test]
fn sni_sections_are_validated() {
    let err = ini_err("[sni:a.example]\ntls_key = /k.pem\n");
    assert!(err.contains("[sni:a.example] has no tls_cert"), "{err}");
    let err = ini_err("[sni:a.example]\namqp_tls_cert = /a.pem\n");
    assert!(err.contains("mqtt_tls_cert"), "{err}");
    let err = ini_err("[sni:a.example]\ntls_cert = /a.pem\nhttp_tls_verify_peer = true\n");
    assert!(err.contains("http_tls_ca_cert"), "{err}");
    let err = ini_err("[sni:a.example]\ntls_cert = /a.pem\ntls_verify_peer = sometimes\n");
    assert!(err.contains("tls_verify_peer") && err.contains("sometimes"), "{err}");
    for host in ["a.*.example", "*.", "**.example"] {
        let err = ini_err(&format!("[sni:{host}]\ntls_cert = /a.pem\n"));
        assert!(err.contains("*."), "{host}: {err}");
    }
}

#[test]
fn bad_value_error_names_section_key_and_value() {
    let err = Config::from_ini_str("[amqp]\nport = abc\n").expect_err("bad port");
    assert!(
        matches!(&err, ConfigError::InvalidIniValue { section, key, value, .. }
            if section == "amqp" && key == "port" && value == "abc"),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("[amqp]") && msg.contains("'port'") && msg.contains("'abc'"),
        "{msg}"
    );

    let msg = ini_err("[main]\nsync = maybe\n");
    assert!(
        msg.contains("[main]") && msg.contains("'sync'") && msg.contains("'maybe'"),
        "{msg}"
    );
    assert!(ini_err("[amqp]\nport = 70000\n").contains("'70000'"));
    assert!(ini_err("[amqp]\nport = -1\n").contains("'-1'"));
    assert!(ini_err("[main]\nlog_level = loud\n").contains("'log_level'"));
    assert!(ini_err("[main]\ndefault_consistent_hash_algorithm = md5\n").contains("md5"));
    assert!(ini_err("[mqtt]\nmax_inflight_messages = 65536\n").contains("[mqtt]"));
}

#[test]
fn deprecated_main_keys_map_to_replacements_with_warnings() {
    let (c, warnings) = ini("[main]\ndefault_password = oldhash\nguest_only_loopback = false\n");
    assert_eq!(c.main.default_password_hash, "oldhash");
    assert!(!c.main.default_user_only_loopback);
    assert_eq!(warnings.len(), 2);
    assert!(warnings[0].contains("'default_password'") && warnings[0].contains("default_password_hash"));
    assert!(warnings[1].contains("'guest_only_loopback'"));
}

#[test]
fn deprecated_amqp_and_mgmt_keys_forward_to_main() {
    let (c, warnings) = ini("\
[amqp]
tls_cert = /a.pem
tls_key = /a.key
set_timestamp = true
consumer_timeout = 1000
default_consumer_prefetch = 10
[mgmt]
tls_cert = /m.pem
");
    assert_eq!(c.main.tls_cert, Some(PathBuf::from("/m.pem")));
    assert_eq!(c.main.tls_key, Some(PathBuf::from("/a.key")));
    assert!(c.main.set_timestamp);
    assert_eq!(c.main.consumer_timeout, Some(1000));
    assert_eq!(c.main.default_consumer_prefetch, 10);
    assert_eq!(warnings.len(), 6, "{warnings:?}");
    assert!(warnings.iter().all(|w| w.contains("deprecated")));
    assert!(warnings[0].contains("[amqp]") && warnings[0].contains("[main]"));
    // Bad values are still reported against the section they were written in.
    let msg = ini_err("[amqp]\nset_timestamp = maybe\n");
    assert!(msg.contains("[amqp]") && msg.contains("'set_timestamp'"), "{msg}");
}

#[test]
fn booleans_accept_all_documented_spellings() {
    for v in ["1", "true", "TRUE", "yes", "Yes", "on", "ON", "y", "Y"] {
        let (c, _) = ini(&format!("[main]\nset_timestamp = {v}\n"));
        assert!(c.main.set_timestamp, "{v}");
    }
    for v in ["0", "false", "False", "no", "NO", "off", "Off", "n", "N"] {
        let (c, _) = ini(&format!("[main]\nsync = {v}\n"));
        assert!(!c.main.sync, "{v}");
    }
    for v in ["maybe", "2", "", "tru"] {
        assert!(Config::from_ini_str(&format!("[main]\nsync = {v}\n")).is_err(), "{v}");
    }
}

#[test]
fn bind_flag_sets_all_binds_and_specific_flags_win() {
    let c = load(&["-b", "0.0.0.0"], &[]).expect("load").config;
    assert_eq!(c.amqp.bind, "0.0.0.0");
    assert_eq!(c.mqtt.bind, "0.0.0.0");
    assert_eq!(c.mgmt.bind, "0.0.0.0");

    let c = load(&["--http-bind", "::1", "--bind", "::", "--mqtt-bind", "1.2.3.4"], &[])
        .expect("load")
        .config;
    assert_eq!(c.amqp.bind, "::");
    assert_eq!(c.mqtt.bind, "1.2.3.4");
    assert_eq!(c.mgmt.bind, "::1");
}

#[test]
fn port_zero_is_accepted_everywhere() {
    let (c, _) = ini("[amqp]\nport = 0\n[mqtt]\nport = 0\n[mgmt]\nport = 0\n");
    assert_eq!((c.amqp.port, c.mqtt.port, c.mgmt.port), (0, 0, 0));
    let c = load(&[], &[("LAVINMQ_AMQP_PORT", "0")]).expect("load").config;
    assert_eq!(c.amqp.port, 0);
    let c = load(
        &["-p", "0", "--http-port", "0", "--mqtt-port", "0", "--amqps-port", "0"],
        &[],
    )
    .expect("load")
    .config;
    assert_eq!(
        (c.amqp.port, c.mgmt.port, c.mqtt.port, c.amqp.tls_port),
        (0, 0, 0, Some(0))
    );
}

#[test]
fn minus_one_disables_a_tls_port() {
    let (c, _) = ini("[amqp]\ntls_port = -1\n[mqtt]\ntls_port = -1\n[mgmt]\ntls_port = 15671\n");
    assert_eq!(
        (c.amqp.tls_port, c.mqtt.tls_port, c.mgmt.tls_port),
        (None, None, Some(15671))
    );
    let c = load(
        &["--amqps-port", "-1", "--https-port", "-1"],
        &[("LAVINMQ_AMQPS_PORT", "1")],
    )
    .expect("load")
    .config;
    assert_eq!(
        (c.amqp.tls_port, c.mgmt.tls_port, c.mqtt.tls_port),
        (None, None, Some(8883))
    );
    let c = load(&[], &[("LAVINMQ_HTTPS_PORT", "-1")]).expect("load").config;
    assert_eq!(c.mgmt.tls_port, None);
    assert!(ini_err("[amqp]\ntls_port = -2\n").contains("-1 (disabled)"));
}

#[test]
fn http_section_is_a_deprecated_alias_of_mgmt() {
    let (c, warnings) = ini("[http]\nbind = ::\nport = 8080\ntls_port = 8443\nunix_path = /h.sock\n");
    assert_eq!(c.mgmt.bind, "::");
    assert_eq!((c.mgmt.port, c.mgmt.tls_port), (8080, Some(8443)));
    assert_eq!(c.mgmt.unix_path, Some(PathBuf::from("/h.sock")));
    assert_eq!(warnings, ["section [http] is deprecated, use [mgmt] instead"]);
    let (_, warnings) = ini("[http]\nnope = 1\n");
    assert!(warnings.contains(&"unknown key 'nope' in section [http]".to_owned()));
}

#[test]
fn frame_max_below_minimum_is_rejected() {
    let err = Config::from_ini_str("[amqp]\nframe_max = 4095\n").expect_err("too small");
    assert!(matches!(err, ConfigError::Invalid { field: "frame_max", .. }), "{err}");
    assert!(err.to_string().contains("frame_max"));
    let (c, _) = ini("[amqp]\nframe_max = 4096\nheartbeat = 65535\nchannel_max = 65535\n");
    assert_eq!(
        (c.amqp.frame_max, c.amqp.heartbeat, c.amqp.channel_max),
        (4096, 65535, 65535)
    );
}

#[test]
fn all_flags_are_applied() {
    let args = [
        "-D",
        "/d",
        "-l",
        "ERROR",
        "--pidfile",
        "/p.pid",
        "--node-name",
        "lavinmq@mq2",
        "--no-sync",
        "--default-consumer-prefetch",
        "5",
        "--default-password-hash",
        "h",
        "--default-user",
        "u",
        "--default-user-only-loopback=false",
        "--no-data-dir-lock",
        "--amqp-unix-path",
        "/a.sock",
        "--mqtts-port",
        "9",
        "--mqtt-unix-path",
        "/m.sock",
        "--https-port",
        "10",
        "--http-unix-path",
        "/h.sock",
        "--control-unix-path",
        "/c.sock",
        "--key",
        "/k",
        "--ciphers",
        "C",
        "--tls-min-version",
        "1.2",
    ];
    let loaded = load(&args, &[]).expect("load");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let c = loaded.config;
    assert_eq!(c.main.data_dir, PathBuf::from("/d"));
    assert_eq!(c.main.log_level, "error");
    assert_eq!(c.main.pidfile, Some(PathBuf::from("/p.pid")));
    assert_eq!(c.main.node_name, "lavinmq@mq2");
    assert!(!c.main.sync && !c.main.data_dir_lock && !c.main.default_user_only_loopback);
    assert_eq!(c.main.default_consumer_prefetch, 5);
    assert_eq!(
        (c.main.default_password_hash.as_str(), c.main.default_user.as_str()),
        ("h", "u")
    );
    assert_eq!(c.amqp.unix_path, Some(PathBuf::from("/a.sock")));
    assert_eq!(c.mqtt.tls_port, Some(9));
    assert_eq!(c.mqtt.unix_path, Some(PathBuf::from("/m.sock")));
    assert_eq!(c.mgmt.tls_port, Some(10));
    assert_eq!(c.mgmt.unix_path, Some(PathBuf::from("/h.sock")));
    assert_eq!(c.main.control_unix_path, PathBuf::from("/c.sock"));
    assert_eq!(c.main.tls_key, Some(PathBuf::from("/k")));
    assert_eq!(c.main.tls_ciphers.as_deref(), Some("C"));
    assert_eq!(c.main.tls_min_version.as_deref(), Some("1.2"));
}

#[test]
fn debug_flag_sets_debug_level() {
    assert_eq!(load(&["-d"], &[]).expect("load").config.main.log_level, "debug");
    assert_eq!(
        load(&["--debug", "-l", "warn"], &[])
            .expect("load")
            .config
            .main
            .log_level,
        "debug"
    );
}

#[test]
fn deprecated_flags_work_and_warn() {
    let loaded = load(&["--guest-only-loopback", "no", "--default-password", "old"], &[]).expect("load");
    assert!(!loaded.config.main.default_user_only_loopback);
    assert_eq!(loaded.config.main.default_password_hash, "old");
    assert_eq!(loaded.warnings.len(), 2, "{:?}", loaded.warnings);
    assert!(loaded.warnings.iter().all(|w| w.contains("deprecated")));
}

#[test]
fn bad_flag_values_are_clap_errors() {
    for args in [
        &["--default-user-only-loopback=maybe"][..],
        &["-p", "abc"],
        &["-p", "65536"],
        &["-l", "loud"],
        &["--no-such-flag"],
    ] {
        let err = load(args, &[]).expect_err("bad flag");
        assert!(matches!(err, ConfigError::Clap(_)), "{args:?}: {err}");
    }
}

#[test]
fn help_and_version_are_reported_as_clap_errors() {
    for (flag, kind) in [
        ("-h", clap::error::ErrorKind::DisplayHelp),
        ("--help", clap::error::ErrorKind::DisplayHelp),
        ("-v", clap::error::ErrorKind::DisplayVersion),
        ("-V", clap::error::ErrorKind::DisplayVersion),
        ("--version", clap::error::ErrorKind::DisplayVersion),
    ] {
        match load(&[flag], &[]) {
            Err(ConfigError::Clap(e)) => assert_eq!(e.kind(), kind, "{flag}"),
            other => panic!("{flag}: unexpected {other:?}"),
        }
    }
}

#[test]
fn missing_explicit_config_file_is_an_error() {
    let err = load(&["-c", "/nonexistent/lavinmq.ini"], &[]).expect_err("missing file");
    assert!(matches!(err, ConfigError::ConfigFileNotFound { .. }));
    assert!(err.to_string().contains("/nonexistent/lavinmq.ini"));
}

#[test]
fn config_file_errors_propagate_from_load() {
    let dir = TempDir::new();
    let file = dir.write("bad.ini", "[amqp]\nport = abc\n");
    let err = load(&["--config", file.to_str().expect("utf-8")], &[]).expect_err("bad value");
    assert!(matches!(err, ConfigError::InvalidIniValue { .. }), "{err}");
}

#[test]
fn config_directory_env_vars_locate_the_file() {
    let lavin = TempDir::new();
    lavin.write("lavinmq.ini", "[amqp]\nport = 1001\n");
    let systemd = TempDir::new();
    systemd.write("lavinmq.ini", "[amqp]\nport = 1002\n");
    let lavin_dir = lavin.0.to_str().expect("utf-8");
    let systemd_dir = systemd.0.to_str().expect("utf-8");

    let loaded = load(&[], &[("CONFIGURATION_DIRECTORY", systemd_dir)]).expect("load");
    assert_eq!(loaded.config.amqp.port, 1002);
    assert_eq!(loaded.config_file, Some(systemd.0.join("lavinmq.ini")));

    let env = [
        ("LAVINMQ_CONFIGURATION_DIRECTORY", lavin_dir),
        ("CONFIGURATION_DIRECTORY", systemd_dir),
    ];
    assert_eq!(load(&[], &env).expect("load").config.amqp.port, 1001);

    // -c beats the directory variables.
    let explicit = systemd.write("other.ini", "[amqp]\nport = 1003\n");
    let loaded = load(&["-c", explicit.to_str().expect("utf-8")], &env).expect("load");
    assert_eq!(loaded.config.amqp.port, 1003);
}

#[test]
fn config_directory_without_file_means_no_file_and_a_warning() {
    let empty = TempDir::new();
    let dir = empty.0.to_str().expect("utf-8");
    let loaded = load(&[], &[("LAVINMQ_CONFIGURATION_DIRECTORY", dir)]).expect("load");
    assert_eq!(loaded.config, Config::default());
    assert_eq!(loaded.config_file, None);
    assert_eq!(loaded.warnings.len(), 1);
    assert!(loaded.warnings[0].contains("LAVINMQ_CONFIGURATION_DIRECTORY"));
}

#[test]
fn system_config_dir_is_used_only_if_the_file_exists() {
    let system = TempDir::new();
    let none = Config::load_with_system_dir(["lavinmq"], &env_of(&[]), &system.0).expect("load");
    assert_eq!(none.config_file, None);
    system.write("lavinmq.ini", "[mgmt]\nport = 9999\n");
    let some = Config::load_with_system_dir(["lavinmq"], &env_of(&[]), &system.0).expect("load");
    assert_eq!(some.config.mgmt.port, 9999);
    assert_eq!(some.config_file, Some(system.0.join("lavinmq.ini")));
}

const EXAMPLE_INI: &str = include_str!("../../extras/lavinmq.ini");

#[test]
fn example_ini_parses_without_warnings() {
    let (c, warnings) = Config::from_ini_str(EXAMPLE_INI).expect("example ini parses");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c, Config::default());
}

#[test]
fn example_ini_documents_every_main_and_amqp_key_with_its_default() {
    // Uncomment every `;key = value` line: each key must be known and each
    // documented value must equal the built-in default.
    let uncommented: String = EXAMPLE_INI
        .lines()
        .map(|line| line.strip_prefix(';').unwrap_or(line))
        .collect::<Vec<_>>()
        .join("\n");
    let (c, warnings) = Config::from_ini_str(&uncommented).expect("uncommented example parses");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c, Config::default());

    let documented: Vec<&str> = EXAMPLE_INI
        .lines()
        .filter_map(|l| l.strip_prefix(';'))
        .filter_map(|l| l.split('=').next())
        .map(str::trim)
        .collect();
    for key in [
        "data_dir",
        "log_level",
        "log_file",
        "pidfile",
        "control_unix_path",
        "tls_cert",
        "tls_key",
        "tls_ciphers",
        "tls_min_version",
        "tls_keylog_file",
        "tls_verify_peer",
        "tls_ca_cert",
        "stats_interval",
        "stats_log_size",
        "set_timestamp",
        "socket_buffer_size",
        "tcp_nodelay",
        "segment_size",
        "sync",
        "sync_method",
        "free_disk_min",
        "free_disk_warn",
        "vm_memory_high_watermark",
        "connection_max",
        "connection_rate_limit",
        "log_exchange",
        "load_definitions",
        "max_deleted_definitions",
        "consumer_timeout",
        "consumer_timeout_loop_interval",
        "default_consumer_prefetch",
        "default_user",
        "default_password_hash",
        "default_user_only_loopback",
        "login_throttle",
        "login_throttle_max_failures",
        "login_throttle_block_time",
        "login_throttle_trusted_networks",
        "data_dir_lock",
        "default_consistent_hash_algorithm",
        "bind",
        "port",
        "tls_port",
        "unix_path",
        "tcp_proxy_protocol",
        "proxy_protocol_trusted_sources",
        "heartbeat",
        "frame_max",
        "channel_max",
        "max_message_size",
        "max_consumers_per_channel",
        "channel_rate_limit",
    ] {
        assert!(documented.contains(&key), "{key} is not documented");
    }
}

#[test]
fn metrics_listener_defaults_ini_and_flags() {
    let c = Config::default();
    assert_eq!(c.main.metrics_http_bind, "127.0.0.1");
    assert_eq!(c.main.metrics_http_port, Some(15692));

    let (c, warnings) = ini("[main]\nmetrics_http_bind = 0.0.0.0\nmetrics_http_port = 9100\n");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.main.metrics_http_bind, "0.0.0.0");
    assert_eq!(c.main.metrics_http_port, Some(9100));
    assert_eq!(ini("[main]\nmetrics_http_port = -1\n").0.main.metrics_http_port, None);
    assert_eq!(ini("[main]\nmetrics_http_port = 0\n").0.main.metrics_http_port, Some(0));
    for bad in ["-2", "65536", "abc"] {
        let err = ini_err(&format!("[main]\nmetrics_http_port = {bad}\n"));
        assert!(err.contains("metrics_http_port"), "{err}");
    }

    let c = load(&["--metrics-http-bind", "::1", "--metrics-http-port", "-1"], &[])
        .expect("load")
        .config;
    assert_eq!(c.main.metrics_http_bind, "::1");
    assert_eq!(c.main.metrics_http_port, None);
    let c = load(&["--metrics-http-port=0"], &[]).expect("load").config;
    assert_eq!(c.main.metrics_http_port, Some(0));
    assert!(load(&["--metrics-http-port", "-2"], &[]).is_err());
    assert!(load(&["--metrics-http-port", "70000"], &[]).is_err());
}

#[test]
fn clustering_defaults_match_lavinmq() {
    let c = Config::default().clustering;
    assert!(!c.enabled);
    assert_eq!(c.bind, "127.0.0.1");
    assert_eq!(c.port, 5679);
    assert_eq!(c.advertised_uri, None);
    assert_eq!(c.etcd_endpoints, "localhost:2379");
    assert_eq!(c.etcd_prefix, "lavinmq");
    assert_eq!((c.on_leader_elected, c.on_leader_lost), (None, None));
    assert_eq!(c.lease_ttl, Duration::from_secs(3));
    assert_eq!(c.client_hold_timeout, Duration::from_secs(30));
    assert_eq!(c.ack_timeout, Duration::from_secs(3));
}

#[test]
fn clustering_ini_values() {
    let (c, warnings) = ini("\
[clustering]
enabled = yes
bind = 0.0.0.0
port = 6000
advertised_uri = tcp://node1.example:6000
etcd_endpoints = user:pw@a:2379,b:2379
etcd_prefix = cluster-a
on_leader_elected = ip addr add 10.0.0.9/24 dev eth0
on_leader_lost = ip addr del 10.0.0.9/24 dev eth0
lease_ttl = 5
ack_timeout = 1
");
    assert!(warnings.is_empty(), "{warnings:?}");
    let c = c.clustering;
    assert!(c.enabled);
    assert_eq!((c.bind.as_str(), c.port), ("0.0.0.0", 6000));
    assert_eq!(c.advertised_uri.as_deref(), Some("tcp://node1.example:6000"));
    assert_eq!(c.advertised_uri(), "tcp://node1.example:6000");
    assert_eq!(c.etcd_endpoints, "user:pw@a:2379,b:2379");
    assert_eq!(c.etcd_prefix, "cluster-a");
    assert_eq!(c.on_leader_elected.as_deref(), Some("ip addr add 10.0.0.9/24 dev eth0"));
    assert_eq!(c.on_leader_lost.as_deref(), Some("ip addr del 10.0.0.9/24 dev eth0"));
    assert_eq!(c.lease_ttl, Duration::from_secs(5));
    assert_eq!(c.ack_timeout, Duration::from_secs(1));

    // Empty values unset the optional settings again.
    let (c, _) = ini("[clustering]\nadvertised_uri =\non_leader_elected =\non_leader_lost =\n");
    assert_eq!(c.clustering, ClusteringConfig::default());

    for (key, bad) in [
        ("enabled", "maybe"),
        ("port", "70000"),
        ("lease_ttl", "abc"),
        ("ack_timeout", "-1"),
    ] {
        let err = ini_err(&format!("[clustering]\n{key} = {bad}\n"));
        assert!(
            err.contains(key) && err.contains("[clustering]") && err.contains(bad),
            "{err}"
        );
    }
}

const CLUSTERING_INI: &str = "\
[clustering]
enabled = false
bind = 10.0.0.1
port = 6001
advertised_uri = tcp://ini:6001
etcd_endpoints = ini:2379
etcd_prefix = ini
on_leader_elected = ini-elected
on_leader_lost = ini-lost
lease_ttl = 20
ack_timeout = 4
";

const CLUSTERING_ENV: &[(&str, &str)] = &[
    ("LAVINMQ_CLUSTERING", "true"),
    ("LAVINMQ_CLUSTERING_BIND", "10.0.0.2"),
    ("LAVINMQ_CLUSTERING_PORT", "6002"),
    ("LAVINMQ_CLUSTERING_ADVERTISED_URI", "tcp://env:6002"),
    ("LAVINMQ_CLUSTERING_ETCD_ENDPOINTS", "env:2379"),
    ("LAVINMQ_CLUSTERING_ETCD_PREFIX", "env"),
    ("LAVINMQ_CLUSTERING_ON_LEADER_ELECTED", "env-elected"),
    ("LAVINMQ_CLUSTERING_ON_LEADER_LOST", "env-lost"),
    ("LAVINMQ_CLUSTERING_LEASE_TTL", "30"),
    ("LAVINMQ_CLUSTERING_ACK_TIMEOUT", "5"),
];

#[test]
fn clustering_env_overrides_ini() {
    let dir = TempDir::new();
    let file = dir.write("lavinmq.ini", CLUSTERING_INI);
    let file = file.to_str().expect("utf-8 path");

    // Without the environment every ini value is used.
    let c = load(&["-c", file], &[]).expect("load").config.clustering;
    assert!(!c.enabled);
    assert_eq!((c.bind.as_str(), c.port), ("10.0.0.1", 6001));
    assert_eq!(c.lease_ttl, Duration::from_secs(20));

    let c = load(&["-c", file], CLUSTERING_ENV).expect("load").config.clustering;
    assert!(c.enabled);
    assert_eq!((c.bind.as_str(), c.port), ("10.0.0.2", 6002));
    assert_eq!(c.advertised_uri.as_deref(), Some("tcp://env:6002"));
    assert_eq!(c.etcd_endpoints, "env:2379");
    assert_eq!(c.etcd_prefix, "env");
    assert_eq!(c.on_leader_elected.as_deref(), Some("env-elected"));
    assert_eq!(c.on_leader_lost.as_deref(), Some("env-lost"));
    assert_eq!(c.lease_ttl, Duration::from_secs(30));
    assert_eq!(c.ack_timeout, Duration::from_secs(5));

    // Only some variables set: the ini values stay for the rest; an empty
    // variable counts as unset.
    let env = [("LAVINMQ_CLUSTERING_PORT", "7000"), ("LAVINMQ_CLUSTERING_BIND", "")];
    let c = load(&["-c", file], &env).expect("load").config.clustering;
    assert_eq!((c.bind.as_str(), c.port), ("10.0.0.1", 7000));
    assert_eq!(c.etcd_prefix, "ini");

    // LAVINMQ_CLUSTERING can also turn clustering off.
    let c = load(&[], &[("LAVINMQ_CLUSTERING", "off")]).expect("load").config;
    assert!(!c.clustering.enabled);

    let err = load(&[], &[("LAVINMQ_CLUSTERING_LEASE_TTL", "ten")]).expect_err("bad seconds");
    assert!(
        matches!(
            err,
            ConfigError::InvalidEnvValue {
                var: "LAVINMQ_CLUSTERING_LEASE_TTL",
                ..
            }
        ),
        "{err}"
    );
    let err = load(&[], &[("LAVINMQ_CLUSTERING", "maybe")]).expect_err("bad bool");
    assert!(err.to_string().contains("LAVINMQ_CLUSTERING"), "{err}");
}

#[test]
fn clustering_flags_override_env() {
    let dir = TempDir::new();
    let file = dir.write("lavinmq.ini", CLUSTERING_INI);
    let file = file.to_str().expect("utf-8 path");
    let args = [
        "-c",
        file,
        "--clustering-bind",
        "10.0.0.3",
        "--clustering-port",
        "6003",
        "--clustering-advertised-uri",
        "tcp://cli:6003",
        "--clustering-etcd-endpoints",
        "cli:2379",
        "--clustering-etcd-prefix",
        "cli",
        "--clustering-on-leader-elected",
        "cli-elected",
        "--clustering-on-leader-lost",
        "cli-lost",
        "--clustering-lease-ttl",
        "40",
        "--clustering-ack-timeout",
        "6",
    ];
    let loaded = load(&args, CLUSTERING_ENV).expect("load");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let c = loaded.config.clustering;
    // Not given as a flag: the environment's value stays.
    assert!(c.enabled);
    assert_eq!((c.bind.as_str(), c.port), ("10.0.0.3", 6003));
    assert_eq!(c.advertised_uri.as_deref(), Some("tcp://cli:6003"));
    assert_eq!(c.etcd_endpoints, "cli:2379");
    assert_eq!(c.etcd_prefix, "cli");
    assert_eq!(c.on_leader_elected.as_deref(), Some("cli-elected"));
    assert_eq!(c.on_leader_lost.as_deref(), Some("cli-lost"));
    assert_eq!(c.lease_ttl, Duration::from_secs(40));
    assert_eq!(c.ack_timeout, Duration::from_secs(6));

    // --clustering switches clustering on over an ini file that turns it off.
    let c = load(&["-c", file, "--clustering"], &[]).expect("load").config;
    assert!(c.clustering.enabled);
    assert!(!load(&["-c", file], &[]).expect("load").config.clustering.enabled);

    for args in [
        &["--clustering-port", "65536"][..],
        &["--clustering-lease-ttl", "abc"],
        &["--clustering-ack-timeout", "-1"],
        &["--clustering=true"],
    ] {
        let err = load(args, &[]).expect_err("bad flag");
        assert!(matches!(err, ConfigError::Clap(_)), "{args:?}: {err}");
    }
}

#[test]
fn clustering_seconds_allow_decimals() {
    let (c, _) = ini("[clustering]\nlease_ttl = 1.5\nack_timeout = 0.1\n");
    assert_eq!(c.clustering.lease_ttl, Duration::from_millis(1500));
    // Parsed exactly, not through a float.
    assert_eq!(c.clustering.ack_timeout, Duration::from_millis(100));
    let (c, _) = ini("[clustering]\nlease_ttl = 2.\nack_timeout = .25\n");
    assert_eq!(c.clustering.lease_ttl, Duration::from_secs(2));
    assert_eq!(c.clustering.ack_timeout, Duration::from_millis(250));
    let (c, _) = ini("[clustering]\nack_timeout = 0.000000001\n");
    assert_eq!(c.clustering.ack_timeout, Duration::from_nanos(1));

    let env = [
        ("LAVINMQ_CLUSTERING_LEASE_TTL", "2.5"),
        ("LAVINMQ_CLUSTERING_ACK_TIMEOUT", "0.75"),
    ];
    let c = load(&[], &env).expect("load").config.clustering;
    assert_eq!(
        (c.lease_ttl, c.ack_timeout),
        (Duration::from_millis(2500), Duration::from_millis(750))
    );

    let args = ["--clustering-lease-ttl", "3.25", "--clustering-ack-timeout=0.5"];
    let c = load(&args, &[]).expect("load").config.clustering;
    assert_eq!(
        (c.lease_ttl, c.ack_timeout),
        (Duration::from_millis(3250), Duration::from_millis(500))
    );

    for bad in ["", ".", "1.2.3", "1e3", "+1", "-0.5", "1,5", "inf", "NaN"] {
        let err = Config::from_ini_str(&format!("[clustering]\nlease_ttl = {bad}\n"));
        assert!(
            matches!(&err, Err(ConfigError::InvalidIniValue { key, .. }) if key == "lease_ttl"),
            "{bad:?}: {err:?}"
        );
    }
}

#[test]
fn clustering_timings_are_validated() {
    let err = Config::from_ini_str("[clustering]\nlease_ttl = 0.5\n").expect_err("short lease");
    assert!(matches!(err, ConfigError::Invalid { field: "lease_ttl", .. }), "{err}");
    let err = Config::from_ini_str("[clustering]\nack_timeout = 0\n").expect_err("zero timeout");
    assert!(
        matches!(
            err,
            ConfigError::Invalid {
                field: "ack_timeout",
                ..
            }
        ),
        "{err}"
    );
    assert!(Config::from_ini_str("[clustering]\nack_timeout = 0.0\n").is_err());
    // The bounds themselves are fine.
    let (c, _) = ini("[clustering]\nlease_ttl = 1\nack_timeout = 0.001\n");
    assert_eq!(c.clustering.lease_ttl, Duration::from_secs(1));

    // Validation applies after merging, whichever source set the value.
    let err = load(&[], &[("LAVINMQ_CLUSTERING_LEASE_TTL", "0.5")]).expect_err("short lease");
    assert!(matches!(err, ConfigError::Invalid { field: "lease_ttl", .. }), "{err}");
    let err = load(&["--clustering-ack-timeout", "0"], &[]).expect_err("zero timeout");
    assert!(
        matches!(
            err,
            ConfigError::Invalid {
                field: "ack_timeout",
                ..
            }
        ),
        "{err}"
    );
    // A valid flag rescues an invalid environment value.
    let c = load(
        &["--clustering-lease-ttl", "2"],
        &[("LAVINMQ_CLUSTERING_LEASE_TTL", "0.5")],
    )
    .expect("load")
    .config;
    assert_eq!(c.clustering.lease_ttl, Duration::from_secs(2));
}

#[test]
fn clustering_deprecated_and_unknown_keys_warn() {
    let (c, warnings) = ini("[clustering]\nmax_unsynced_actions = 8192\nport = 6000\nbogus = 1\n");
    assert_eq!(c.clustering.port, 6000);
    assert_eq!(
        warnings,
        [
            "'max_unsynced_actions' in section [clustering] is deprecated and ignored",
            "unknown key 'bogus' in section [clustering]",
        ]
    );
    // Ignored means its value is not even checked.
    let (_, warnings) = ini("[clustering]\nmax_unsynced_actions = lots\n");
    assert_eq!(warnings.len(), 1, "{warnings:?}");

    let loaded = load(&["--clustering-max-unsynced-actions", "100"], &[]).expect("load");
    assert_eq!(loaded.config, Config::default());
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    assert!(loaded.warnings[0].contains("deprecated"), "{:?}", loaded.warnings);
}

#[test]
fn advertised_uri_defaults_to_tcp_hostname_and_port() {
    let mut c = ClusteringConfig::default();
    let uri = c.advertised_uri();
    let host = uri
        .strip_prefix("tcp://")
        .and_then(|rest| rest.strip_suffix(":5679"))
        .unwrap_or_else(|| panic!("unexpected default advertised URI {uri}"));
    assert!(!host.is_empty() && !host.contains(char::is_whitespace), "{uri}");
    if let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname")
        && !name.trim().is_empty()
    {
        assert_eq!(host, name.trim());
    }

    c.port = 7000;
    assert_eq!(c.advertised_uri(), format!("tcp://{host}:7000"));
    c.advertised_uri = Some("tcp://10.0.0.1:5679".to_owned());
    assert_eq!(c.advertised_uri(), "tcp://10.0.0.1:5679");
}

#[test]
fn example_ini_documents_every_clustering_key_with_its_default() {
    // The uncommented example equals the defaults (checked above), so it is
    // enough that each key appears as a `;key = ...` line in [clustering].
    let section: Vec<&str> = EXAMPLE_INI
        .lines()
        .skip_while(|l| l.trim() != "[clustering]")
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .filter_map(|l| l.strip_prefix(';'))
        .filter_map(|l| l.split('=').next())
        .map(str::trim)
        .collect();
    for key in [
        "enabled",
        "bind",
        "port",
        "advertised_uri",
        "etcd_endpoints",
        "etcd_prefix",
        "on_leader_elected",
        "on_leader_lost",
        "lease_ttl",
        "ack_timeout",
    ] {
        assert!(section.contains(&key), "[clustering] {key} is not documented");
    }
}

/// Every flag LavinMQ 2.9's `lavinmq --help` lists is accepted (the ones that
/// have no work to do here with a warning), so a unit file or script written
/// for LavinMQ starts this broker unchanged.
#[test]
fn every_lavinmq_2_9_flag_is_accepted() {
    let args = [
        "-D",
        "/tmp/d",
        "-l",
        "info",
        "--pidfile",
        "/tmp/p",
        "--no-sync",
        "--default-consumer-prefetch",
        "10",
        "--default-password-hash",
        "+pHuxkR9fCyrrwXjOD4BP4XbzO3l8LJr8YkThMgJ0yVHFRE+",
        "--default-password",
        "+pHuxkR9fCyrrwXjOD4BP4XbzO3l8LJr8YkThMgJ0yVHFRE+",
        "--default-user",
        "admin",
        "--default-user-only-loopback=false",
        "--guest-only-loopback=false",
        "--no-data-dir-lock",
        "--raise-gc-warn",
        "--metrics-http-bind",
        "0.0.0.0",
        "--metrics-http-port",
        "15692",
        "-b",
        "0.0.0.0",
        "-p",
        "5672",
        "--amqp-bind",
        "0.0.0.0",
        "--amqp-unix-path",
        "/tmp/a.sock",
        "--amqps-port",
        "5671",
        "--mqtt-bind",
        "0.0.0.0",
        "--mqtt-port",
        "1883",
        "--mqtts-port",
        "8883",
        "--mqtt-unix-path",
        "/tmp/m.sock",
        "--http-bind",
        "0.0.0.0",
        "--http-port",
        "15672",
        "--http-unix-path",
        "/tmp/h.sock",
        "--https-port",
        "15671",
        "--control-unix-path",
        "/tmp/c.sock",
        "--cert",
        "/tmp/c.pem",
        "--key",
        "/tmp/k.pem",
        "--ciphers",
        "ECDHE",
        "--tls-min-version",
        "1.2",
        "--tls-ktls=true",
        "--clustering-advertised-uri",
        "tcp://h:5679",
        "--clustering-bind",
        "0.0.0.0",
        "--clustering-port",
        "5679",
        "--clustering-etcd-endpoints",
        "localhost:2379",
        "--clustering-etcd-prefix",
        "lavinmq",
        "--clustering-on-leader-elected",
        "true",
        "--clustering-on-leader-lost",
        "true",
        "--clustering-max-unsynced-actions",
        "8192",
        "-d",
    ];
    let loaded = load(&args, &[]).expect("every LavinMQ flag parses");
    for flag in ["--tls-ktls", "--raise-gc-warn", "--clustering-max-unsynced-actions"] {
        assert!(
            loaded.warnings.iter().any(|w| w.contains(flag)),
            "no warning for {flag}: {:?}",
            loaded.warnings
        );
    }
    assert!(load(&["--clustering"], &[]).is_ok());
    assert!(load(&["--build-info"], &[]).is_ok());
}

/// Keys LavinMQ reads that do nothing here are accepted with a warning
/// saying so, never silently.
#[test]
fn lavinmq_keys_without_effect_here_are_named_in_warnings() {
    let (_, warnings) = Config::from_ini_str(
        "[main]\ntls_ktls = true\n\
         [amqp]\namqp_systemd_socket_name = x.socket\n\
         [mgmt]\nhttp_systemd_socket_name = y.socket\n\
         [experimental]\nyield_each_received_bytes = 1\n",
    )
    .expect("accepted");
    for key in [
        "tls_ktls",
        "amqp_systemd_socket_name",
        "http_systemd_socket_name",
        "yield_each_received_bytes",
    ] {
        assert!(
            warnings.iter().any(|w| w.contains(key) && w.contains("no effect")),
            "no warning for {key}: {warnings:?}"
        );
    }
}

#[test]
fn node_limits_and_the_memory_watermark() {
    use crate::core::memory::Watermark;
    let c = Config::default();
    assert_eq!(c.main.vm_memory_high_watermark, Watermark::Fraction(600_000));
    assert_eq!((c.main.connection_max, c.main.connection_rate_limit), (None, 0));
    assert_eq!(c.amqp.channel_rate_limit, 0);

    let (c, warnings) = ini(
        "[main]\nvm_memory_high_watermark = 0.4\nconnection_max = 5000\nconnection_rate_limit = 50\n[amqp]\nchannel_rate_limit = 100\n",
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.main.vm_memory_high_watermark, Watermark::Fraction(400_000));
    assert_eq!((c.main.connection_max, c.main.connection_rate_limit), (Some(5000), 50));
    assert_eq!(c.amqp.channel_rate_limit, 100);
    // RabbitMQ's spellings.
    let (c, _) = ini("[main]\nvm_memory_high_watermark.absolute = 2GiB\nmax_connections = 7\n");
    assert_eq!(c.main.vm_memory_high_watermark, Watermark::Bytes(2 << 30));
    assert_eq!(c.main.connection_max, Some(7));
    let (c, _) = ini("[main]\nvm_memory_high_watermark.relative = 0.5\nconnection_max = infinity\n");
    assert_eq!(c.main.vm_memory_high_watermark, Watermark::Fraction(500_000));
    assert_eq!(c.main.connection_max, None);
    for bad in [
        "vm_memory_high_watermark = lots",
        "vm_memory_high_watermark.absolute = 2PB",
        "connection_max = -1",
        "connection_rate_limit = fast",
    ] {
        let err = ini_err(&format!("[main]\n{bad}\n"));
        assert!(err.contains(bad.split(' ').next().unwrap_or_default()), "{err}");
    }
    // A reload applies them, with no restart.
    let (new, _) = ini("[main]\nvm_memory_high_watermark = 0.3\nconnection_max = 1\n[amqp]\nchannel_rate_limit = 1\n");
    assert!(Config::default().restart_needed(&new).is_empty());
}

#[test]
fn anonymous_login_is_off_unless_a_user_is_named() {
    let (c, _) = ini("[main]\n");
    assert_eq!(c.main.anonymous_login_user, None);
    let (c, _) = ini("[main]\nanonymous_login_user = guest\nanonymous_login_pass = secret\n");
    assert_eq!(c.main.anonymous_login_user.as_deref(), Some("guest"));
    assert_eq!(c.main.anonymous_login_pass, "secret");
    let (c, _) = ini("[main]\nanonymous_login_user = none\n");
    assert_eq!(c.main.anonymous_login_user, None);
}
