//! Publishing: a declared publisher appends messages to one stream; each
//! publishing id is confirmed once the message is on disk (after the group
//! commit that covers it, and, clustered, the in-sync followers), or
//! refused with a code. A publisher with a name (its reference) is
//! deduplicated: an id not above the last one stored for that name is
//! confirmed without being stored again, across reconnects and restarts.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;

use super::codec::command::Published as PublishedEntry;
use super::codec::sub_batch::Entry;
use super::codec::{chunk, code, reply};
use crate::amqp1::message::Received;
use crate::core::message::Message;
use crate::core::queue::{PlainBatch, Published, Queue};
use crate::core::stream_clients::PublisherStats;
use crate::store::{GroupSync, SyncWaiter};
use crate::transport::outbox::Outbox;
use crate::wire::properties::delivery_mode_only;
use crate::wire::{BasicProperties, FieldTable, FieldValue, ShortStr};

/// The header the filter value of a message is kept in, which the stream
/// filters of every protocol match.
const FILTER_VALUE_HEADER: &str = "x-stream-filter-value";

/// A declared publisher.
pub struct Publisher {
    /// The stream it writes to.
    pub queue: Arc<Queue>,
    /// Its name, for deduplication.
    pub reference: Option<String>,
    /// Its listing and counters in the management API.
    pub stats: Arc<PublisherStats>,
}

/// Confirms and replies held until the sync that covers them, sent in the
/// order they were queued.
pub struct HeldReplies {
    outbox: Arc<Outbox>,
    state: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    next_token: u64,
    /// (token, publisher id, publishing ids) or (token, a written reply).
    waiting: VecDeque<(u64, Pending)>,
}

enum Pending {
    Confirms(Arc<PublisherStats>, Vec<u64>),
    Reply(BytesMut),
}

impl HeldReplies {
    /// Replies for the connection behind `outbox`.
    pub fn new(outbox: Arc<Outbox>) -> Arc<Self> {
        Arc::new(HeldReplies {
            outbox,
            state: Mutex::default(),
        })
    }

    fn hold(self: &Arc<Self>, sync: &GroupSync, pending: Pending) {
        let token = {
            let mut s = self.state.lock();
            s.next_token += 1;
            let t = s.next_token;
            s.waiting.push_back((t, pending));
            t
        };
        let waiter: Arc<dyn SyncWaiter> = self.clone();
        sync.register(&waiter, token);
    }

    /// Confirms `ids` of `publisher_id` once synced.
    pub fn confirm_after_sync(self: &Arc<Self>, sync: &GroupSync, publisher: &Arc<PublisherStats>, ids: Vec<u64>) {
        self.hold(sync, Pending::Confirms(publisher.clone(), ids));
    }

    /// Sends the reply `write` produces once synced (a definition change).
    pub fn reply_after_sync(self: &Arc<Self>, sync: &GroupSync, write: impl FnOnce(&mut BytesMut)) {
        let mut b = BytesMut::new();
        write(&mut b);
        self.hold(sync, Pending::Reply(b));
    }

    /// True while something waits for a sync: later replies must queue
    /// behind it to keep their order.
    pub fn busy(&self) -> bool {
        !self.state.lock().waiting.is_empty()
    }
}

impl SyncWaiter for HeldReplies {
    fn synced(&self, token: u64, ok: bool) {
        let mut ready = Vec::new();
        {
            let mut s = self.state.lock();
            while s.waiting.front().is_some_and(|(t, _)| *t <= token) {
                if let Some((_, p)) = s.waiting.pop_front() {
                    ready.push(p);
                }
            }
        }
        if ready.is_empty() {
            return;
        }
        self.outbox.send(|b| {
            for p in ready {
                match p {
                    Pending::Confirms(p, ids) if ok => {
                        p.confirmed.fetch_add(ids.len() as u64, Ordering::Relaxed);
                        reply::publish_confirm(b, p.publisher_id, &ids);
                    }
                    Pending::Confirms(p, ids) => {
                        p.errored.fetch_add(ids.len() as u64, Ordering::Relaxed);
                        let errors: Vec<(u64, u16)> = ids.iter().map(|id| (*id, code::INTERNAL_ERROR)).collect();
                        reply::publish_error(b, p.publisher_id, &errors);
                    }
                    Pending::Reply(bytes) => b.extend_from_slice(&bytes),
                }
            }
        });
    }
}

