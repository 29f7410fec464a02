//! Why a `lavinmqctl` command failed, worded for the person who ran it, and
//! the exit code each failure gives.

use std::path::PathBuf;

/// Exit code of a command the broker refused or that could not reach it.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code of a usage error (as clap uses) and of a broker that answers
/// 503 (a cluster follower, as in LavinMQ).
pub const EXIT_USAGE: u8 = 2;

/// A failed command.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// The arguments make no sense (bad JSON, conflicting options, ...).
    #[error("{0}")]
    Usage(String),
    /// Nothing at the control socket path: most likely no broker runs.
    #[error("{0} not found. Is LavinMQ running?")]
    SocketMissing(PathBuf),
    /// The control socket exists but may not be opened by this user.
    #[error("cannot open {0}: permission denied. Please run lavinmqctl as root or as the same user as LavinMQ.")]
    PermissionDenied(PathBuf),
    /// Connecting failed (nobody listens, unreachable host, ...).
    #[error("Can't connect to LavinMQ at {target}: {source}. Is LavinMQ running?")]
    Connect {
        /// The socket path or `host:port`.
        target: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The HTTP exchange itself broke (connection reset, malformed answer).
    #[error("HTTP request to {target} failed: {source}")]
    Http {
        /// The socket path or `host:port`.
        target: String,
        /// What hyper saw.
        source: hyper::Error,
    },
    /// The request could not be built (a header value the user supplied
    /// that HTTP cannot carry).
    #[error("invalid request: {0}")]
    Request(#[from] hyper::http::Error),
    /// The broker answered with an error status; `reason` is its explanation.
    #[error("{}", api_message(*.status, .reason))]
    Api {
        /// The HTTP status, e.g. `404 Not Found`.
        status: hyper::StatusCode,
        /// The broker's reason (the `reason` of its JSON error body, or the body).
        reason: String,
    },
    /// The broker answered something this tool cannot interpret.
    #[error("unexpected response to {path}: {detail}")]
    BadResponse {
        /// The request path.
        path: String,
        /// What was wrong with it.
        detail: String,
    },
    /// `--uri`/`--host`/`--hostname` describe no usable HTTP endpoint.
    #[error("invalid URI {uri}: {reason}")]
    InvalidUri {
        /// The URI as given.
        uri: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A local file (definitions to import) could not be read.
    #[error("cannot read {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The definitions of a data dir could not be read (`definitions`).
    #[error("{0}")]
    DataDir(#[from] lavinmq::core::definitions_offline::OfflineExportError),
    /// A LavinMQ data dir could not be read (`definitions`).
    #[error("{0}")]
    LavinMqDataDir(#[from] lavinmq::takeover::ConvertError),
    /// Writing the output failed (e.g. a closed pipe).
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

/// `404 Not Found: <reason>`, without repeating a reason that only restates
/// the status.
fn api_message(status: hyper::StatusCode, reason: &str) -> String {
    if status.canonical_reason() == Some(reason) {
        status.to_string()
    } else {
        format!("{status}: {reason}")
    }
}

impl CtlError {
    /// The process exit code for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            CtlError::Usage(_) => EXIT_USAGE,
            CtlError::Api { status, .. } if *status == hyper::StatusCode::SERVICE_UNAVAILABLE => EXIT_USAGE,
            _ => EXIT_FAILURE,
        }
    }
}

/// Result of a `lavinmqctl` step.
pub type CtlResult<T> = Result<T, CtlError>;
