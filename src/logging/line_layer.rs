//! Writes each log event as one line, after the fields of the spans it is in:
//! `2026-01-01T12:00:00.000000Z  INFO amqp{client=10.0.0.1:5000}:conn{vhost=/ user=guest}: message key=value`.
//!
//! `tracing_subscriber`'s own formatting layer keeps each span's formatted
//! fields in the registry's per-span extension map, and the registry keeps
//! that map's allocation with the span's slot for good. The maps of a storm of
//! connections were allocated between the connections' buffers, so after
//! 10,000 connections closed their few hundred bytes each held 45 MB of
//! freed heap resident that no trim could return. This layer keeps span
//! fields in a table of its own instead and frees them when the span closes.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;

use parking_lot::Mutex;
use rustc_hash::FxBuildHasher;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::log_tail::LineVisitor;

/// How lines look.
#[derive(Debug, Clone, Copy)]
pub struct LineStyle {
    /// Colours (ANSI escapes) for a terminal.
    pub ansi: bool,
    /// A timestamp first (not for the journal, which adds its own).
    pub time: bool,
    /// The `<N>` syslog priority prefix journald reads.
    pub priority: bool,
}

/// The layer that writes log lines to `W`.
pub struct LineLayer<W> {
    writer: W,
    style: LineStyle,
    /// The formatted fields of each open span.
    spans: Mutex<HashMap<u64, Box<str>, FxBuildHasher>>,
}

impl<W> LineLayer<W> {
    /// Lines in `style`, written to `writer`.
    pub fn new(writer: W, style: LineStyle) -> LineLayer<W> {
        LineLayer {
            writer,
            style,
            spans: Mutex::new(HashMap::default()),
        }
    }
}

thread_local! {
    /// A thread's line being formatted: one buffer reused for every line.
    static LINE: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Formats fields as the line shows them.
fn fields_of(record: impl FnOnce(&mut LineVisitor<'_>)) -> String {
    let mut buf = String::new();
    record(&mut LineVisitor::new(&mut buf));
    buf
}

impl<S, W> Layer<S> for LineLayer<W>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + 'static,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        let fields = fields_of(|v| attrs.record(v));
        self.spans.lock().insert(id.into_u64(), fields.into_boxed_str());
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let added = fields_of(|v| values.record(v));
        if added.is_empty() {
            return;
        }
        let mut spans = self.spans.lock();
        if let Some(fields) = spans.get_mut(&id.into_u64()) {
            let mut joined = String::with_capacity(fields.len() + 1 + added.len());
            joined.push_str(fields);
            if !joined.is_empty() {
                joined.push(' ');
            }
            joined.push_str(&added);
            *fields = joined.into_boxed_str();
        }
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        let mut spans = self.spans.lock();
        spans.remove(&id.into_u64());
        // Gives the table back after a storm of connections has closed.
        if spans.capacity() > 64 && spans.len() < spans.capacity() / 4 {
            let keep = spans.len() * 2;
            spans.shrink_to(keep);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let write = |line: &mut String| {
            line.clear();
            self.format(event, &ctx, line);
            let _ = self.writer.make_writer().write_all(line.as_bytes());
        };
        // Formatting a field may log in turn: that inner event gets its own buffer.
        LINE.with(|cell| match cell.try_borrow_mut() {
            Ok(mut line) => write(&mut line),
            Err(_) => write(&mut String::new()),
        });
    }
}

impl<W> LineLayer<W> {
    fn format<S>(&self, event: &Event<'_>, ctx: &Context<'_, S>, line: &mut String)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let level = *event.metadata().level();
        let ansi = self.style.ansi;
        if self.style.priority {
            let _ = write!(line, "<{}>", syslog_priority(level));
        }
        if self.style.time {
            paint(line, ansi, DIM, |line| {
                let _ = SystemTime.format_time(&mut Writer::new(line));
            });
            line.push(' ');
        }
        paint(line, ansi, level_colour(level), |line| {
            let _ = write!(line, "{level:>5}");
        });
        line.push(' ');
        if let Some(scope) = ctx.event_scope(event) {
            let spans = self.spans.lock();
            let mut any = false;
            for span in scope.from_root() {
                paint(line, ansi, BOLD, |line| line.push_str(span.name()));
                match spans.get(&span.id().into_u64()) {
                    Some(fields) if !fields.is_empty() => {
                        let _ = write!(line, "{{{fields}}}");
                    }
                    _ => {}
                }
                line.push(':');
                any = true;
            }
            if any {
                line.push(' ');
            }
        }
        event.record(&mut LineVisitor::new(line));
        line.push('\n');
    }
}

