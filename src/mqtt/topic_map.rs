//! Translation between MQTT topics and AMQP 0-9-1 routing and binding keys,
//! following RabbitMQ's MQTT plugin, so MQTT publishes reach AMQP queues bound
//! to the topic exchange and AMQP publishes reach MQTT subscribers.
//!
//! | MQTT | AMQP | meaning                     |
//! |------|------|-----------------------------|
//! | `/`  | `.`  | level separator             |
//! | `+`  | `*`  | exactly one level           |
//! | `#`  | `#`  | any number of levels        |
//!
//! Like RabbitMQ, a `.` inside an MQTT topic level is not escaped: it becomes a
//! level separator on the AMQP side (`v1.2/data` routes as `v1.2.data`, which
//! maps back to `v1/2/data`), and a `/` in an AMQP routing key likewise splits
//! a level for MQTT subscribers. Every replacement is one ASCII byte for
//! another, so lengths are preserved and UTF-8 stays valid.

use std::borrow::Cow;

/// The AMQP routing key an MQTT PUBLISH to `topic` is routed with.
pub fn topic_to_routing_key(topic: &str) -> Cow<'_, str> {
    translate(topic, TO_AMQP)
}

/// The AMQP binding key for an MQTT subscription to `filter`.
pub fn filter_to_binding_key(filter: &str) -> Cow<'_, str> {
    translate(filter, TO_AMQP)
}

/// The MQTT topic name a message routed with `routing_key` is delivered under.
pub fn routing_key_to_topic(routing_key: &str) -> Cow<'_, str> {
    translate(routing_key, TO_MQTT)
}

/// Writes the MQTT topic name of `routing_key` into `out` (cleared first), so
/// that a delivery loop can reuse one buffer instead of allocating per message.
pub fn write_topic(routing_key: &str, out: &mut String) {
    out.clear();
    push_translated(routing_key, TO_MQTT, out);
}

/// The MQTT topic filter an AMQP binding key corresponds to, e.g. to list
/// an MQTT session's bindings as subscriptions.
pub fn binding_key_to_filter(binding_key: &str) -> Cow<'_, str> {
    translate(binding_key, TO_MQTT)
}

/// The two ASCII bytes one direction replaces, and their replacements.
#[derive(Clone, Copy)]
struct Mapping {
    from: [u8; 2],
    to: [u8; 2],
}

const TO_AMQP: Mapping = Mapping {
    from: [b'/', b'+'],
    to: [b'.', b'*'],
};

const TO_MQTT: Mapping = Mapping {
    from: [b'.', b'*'],
    to: [b'/', b'+'],
};

/// Applies `map` to `s`, borrowing it when nothing changes. Only ASCII bytes
/// are replaced, by ASCII bytes; the bytes of a multi-byte UTF-8 character
/// are never ASCII, so they pass unchanged and the result stays UTF-8.
fn translate(s: &str, map: Mapping) -> Cow<'_, str> {
    if memchr::memchr2(map.from[0], map.from[1], s.as_bytes()).is_none() {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    push_translated(s, map, &mut out);
    Cow::Owned(out)
}

/// Appends `s` with `map` applied (see [`translate`]) to `out`. This runs for
/// every MQTT delivery: it copies the runs between replaced bytes whole.
fn push_translated(s: &str, map: Mapping, out: &mut String) {
    let mut rest = s;
    while let Some(i) = memchr::memchr2(map.from[0], map.from[1], rest.as_bytes()) {
        // `i` is an ASCII byte's index: a character boundary on both sides.
        out.push_str(&rest[..i]);
        let to = if rest.as_bytes()[i] == map.from[0] {
            map.to[0]
        } else {
            map.to[1]
        };
        out.push(char::from(to));
        rest = &rest[i + 1..];
    }
    out.push_str(rest);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_become_routing_keys() {
        assert_eq!(topic_to_routing_key("a/b/c"), "a.b.c");
        assert_eq!(topic_to_routing_key("/a"), ".a");
        assert_eq!(topic_to_routing_key("a//c/"), "a..c.");
        assert_eq!(topic_to_routing_key("$SYS/ü"), "$SYS.ü");
        // The documented caveat: a dot splits a level on the AMQP side.
        assert_eq!(topic_to_routing_key("v1.2/data"), "v1.2.data");
    }

    #[test]
    fn unchanged_keys_are_borrowed() {
        assert!(matches!(topic_to_routing_key("plain"), Cow::Borrowed("plain")));
        assert!(matches!(routing_key_to_topic("plain"), Cow::Borrowed("plain")));
        assert!(matches!(filter_to_binding_key("#"), Cow::Borrowed("#")));
    }

    #[test]
    fn filters_become_binding_keys() {
        assert_eq!(filter_to_binding_key("sport/+/player1"), "sport.*.player1");
        assert_eq!(filter_to_binding_key("sport/#"), "sport.#");
        assert_eq!(filter_to_binding_key("+/+"), "*.*");
        assert_eq!(filter_to_binding_key("#"), "#");
    }

    #[test]
    fn routing_keys_become_topics() {
        assert_eq!(routing_key_to_topic("a.b.c"), "a/b/c");
        assert_eq!(routing_key_to_topic(".a."), "/a/");
        assert_eq!(routing_key_to_topic(""), "");
        assert_eq!(routing_key_to_topic("a/b.c"), "a/b/c");
    }

    #[test]
    fn binding_keys_become_filters() {
        assert_eq!(binding_key_to_filter("sport.*.player1"), "sport/+/player1");
        assert_eq!(binding_key_to_filter("sport.#"), "sport/#");
        assert_eq!(binding_key_to_filter("*.*"), "+/+");
    }

    #[test]
    fn round_trips_without_dots() {
        for topic in ["a/b/c", "/", "x", "€/日本/ü", "a//b"] {
            assert_eq!(routing_key_to_topic(&topic_to_routing_key(topic)), topic);
        }
        for filter in ["a/+/#", "#", "+", "/+/", "$SYS/#"] {
            assert_eq!(binding_key_to_filter(&filter_to_binding_key(filter)), filter);
        }
        assert_eq!(routing_key_to_topic(&topic_to_routing_key("v1.2/data")), "v1/2/data");
    }

    #[test]
    fn translation_preserves_length() {
        for s in ["a/b.c+d*e#", "ü/€.日本"] {
            assert_eq!(topic_to_routing_key(s).len(), s.len());
            assert_eq!(routing_key_to_topic(s).len(), s.len());
        }
    }
}
