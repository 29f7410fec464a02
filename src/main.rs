//! The `lavinmq` daemon: reads flags, the ini file and the environment, starts the
//! broker, tells systemd when it is ready, reloads its configuration on SIGHUP,
//! and shuts it down gracefully on SIGINT or SIGTERM.

use std::process::ExitCode;

use lavinmq::config::Config;
use lavinmq::logging::Logging;
use lavinmq::server::Server;
use lavinmq::systemd;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    if std::env::args().skip(1).any(|a| a == "--build-info") {
        print!("{}", build_info());
        return ExitCode::SUCCESS;
    }
    let loaded = match load_config() {
        Ok(l) => l,
        Err(lavinmq::config::ConfigError::Clap(e)) => e.exit(),
        Err(e) => {
            eprintln!("lavinmq: {e}");
            return ExitCode::from(2);
        }
    };
    let config = loaded.config;
    let logging = match Logging::init(&config.main.log_level, config.main.log_file.as_deref()) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("lavinmq: {e}");
            return ExitCode::FAILURE;
        }
    };
    let pidfile = config.main.pidfile.clone();
    if let Some(path) = &pidfile
        && let Err(e) = std::fs::write(path, format!("{}\n", std::process::id()))
    {
        eprintln!("lavinmq: cannot write pidfile {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    if let Some(path) = &loaded.config_file {
        tracing::info!("config file: {}", path.display());
    }
    for w in &loaded.warnings {
        tracing::warn!("config: {w}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lavinmq: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(src) = config.main.convert_lavinmq_data_dir.clone() {
        return runtime.block_on(convert(&src, &config));
    }
    let code = runtime.block_on(run(config, logging));
    if let Some(path) = pidfile {
        let _ = std::fs::remove_file(path);
    }
    code
}

/// `--convert-lavinmq-data-dir SRC`: converts the LavinMQ data dir `SRC`
/// into the (empty) data dir, without starting the broker.
async fn convert(src: &std::path::Path, config: &Config) -> ExitCode {
    let dest = &config.main.data_dir;
    let _lock = if config.main.data_dir_lock {
        if let Err(e) = std::fs::create_dir_all(dest) {
            eprintln!("lavinmq: cannot create {}: {e}", dest.display());
            return ExitCode::FAILURE;
        }
        match lavinmq::data_dir_lock::DataDirLock::acquire(dest) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("lavinmq: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let started = std::time::Instant::now();
    match lavinmq::takeover::convert(src, dest, lavinmq::server::store_settings(&config.main)) {
        Ok(report) => {
            report.log();
            let secs = started.elapsed().as_secs_f64();
            println!(
                "converted {} into {}: {} users, {} vhosts, {} queues, {} messages in {secs:.1} s",
                src.display(),
                dest.display(),
                report.users,
                report.vhosts,
                report.entities.1,
                report.messages()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lavinmq: cannot convert {}: {e}", src.display());
            ExitCode::FAILURE
        }
    }
}

/// The configuration from this process's flags, environment and config file.
fn load_config() -> Result<lavinmq::config::LoadedConfig, lavinmq::config::ConfigError> {
    Config::load(std::env::args_os(), &|k| std::env::var(k).ok())
}

/// What `--build-info` prints: the version, the compiler, the target and the
/// protocols and features built in.
fn build_info() -> String {
    format!(
        "LavinMQ {version}\n\
         Built with {rustc} for {target} ({profile})\n\
         Features: AMQP 0-9-1, AMQPS, MQTT 3.1/3.1.1, MQTTS, WebSocket, HTTP API, \
         Prometheus metrics, clustering (etcd), TLS (rustls, ring), systemd notify\n",
        version = env!("CARGO_PKG_VERSION"),
        rustc = env!("LAVINMQ_RUSTC_VERSION"),
        target = env!("LAVINMQ_BUILD_TARGET"),
        profile = env!("LAVINMQ_BUILD_PROFILE"),
    )
}

/// SIGINT, SIGTERM and SIGHUP, installed before anything starts so that a
/// signal during start-up is not the default action (which ends the process).
struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

async fn run(config: Config, mut logging: Logging) -> ExitCode {
    tracing::info!(
        "LavinMQ {} starting, data dir {}",
        env!("CARGO_PKG_VERSION"),
        config.main.data_dir.display()
    );
    let Ok(mut signals) = Signals::install() else {
        eprintln!("lavinmq: cannot install signal handlers");
        return ExitCode::FAILURE;
    };
    let watchdog = CancellationToken::new();
    systemd::spawn_watchdog(watchdog.clone());
    if config.clustering.enabled {
        warn_about_system_limits();
        let code = run_clustered(config, signals, logging).await;
        systemd::stopping();
        return code;
    }
    let server = match Server::start(&config).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("lavinmq: {e}");
            return ExitCode::FAILURE;
        }
    };
    warn_about_system_limits();
    systemd::ready();
    loop {
        tokio::select! {
            _ = signals.int.recv() => {
                tracing::info!("SIGINT received, shutting down");
                break;
            }
            _ = signals.term.recv() => {
                tracing::info!("SIGTERM received, shutting down");
                break;
            }
            _ = signals.hup.recv() => {
                systemd::reloading();
                if let Some(new) = reload_config(&config, &mut logging) {
                    match server.reload(&new) {
                        Ok(()) => tracing::info!("configuration reloaded"),
                        Err(e) => tracing::error!("TLS reload failed, keeping the current certificates: {e}"),
                    }
                }
                systemd::ready();
            }
        }
    }
    systemd::stopping();
    watchdog.cancel();
    server.shutdown().await;
    ExitCode::SUCCESS
}

/// Logs each operating-system limit that is too low for the opened store.
fn warn_about_system_limits() {
    for w in lavinmq::system_limits::check() {
        tracing::warn!("{w}");
    }
}

/// SIGHUP: reads the configuration again (the same flags, environment and
/// config file as at start), applies its log settings and names the changed
/// settings that need a restart. Returns the new configuration for the
/// broker to apply, or `None` (changing nothing) when it does not load.
fn reload_config(started: &Config, logging: &mut Logging) -> Option<Config> {
    tracing::info!("SIGHUP received, reloading the configuration");
    let loaded = match load_config() {
        Ok(loaded) => loaded,
        Err(e) => {
            tracing::error!("reload failed, keeping the current configuration: {e}");
            return None;
        }
    };
    for w in &loaded.warnings {
        tracing::warn!("config: {w}");
    }
    let config = loaded.config;
    if let Err(e) = logging.reload(&config.main.log_level, config.main.log_file.as_deref()) {
        tracing::error!("reload failed, keeping the current configuration: {e}");
        return None;
    }
    tracing::info!("log level {}", config.main.log_level);
    let pending = started.restart_needed(&config);
    if !pending.is_empty() {
        tracing::warn!(
            "changed settings that take effect only after a restart: {}",
            pending.join(", ")
        );
    }
    Some(config)
}

/// A clustered node: follows, campaigns and leads (see `lavinmq::cluster`)
/// until SIGINT or SIGTERM, when a leader closes its clients and hands over.
/// SIGHUP applies the log settings; the rest of a changed configuration needs
/// a restart of the node.
async fn run_clustered(config: Config, mut signals: Signals, mut logging: Logging) -> ExitCode {
    let stop = CancellationToken::new();
    let node = tokio::spawn({
        let (stop, config) = (stop.clone(), config.clone());
        async move { lavinmq::cluster::node::run(&config, stop, lavinmq::server::leader_starter()).await }
    });
    let signal_stop = stop.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = signals.int.recv() => tracing::info!("SIGINT received, shutting down"),
                _ = signals.term.recv() => tracing::info!("SIGTERM received, shutting down"),
                _ = signals.hup.recv() => {
                    systemd::reloading();
                    if reload_config(&config, &mut logging).is_some() {
                        tracing::info!("clustered: log settings reloaded; other settings apply after a restart");
                    }
                    systemd::ready();
                    continue;
                }
            }
            systemd::stopping();
            signal_stop.cancel();
            return;
        }
    });
    match node.await {
        Ok(Ok(())) => {
            tracing::info!("shutdown complete");
            ExitCode::SUCCESS
        }
        Ok(Err(e)) => {
            tracing::error!("{e}");
            eprintln!("lavinmq: {e}");
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("lavinmq: {e}");
            ExitCode::FAILURE
        }
    }
}
