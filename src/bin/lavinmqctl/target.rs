//! Where `lavinmqctl` sends its requests: the control socket by default, or
//! a broker's HTTP API when `--uri`, `--host` (or `LAVINMQCTL_HOST`) or
//! `--hostname` names one, as LavinMQ decides.

use std::path::PathBuf;

use hyper::http::Uri;

use crate::cli::GlobalOpts;
use crate::error::{CtlError, CtlResult};
use crate::percent;

/// Port of the HTTP API with `--hostname` and no `--port`.
const DEFAULT_HTTP_PORT: u16 = 15672;

/// The broker end of every request.
#[derive(Debug, Clone)]
pub enum Target {
    /// The control socket: no credentials needed, its file permissions are
    /// the access control.
    Unix(PathBuf),
    /// The HTTP API over TCP.
    Tcp(HttpEndpoint),
}

/// A broker's HTTP API.
#[derive(Debug, Clone)]
pub struct HttpEndpoint {
    /// Host name or address (without IPv6 brackets), for connecting.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// `host:port` as the `Host` header wants it.
    pub authority: String,
    /// Path prefix in front of `/api` (empty unless the URI had a path), for
    /// an API behind a reverse proxy.
    pub base_path: String,
    /// Basic-auth user name and password.
    pub credentials: Option<(String, String)>,
}

impl Target {
    /// Picks the target from the global options: `--uri`, then `--host` or
    /// `LAVINMQCTL_HOST`, then `--hostname`, else the control socket.
    pub fn resolve(g: &GlobalOpts) -> CtlResult<Target> {
        let (flag, uri) = match (&g.uri, &g.host) {
            (Some(uri), _) => ("uri", uri.clone()),
            (None, Some(host)) => ("host", host.clone()),
            (None, None) => match &g.hostname {
                Some(hostname) => {
                    let scheme = g.scheme.as_deref().unwrap_or("http");
                    let port = g.port.unwrap_or(DEFAULT_HTTP_PORT);
                    let host = if hostname.contains(':') && !hostname.starts_with('[') {
                        format!("[{hostname}]")
                    } else {
                        hostname.clone()
                    };
                    return endpoint(&format!("{scheme}://{host}:{port}"), g).map(Target::Tcp);
                }
                None => return Ok(Target::Unix(g.control_unix_path.clone())),
            },
        };
        let conflicting: Vec<&str> = [
            ("hostname", g.hostname.is_some()),
            ("port", g.port.is_some()),
            ("scheme", g.scheme.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        if !conflicting.is_empty() {
            return Err(CtlError::Usage(format!(
                "invalid args when using {flag}: {}",
                conflicting.join(", ")
            )));
        }
        endpoint(&uri, g).map(Target::Tcp)
    }

    /// The target as error messages name it.
    pub fn describe(&self) -> String {
        match self {
            Target::Unix(path) => path.display().to_string(),
            Target::Tcp(e) => e.authority.clone(),
        }
    }
}

/// Parses an `http://[user[:password]@]host[:port][/prefix]` URI; `--user`
/// and `--password` override its user info.
fn endpoint(raw: &str, g: &GlobalOpts) -> CtlResult<HttpEndpoint> {
    let invalid = |reason: &str| CtlError::InvalidUri {
        uri: raw.to_string(),
        reason: reason.to_string(),
    };
    let uri: Uri = raw
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| invalid(&e.to_string()))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(invalid(
                "https is not supported; use http or run lavinmqctl on the broker's host (control socket)",
            ));
        }
        Some(other) => return Err(invalid(&format!("unsupported scheme '{other}', use http"))),
        None => return Err(invalid("a scheme is required, e.g. http://localhost:15672")),
    }
    let authority = uri.authority().ok_or_else(|| invalid("a host is required"))?;
    let host = authority.host();
    if host.is_empty() {
        return Err(invalid("a host is required"));
    }
    let port = authority.port_u16().unwrap_or(80);
    let mut credentials = authority.as_str().rsplit_once('@').map(|(info, _)| {
        let (user, password) = info.split_once(':').unwrap_or((info, ""));
        (percent::decode(user), percent::decode(password))
    });
    if let Some(user) = &g.user {
        let password = credentials.take().map(|(_, p)| p).unwrap_or_default();
        credentials = Some((user.clone(), password));
    }
    if let Some(password) = &g.password {
        let user = credentials.take().map(|(u, _)| u).unwrap_or_default();
        credentials = Some((user, password.clone()));
    }
    Ok(HttpEndpoint {
        host: host.trim_start_matches('[').trim_end_matches(']').to_string(),
        port,
        authority: format!("{host}:{port}"),
        base_path: uri.path().trim_end_matches('/').to_string(),
        credentials,
    })
}