/// What became of the messages of one publish frame.
#[derive(Default)]
pub struct Outcome {
    /// Stored (or duplicates): confirmed.
    pub confirmed: Vec<u64>,
    /// Refused, with their codes.
    pub refused: Vec<(u64, u16)>,
    /// The stream got its first ready message: wake its readers.
    pub woke: bool,
}

impl Publisher {
    /// Stores the messages of a publish frame on the publisher's stream.
    pub fn publish(&self, messages: Vec<PublishedEntry>, scratch: &mut BytesMut, set_timestamp: bool) -> Outcome {
        self.stats.published.fetch_add(messages.len() as u64, Ordering::Relaxed);
        if !set_timestamp && let Some(out) = self.publish_as_run(&messages) {
            return out;
        }
        let mut out = Outcome::default();
        let deleted = self.queue.lock().deleted;
        for m in messages {
            let id = m.publishing_id;
            if deleted {
                out.refused.push((id, code::STREAM_DOES_NOT_EXIST));
                continue;
            }
            let filter = m.filter_value.as_deref();
            let convert = |body| to_message(&self.queue.name, body, filter, set_timestamp);
            // A lone message is stored without collecting it into a batch.
            let stored = match &m.entry {
                Entry::Single(body) => Ok(self.store(std::slice::from_ref(&convert(body)), scratch, id)),
                Entry::Batch(bodies) => Ok(self.store(&bodies.iter().map(convert).collect::<Vec<_>>(), scratch, id)),
                Entry::Unreadable(why) => Err(why.to_string()),
            };
            let stored = match stored {
                Ok(stored) => stored,
                Err(e) => {
                    tracing::info!("publish refused: {e}");
                    out.refused.push((id, code::PRECONDITION_FAILED));
                    continue;
                }
            };
            match stored {
                Ok(Some(p)) if p.rejected => out.refused.push((id, code::PRECONDITION_FAILED)),
                Ok(Some(p)) => {
                    out.woke |= p.woke;
                    out.confirmed.push(id);
                }
                // A duplicate: confirmed, not stored again.
                Ok(None) => out.confirmed.push(id),
                Err(e) => {
                    tracing::error!("publish failed: {e}");
                    out.refused.push((id, code::INTERNAL_ERROR));
                }
            }
        }
        self.stats
            .errored
            .fetch_add(out.refused.len() as u64, Ordering::Relaxed);
        out
    }

    /// Stores a frame of plain messages (each a body only, with no filter
    /// value), the common case, as one run: under one queue lock, with the
    /// chunk subscribers are sent made once (see
    /// [`crate::core::stream_runs`]). `None` when the frame holds anything
    /// else, or the queue wants it message by message.
    fn publish_as_run(&self, messages: &[PublishedEntry]) -> Option<Outcome> {
        if messages.is_empty() || messages.len() > usize::from(u16::MAX) {
            return None;
        }
        let mut bodies = Vec::with_capacity(messages.len());
        let mut data_len = 0;
        let (mut lowest, mut highest) = (u64::MAX, 0);
        for m in messages {
            let Entry::Single(raw) = &m.entry else {
                return None;
            };
            if m.filter_value.is_some() {
                return None;
            }
            bodies.push(data_section_body(raw)?);
            data_len += 4 + raw.len();
            lowest = lowest.min(m.publishing_id);
            highest = highest.max(m.publishing_id);
        }
        let batch = PlainBatch {
            timestamp: Message::coarse_now_ms(),
            routing_key: &self.queue.name,
            properties: delivery_mode_only(2),
            bodies: &bodies,
        };
        let dedup = self.reference.as_deref().map(|r| (r, lowest, highest));
        let raws = messages.iter().filter_map(|m| match &m.entry {
            Entry::Single(raw) => Some(&raw[..]),
            _ => None,
        });
        let encode = |first| chunk::encode_chunk(first, batch.timestamp, raws, data_len);
        let ids = || messages.iter().map(|m| m.publishing_id);
        let mut out = Outcome::default();
        match self.queue.publish_run(&batch, dedup, encode) {
            Ok(None) => return None,
            Ok(Some(p)) if p.rejected => out.refused = ids().map(|id| (id, code::PRECONDITION_FAILED)).collect(),
            Ok(Some(p)) => {
                out.woke = p.woke;
                out.confirmed = ids().collect();
            }
            Err(e) => {
                tracing::error!("publish failed: {e}");
                out.refused = ids().map(|id| (id, code::INTERNAL_ERROR)).collect();
            }
        }
        self.stats
            .errored
            .fetch_add(out.refused.len() as u64, Ordering::Relaxed);
        Some(out)
    }

