//! The `tcp_keepalive` setting: how long a client socket may stay silent
//! before the kernel probes it, and how many unanswered probes end it. It
//! finds peers that vanished without a FIN (a crashed host, a dropped NAT
//! entry) even when the protocol's own heartbeat is off.

use std::time::Duration;

/// Keepalive timing, in LavinMQ's `idle:interval:count` form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpKeepalive {
    /// Silence before the first probe.
    pub idle: Duration,
    /// Time between probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is dropped.
    pub count: u32,
}

impl Default for TcpKeepalive {
    /// LavinMQ's default, `60:10:3`.
    fn default() -> Self {
        TcpKeepalive {
            idle: Duration::from_secs(60),
            interval: Duration::from_secs(10),
            count: 3,
        }
    }
}

/// What the setting accepts, for error messages.
pub(crate) const TCP_KEEPALIVE_EXPECTED: &str = "idle:interval:count in seconds (e.g. 60:10:3), or false";

impl TcpKeepalive {
    /// Parses `idle:interval:count` (each a positive number); a false
    /// boolean turns keepalive off (`Some(None)`); anything else is `None`.
    pub(crate) fn parse(value: &str) -> Option<Option<TcpKeepalive>> {
        if super::value::parse_bool(value) == Some(false) {
            return Some(None);
        }
        let mut parts = value
            .trim()
            .split(':')
            .map(|p| p.trim().parse::<u32>().ok().filter(|n| *n > 0));
        let (idle, interval, count) = (parts.next()??, parts.next()??, parts.next()??);
        if parts.next().is_some() {
            return None;
        }
        Some(Some(TcpKeepalive {
            idle: Duration::from_secs(idle.into()),
            interval: Duration::from_secs(interval.into()),
            count,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_numbers_or_off() {
        let k = TcpKeepalive::parse("30:5:4").expect("valid").expect("on");
        assert_eq!((k.idle.as_secs(), k.interval.as_secs(), k.count), (30, 5, 4));
        assert_eq!(TcpKeepalive::parse("false"), Some(None));
        assert_eq!(TcpKeepalive::parse("0"), Some(None));
        for bad in ["60:10", "60:10:3:1", "a:b:c", "60:0:3", "", "true"] {
            assert_eq!(TcpKeepalive::parse(bad), None, "{bad}");
        }
    }
}
