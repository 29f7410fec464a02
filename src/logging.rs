//! The daemon's log: level filter, output (stdout or `log_file`), and the
//! in-memory tail the management API serves. SIGHUP re-reads the config and
//! calls [`Logging::reload`], which applies a new `log_level` at once and
//! reopens `log_file` (so that logrotate's rename-and-HUP works, and a moved
//! `log_file` takes effect).
//!
//! Under systemd, when stdout is the journal (`JOURNAL_STREAM` names stdout's
//! device and inode, as LavinMQ checks), lines carry no timestamp of their
//! own, since journald adds one, and start with the `<N>` syslog priority
//! prefix so that journald records each line's severity.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

mod line_layer;

use line_layer::{LineLayer, LineStyle};

/// Why the log could not be set up or changed.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// `log_file` cannot be opened for appending.
    #[error("cannot open log file {path}: {source}")]
    LogFile {
        /// The configured path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The level filter could not be replaced.
    #[error("cannot change the log level: {0}")]
    Level(String),
}

/// Where lines go; swapped on reload.
enum Output {
    Stdout,
    File(File),
}

/// The shared, swappable output that the formatting layer writes through.
#[derive(Clone)]
struct SharedOutput(Arc<Mutex<Output>>);

/// One line's writer: holds the output's lock while the line is written.
struct LineWriter<'a>(parking_lot::MutexGuard<'a, Output>);

impl Write for LineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut *self.0 {
            Output::Stdout => io::stdout().lock().write(buf),
            Output::File(f) => f.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut *self.0 {
            Output::Stdout => io::stdout().lock().write_all(buf),
            Output::File(f) => f.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut *self.0 {
            Output::Stdout => io::stdout().flush(),
            Output::File(f) => f.flush(),
        }
    }
}

impl<'a> MakeWriter<'a> for SharedOutput {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter(self.0.lock())
    }
}

/// The installed log, kept by the daemon for reloads.
pub struct Logging {
    filter: reload::Handle<EnvFilter, Registry>,
    output: SharedOutput,
}

/// The `tracing` filter for a LavinMQ log level (`notice` and `fatal` have no
/// `tracing` equivalent and map to `info` and `error`).
pub fn filter_for(level: &str) -> EnvFilter {
    let level = match level {
        "fatal" => "error",
        "notice" => "info",
        "none" => "off",
        other => other,
    };
    EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"))
}

/// Whether log lines get ANSI colours: only on stdout, only when it is a
/// terminal (not a pipe, a file or the journal), and never when `NO_COLOR`
/// is set to anything non-empty (<https://no-color.org>).
fn colours_wanted(to_stdout: bool, journal: bool, terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    to_stdout && !journal && terminal && no_color.is_none_or(|v| v.is_empty())
}

impl Logging {
    /// Installs the process's log: `level`, written to `file` (stdout when
    /// `None`) and to the in-memory tail.
    pub fn init(level: &str, file: Option<&Path>) -> Result<Logging, LoggingError> {
        let output = SharedOutput(Arc::new(Mutex::new(open(file)?)));
        let (filter, handle) = reload::Layer::new(filter_for(level));
        let journal = file.is_none() && stdout_is_journal();
        let style = LineStyle {
            ansi: colours_wanted(
                file.is_none(),
                journal,
                std::io::IsTerminal::is_terminal(&std::io::stdout()),
                std::env::var_os("NO_COLOR").as_deref(),
            ),
            time: !journal,
            priority: journal,
        };
        tracing_subscriber::registry()
            .with(filter)
            .with(crate::log_tail::layer())
            .with(LineLayer::new(output.clone(), style))
            .init();
        Ok(Logging { filter: handle, output })
    }

    /// Applies a reloaded `log_level` and reopens the log file (or switches
    /// between stdout and a file). The old output stays when the new one
    /// cannot be opened.
    pub fn reload(&mut self, level: &str, file: Option<&Path>) -> Result<(), LoggingError> {
        let output = open(file)?;
        *self.output.0.lock() = output;
        self.filter
            .reload(filter_for(level))
            .map_err(|e| LoggingError::Level(e.to_string()))
    }
}

fn open(file: Option<&Path>) -> Result<Output, LoggingError> {
    match file {
        None => Ok(Output::Stdout),
        Some(path) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(Output::File)
            .map_err(|source| LoggingError::LogFile {
                path: path.to_path_buf(),
                source,
            }),
    }
}

/// True when `JOURNAL_STREAM` (`<device>:<inode>`) names stdout: systemd
/// connected stdout to the journal.
fn stdout_is_journal() -> bool {
    let Some((dev, ino)) = std::env::var("JOURNAL_STREAM")
        .ok()
        .and_then(|v| v.split_once(':').map(|(d, i)| (d.parse::<u64>(), i.parse::<u64>())))
        .and_then(|(d, i)| Some((d.ok()?, i.ok()?)))
    else {
        return false;
    };
    rustix::fs::fstat(std::io::stdout()).is_ok_and(|st| st.st_dev == dev && st.st_ino == ino)
}

#[cfg(test)]
mod tests {
    use super::colours_wanted;
    use std::ffi::OsStr;

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(colours_wanted(true, false, true, None));
        assert!(colours_wanted(true, false, true, Some(OsStr::new(""))));
        assert!(!colours_wanted(true, false, false, None), "a pipe or a file");
        assert!(!colours_wanted(true, false, true, Some(OsStr::new("1"))), "NO_COLOR");
        assert!(!colours_wanted(true, true, true, None), "the journal");
        assert!(!colours_wanted(false, false, true, None), "a log file");
    }
}