    /// Stores the messages of publishing id `id`, deduplicated when the
    /// publisher has a name; `None` for a duplicate.
    fn store(&self, msgs: &[Message], scratch: &mut BytesMut, id: u64) -> crate::core::Result<Option<Published>> {
        match &self.reference {
            Some(r) => self.queue.publish_deduplicated(msgs, scratch, r, id),
            None => self.queue.publish_all(msgs, scratch).map(Some),
        }
    }
}

/// The body of a message that is exactly one data section (what the stream
/// clients send for a message without properties), without decoding it.
pub fn only_data_section(m: &bytes::Bytes) -> Option<bytes::Bytes> {
    let body = data_section_body(m)?;
    Some(m.slice_ref(body))
}

/// [`only_data_section`] on a slice.
fn data_section_body(m: &[u8]) -> Option<&[u8]> {
    let (start, len) = match m.get(..4)? {
        [0x00, 0x53, 0x75, 0xa0] => (5, usize::from(*m.get(4)?)),
        [0x00, 0x53, 0x75, 0xb0] => (8, u32::from_be_bytes(m.get(4..8)?.try_into().ok()?) as usize),
        _ => return None,
    };
    (start + len == m.len()).then(|| &m[start..])
}

/// The core message for an AMQP 1.0 message that is only `body`: durable,
/// as an AMQP 1.0 message without a header is.
fn plain_message(stream: &str, body: Bytes, timestamp: i64) -> Message {
    Message {
        timestamp,
        exchange: ShortStr::from(""),
        routing_key: ShortStr::from(stream),
        properties: Box::new(crate::wire::BasicProperties {
            delivery_mode: Some(2),
            ..Default::default()
        }),
        raw_properties: Some(Bytes::from_static(delivery_mode_only(2))),
        body,
    }
}

/// The header that keeps the bytes a stream publisher sent for a message
/// that is not a lone data section, first in the table (a private header:
/// other protocols leave it out). Stream consumers get exactly those bytes
/// back, as RabbitMQ hands them what was published: AMQP 1.0 messages with
/// sections the broker would encode differently (a header or annotations
/// added, a list's trailing nulls dropped), and payloads that are not AMQP
/// 1.0 at all, which RabbitMQ stores as well. Such a message's body is
/// stored twice (here and as the body other protocols read); clients send
/// most messages as a lone data section, which is stored once and sent back
/// as it came.
pub const PAYLOAD_HEADER: &str = "x-amqp-1.0-stream-payload";

/// The payload a stream publisher sent for a message stored with `props`,
/// when it was kept (see [`PAYLOAD_HEADER`]).
pub fn original_payload(props: &BasicProperties) -> Option<&Bytes> {
    match props.headers.as_ref()?.0.first()? {
        (k, FieldValue::ByteArray(b)) if k.as_str() == PAYLOAD_HEADER => Some(b),
        _ => None,
    }
}

/// Whether `props` are those of a lone data section published with a filter
/// value: such a message goes back to stream consumers as the data section
/// it was, the filter value being no part of it.
pub fn body_with_filter_value(props: &BasicProperties) -> bool {
    let filter_only = props
        .headers
        .as_ref()
        .is_some_and(|h| h.0.len() == 1 && h.0[0].0.as_str() == FILTER_VALUE_HEADER);
    filter_only
        && *props
            == BasicProperties {
                delivery_mode: Some(2),
                headers: props.headers.clone(),
                ..Default::default()
            }
}

