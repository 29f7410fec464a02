//! The broker's own log over the management API, as LavinMQ serves it to its
//! browser UI (administrators only):
//!
//! * `GET /api/livelog` — server-sent events (`text/event-stream`): first the
//!   kept lines newer than the `Last-Event-Id` request header (all of them
//!   without it), then each new line as it is logged. An event is
//!   `id: <id>` and `data: ["<severity>","<source>","<message>"]`; the id is
//!   the line's time in milliseconds since the Unix epoch, moved up by one
//!   when lines share a millisecond, so ids increase strictly and a browser
//!   reconnecting with `Last-Event-Id` gets exactly the lines it missed that
//!   are still kept. A reader too slow to keep up gets a comment line saying
//!   how many lines it lost and carries on; logging never waits for it.
//! * `GET /api/logs` — the kept lines as a `text/plain` download (`logs.txt`).
//!
//! Both read [`LogTail::global`], which the `lavinmq` binary feeds. In a
//! process that does not feed it the answers are the empty tail, and the
//! event stream ends at once rather than waiting for lines that cannot come.

use std::convert::Infallible;

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use futures_util::stream;
use tokio::sync::broadcast::error::RecvError;

use super::auth::Authed;
use super::error::ApiResult;
use crate::log_tail::{LogLine, LogTail};

/// Streams the log as server-sent events.
pub async fn livelog(user: Authed, headers: HeaderMap) -> ApiResult<Response> {
    user.require_admin()?;
    // The browser sends back an id it got from us; anything else reads as none.
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let tail = LogTail::global();
    let sub = tail.subscribe(after);
    let backlog = stream::iter(sub.backlog.into_iter().map(|l| Ok::<_, Infallible>(event(&l))));
    if !tail.is_installed() {
        return Ok(Sse::new(backlog).into_response());
    }
    let last = None;
    let live = stream::unfold((sub.live, last), |(mut rx, last)| async move {
        loop {
            match rx.recv().await {
                // The backlog and the channel do not overlap; the check keeps
                // it that way should that ever change.
                Ok(line) if last.is_some_and(|l| line.id <= l) => {}
                Ok(line) => return Some((Ok(event(&line)), (rx, Some(line.id)))),
                Err(RecvError::Lagged(n)) => {
                    let note = Event::default().comment(format!("{n} log lines skipped: the reader fell behind"));
                    return Some((Ok(note), (rx, last)));
                }
                Err(RecvError::Closed) => return None,
            }
        }
    });
    // Keep-alive comments let a vanished client be noticed and dropped.
    Ok(Sse::new(backlog.chain(live))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// One line as an event, in LavinMQ's form.
fn event(line: &LogLine) -> Event {
    let data = serde_json::json!([line.severity(), &*line.source, &*line.message]).to_string();
    Event::default().id(line.id.to_string()).data(data)
}

/// The kept lines as a text download.
pub async fn download(user: Authed) -> ApiResult<Response> {
    user.require_admin()?;
    let mut text = String::new();
    for line in LogTail::global().lines() {
        line.write_plain(&mut text);
    }
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            ),
            (
                header::CONTENT_DISPOSITION,
                HeaderValue::from_static("attachment; filename=logs.txt"),
            ),
        ],
        text,
    )
        .into_response())
}
