//! What a SIGHUP reload can change in a running broker, and what needs a
//! restart. The daemon re-reads its configuration, applies the settings
//! listed in [`Config::live_settings_cleared`] at once, and logs every other
//! changed setting by name as waiting for a restart, so an operator is never
//! left guessing whether an edit took effect.

use super::Config;

impl Config {
    /// A copy with every setting that a reload applies at run time set back
    /// to its default: two configurations whose copies are equal differ only
    /// in settings a reload applies.
    ///
    /// Applied at run time: the log level and file, the TLS certificates and
    /// settings (`[sni:...]` too), the disk thresholds, the memory high
    /// watermark, the node's connection limit and rate limits, `log_exchange`,
    /// `max_deleted_definitions`, the AMQP limits (`heartbeat`, `frame_max`,
    /// `channel_max` for new connections; `max_message_size`,
    /// `max_consumers_per_channel`, `default_consumer_prefetch`,
    /// `consumer_timeout` and `set_timestamp` for new channels and messages),
    /// the default user's loopback restriction, login throttling and the
    /// MQTT limits and defaults.
    pub fn live_settings_cleared(&self) -> Config {
        let defaults = Config::default();
        let mut c = self.clone();
        let (m, d) = (&mut c.main, &defaults.main);
        m.log_level.clone_from(&d.log_level);
        m.log_file.clone_from(&d.log_file);
        m.tls_cert.clone_from(&d.tls_cert);
        m.tls_key.clone_from(&d.tls_key);
        m.tls_ciphers.clone_from(&d.tls_ciphers);
        m.tls_min_version.clone_from(&d.tls_min_version);
        m.tls_keylog_file.clone_from(&d.tls_keylog_file);
        m.tls_verify_peer = d.tls_verify_peer;
        m.tls_ca_cert.clone_from(&d.tls_ca_cert);
        m.free_disk_min = d.free_disk_min;
        m.free_disk_warn = d.free_disk_warn;
        m.vm_memory_high_watermark = d.vm_memory_high_watermark;
        m.connection_max = d.connection_max;
        m.connection_rate_limit = d.connection_rate_limit;
        m.log_exchange = d.log_exchange;
        m.max_deleted_definitions = d.max_deleted_definitions;
        m.consumer_timeout = d.consumer_timeout;
        m.default_consumer_prefetch = d.default_consumer_prefetch;
        m.set_timestamp = d.set_timestamp;
        m.default_user_only_loopback = d.default_user_only_loopback;
        m.login_throttle = d.login_throttle;
        m.login_throttle_max_failures = d.login_throttle_max_failures;
        m.login_throttle_block_time = d.login_throttle_block_time;
        m.login_throttle_trusted_networks
            .clone_from(&d.login_throttle_trusted_networks);
        let (a, d) = (&mut c.amqp, &defaults.amqp);
        a.heartbeat = d.heartbeat;
        a.frame_max = d.frame_max;
        a.channel_max = d.channel_max;
        a.max_message_size = d.max_message_size;
        a.max_consumers_per_channel = d.max_consumers_per_channel;
        a.channel_rate_limit = d.channel_rate_limit;
        c.mqtt = super::MqttConfig {
            bind: c.mqtt.bind,
            port: c.mqtt.port,
            tls_port: c.mqtt.tls_port,
            unix_path: c.mqtt.unix_path,
            ..defaults.mqtt
        };
        c.sni.clear();
        c
    }

    /// The names of changed settings that only a restart applies.
    pub fn restart_needed(&self, new: &Config) -> Vec<&'static str> {
        let (old, new) = (self.live_settings_cleared(), new.live_settings_cleared());
        if old == new {
            return Vec::new();
        }
        macro_rules! changed {
            ($($section:ident . $field:ident),* $(,)?) => {
                [$((
                    concat!("[", stringify!($section), "] ", stringify!($field)),
                    old.$section.$field != new.$section.$field,
                )),*]
            };
        }
        let named = changed![
            main.data_dir,
            main.pidfile,
            main.control_unix_path,
            main.stats_interval,
            main.stats_log_size,
            main.socket_buffer_size,
            main.tcp_nodelay,
            main.tcp_keepalive,
            main.tcp_recv_buffer_size,
            main.tcp_send_buffer_size,
            main.segment_size,
            main.sync,
            main.sync_method,
            main.load_definitions,
            main.convert_lavinmq_data_dir,
            main.consumer_timeout_loop_interval,
            main.default_user,
            main.default_password_hash,
            main.data_dir_lock,
            main.default_consistent_hash_algorithm,
            main.metrics_http_bind,
            main.metrics_http_port,
            amqp.bind,
            amqp.port,
            amqp.tls_port,
            amqp.unix_path,
            amqp.tcp_proxy_protocol,
            amqp.proxy_protocol_trusted_sources,
            mqtt.bind,
            mqtt.port,
            mqtt.tls_port,
            mqtt.unix_path,
            mgmt.bind,
            mgmt.port,
            mgmt.tls_port,
            mgmt.unix_path,
        ];
        let mut names: Vec<&'static str> = named.iter().filter(|(_, c)| *c).map(|(n, _)| *n).collect();
        if old.clustering != new.clustering {
            names.push("[clustering]");
        }
        if old.oauth != new.oauth {
            names.push("[oauth]");
        }
        if old.experimental != new.experimental {
            names.push("[experimental]");
        }
        if names.is_empty() {
            names.push("other settings");
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_settings_need_no_restart_and_the_rest_are_named() {
        let old = Config::default();
        let mut new = old.clone();
        new.main.log_level = "debug".into();
        new.amqp.max_message_size = 1024;
        new.mqtt.max_inflight_messages = 10;
        new.main.free_disk_min = 1 << 30;
        assert!(old.restart_needed(&new).is_empty());
        new.amqp.port = 5673;
        new.main.segment_size = 1 << 20;
        new.clustering.enabled = true;
        assert_eq!(
            old.restart_needed(&new),
            vec!["[main] segment_size", "[amqp] port", "[clustering]"]
        );
    }
}