/// The core message for a published payload, its filter value kept in a
/// header. An AMQP 1.0 message is read into the core's properties and body;
/// any other payload becomes the body of a durable message, for the other
/// protocols to read as bytes.
fn to_message(stream: &str, message: &Bytes, filter_value: Option<&str>, set_timestamp: bool) -> Message {
    // Most messages are a body only: stored without decoding or re-encoding.
    let lone_body = only_data_section(message);
    let has_sections = lone_body.is_none();
    if filter_value.is_none()
        && !set_timestamp
        && let Some(body) = lone_body
    {
        return plain_message(stream, body, Message::coarse_now_ms());
    }
    let (mut properties, body) = match Received::parse(message) {
        Ok(received) => (received.properties, received.body),
        Err(e) => {
            tracing::debug!("payload kept as published (not an AMQP 1.0 message: {e})");
            let durable = BasicProperties {
                delivery_mode: Some(2),
                ..Default::default()
            };
            (Box::new(durable), message.clone())
        }
    };
    let headers = properties.headers.get_or_insert_with(FieldTable::new);
    if has_sections {
        headers.0.insert(
            0,
            (ShortStr::from(PAYLOAD_HEADER), FieldValue::ByteArray(message.clone())),
        );
    }
    if let Some(v) = filter_value {
        headers.insert(FILTER_VALUE_HEADER, FieldValue::from(v));
    }
    if headers.is_empty() {
        properties.headers = None;
    }
    if set_timestamp && properties.timestamp.is_none() {
        properties.timestamp = Some((Message::now_ms() / 1000) as u64);
    }
    Message {
        timestamp: Message::coarse_now_ms(),
        exchange: ShortStr::from(""),
        routing_key: ShortStr::from(stream),
        properties,
        raw_properties: None,
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_data_section_is_taken_as_the_body() {
        let short = bytes::Bytes::from_static(&[0x00, 0x53, 0x75, 0xa0, 2, b'h', b'i']);
        assert_eq!(only_data_section(&short).as_deref(), Some(&b"hi"[..]));
        let long = bytes::Bytes::from_static(&[0x00, 0x53, 0x75, 0xb0, 0, 0, 0, 1, b'x']);
        assert_eq!(only_data_section(&long).as_deref(), Some(&b"x"[..]));
        // Anything more (a properties section, a trailing byte) is decoded.
        let more = bytes::Bytes::from_static(&[0x00, 0x53, 0x75, 0xa0, 1, b'x', 0]);
        assert_eq!(only_data_section(&more), None);
        let props = bytes::Bytes::from_static(&[0x00, 0x53, 0x73, 0x45]);
        assert_eq!(only_data_section(&props), None);
        // The stored properties are those the full decoding gives.
        let decoded = Received::parse(&short).unwrap();
        let mut enc = BytesMut::new();
        decoded.properties.encode(&mut enc).unwrap();
        assert_eq!(&enc[..], delivery_mode_only(2));
    }

    #[test]
    fn payloads_other_than_a_lone_data_section_are_kept_as_published() {
        // Not AMQP 1.0: the payload is the body, and is kept for stream consumers.
        let opaque = Bytes::from_static(b"not an AMQP 1.0 message");
        let m = to_message("s", &opaque, None, false);
        assert_eq!(m.body, opaque);
        assert!(m.properties.is_persistent());
        assert_eq!(original_payload(&m.properties), Some(&opaque));
        // Sections other than the body: read for other protocols, kept first.
        let mut sections = BytesMut::from(&[0x00, 0x53, 0x73, 0xc0, 0x03, 0x01, 0xa1, 0x00][..]);
        sections.extend_from_slice(&[0x00, 0x53, 0x75, 0xa0, 0x02, b'h', b'i']);
        let sections = sections.freeze();
        let m = to_message("s", &sections, Some("f"), false);
        assert_eq!(&m.body[..], b"hi");
        assert_eq!(original_payload(&m.properties), Some(&sections));
        let headers = m.properties.headers.as_ref().unwrap();
        assert!(crate::wire::properties::is_private_header(headers.0[0].0.as_str()));
        assert!(headers.get(FILTER_VALUE_HEADER).is_some());
        assert!(!body_with_filter_value(&m.properties));
        // A lone data section is not kept twice, with or without a filter value.
        let lone = Bytes::from_static(&[0x00, 0x53, 0x75, 0xa0, 2, b'h', b'i']);
        let m = to_message("s", &lone, Some("f"), false);
        assert_eq!(original_payload(&m.properties), None);
        assert!(body_with_filter_value(&m.properties));
        assert!(!body_with_filter_value(
            &to_message("s", &sections, None, false).properties
        ));
    }
}
