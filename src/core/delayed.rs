//! Delayed exchanges: messages published with an `x-delay` header wait here, on
//! disk, until their delay has passed, and are then routed by the exchange as if
//! just published. Declared as RabbitMQ's plugin does (`x-delayed-message` with
//! `x-delayed-type`) or as LavinMQ does (any type with `x-delayed-exchange: true`).
//!
//! The messages live in an ordinary [`MessageStore`]; the order of release is kept
//! in memory and rebuilt from the stored messages after a restart.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Weak};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::exchange::Exchange;
use super::message::Message;
use super::vhost::VHost;
use super::{BasicProperties, FieldTable, FieldValue, Result};
use crate::store::{MessageStore, SegPos};

/// The delay a message asks for: its `x-delay` header in milliseconds, when positive.
pub fn delay_of(headers: Option<&FieldTable>) -> Option<u64> {
    let v = headers?.get("x-delay")?;
    let ms = match v {
        FieldValue::LongStr(_) => v.as_str()?.trim().parse::<i64>().ok()?,
        FieldValue::F32(f) => *f as i64,
        FieldValue::F64(f) => *f as i64,
        _ => v.as_i64()?,
    };
    u64::try_from(ms).ok().filter(|&ms| ms > 0)
}

struct State {
    store: MessageStore,
    /// (release time in ms, position), earliest first.
    due: BTreeSet<(i64, SegPos)>,
}

/// The held messages of one delayed exchange.
pub struct DelayedMessages {
    state: Mutex<State>,
    wake: Notify,
}

impl DelayedMessages {
    /// Opens the store in `dir`, recovering the messages still waiting.
    pub fn open(dir: &Path, label: &str, segment_size: u64) -> Result<Arc<Self>> {
        let mut store = MessageStore::open(dir, label, segment_size)?;
        let mut due = BTreeSet::new();
        // Every stored message is waiting: take them all off the ready list and
        // keep them ordered by release time; each is acked once released.
        while let Some((pos, _)) = store.shift() {
            let Some(view) = store.read_at(pos) else {
                let _ = store.ack(pos);
                continue;
            };
            let props = BasicProperties::decode(&mut Bytes::copy_from_slice(view.properties)).unwrap_or_default();
            let delay = delay_of(props.headers.as_ref()).unwrap_or(0);
            due.insert((view.timestamp.saturating_add(delay as i64), pos));
        }
        Ok(Arc::new(DelayedMessages {
            state: Mutex::new(State { store, due }),
            wake: Notify::new(),
        }))
    }