const DIM: &str = "\x1b[2m";
const BOLD: &str = "\x1b[1m";

/// Writes what `body` writes, in `colour` when `ansi`.
fn paint(line: &mut String, ansi: bool, colour: &str, body: impl FnOnce(&mut String)) {
    if ansi {
        line.push_str(colour);
    }
    body(line);
    if ansi {
        line.push_str("\x1b[0m");
    }
}

fn level_colour(level: Level) -> &'static str {
    match level {
        Level::TRACE => "\x1b[35m",
        Level::DEBUG => "\x1b[34m",
        Level::INFO => "\x1b[32m",
        Level::WARN => "\x1b[33m",
        Level::ERROR => "\x1b[31m",
    }
}

/// The syslog priority journald reads from a line's `<N>` prefix.
fn syslog_priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// Collects written lines.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for &Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = &'a Lines;
        fn make_writer(&'a self) -> Self::Writer {
            self
        }
    }

    fn plain(priority: bool) -> LineStyle {
        LineStyle {
            ansi: false,
            time: false,
            priority,
        }
    }

    /// Lines carry the level, the spans from the outermost in with their
    /// fields, the message and the event's fields; a closed span's fields
    /// are gone from the table.
    #[test]
    fn lines_show_spans_message_and_fields() {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::registry().with(LineLayer::new(lines.clone(), plain(false)));
        let open_spans =
            || tracing::dispatcher::get_default(|d| d.downcast_ref::<LineLayer<Lines>>().map(|l| l.spans.lock().len()));
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("amqp", client = %"10.0.0.1:5000");
            let inner = tracing::info_span!(parent: &outer, "conn", vhost = %"/", user = "guest");
            inner.in_scope(|| tracing::warn!(queue = "q", "closed by {}", "peer"));
            let bare = tracing::info_span!("bare");
            bare.in_scope(|| tracing::info!("in a span without fields"));
            tracing::error!("outside");
            assert_eq!(open_spans(), Some(3));
            drop((inner, outer, bare));
            assert_eq!(open_spans(), Some(0));
        });
        let text = String::from_utf8(lines.0.lock().clone()).expect("utf-8");
        assert_eq!(
            text,
            " WARN amqp{client=10.0.0.1:5000}:conn{vhost=/ user=\"guest\"}: closed by peer queue=\"q\"\n \
             INFO bare: in a span without fields\n\
             ERROR outside\n"
        );
    }

    /// Journal lines start with the syslog priority; terminal lines are
    /// coloured and stamped.
    #[test]
    fn journal_and_terminal_styles() {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::registry().with(LineLayer::new(lines.clone(), plain(true)));
        tracing::subscriber::with_default(subscriber, || tracing::warn!("careful"));
        assert_eq!(String::from_utf8_lossy(&lines.0.lock()), "<4> WARN careful\n");

        let lines = Lines::default();
        let style = LineStyle {
            ansi: true,
            time: true,
            priority: false,
        };
        let subscriber = tracing_subscriber::registry().with(LineLayer::new(lines.clone(), style));
        tracing::subscriber::with_default(subscriber, || tracing::info!("hello"));
        let text = String::from_utf8_lossy(&lines.0.lock()).into_owned();
        assert!(text.starts_with("\x1b[2m20"), "{text:?}");
        assert!(text.ends_with("Z\x1b[0m \x1b[32m INFO\x1b[0m hello\n"), "{text:?}");
    }
}
