//! Parsing of the scalar value formats shared by the ini file, environment
//! variables and command-line flags, so all three accept the same spellings.

use std::str::FromStr;
use std::time::Duration;

/// Description of accepted boolean spellings, used in error messages.
pub(crate) const BOOL_EXPECTED: &str = "a boolean (true/false, yes/no, on/off, y/n, 1/0)";

/// Log levels LavinMQ understands (Crystal's `Log::Severity` names).
pub(crate) const LOG_LEVELS: &[&str] = &["trace", "debug", "info", "notice", "warn", "error", "fatal", "none"];

/// Description of accepted log levels, used in error messages.
pub(crate) const LOG_LEVEL_EXPECTED: &str = "one of trace, debug, info, notice, warn, error, fatal, none";

/// Consistent-hash algorithms: RabbitMQ's and LavinMQ's two.
pub(crate) const HASH_ALGORITHMS: &[&str] = &["rabbitmq", "ring", "jump"];

/// Description of accepted consistent-hash algorithms, used in error messages.
pub(crate) const HASH_ALGORITHM_EXPECTED: &str = "one of rabbitmq, ring, jump";

/// Parses a boolean the way LavinMQ documents it (case-insensitive).
/// Returns `None` for anything that is neither a true nor a false spelling,
/// so typos such as `sync = maybe` are reported instead of silently read as false.
pub(crate) fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" | "y" => Some(true),
        "0" | "false" | "no" | "off" | "n" => Some(false),
        _ => None,
    }
}

/// Normalises a log level to lower case, or `None` if it is not a known level.
pub(crate) fn parse_log_level(value: &str) -> Option<String> {
    let level = value.trim().to_ascii_lowercase();
    LOG_LEVELS.contains(&level.as_str()).then_some(level)
}

/// Normalises a consistent-hash algorithm name, or `None` if unknown.
pub(crate) fn parse_hash_algorithm(value: &str) -> Option<String> {
    let algo = value.trim().to_ascii_lowercase();
    HASH_ALGORITHMS.contains(&algo.as_str()).then_some(algo)
}

/// Integer types settings can have, each with a description of its range for
/// error messages.
pub(crate) trait IntValue: FromStr {
    /// What a valid value looks like, e.g. "an integer from 0 to 65535".
    const EXPECTED: &'static str;
}

impl IntValue for u16 {
    const EXPECTED: &'static str = "an integer from 0 to 65535";
}
impl IntValue for u32 {
    const EXPECTED: &'static str = "an integer from 0 to 4294967295";
}
impl IntValue for u64 {
    const EXPECTED: &'static str = "a non-negative integer";
}
impl IntValue for usize {
    const EXPECTED: &'static str = "a non-negative integer";
}

/// Description of a port setting that `-1` disables, used in error messages.
pub(crate) const PORT_OR_DISABLED_EXPECTED: &str = "-1 (disabled) or an integer from 0 to 65535";

/// Parses a port that `-1` disables (`Some(None)`), as LavinMQ's
/// `metrics_http_port`; `None` when the value is neither.
pub(crate) fn parse_port_or_disabled(value: &str) -> Option<Option<u16>> {
    match value.trim() {
        "-1" => Some(None),
        v => v.parse().ok().map(Some),
    }
}

/// Description of a duration in seconds, used in error messages.
pub(crate) const SECONDS_EXPECTED: &str = "a non-negative number of seconds, decimals allowed (e.g. 1.5)";

/// Parses a duration written as seconds with an optional decimal fraction
/// (`10`, `1.5`, `.25`), exactly rather than through a float so `0.1` is
/// 100 ms. Digits past nanoseconds are dropped; signs and exponents are
/// refused.
pub(crate) fn parse_seconds(value: &str) -> Option<Duration> {
    let value = value.trim();
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !all_digits(whole) || !all_digits(fraction) {
        return None;
    }
    let secs = if whole.is_empty() { 0 } else { whole.parse().ok()? };
    let nanos = fraction
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(9)
        .fold(0_u32, |n, digit| n * 10 + u32::from(digit - b'0'));
    Some(Duration::new(secs, nanos))
}

/// Parses an integer after trimming surrounding whitespace.
pub(crate) fn parse_int<T: IntValue>(value: &str) -> Option<T> {
    value.trim().parse().ok()
}

/// Clap value parser for `BOOL` flags, sharing the ini spellings.
pub(crate) fn bool_flag(value: &str) -> Result<bool, String> {
    parse_bool(value).ok_or_else(|| format!("expected {BOOL_EXPECTED}"))
}

/// Clap value parser for flags taking seconds, sharing the ini format.
pub(crate) fn seconds_flag(value: &str) -> Result<Duration, String> {
    parse_seconds(value).ok_or_else(|| format!("expected {SECONDS_EXPECTED}"))
}

/// Clap value parser for `--log-level`.
pub(crate) fn log_level_flag(value: &str) -> Result<String, String> {
    parse_log_level(value).ok_or_else(|| format!("expected {LOG_LEVEL_EXPECTED}"))
}
