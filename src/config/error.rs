//! Error type for configuration loading.

use std::path::PathBuf;

/// Everything that can make loading the broker configuration fail.
///
/// The broker refuses to start on any of these, so each variant carries
/// enough context (file, section, key, variable, value) for an operator to
/// find and fix the offending setting without reading the source.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Command-line parsing stopped: a bad flag or value, or a request for
    /// `--help` / `--version`. The caller should call [`clap::Error::exit`],
    /// which prints the message (or help text) and exits with the right code.
    #[error(transparent)]
    Clap(#[from] clap::Error),

    /// The file named with `-c/--config` does not exist or is not a file.
    #[error("config file '{}' not found or not a regular file", path.display())]
    ConfigFileNotFound {
        /// The path that was given.
        path: PathBuf,
    },

    /// The config file exists but could not be read.
    #[error("failed to read config file '{}': {source}", path.display())]
    Io {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },

    /// The config file is not syntactically valid INI.
    #[error("invalid ini syntax at line {line}, column {column}: {message}")]
    IniSyntax {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What the INI parser complained about.
        message: String,
    },

    /// A `key = value` line appears before the first `[section]` header.
    #[error("key '{key}' is outside of any section")]
    KeyOutsideSection {
        /// The key that has no section.
        key: String,
    },

    /// A section that LavinMQ does not know, such as `[replication]`.
    #[error("unrecognized config section [{section}]{hint}")]
    UnknownSection {
        /// The section name, without brackets.
        section: String,
        /// Extra advice (possibly empty), e.g. which section replaced it.
        hint: &'static str,
    },

    /// A known key in the config file has a value of the wrong type or range.
    #[error("invalid value '{value}' for '{key}' in section [{section}]: expected {expected}")]
    InvalidIniValue {
        /// The section name, without brackets.
        section: String,
        /// The key whose value is bad.
        key: String,
        /// The value as written.
        value: String,
        /// A human description of what would have been accepted.
        expected: &'static str,
    },

    /// An environment variable has a value of the wrong type or range.
    #[error("invalid value '{value}' for environment variable {var}: expected {expected}")]
    InvalidEnvValue {
        /// The variable name.
        var: &'static str,
        /// The value as set.
        value: String,
        /// A human description of what would have been accepted.
        expected: &'static str,
    },

    /// The merged configuration breaks a rule that spans sources, such as
    /// `frame_max` being below the AMQP minimum.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The setting name, as used in the ini file.
        field: &'static str,
        /// Why the value is rejected.
        reason: String,
    },
}
