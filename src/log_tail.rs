//! The tail of the broker's own log, kept in memory for the management API:
//! `GET /api/livelog` streams it to the browser UI and `GET /api/logs` offers
//! it as a download, as LavinMQ does.
//!
//! [`TailLayer`] is a `tracing_subscriber` layer: the `lavinmq` binary adds it
//! next to the formatting layer, so the tail holds exactly what the log
//! shows (the same level filter applies). Each event is formatted once, into
//! a per-thread scratch buffer, and kept as one shared string in a ring of the
//! last [`CAPACITY`] lines; live readers get the same string through a
//! `tokio::sync::broadcast` channel, which costs nothing when nobody listens
//! and drops lines for a reader that falls behind instead of ever blocking
//! the code that logs.
//!
//! A process that never adds the layer (the in-process test brokers, unless a
//! test adds it) has an empty tail; [`LogTail::is_installed`] says so, and the
//! endpoints then answer with the empty tail at once instead of waiting for
//! lines that cannot come.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;
use tokio::sync::broadcast;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Lines the ring keeps (LavinMQ keeps as many).
pub const CAPACITY: usize = 1024;

/// Lines a live reader may fall behind before it misses some.
const LIVE_BACKLOG: usize = 256;

/// One log line.
#[derive(Debug, Clone)]
pub struct LogLine {
    /// Strictly increasing: the time of the line in milliseconds since the
    /// Unix epoch, moved up by one when several lines share a millisecond. The
    /// browser UI reads it as the line's time; `Last-Event-Id` resumes after it.
    pub id: u64,
    /// Milliseconds since the Unix epoch when the line was logged.
    pub timestamp_ms: i64,
    /// Severity.
    pub level: Level,
    /// Where it was logged from (the `tracing` target).
    pub source: Cow<'static, str>,
    /// The message with its fields (`key=value`), as the log shows them.
    pub message: Arc<str>,
}

impl LogLine {
    /// The severity as LavinMQ names it in the live log (`info`, `warn`, …).
    pub fn severity(&self) -> &'static str {
        match self.level {
            Level::TRACE => "trace",
            Level::DEBUG => "debug",
            Level::INFO => "info",
            Level::WARN => "warn",
            Level::ERROR => "error",
        }
    }

    /// Appends the line as the log download has it:
    /// `2024-05-01T12:00:00.123Z [INFO] source - message` and a newline.
    pub fn write_plain(&self, out: &mut String) {
        write_utc(out, self.timestamp_ms);
        let _ = writeln!(
            out,
            " [{}] {} - {}",
            self.severity().to_ascii_uppercase(),
            self.source,
            self.message
        );
    }
}

/// Year, month and day of a count of days since 1970-01-01 (Howard
/// Hinnant's algorithm for the proleptic Gregorian calendar).
pub(crate) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Appends `ms` (since the Unix epoch) as an RFC 3339 UTC time with milliseconds.
fn write_utc(out: &mut String, ms: i64) {
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let secs = ms_of_day / 1000;
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        ms_of_day % 1000
    );
}

/// The ring of recent lines and the channel to live readers.
pub struct LogTail {
    inner: Mutex<Inner>,
    capacity: usize,
    installed: AtomicBool,
}

struct Inner {
    lines: VecDeque<LogLine>,
    last_id: u64,
    live: broadcast::Sender<LogLine>,
}

/// What a new live reader starts with: the kept lines it has not seen and
/// the channel the next ones arrive on.
pub struct Subscription {
    /// Kept lines newer than the id the reader had seen, oldest first.
    pub backlog: Vec<LogLine>,
    /// Every line logged after the backlog, in order.
    pub live: broadcast::Receiver<LogLine>,
}

static GLOBAL: LazyLock<Arc<LogTail>> = LazyLock::new(|| Arc::new(LogTail::new(CAPACITY)));

impl LogTail {
    /// An empty tail keeping the last `capacity` lines.
    pub fn new(capacity: usize) -> Self {
        let (live, _) = broadcast::channel(LIVE_BACKLOG);
        LogTail {
            inner: Mutex::new(Inner {
                lines: VecDeque::with_capacity(capacity),
                last_id: 0,
                live,
            }),
            capacity: capacity.max(1),
            installed: AtomicBool::new(false),
        }
    }

    /// The process's tail, which the management API serves.
    pub fn global() -> &'static Arc<LogTail> {
        &GLOBAL
    }

    /// A layer that records every event it sees into this tail.
    pub fn layer(self: &Arc<Self>) -> TailLayer {
        self.installed.store(true, Ordering::Release);
        TailLayer { tail: self.clone() }
    }

    /// True once a layer feeds this tail; until then it stays empty.
    pub fn is_installed(&self) -> bool {
        self.installed.load(Ordering::Acquire)
    }

    /// The kept lines, oldest first.
    pub fn lines(&self) -> Vec<LogLine> {
        self.inner.lock().lines.iter().cloned().collect()
    }

    /// Starts a live reader that has seen the lines up to id `after` (none
    /// when `None`). The backlog and the channel are taken together, so no
    /// line is missed or repeated between them.
    pub fn subscribe(&self, after: Option<u64>) -> Subscription {
        let inner = self.inner.lock();
        let backlog = inner
            .lines
            .iter()
            .filter(|l| after.is_none_or(|a| l.id > a))
            .cloned()
            .collect();
        Subscription {
            backlog,
            live: inner.live.subscribe(),
        }
    }

    /// Adds a line, dropping the oldest when the ring is full.
    pub fn push(&self, timestamp_ms: i64, level: Level, source: Cow<'static, str>, message: &str) {
        let message: Arc<str> = Arc::from(message);
        let mut inner = self.inner.lock();
        let id = u64::try_from(timestamp_ms).unwrap_or(0).max(inner.last_id + 1);
        inner.last_id = id;
        let line = LogLine {
            id,
            timestamp_ms,
            level,
            source,
            message,
        };
        if inner.lines.len() >= self.capacity {
            inner.lines.pop_front();
        }
        if inner.live.receiver_count() > 0 {
            // Never blocks: a reader that lags behind loses the oldest lines.
            let _ = inner.live.send(line.clone());
        }
        inner.lines.push_back(line);
    }
}

