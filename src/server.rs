//! Starts the broker: opens the data dir, binds the listeners, and shuts everything
//! down gracefully on request.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::transport::protocol_listener::{Forwarders, TcpEdge};
use crate::transport::proxy_protocol::ProxyPolicy;
use crate::transport::socket_options::SocketOptions;
use tokio_util::sync::CancellationToken;

use crate::amqp::{AmqpContext, AmqpSettings};
use crate::config::{Config, TlsProtocol};
use crate::core::broker::Broker;
use crate::core::vhost::StoreSettings;
use crate::data_dir_lock::DataDirLock;
use crate::mqtt::{ClientIdValidation, MqttContext, MqttSettings};
use crate::transport::tls::{TlsAcceptors, TlsError};

/// Segment offsets are 32-bit, so no message may come near 4 GiB; RabbitMQ's own
/// ceiling is 512 MiB.
const MAX_MESSAGE_SIZE_LIMIT: u64 = 512 * 1024 * 1024;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The data dir is locked by another broker.
    #[error("{0}")]
    Locked(String),
    /// Loading state from the data dir failed.
    #[error("cannot open data dir: {0}")]
    Broker(#[from] crate::core::Error),
    /// A listener could not bind.
    #[error("cannot bind {what} to {addr}: {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// Address tried.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The `load_definitions` file could not be read or imported.
    #[error("cannot load definitions from {path}: {reason}")]
    Definitions {
        /// The file named by `load_definitions`.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// The data dir is a LavinMQ data dir that could not be converted; its
    /// original files are in the backup directory.
    #[error("cannot take over the LavinMQ data dir (its files are kept in {backup}): {source}")]
    TakeOver {
        /// Where the original files are.
        backup: PathBuf,
        /// What went wrong.
        source: crate::takeover::ConvertError,
    },
    /// A Unix socket (the control socket, or a protocol's `unix_path`)
    /// could not be set up.
    #[error(transparent)]
    UnixSocket(#[from] crate::transport::unix_socket::UnixSocketError),
    /// The TLS settings (certificates, versions, ciphers, SNI sections) are
    /// unusable.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// `proxy_protocol_trusted_sources` holds something that is not an
    /// address or network.
    #[error(transparent)]
    ProxySources(#[from] crate::transport::proxy_protocol::BadTrustedSource),
    /// `login_throttle_trusted_networks` holds something that is not an
    /// address or network.
    #[error(transparent)]
    ThrottleNetworks(#[from] crate::core::login_throttle::BadNetwork),
}

/// A running server; dropping it does not stop it, call [`Server::shutdown`].
pub struct Server {
    /// The broker state.
    pub broker: Arc<Broker>,
    amqp_addr: SocketAddr,
    mqtt_addr: SocketAddr,
    http_addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    amqps_addr: Option<SocketAddr>,
    mqtts_addr: Option<SocketAddr>,
    https_addr: Option<SocketAddr>,
    /// The TLS listeners' acceptors, when `tls_cert` was set at start.
    tls: Option<TlsAcceptors>,
    shutdown: CancellationToken,
    ctx: Arc<AmqpContext>,
    mqtt_ctx: Arc<MqttContext>,
    stream_ctx: Arc<crate::stream_protocol::StreamContext>,
    stream_addr: Option<SocketAddr>,
    stream_tls_addr: Option<SocketAddr>,
    control: Option<crate::transport::unix_socket::BoundSocket>,
    /// Stops the `log_exchange` publisher, while it runs.
    log_exchange: parking_lot::Mutex<Option<CancellationToken>>,
    /// The protocols' Unix sockets (`unix_path`), removed at shutdown.
    unix_sockets: Vec<crate::transport::unix_socket::BoundSocket>,
    _lock: Option<DataDirLock>,
}

impl Server {
    /// Opens the data dir and binds every listener the config asks for.
    pub async fn start(config: &Config) -> Result<Server, StartError> {
        Self::start_with(config, None).await
    }

    /// Starts a clustered leader: AMQP connections forwarded by
    /// `forwarders` (its followers) may name their client in a PROXY header.
    pub async fn start_leader(config: &Config, forwarders: Forwarders) -> Result<Server, StartError> {
        Self::start_with(config, Some(forwarders)).await
    }

    async fn start_with(config: &Config, forwarders: Option<Forwarders>) -> Result<Server, StartError> {
        crate::http::node_stats::mark_started();
        let main = &config.main;
        crate::core::node::set_name(&main.node_name);
        // Unusable certificates stop the start before anything is opened.
        let tls = TlsAcceptors::from_config(config)?;
        let (amqp_edge, mqtt_edge) = tcp_edges(config, forwarders)?;
        if tls.is_none() && !config.sni.is_empty() {
            tracing::warn!("[sni:...] sections are ignored: TLS is off without [main] tls_cert");
        }
        let lock = if main.data_dir_lock {
            std::fs::create_dir_all(&main.data_dir)
                .map_err(|e| StartError::Locked(format!("cannot create data dir: {e}")))?;
            Some(DataDirLock::acquire(&main.data_dir).map_err(StartError::Locked)?)
        } else {
            None
        };
        let settings = store_settings(main);
        if crate::takeover::needs_take_over(&main.data_dir) {
            let report = crate::takeover::take_over(&main.data_dir, settings.clone()).map_err(|source| {
                StartError::TakeOver {
                    backup: main.data_dir.join(crate::takeover::BACKUP_DIR),
                    source,
                }
            })?;
            report.log();
        }
        let broker = Broker::open(
            &main.data_dir,
            settings,
            &main.default_user,
            &main.default_password_hash,
        )?;
        broker.logins.configure(throttle_settings(main)?);
        broker.auth.configure(&main.auth_backends, &config.oauth);
        if let Some(path) = &main.load_definitions {
            load_definitions(&broker, path)?;
        }
        let amqp = &config.amqp;
        let addr = format!("{}:{}", amqp.bind, amqp.port);
        let bind_addr = crate::transport::listen_address(&amqp.bind, amqp.port);
        let listener = TcpListener::bind(&bind_addr).await.map_err(|source| StartError::Bind {
            what: "AMQP",
            addr,
            source,
        })?;
        let amqp_addr = listener.local_addr().map_err(|source| StartError::Bind {
            what: "AMQP",
            addr: bind_addr,
            source,
        })?;
        tracing::info!("AMQP listening on {amqp_addr}");
        let shutdown = CancellationToken::new();
        let amqp_settings = amqp_settings(config);
        let mqtt_listener = bind_tcp("MQTT", &config.mqtt.bind, config.mqtt.port).await?;
        let mqtt_addr = mqtt_listener.local_addr().map_err(|source| StartError::Bind {
            what: "MQTT",
            addr: config.mqtt.bind.clone(),
            source,
        })?;
        tracing::info!("MQTT listening on {mqtt_addr}");
        let mgmt = &config.mgmt;
        let http_bind = crate::transport::listen_address(&mgmt.bind, mgmt.port);
        let http_listener = TcpListener::bind(&http_bind).await.map_err(|source| StartError::Bind {
            what: "HTTP",
            addr: http_bind.clone(),
            source,
        })?;
        let http_addr = http_listener.local_addr().map_err(|source| StartError::Bind {
            what: "HTTP",
            addr: http_bind,
            source,
        })?;
        tracing::info!("HTTP API listening on {http_addr}");
        let tls_listeners = match &tls {
            Some(_) => Some(TlsListeners::bind(config).await?),
            None => None,
        };
        let (amqps_addr, mqtts_addr, https_addr) = match &tls_listeners {
            Some(t) => (
                t.amqp.as_ref().map(|l| l.1),
                t.mqtt.as_ref().map(|l| l.1),
                t.http.as_ref().map(|l| l.1),
            ),
            None => (None, None, None),
        };
        let stream_listener = match config.stream.port {
            Some(port) => {
                let l = bind_tcp("stream", &config.stream.bind, port).await?;
                let addr = l.local_addr().map_err(|source| StartError::Bind {
                    what: "stream",
                    addr: config.stream.bind.clone(),
                    source,
                })?;
                tracing::info!("Stream protocol listening on {addr}");
                Some((l, addr))
            }
            None => None,
        };
        let stream_tls_listener = match (&tls, config.stream.tls_port) {
            (Some(_), Some(port)) => {
                let l = bind_tcp("stream TLS", &config.stream.bind, port).await?;
                let addr = l.local_addr().map_err(|source| StartError::Bind {
                    what: "stream TLS",
                    addr: config.stream.bind.clone(),
                    source,
                })?;
                tracing::info!("Stream protocol over TLS listening on {addr}");
                Some((l, addr))
            }
            _ => None,
        };
        let stream_addr = stream_listener.as_ref().map(|l| l.1);
        let stream_tls_addr = stream_tls_listener.as_ref().map(|l| l.1);
        let mut listeners = vec![("amqp", amqp_addr), ("mqtt", mqtt_addr), ("http", http_addr)];
        listeners.extend(stream_addr.map(|a| ("stream", a)));
        listeners.extend(stream_tls_addr.map(|a| ("stream/ssl", a)));
        for (protocol, addr) in [("amqps", amqps_addr), ("mqtts", mqtts_addr), ("https", https_addr)] {
            listeners.extend(addr.map(|a| (protocol, a)));
        }
        let ctx = AmqpContext::new(broker.clone(), amqp_settings, shutdown.clone());
        let mqtt_ctx = MqttContext::new(broker.clone(), mqtt_settings(config), shutdown.clone());
        // Stream connections, as MQTT's, take no PROXY header and are not
        // forwarded by followers (yet): the same socket options only.
        let stream_edge = mqtt_edge.clone();
        let stream_ctx = crate::stream_protocol::StreamContext::new(
            ctx.clone(),
            stream_settings(config, stream_addr, stream_tls_addr),
            shutdown.clone(),
        );
        let http_state = Arc::new(crate::http::HttpState {
            broker: broker.clone(),
            loopback_only_user: main.default_user_only_loopback.then(|| main.default_user.clone()),
            listeners,
            websocket: Some(crate::http::websocket::WsTargets {
                amqp: ctx.clone(),
                mqtt: mqtt_ctx.clone(),
                local: http_addr,
            }),
            shovels: crate::shovel::Shovels::start(ctx.clone(), &main.default_user),
            federation: crate::federation::Federation::start(ctx.clone(), &main.default_user),
        });
        let control = if main.control_unix_path.as_os_str().is_empty() {
            None
        } else {
            Some(crate::http::control_socket::serve_unix(
                &main.control_unix_path,
                http_state.clone(),
                &main.default_user,
                shutdown.clone(),
            )?)
        };
        // Bound after the control socket, whose errors tests expect to see first;
        // on failure the cancel stops the control socket's task again.
        let metrics_addr = match main.metrics_http_port {
            Some(port) => {
                let (listener, addr) = crate::http::metrics::bind(&main.metrics_http_bind, port)
                    .await
                    .map_err(|e| {
                        shutdown.cancel();
                        StartError::Bind {
                            what: "metrics",
                            addr: e.addr,
                            source: e.source,
                        }
                    })?;
                tracing::info!("Metrics listening on {addr}");
                tokio::spawn(crate::http::metrics::serve(
                    listener,
                    http_state.clone(),
                    shutdown.clone(),
                ));
                Some(addr)
            }
            None => None,
        };
        if let (Some(acceptors), Some(bound)) = (&tls, tls_listeners) {
            use crate::transport::protocol_listener::serve_tls;
            if let Some((listener, _)) = bound.amqp {
                let edge = amqp_edge.clone();
                tokio::spawn(serve_tls(listener, edge, acceptors.amqp.clone(), ctx.clone()));
            }
            if let Some((listener, _)) = bound.mqtt {
                let edge = mqtt_edge.clone();
                tokio::spawn(serve_tls(listener, edge, acceptors.mqtt.clone(), mqtt_ctx.clone()));
            }
            if let Some((listener, _)) = stream_tls_listener {
                // The stream protocol's TLS settings are AMQPS's.
                let edge = stream_edge.clone();
                tokio::spawn(serve_tls(listener, edge, acceptors.amqp.clone(), stream_ctx.clone()));
            }
            if let Some((listener, _)) = bound.http {
                let (tls, state) = (acceptors.http.clone(), http_state.clone());
                tokio::spawn(crate::http::https::serve(
                    listener,
                    tls,
                    SocketOptions::from_config(main),
                    state,
                    shutdown.clone(),
                ));
            }
        }
        let unix_sockets = serve_unix_sockets(config, &ctx, &mqtt_ctx, &http_state, &shutdown).inspect_err(|_| {
            shutdown.cancel();
        })?;
        tokio::spawn(crate::http::serve(http_listener, http_state, shutdown.clone()));
        tokio::spawn(crate::transport::protocol_listener::serve_plain(
            listener,
            amqp_edge,
            ctx.clone(),
        ));
        tokio::spawn(crate::transport::protocol_listener::serve_plain(
            mqtt_listener,
            mqtt_edge.clone(),
            mqtt_ctx.clone(),
        ));
        if let Some((listener, _)) = stream_listener {
            tokio::spawn(crate::transport::protocol_listener::serve_plain(
                listener,
                stream_edge,
                stream_ctx.clone(),
            ));
        }
        apply_node_limits(&broker, main);
        tokio::spawn(alarm_check_loop(broker.clone(), shutdown.clone()));
        tokio::spawn(crate::memory_trim::trim_periodically(broker.clone(), shutdown.clone()));
        let stats_interval = Duration::from_millis(main.stats_interval.max(10));
        tokio::spawn(stats_loop(broker.clone(), stats_interval, shutdown.clone()));
        let server = Server {
            broker,
            amqp_addr,
            mqtt_addr,
            http_addr,
            metrics_addr,
            amqps_addr,
            mqtts_addr,
            https_addr,
            tls,
            shutdown,
            ctx,
            mqtt_ctx,
            stream_ctx,
            stream_addr,
            stream_tls_addr,
            control,
            log_exchange: parking_lot::Mutex::new(None),
            unix_sockets,
            _lock: lock,
        };
        server.set_log_exchange(main.log_exchange);
        crate::memory_trim::after_start_up();
        Ok(server)
    }

    /// Starts or stops publishing the log to `amq.lavinmq.log` (`log_exchange`).
    fn set_log_exchange(&self, on: bool) {
        let mut running = self.log_exchange.lock();
        match (on, running.is_some()) {
            (true, false) => {
                let stop = self.shutdown.child_token();
                crate::log_exchange::spawn(self.broker.clone(), crate::log_tail::LogTail::global(), stop.clone());
                *running = Some(stop);
            }
            (false, true) => {
                if let Some(stop) = running.take() {
                    stop.cancel();
                }
            }
            _ => {}
        }
    }

    /// Applies a reloaded configuration (SIGHUP) to the running broker: the
    /// settings [`Config::live_settings_cleared`] lists, for connections,
    /// channels and messages from now on; open connections keep what they
    /// negotiated. TLS is reloaded last; its error (a certificate that does
    /// not load) is returned, and leaves the old certificates in use.
    pub fn reload(&self, config: &Config) -> Result<(), TlsError> {
        self.ctx.settings.store(Arc::new(amqp_settings(config)));
        self.mqtt_ctx.settings.store(Arc::new(mqtt_settings(config)));
        let main = &config.main;
        self.broker
            .set_store_limits(main.free_disk_min, main.free_disk_warn, main.max_deleted_definitions);
        apply_node_limits(&self.broker, main);
        self.set_log_exchange(main.log_exchange);
        match throttle_settings(main) {
            Ok(t) => self.broker.logins.configure(t),
            Err(e) => tracing::error!("{e}; login throttling keeps its previous settings"),
        }
        self.reload_tls(config)?;
        if self.tls.is_some() {
            tracing::info!("TLS certificates reloaded");
        }
        Ok(())
    }

    /// The address the AMQP listener is bound to (useful with port 0).
    pub fn amqp_addr(&self) -> SocketAddr {
        self.amqp_addr
    }

    /// The address the MQTT listener is bound to.
    pub fn mqtt_addr(&self) -> SocketAddr {
        self.mqtt_addr
    }

    /// Address of the stream protocol listener, unless disabled.
    pub fn stream_addr(&self) -> Option<SocketAddr> {
        self.stream_addr
    }

    /// The address the stream protocol's TLS listener is bound to, when TLS
    /// is configured and its port is on.
    pub fn stream_tls_addr(&self) -> Option<SocketAddr> {
        self.stream_tls_addr
    }

    /// The address the HTTP API listener is bound to.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The address the Prometheus metrics listener is bound to, unless it is
    /// disabled (`metrics_http_port = -1`).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The address the AMQPS listener is bound to, when TLS is configured.
    pub fn amqps_addr(&self) -> Option<SocketAddr> {
        self.amqps_addr
    }

    /// The address the MQTTS listener is bound to, when TLS is configured.
    pub fn mqtts_addr(&self) -> Option<SocketAddr> {
        self.mqtts_addr
    }

    /// The address the HTTPS listener is bound to, when TLS is configured.
    pub fn https_addr(&self) -> Option<SocketAddr> {
        self.https_addr
    }

    /// Re-reads the TLS certificates and settings (including `[sni:...]`
    /// sections) from `config` for every TLS listener, as on SIGHUP: new
    /// connections get them, open ones are not touched. On error (an
    /// unreadable or mismatched certificate, say) the listeners keep what
    /// they had. Listeners are bound at start only, so turning TLS on or off
    /// needs a restart.
    pub fn reload_tls(&self, config: &Config) -> Result<(), TlsError> {
        match &self.tls {
            Some(acceptors) => acceptors.reload(config),
            None if config.main.tls_cert.is_some() => Err(TlsError::NotBound),
            None => Ok(()),
        }
    }

    /// Where the control socket is, unless it is disabled (empty
    /// `control_unix_path`).
    pub fn control_path(&self) -> Option<&Path> {
        self.control.as_ref().map(|c| c.path())
    }

    /// Closes every connection with CONNECTION_FORCED, waits for them (up to a few
    /// seconds), and syncs all files.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        if let Some(control) = self.control {
            control.remove();
        }
        for socket in self.unix_sockets {
            socket.remove();
        }
        self.ctx.tasks.close();
        self.mqtt_ctx.tasks.close();
        self.stream_ctx.tasks.close();
        let connections = async {
            self.ctx.tasks.wait().await;
            self.mqtt_ctx.tasks.wait().await;
            self.stream_ctx.tasks.wait().await;
        };
        if tokio::time::timeout(Duration::from_secs(5), connections).await.is_err() {
            tracing::warn!("connections did not close in time");
        }
        let broker = self.broker.clone();
        let _ = tokio::task::spawn_blocking(move || {
            broker.sync_now();
            broker.sync.stop();
        })
        .await;
        tracing::info!("shutdown complete");
    }
}

/// How the AMQP and MQTT TCP listeners treat accepted sockets: `[main]`'s
/// socket options for both, and PROXY protocol headers on AMQP when
/// `tcp_proxy_protocol` is on (as LavinMQ, MQTT listeners take none) or
/// when forwarded by a cluster follower.
fn tcp_edges(config: &Config, forwarders: Option<Forwarders>) -> Result<(TcpEdge, TcpEdge), StartError> {
    let socket = SocketOptions::from_config(&config.main);
    let amqp = &config.amqp;
    let proxy = match amqp.tcp_proxy_protocol {
        true => Some(Arc::new(ProxyPolicy::parse(&amqp.proxy_protocol_trusted_sources)?)),
        false => None,
    };
    let amqp = TcpEdge {
        socket,
        proxy,
        forwarders,
    };
    let mqtt = TcpEdge {
        socket,
        proxy: None,
        forwarders: None,
    };
    Ok((amqp, mqtt))
}

/// File mode of the protocols' Unix sockets: any local user may connect,
/// and then logs in as over TCP.
const PROTOCOL_SOCKET_MODE: u32 = 0o666;

/// Binds the `unix_path` of each protocol that sets one and serves it until
/// `shutdown`.
fn serve_unix_sockets(
    config: &Config,
    amqp: &Arc<AmqpContext>,
    mqtt: &Arc<MqttContext>,
    http: &Arc<crate::http::HttpState>,
    shutdown: &CancellationToken,
) -> Result<Vec<crate::transport::unix_socket::BoundSocket>, StartError> {
    use crate::transport::protocol_listener::serve_unix;
    use crate::transport::unix_socket::bind;
    let mut bound = Vec::new();
    if let Some(path) = &config.amqp.unix_path {
        let (listener, socket) = bind("AMQP unix socket", path, PROTOCOL_SOCKET_MODE)?;
        tokio::spawn(serve_unix(listener, amqp.clone()));
        tracing::info!("AMQP listening on unix socket {}", path.display());
        bound.push(socket);
    }
    if let Some(path) = &config.mqtt.unix_path {
        let (listener, socket) = bind("MQTT unix socket", path, PROTOCOL_SOCKET_MODE)?;
        tokio::spawn(serve_unix(listener, mqtt.clone()));
        tracing::info!("MQTT listening on unix socket {}", path.display());
        bound.push(socket);
    }
    if let Some(path) = &config.mgmt.unix_path {
        let (listener, socket) = bind("HTTP unix socket", path, PROTOCOL_SOCKET_MODE)?;
        tokio::spawn(crate::http::serve_unix(listener, http.clone(), shutdown.clone()));
        tracing::info!("HTTP API listening on unix socket {}", path.display());
        bound.push(socket);
    }
    Ok(bound)
}

/// Login throttling as `[main]` configures it.
fn throttle_settings(
    main: &crate::config::MainConfig,
) -> Result<crate::core::login_throttle::ThrottleSettings, crate::core::login_throttle::BadNetwork> {
    Ok(crate::core::login_throttle::ThrottleSettings {
        enabled: main.login_throttle,
        max_failures: main.login_throttle_max_failures.max(1),
        block_time: std::time::Duration::from_secs(main.login_throttle_block_time),
        trusted: crate::core::login_throttle::parse_networks(&main.login_throttle_trusted_networks)?,
    })
}

/// The storage settings of `[main]`.
pub fn store_settings(main: &crate::config::MainConfig) -> StoreSettings {
    StoreSettings {
        segment_size: main.segment_size,
        sync: main.sync,
        sync_method: main.sync_method,
        free_disk_min: main.free_disk_min,
        free_disk_warn: main.free_disk_warn,
        max_deleted_definitions: Arc::new(std::sync::atomic::AtomicUsize::new(main.max_deleted_definitions)),
        consistent_hash_algorithm: crate::core::consistent_hash::HashAlgorithm::parse(
            &main.default_consistent_hash_algorithm,
        )
        .unwrap_or_default(),
    }
}

/// Imports the definitions file `path` (`load_definitions`) into `broker`.
/// Importing only creates what is missing, so doing it at every start is harmless.
fn load_definitions(broker: &Broker, path: &Path) -> Result<(), StartError> {
    let failed = |reason: String| StartError::Definitions {
        path: path.to_path_buf(),
        reason,
    };
    let body = std::fs::read(path).map_err(|e| failed(e.to_string()))?;
    crate::core::definitions_import::import_document(broker, &body).map_err(|e| failed(e.to_string()))?;
    tracing::info!("definitions loaded from {}", path.display());
    Ok(())
}

/// Samples message counters into rates every `stats_interval`.
async fn stats_loop(broker: Arc<Broker>, interval: Duration, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => broker.stats.sample(&broker, std::time::Instant::now()),
            _ = shutdown.cancelled() => return,
        }
    }
}