    /// Number of messages waiting.
    pub fn len(&self) -> usize {
        self.state.lock().due.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Holds `msg` back for `delay` ms.
    pub fn push(&self, msg: &Message, delay: u64, scratch: &mut BytesMut) -> Result<()> {
        let mut st = self.state.lock();
        let pos = msg.with_encoded_properties(scratch, |props| {
            st.store
                .push(msg.timestamp, &msg.exchange, &msg.routing_key, props, &msg.body)
        })?;
        // Taken off the ready list at once: the store's cursor then marks it as
        // waiting, and a restart finds it again among the unacked.
        let _ = st.store.shift();
        let at = msg.timestamp.saturating_add(delay as i64);
        let earliest = st.due.first().is_none_or(|(first, _)| at < *first);
        st.due.insert((at, pos));
        drop(st);
        if earliest {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// Takes the messages due at `now` (they stay stored until
    /// [`DelayedMessages::released`]), and tells when the next one is.
    fn take_due(&self, now: i64) -> (Vec<(Message, SegPos)>, Option<i64>) {
        let mut st = self.state.lock();
        let mut out = Vec::new();
        while let Some(&(at, pos)) = st.due.first() {
            if at > now {
                return (out, Some(at));
            }
            st.due.pop_first();
            if let Some(view) = st.store.read_mapped(pos) {
                let raw = Bytes::copy_from_slice(view.properties);
                let properties = BasicProperties::decode(&mut raw.clone()).unwrap_or_default();
                let msg = Message {
                    timestamp: now,
                    exchange: view.exchange.into(),
                    routing_key: view.routing_key.into(),
                    properties: Box::new(properties),
                    raw_properties: Some(raw),
                    body: Bytes::copy_from_slice(view.body),
                };
                out.push((msg, pos));
            } else if let Err(e) = st.store.ack(pos) {
                tracing::error!("cannot record removal of an unreadable delayed message: {e}");
            }
        }
        (out, None)
    }

    /// Removes a released message once it is stored in its queues.
    fn released(&self, pos: SegPos) {
        if let Err(e) = self.state.lock().store.ack(pos) {
            tracing::error!("cannot record release of a delayed message: {e}");
        }
    }

    /// Starts the task that releases due messages through `exchange`.
    pub fn spawn(self: &Arc<Self>, vhost: Weak<VHost>, exchange: Weak<Exchange>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(release_loop(Arc::downgrade(self), vhost, exchange));
    }
}

/// Releases messages when they are due; ends when the exchange is gone.
async fn release_loop(me: Weak<DelayedMessages>, vhost: Weak<VHost>, exchange: Weak<Exchange>) {
    let mut scratch = BytesMut::new();
    loop {
        let (Some(d), Some(ex), Some(vh)) = (me.upgrade(), exchange.upgrade(), vhost.upgrade()) else {
            return;
        };
        if ex.is_deleted() {
            return;
        }
        let (due, next) = d.take_due(Message::now_ms());
        for (msg, pos) in due {
            vh.publish_routed(&ex, &msg, &mut scratch);
            d.released(pos);
        }
        let wait = next.map(|at| (at - Message::now_ms()).clamp(1, 3_600_000) as u64);
        drop((ex, vh));
        match wait {
            Some(ms) => {
                tokio::select! {
                    _ = tokio::time::sleep(std::time::Duration::from_millis(ms)) => {}
                    _ = d.wake.notified() => {}
                }
            }
            None => d.wake.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(delay: i64, body: &'static str, at: i64) -> Message {
        let mut headers = FieldTable::new();
        headers.insert("x-delay", FieldValue::I64(delay));
        Message {
            timestamp: at,
            exchange: "d".into(),
            routing_key: "k".into(),
            properties: Box::new(BasicProperties {
                headers: Some(headers),
                ..Default::default()
            }),
            raw_properties: None,
            body: Bytes::from_static(body.as_bytes()),
        }
    }

    #[test]
    fn releases_in_due_order_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let d = DelayedMessages::open(dir.path(), "d", 4096).unwrap();
        let mut scratch = BytesMut::new();
        d.push(&msg(300, "late", 1000), 300, &mut scratch).unwrap();
        d.push(&msg(100, "early", 1000), 100, &mut scratch).unwrap();
        d.push(&msg(200, "middle", 1000), 200, &mut scratch).unwrap();
        let (out, next) = d.take_due(1150);
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0].0.body[..], b"early");
        assert_eq!(next, Some(1200));
        d.released(out[0].1);
        drop(d);
        let d = DelayedMessages::open(dir.path(), "d", 4096).unwrap();
        assert_eq!(d.len(), 2);
        let (out, next) = d.take_due(5000);
        let bodies: Vec<_> = out.iter().map(|(m, _)| m.body.clone()).collect();
        assert_eq!(bodies, [Bytes::from_static(b"middle"), Bytes::from_static(b"late")]);
        assert_eq!(next, None);
    }

    #[test]
    fn delay_header_forms() {
        let t = |v: FieldValue| {
            let mut h = FieldTable::new();
            h.insert("x-delay", v);
            delay_of(Some(&h))
        };
        assert_eq!(t(FieldValue::I32(500)), Some(500));
        assert_eq!(t(FieldValue::I32(-5)), None);
        assert_eq!(t(FieldValue::from("250")), Some(250));
        assert_eq!(t(FieldValue::I32(0)), None);
        assert_eq!(delay_of(None), None);
    }
}
