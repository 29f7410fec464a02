//! A message as the core routes and stores it.

use bytes::{Bytes, BytesMut};

use super::{BasicProperties, ShortStr};

/// A published message on its way through exchanges into queues.
#[derive(Debug, Clone)]
pub struct Message {
    /// Milliseconds since the Unix epoch when the broker accepted it.
    pub timestamp: i64,
    /// Exchange it was published to.
    pub exchange: ShortStr,
    /// Routing key it was published with.
    pub routing_key: ShortStr,
    /// Parsed properties, used for routing decisions and validation.
    pub properties: Box<BasicProperties>,
    /// The properties exactly as received, so that storing them needs no re-encoding;
    /// `None` once the broker changed a property.
    pub raw_properties: Option<Bytes>,
    /// Message body.
    pub body: Bytes,
}

impl Message {
    /// Calls `f` with the encoded properties: the received bytes when unchanged,
    /// otherwise a fresh encoding written into `scratch`.
    pub fn with_encoded_properties<R>(&self, scratch: &mut BytesMut, f: impl FnOnce(&[u8]) -> R) -> R {
        match &self.raw_properties {
            Some(raw) => f(raw),
            None => {
                scratch.clear();
                // Properties decoded from the wire always fit their encoding again.
                let _ = self.properties.encode(scratch);
                f(scratch)
            }
        }
    }

    /// Marks the properties as changed so that they are re-encoded when stored.
    pub fn properties_mut(&mut self) -> &mut BasicProperties {
        self.raw_properties = None;
        &mut self.properties
    }

    /// Current time in milliseconds since the Unix epoch.
    pub fn now_ms() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }

    /// Milliseconds since the Unix epoch from the kernel's coarse clock (a few
    /// ms behind, but cheap enough to stamp every delivery).
    pub fn coarse_now_ms() -> i64 {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
        t.tv_sec * 1000 + i64::from(t.tv_nsec as u32 / 1_000_000)
    }
}