/// Applies the node-wide limits of `[main]` (at start and on reload): the
/// memory high watermark, `connection_max` and `connection_rate_limit`.
fn apply_node_limits(broker: &Broker, main: &crate::config::MainConfig) {
    broker.memory.set_watermark(main.vm_memory_high_watermark);
    broker
        .connections
        .set_node_limits(main.connection_max, main.connection_rate_limit);
}

/// Measures free disk space and memory use a few times a second for the
/// resource alarms.
async fn alarm_check_loop(broker: Arc<Broker>, shutdown: CancellationToken) {
    loop {
        broker.disk.check();
        broker.memory.check();
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// The stream listeners' settings: the address metadata answers advertise
/// is the configured one, else the bind address (the host name when bound
/// to every address), with the bound ports.
fn stream_settings(
    config: &Config,
    plain: Option<SocketAddr>,
    tls: Option<SocketAddr>,
) -> crate::stream_protocol::StreamSettings {
    let s = &config.stream;
    let host = s
        .advertised_host
        .clone()
        .unwrap_or_else(|| match s.bind.parse::<std::net::IpAddr>() {
            Ok(ip) if ip.is_unspecified() => crate::core::node::host_name(),
            _ => s.bind.clone(),
        });
    let plain_port = plain.map(|a| a.port());
    let tls_port = tls.map(|a| a.port());
    crate::stream_protocol::StreamSettings {
        frame_max: s.frame_max,
        heartbeat: s.heartbeat,
        advertised_host: host,
        advertised_port: s.advertised_port.or(plain_port).or(tls_port).unwrap_or(5552),
        advertised_tls_port: s.advertised_port.and(tls_port).or(tls_port),
    }
}

/// The TLS listeners, bound (with their addresses) before they are served.
/// A port of `-1` leaves its listener out.
struct TlsListeners {
    amqp: Option<(TcpListener, SocketAddr)>,
    mqtt: Option<(TcpListener, SocketAddr)>,
    http: Option<(TcpListener, SocketAddr)>,
}

impl TlsListeners {
    /// Binds the AMQPS, MQTTS and HTTPS ports next to the plain ones.
    async fn bind(config: &Config) -> Result<TlsListeners, StartError> {
        let (amqp, mqtt, mgmt) = (&config.amqp, &config.mqtt, &config.mgmt);
        Ok(TlsListeners {
            amqp: bind_tls(TlsProtocol::Amqp, &amqp.bind, amqp.tls_port).await?,
            mqtt: bind_tls(TlsProtocol::Mqtt, &mqtt.bind, mqtt.tls_port).await?,
            http: bind_tls(TlsProtocol::Http, &mgmt.bind, mgmt.tls_port).await?,
        })
    }
}

/// Binds `protocol`'s TLS listener on `bind:port` and logs its address.
async fn bind_tls(
    protocol: TlsProtocol,
    bind: &str,
    port: Option<u16>,
) -> Result<Option<(TcpListener, SocketAddr)>, StartError> {
    let what = protocol.listener();
    let Some(port) = port else {
        tracing::info!("{what} is disabled (tls_port = -1)");
        return Ok(None);
    };
    let listener = bind_tcp(what, bind, port).await?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        what,
        addr: bind.to_owned(),
        source,
    })?;
    tracing::info!("{what} listening on {addr}");
    Ok(Some((listener, addr)))
}

