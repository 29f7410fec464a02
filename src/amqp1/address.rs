//! Link addresses as RabbitMQ reads them: version 2 (`/queues/Q`,
//! `/exchanges/X/KEY`, `/exchanges/X`, percent-encoded), which RabbitMQ 4's
//! clients use, and version 1 (`/queue/Q`, `/exchange/X/KEY`, `/topic/KEY`,
//! `/amq/queue/Q`) for older ones.

/// What an address names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// A queue: publishing goes through the default exchange with the
    /// queue's name as key; consuming reads it.
    Queue(String),
    /// An exchange, with a fixed routing key or (None) each message's
    /// subject as its key.
    Exchange(String, Option<String>),
    /// RabbitMQ 4's management node (`/management`).
    Management,
}

/// Why an address is not one we serve.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid address '{0}'")]
pub struct BadAddress(pub String);

impl Address {
    /// Parses a link's source or target address.
    pub fn parse(address: &str) -> Result<Address, BadAddress> {
        let bad = || BadAddress(address.to_owned());
        let dec = |s: &str| crate::auth::percent_decode(s, false).ok_or_else(bad);
        if address == "/management" {
            return Ok(Address::Management);
        }
        if let Some(q) = address.strip_prefix("/queues/") {
            if q.is_empty() || q.contains('/') {
                return Err(bad());
            }
            return Ok(Address::Queue(dec(q)?));
        }
        if let Some(rest) = address.strip_prefix("/exchanges/") {
            return match rest.split_once('/') {
                Some((x, key)) if !key.contains('/') => Ok(Address::Exchange(dec(x)?, Some(dec(key)?))),
                Some(_) => Err(bad()),
                None if rest.is_empty() => Err(bad()),
                None => Ok(Address::Exchange(dec(rest)?, None)),
            };
        }
        // Version 1.
        if let Some(q) = address
            .strip_prefix("/amq/queue/")
            .or_else(|| address.strip_prefix("/queue/"))
        {
            return match q.is_empty() {
                true => Err(bad()),
                false => Ok(Address::Queue(q.to_owned())),
            };
        }
        if let Some(key) = address.strip_prefix("/topic/") {
            return Ok(Address::Exchange("amq.topic".into(), Some(key.to_owned())));
        }
        if let Some(rest) = address.strip_prefix("/exchange/") {
            return Ok(match rest.split_once('/') {
                Some((x, key)) => Address::Exchange(x.to_owned(), Some(key.to_owned())),
                None => Address::Exchange(rest.to_owned(), None),
            });
        }
        Err(bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_2_addresses() {
        assert_eq!(Address::parse("/queues/q%201"), Ok(Address::Queue("q 1".into())));
        assert_eq!(
            Address::parse("/exchanges/amq.direct/k%2Fk"),
            Ok(Address::Exchange("amq.direct".into(), Some("k/k".into())))
        );
        assert_eq!(Address::parse("/exchanges/x"), Ok(Address::Exchange("x".into(), None)));
        assert_eq!(
            Address::parse("/exchanges/%2F"),
            Ok(Address::Exchange("/".into(), None))
        );
        assert_eq!(Address::parse("/management"), Ok(Address::Management));
        for bad in [
            "/queues/",
            "/queues/a/b",
            "/exchanges/",
            "/exchanges/x/k/z",
            "/queues/%zz",
            "q",
            "",
        ] {
            assert!(Address::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn version_1_addresses() {
        assert_eq!(Address::parse("/queue/q"), Ok(Address::Queue("q".into())));
        assert_eq!(Address::parse("/amq/queue/q"), Ok(Address::Queue("q".into())));
        assert_eq!(
            Address::parse("/topic/a.b"),
            Ok(Address::Exchange("amq.topic".into(), Some("a.b".into())))
        );
        assert_eq!(
            Address::parse("/exchange/x/k"),
            Ok(Address::Exchange("x".into(), Some("k".into())))
        );
    }
}