/// The `tracing_subscriber` layer feeding a [`LogTail`].
pub struct TailLayer {
    tail: Arc<LogTail>,
}

/// The layer feeding the process's tail ([`LogTail::global`]).
pub fn layer() -> TailLayer {
    LogTail::global().layer()
}

thread_local! {
    /// Where events are formatted, reused so that a line costs one allocation.
    static SCRATCH: RefCell<String> = const { RefCell::new(String::new()) };
}

impl<S: Subscriber> Layer<S> for TailLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let meta = event.metadata();
        let record = |buf: &mut String| {
            buf.clear();
            let mut v = LineVisitor::new(buf);
            event.record(&mut v);
            let source = match v.log_target {
                Some(t) => Cow::Owned(t),
                None => Cow::Borrowed(meta.target()),
            };
            self.tail.push(now, *meta.level(), source, buf);
        };
        // Formatting a field may log in turn: that inner event gets its own buffer.
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buf) => record(&mut buf),
            Err(_) => record(&mut String::new()),
        });
    }
}

/// Writes an event's or a span's fields as the log shows them: the message
/// as it comes, the others as `key=value`, separated by spaces. Events
/// bridged from the `log` crate carry their target in `log.target`, which
/// becomes the source.
pub(crate) struct LineVisitor<'a> {
    buf: &'a mut String,
    /// Where the fields start in `buf`.
    start: usize,
    log_target: Option<String>,
}

impl<'a> LineVisitor<'a> {
    /// Appends to `buf`.
    pub(crate) fn new(buf: &'a mut String) -> LineVisitor<'a> {
        let start = buf.len();
        LineVisitor {
            buf,
            start,
            log_target: None,
        }
    }

    fn separate(&mut self) {
        if self.buf.len() > self.start {
            self.buf.push(' ');
        }
    }
}

impl Visit for LineVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => {
                self.separate();
                self.buf.push_str(value);
            }
            "log.target" => self.log_target = Some(value.to_string()),
            name if name.starts_with("log.") => {}
            name => {
                self.separate();
                let _ = write!(self.buf, "{name}={value:?}");
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => {
                self.separate();
                let _ = write!(self.buf, "{value:?}");
            }
            name if name.starts_with("log.") => {}
            name => {
                self.separate();
                let _ = write!(self.buf, "{name}={value:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    fn tail_of(capacity: usize, f: impl FnOnce()) -> Arc<LogTail> {
        let tail = Arc::new(LogTail::new(capacity));
        let subscriber = tracing_subscriber::registry().with(tail.layer());
        tracing::subscriber::with_default(subscriber, f);
        tail
    }

    #[test]
    fn keeps_the_last_lines_with_increasing_ids() {
        let tail = tail_of(3, || {
            for i in 0..5 {
                tracing::info!(queue = "q", "line {i}");
            }
        });
        let lines = tail.lines();
        let messages: Vec<&str> = lines.iter().map(|l| &*l.message).collect();
        assert_eq!(
            messages,
            ["line 2 queue=\"q\"", "line 3 queue=\"q\"", "line 4 queue=\"q\""]
        );
        assert!(lines.windows(2).all(|w| w[0].id < w[1].id));
        assert_eq!(lines[0].severity(), "info");
        assert_eq!(lines[0].source, module_path!());
    }

    #[test]
    fn subscribers_get_backlog_after_an_id_then_live_lines() {
        let tail = Arc::new(LogTail::new(10));
        let subscriber = tracing_subscriber::registry().with(tail.layer());
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!("one");
            tracing::warn!("two");
            let first = tail.lines()[0].id;
            let mut sub = tail.subscribe(Some(first));
            assert_eq!(sub.backlog.len(), 1);
            assert_eq!(&*sub.backlog[0].message, "two");
            tracing::error!("three");
            let live = sub.live.try_recv().expect("a live line");
            assert_eq!((&*live.message, live.severity()), ("three", "error"));
        });
    }

    #[test]
    fn a_lagging_reader_loses_lines_instead_of_blocking() {
        let tail = Arc::new(LogTail::new(4));
        let mut sub = tail.subscribe(None);
        for i in 0..LIVE_BACKLOG + 10 {
            tail.push(0, Level::INFO, Cow::Borrowed("t"), &format!("{i}"));
        }
        assert!(matches!(
            sub.live.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(_))
        ));
        assert_eq!(tail.lines().len(), 4);
    }

    #[test]
    fn plain_lines_carry_utc_time_level_source_and_message() {
        let line = LogLine {
            id: 1,
            timestamp_ms: 1_714_564_800_123,
            level: Level::WARN,
            source: Cow::Borrowed("lavinmq::amqp"),
            message: Arc::from("hello"),
        };
        let mut out = String::new();
        line.write_plain(&mut out);
        assert_eq!(out, "2024-05-01T12:00:00.123Z [WARN] lavinmq::amqp - hello\n");
        out.clear();
        write_utc(&mut out, 0);
        assert_eq!(out, "1970-01-01T00:00:00.000Z");
    }
}
