//! The `lavinmq` daemon: reads flags, the ini file and the environment, starts the
//! broker, reloads its TLS certificates on SIGHUP, and shuts it down gracefully
//! on SIGINT or SIGTERM.

use std::process::ExitCode;

use lavinmq::config::Config;
use lavinmq::server::Server;
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

fn main() -> ExitCode {
    let loaded = match Config::load(std::env::args_os(), &|k| std::env::var(k).ok()) {
        Ok(l) => l,
        Err(lavinmq::config::ConfigError::Clap(e)) => e.exit(),
        Err(e) => {
            eprintln!("lavinmq: {e}");
            return ExitCode::from(2);
        }
    };
    let config = loaded.config;
    let level = match config.main.log_level.as_str() {
        "fatal" => "error",
        "notice" => "info",
        "none" => "off",
        other => other,
    };
    let filter =
        tracing_subscriber::EnvFilter::try_new(level).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // The log goes to stdout or the log file, and its tail to the management
    // API's live log (`GET /api/livelog`), under the same level filter.
    let logging = tracing_subscriber::registry()
        .with(filter)
        .with(lavinmq::log_tail::layer());
    let output = tracing_subscriber::fmt::layer().with_target(false);
    match &config.main.log_file {
        Some(path) => match std::fs::OpenOptions::new().create(true).append(true).open(path) {
            Ok(file) => logging
                .with(output.with_ansi(false).with_writer(std::sync::Mutex::new(file)))
                .init(),
            Err(e) => {
                eprintln!("lavinmq: cannot open log file {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => logging.with(output).init(),
    }
    if let Some(pidfile) = &config.main.pidfile
        && let Err(e) = std::fs::write(pidfile, format!("{}\n", std::process::id()))
    {
        eprintln!("lavinmq: cannot write pidfile {}: {e}", pidfile.display());
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
    runtime.block_on(run(config))
}

async fn run(config: Config) -> ExitCode {
    tracing::info!(
        "LavinMQ {} starting, data dir {}",
        env!("CARGO_PKG_VERSION"),
        config.main.data_dir.display()
    );
    // Installed first, so a SIGHUP during start-up does not end the process.
    let signals = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    );
    let (mut int, mut term, mut hup) = match signals {
        (Ok(i), Ok(t), Ok(h)) => (i, t, h),
        _ => {
            eprintln!("lavinmq: cannot install signal handlers");
            return ExitCode::FAILURE;
        }
    };
    if config.clustering.enabled {
        return run_clustered(config, int, term).await;
    }
    let server = match Server::start(&config).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("lavinmq: {e}");
            return ExitCode::FAILURE;
        }
    };
    loop {
        tokio::select! {
            _ = int.recv() => {
                tracing::info!("SIGINT received, shutting down");
                break;
            }
            _ = term.recv() => {
                tracing::info!("SIGTERM received, shutting down");
                break;
            }
            _ = hup.recv() => reload(&server),
        }
    }
    server.shutdown().await;
    ExitCode::SUCCESS
}

/// A clustered node: follows, campaigns and leads (see `lavinmq::cluster`)
/// until SIGINT or SIGTERM, when a leader closes its clients and hands over.
async fn run_clustered(
    config: Config,
    mut int: tokio::signal::unix::Signal,
    mut term: tokio::signal::unix::Signal,
) -> ExitCode {
    let stop = tokio_util::sync::CancellationToken::new();
    let node = tokio::spawn({
        let stop = stop.clone();
        async move { lavinmq::cluster::node::run(&config, stop).await }
    });
    let signal_stop = stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
            _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        }
        signal_stop.cancel();
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

/// SIGHUP: reads the configuration again (the same flags, environment and
/// config file as at start) and reloads the TLS certificates from it. A
/// configuration or certificate that does not load changes nothing.
fn reload(server: &Server) {
    tracing::info!("SIGHUP received, reloading TLS certificates");
    let config = match Config::load(std::env::args_os(), &|k| std::env::var(k).ok()) {
        Ok(loaded) => {
            for w in &loaded.warnings {
                tracing::warn!("config: {w}");
            }
            loaded.config
        }
        Err(e) => {
            tracing::error!("reload failed, keeping the current certificates: {e}");
            return;
        }
    };
    match server.reload_tls(&config) {
        Ok(()) if server.https_addr().is_some() => tracing::info!("TLS certificates reloaded"),
        Ok(()) => tracing::info!("TLS is off (no tls_cert); nothing to reload"),
        Err(e) => tracing::error!("reload failed, keeping the current certificates: {e}"),
    }
}
