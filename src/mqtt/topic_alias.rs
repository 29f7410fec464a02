//! Topic aliases a client sets up (MQTT 5 section 3.3.2.3.4): a PUBLISH may
//! name its topic by a number agreed on in an earlier PUBLISH of the same
//! connection, up to the maximum the broker announced in CONNACK.

use bytes::Bytes;

use super::codec::{MqttStr, ReasonCode};

/// The highest topic alias the broker accepts from a client.
pub const TOPIC_ALIAS_MAXIMUM: u16 = 64;

/// The aliases of one connection; they end with it [MQTT-3.3.2-7].
#[derive(Default)]
pub struct TopicAliases {
    topics: Vec<Option<MqttStr>>,
}

impl TopicAliases {
    /// The topic of a PUBLISH that came with `topic` (empty when an alias
    /// stands for it) and `alias`; a topic with an alias sets it up. Fails
    /// with the reason to disconnect for an alias out of range, an unknown
    /// alias, or an empty topic without one.
    pub fn resolve(&mut self, topic: MqttStr, alias: Option<u16>) -> Result<MqttStr, (ReasonCode, &'static str)> {
        let Some(alias) = alias else {
            if topic.is_empty() {
                return Err((ReasonCode::PROTOCOL_ERROR, "PUBLISH without topic name or topic alias"));
            }
            return Ok(topic);
        };
        if alias == 0 || alias > TOPIC_ALIAS_MAXIMUM {
            return Err((
                ReasonCode::TOPIC_ALIAS_INVALID,
                "topic alias 0 or above the announced maximum [MQTT-3.3.2-8/-9]",
            ));
        }
        let slot = usize::from(alias - 1);
        if topic.is_empty() {
            return self
                .topics
                .get(slot)
                .and_then(Clone::clone)
                .ok_or((ReasonCode::PROTOCOL_ERROR, "unknown topic alias"));
        }
        if self.topics.len() <= slot {
            self.topics.resize(slot + 1, None);
        }
        // A copy: the alias outlives the receive buffer the topic points into.
        let owned = MqttStr::from_bytes(Bytes::copy_from_slice(topic.as_bytes()), "topic name")
            .map_err(|_| (ReasonCode::MALFORMED_PACKET, "invalid topic name"))?;
        self.topics[slot] = Some(owned);
        Ok(topic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: &str) -> MqttStr {
        MqttStr::try_from(t).unwrap()
    }

    #[test]
    fn aliases_are_set_and_used() {
        let mut a = TopicAliases::default();
        assert_eq!(a.resolve(s("a/b"), None).unwrap(), "a/b");
        assert_eq!(a.resolve(s("a/b"), Some(3)).unwrap(), "a/b");
        assert_eq!(a.resolve(s(""), Some(3)).unwrap(), "a/b");
        assert_eq!(a.resolve(s("c"), Some(3)).unwrap(), "c");
        assert_eq!(a.resolve(s(""), Some(3)).unwrap(), "c");
        assert_eq!(a.resolve(s(""), Some(1)).unwrap_err().0, ReasonCode::PROTOCOL_ERROR);
        assert_eq!(a.resolve(s(""), None).unwrap_err().0, ReasonCode::PROTOCOL_ERROR);
        assert_eq!(
            a.resolve(s("x"), Some(TOPIC_ALIAS_MAXIMUM + 1)).unwrap_err().0,
            ReasonCode::TOPIC_ALIAS_INVALID
        );
    }
}