/// Binds a TCP listener on `bind:port` (IPv6 addresses without brackets).
async fn bind_tcp(what: &'static str, bind: &str, port: u16) -> Result<TcpListener, StartError> {
    let addr = crate::transport::listen_address(bind, port);
    TcpListener::bind(&addr)
        .await
        .map_err(|source| StartError::Bind { what, addr, source })
}

/// The AMQP listeners' settings from `[amqp]` and `[main]`.
fn amqp_settings(config: &Config) -> AmqpSettings {
    let (amqp, main) = (&config.amqp, &config.main);
    AmqpSettings {
        frame_max: amqp.frame_max,
        channel_max: amqp.channel_max,
        heartbeat: amqp.heartbeat,
        max_message_size: amqp.max_message_size.min(MAX_MESSAGE_SIZE_LIMIT),
        default_prefetch: main.default_consumer_prefetch,
        set_timestamp: main.set_timestamp,
        max_consumers_per_channel: amqp.max_consumers_per_channel,
        channel_rate_limit: amqp.channel_rate_limit,
        default_user: main.default_user.clone(),
        default_user_only_loopback: main.default_user_only_loopback,
        anonymous_login: main
            .anonymous_login_user
            .clone()
            .map(|user| (user, main.anonymous_login_pass.clone())),
        consumer_timeout: main.consumer_timeout,
        consumer_timeout_check: std::time::Duration::from_secs(main.consumer_timeout_loop_interval.max(1)),
    }
}

