//! A writer for the Prometheus text exposition format, version 0.0.4: `# HELP`
//! and `# TYPE` lines followed by `name{label="value",...} value` samples.
//!
//! Why not the `prometheus` crate: its registry holds one metric object per
//! labelled series, so exporting per-queue, per-connection and per-channel
//! figures means either keeping a series registered for every object as it
//! comes and goes (and unregistering it reliably), or building a fresh
//! registry on every scrape, which allocates a descriptor, a label vector and
//! a value cell per sample. With tens of thousands of queues either costs far
//! more than the text itself, and the broker already keeps every figure in
//! its own counters. Here a scrape reads those counters and writes straight
//! into one growing `String`: a sample costs its bytes and nothing else.
//!
//! What keeps the output valid 0.0.4 text: metric names are fixed strings
//! behind a prefix checked by [`validate_prefix`]; help text and label values
//! are escaped as the format requires; each family's `# HELP` and `# TYPE`
//! come once, before its samples (the caller writes a family's samples
//! together); values are integers or floats in the format's syntax (`NaN`,
//! `+Inf`, `-Inf`).

use std::fmt::Write;

/// The content type of the format this module writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Longest metric-name prefix a scrape may ask for (LavinMQ's limit).
pub const MAX_PREFIX_LEN: usize = 20;

/// The Prometheus type of a metric family, written on its `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// A value that can go up and down.
    Gauge,
    /// A value that only grows (until the process restarts).
    Counter,
}

impl MetricType {
    fn as_str(self) -> &'static str {
        match self {
            MetricType::Gauge => "gauge",
            MetricType::Counter => "counter",
        }
    }
}

/// Why a requested metric-name prefix cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// Longer than [`MAX_PREFIX_LEN`] bytes.
    #[error("Prefix too long (max {MAX_PREFIX_LEN} characters)")]
    TooLong,
    /// Contains a character a metric name may not have, or starts with a digit.
    #[error("Invalid prefix: only letters, digits, '_' and ':' are allowed, and no leading digit")]
    InvalidCharacter,
}

/// Checks that `prefix` keeps every metric name valid, so that a query
/// parameter can never inject lines or break the output.
pub fn validate_prefix(prefix: &str) -> Result<(), PrefixError> {
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(PrefixError::TooLong);
    }
    let valid_chars = prefix
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':');
    if !valid_chars || prefix.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(PrefixError::InvalidCharacter);
    }
    Ok(())
}

/// A number that can be written as a sample value.
pub trait SampleValue: Copy {
    /// Appends the value in the exposition format's number syntax.
    fn write_to(self, out: &mut String);
}

impl SampleValue for u64 {
    fn write_to(self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl SampleValue for usize {
    fn write_to(self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl SampleValue for u32 {
    fn write_to(self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl SampleValue for i64 {
    fn write_to(self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl SampleValue for f64 {
    fn write_to(self, out: &mut String) {
        if self.is_nan() {
            out.push_str("NaN");
        } else if self.is_infinite() {
            out.push_str(if self > 0.0 { "+Inf" } else { "-Inf" });
        } else {
            // Rust prints finite floats without exponents, which the format accepts.
            let _ = write!(out, "{self}");
        }
    }
}

/// Builds one exposition document. Every metric name is written as
/// `<prefix>_<name>`; the caller writes a family's header once and then all
/// of its samples, as the format requires.
pub struct TextWriter<'p> {
    out: String,
    prefix: &'p str,
}

impl<'p> TextWriter<'p> {
    /// A writer whose metric names start with `prefix` (which the caller has
    /// checked with [`validate_prefix`]), with room for `capacity` bytes.
    pub fn new(prefix: &'p str, capacity: usize) -> Self {
        TextWriter {
            out: String::with_capacity(capacity),
            prefix,
        }
    }

    fn name(&mut self, name: &str) {
        self.out.push_str(self.prefix);
        self.out.push('_');
        self.out.push_str(name);
    }

    /// Writes the `# HELP` and `# TYPE` lines that start family `name`.
    pub fn header(&mut self, name: &str, kind: MetricType, help: &str) {
        self.out.push_str("# HELP ");
        self.name(name);
        self.out.push(' ');
        escape_help(&mut self.out, help);
        self.out.push_str("\n# TYPE ");
        self.name(name);
        self.out.push(' ');
        self.out.push_str(kind.as_str());
        self.out.push('\n');
    }

    /// Writes one sample of family `name` with `labels` (none: no braces).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl SampleValue) {
        self.name(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(key);
                self.out.push_str("=\"");
                escape_label_value(&mut self.out, val);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        value.write_to(&mut self.out);
        self.out.push('\n');
    }

    /// Writes a family that has exactly one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: MetricType, help: &str, value: impl SampleValue) {
        self.header(name, kind, help);
        self.sample(name, &[], value);
    }

    /// Bytes reserved for the document so far.
    pub fn capacity(&self) -> usize {
        self.out.capacity()
    }

    /// The document written so far.
    pub fn finish(self) -> String {
        self.out
    }
}

/// Escapes a label value: backslash, double quote and line feed.
fn escape_label_value(out: &mut String, value: &str) {
    if !value.contains(['\\', '"', '\n']) {
        out.push_str(value);
        return;
    }
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Escapes help text: backslash and line feed.
fn escape_help(out: &mut String, help: &str) {
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_header_and_samples() {
        let mut w = TextWriter::new("lavinmq", 0);
        w.header("queue_messages", MetricType::Gauge, "Messages\\now");
        w.sample("queue_messages", &[("queue", "q"), ("vhost", "/")], 3u64);
        w.single("uptime", MetricType::Counter, "Seconds", 7u64);
        assert_eq!(
            w.finish(),
            "# HELP lavinmq_queue_messages Messages\\\\now\n\
             # TYPE lavinmq_queue_messages gauge\n\
             lavinmq_queue_messages{queue=\"q\",vhost=\"/\"} 3\n\
             # HELP lavinmq_uptime Seconds\n\
             # TYPE lavinmq_uptime counter\n\
             lavinmq_uptime 7\n"
        );
    }

    #[test]
    fn escapes_label_values() {
        let mut w = TextWriter::new("p", 0);
        w.sample("m", &[("queue", "a\"b\\c\nd")], 1u64);
        assert_eq!(w.finish(), "p_m{queue=\"a\\\"b\\\\c\\nd\"} 1\n");
    }

    #[test]
    fn writes_special_floats() {
        let mut w = TextWriter::new("p", 0);
        w.sample("a", &[], f64::NAN);
        w.sample("b", &[], f64::INFINITY);
        w.sample("c", &[], f64::NEG_INFINITY);
        w.sample("d", &[], 0.25f64);
        assert_eq!(w.finish(), "p_a NaN\np_b +Inf\np_c -Inf\np_d 0.25\n");
    }

    #[test]
    fn prefixes_are_checked() {
        assert_eq!(validate_prefix("lavinmq"), Ok(()));
        assert_eq!(validate_prefix("my_app:x1"), Ok(()));
        assert_eq!(validate_prefix(""), Ok(()));
        assert_eq!(validate_prefix("abcdefghijklmnopqrstu"), Err(PrefixError::TooLong));
        assert_eq!(validate_prefix("a b"), Err(PrefixError::InvalidCharacter));
        assert_eq!(validate_prefix("a\n"), Err(PrefixError::InvalidCharacter));
        assert_eq!(validate_prefix("1abc"), Err(PrefixError::InvalidCharacter));
    }
}
