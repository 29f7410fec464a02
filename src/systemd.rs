//! The systemd service-manager protocol (`sd_notify`): a `Type=notify` unit
//! learns that the broker is ready only once every listener is bound, that it
//! is reloading on SIGHUP, and that it is stopping; with `WatchdogSec=` set the
//! broker also pings the watchdog. It is a datagram of `KEY=VALUE` lines sent
//! to the socket named by `NOTIFY_SOCKET` (a path, or an abstract name written
//! with a leading `@`); the protocol is these few lines, so no crate is needed.
//! Without `NOTIFY_SOCKET` (not run by systemd) every call does nothing.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Sends `state` (newline-separated `KEY=VALUE` assignments) to the service
/// manager, if there is one. Failures are logged at debug level only: a broker
/// must not stop because its supervisor went away.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send(&path, state) {
        tracing::debug!("sd_notify to {}: {e}", path.to_string_lossy());
    }
}

fn send(path: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let socket = UnixDatagram::unbound()?;
    let bytes = path.as_bytes();
    match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            socket.send_to_addr(state.as_bytes(), &addr)?;
        }
        None => {
            socket.send_to(state.as_bytes(), path)?;
        }
    }
    Ok(())
}

/// Every listener is bound and the broker serves clients.
pub fn ready() {
    notify(&format!(
        "READY=1\nSTATUS=Accepting connections\nMAINPID={}",
        std::process::id()
    ));
}

/// A SIGHUP reload has begun; [`ready`] says when it is over. systemd wants
/// the monotonic clock's time with it, to tell this reload from earlier ones.
pub fn reloading() {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let usec = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000;
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
}

/// Shutdown has begun.
pub fn stopping() {
    notify("STOPPING=1\nSTATUS=Shutting down");
}

/// The watchdog interval systemd asked for (`WatchdogSec=`), when it is meant
/// for this process (`WATCHDOG_PID`, when set, is our pid).
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID")
        && pid.parse::<u32>().ok() != Some(std::process::id())
    {
        return None;
    }
    (usec > 0).then(|| Duration::from_micros(usec))
}

/// Pings the watchdog at half its interval until `stop`. The pings come from
/// the runtime, so a runtime that stops making progress stops them, and
/// systemd restarts the broker.
pub fn spawn_watchdog(stop: CancellationToken) {
    let Some(interval) = watchdog_interval() else {
        return;
    };
    tracing::info!("systemd watchdog: pinging every {:?}", interval / 2);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval / 2);
        loop {
            tokio::select! {
                _ = tick.tick() => notify("WATCHDOG=1"),
                _ = stop.cancelled() => return,
            }
        }
    });
}