/// The MQTT listener's settings from `[mqtt]` and `[main]`.
fn mqtt_settings(config: &Config) -> MqttSettings {
    let (mqtt, main) = (&config.mqtt, &config.main);
    MqttSettings {
        max_packet_size: mqtt.max_packet_size as usize,
        max_inflight: mqtt.max_inflight_messages,
        max_keep_alive: mqtt.max_keep_alive,
        default_vhost: mqtt.default_vhost.clone(),
        client_id_validation: if mqtt.client_id_validation == "username" {
            ClientIdValidation::Username
        } else {
            ClientIdValidation::None
        },
        permission_check: mqtt.permission_check_enabled,
        default_user: main.default_user.clone(),
        default_user_only_loopback: main.default_user_only_loopback,
    }
}

impl crate::cluster::leader_service::LeaderService for Server {
    fn client_ports(&self) -> crate::cluster::follower::LeaderInfo {
        crate::cluster::follower::LeaderInfo {
            id: String::new(),
            amqp_port: self.amqp_addr().port(),
            mqtt_port: self.mqtt_addr().port(),
            http_port: self.http_addr().port(),
            amqps_port: self.amqps_addr().map(|a| a.port()),
            mqtts_port: self.mqtts_addr().map(|a| a.port()),
            https_port: self.https_addr().map(|a| a.port()),
            stream_port: self.stream_addr().map(|a| a.port()),
            stream_tls_port: self.stream_tls_addr().map(|a| a.port()),
        }
    }

    fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    fn shutdown(self: Box<Self>) -> futures_util::future::BoxFuture<'static, ()> {
        Box::pin(Server::shutdown(*self))
    }
}

/// What a clustered node starts when it is elected: this server, as
/// [`Server::start_leader`] starts it.
pub fn leader_starter() -> crate::cluster::leader_service::StartLeader {
    Arc::new(|config, forwarders| {
        Box::pin(async move {
            match Server::start_leader(&config, forwarders).await {
                Ok(server) => Ok(Box::new(server) as Box<dyn crate::cluster::leader_service::LeaderService>),
                Err(e) => Err(e.to_string()),
            }
        })
    })
}
