//! Slows down password guessing, for every protocol alike: each failed login
//! from an address makes the next refusal from it come later, and once an
//! address has failed `max_failures` times in a row it is refused outright,
//! without its credentials being checked, for `block_time`. A successful
//! login forgets the address's failures; so does `block_time` without one.
//!
//! Addresses are counted as they are (IPv4) or by their /64 network (IPv6,
//! where one host commonly holds a whole /64). Trusted networks are never
//! throttled. The table of addresses is bounded, so that a flood of sources
//! cannot grow it without limit.

use std::net::IpAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use ipnet::IpNet;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;

/// Addresses tracked at most; beyond this, new addresses go untracked until
/// old entries lapse.
const MAX_TRACKED: usize = 65_536;
/// The refusal after the first failure is not delayed; each further one
/// doubles from this, up to [`MAX_DELAY`].
const BASE_DELAY: Duration = Duration::from_millis(100);
/// The longest a refusal is delayed.
const MAX_DELAY: Duration = Duration::from_secs(3);

/// How logins are throttled (the `login_throttle*` keys of `[main]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThrottleSettings {
    /// Throttling is on (`login_throttle`).
    pub enabled: bool,
    /// Failed logins in a row after which an address is refused
    /// (`login_throttle_max_failures`).
    pub max_failures: u32,
    /// How long a refused address stays refused, and how long failures are
    /// remembered (`login_throttle_block_time`, seconds).
    pub block_time: Duration,
    /// Addresses and networks never throttled
    /// (`login_throttle_trusted_networks`).
    pub trusted: Vec<IpNet>,
}

impl Default for ThrottleSettings {
    /// On, with limits no client that knows its password reaches: 20
    /// failures in a row, 60 s refused; loopback trusted.
    fn default() -> Self {
        ThrottleSettings {
            enabled: true,
            max_failures: 20,
            block_time: Duration::from_secs(60),
            trusted: parse_networks(DEFAULT_TRUSTED).unwrap_or_default(),
        }
    }
}

/// The default `login_throttle_trusted_networks`: loopback.
pub const DEFAULT_TRUSTED: &str = "127.0.0.0/8, ::1/128";

/// A `login_throttle_trusted_networks` entry that is neither an address nor
/// a CIDR range.
#[derive(Debug, thiserror::Error)]
#[error("login_throttle_trusted_networks: '{0}' is not an IP address or CIDR range")]
pub struct BadNetwork(pub String);

/// Parses addresses and CIDR ranges separated by commas or whitespace.
pub fn parse_networks(list: &str) -> Result<Vec<IpNet>, BadNetwork> {
    list.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            IpNet::from_str(s)
                .or_else(|_| IpAddr::from_str(s).map(IpNet::from))
                .map_err(|_| BadNetwork(s.to_owned()))
        })
        .collect()
}

/// What to do with a login attempt before its credentials are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Check the credentials.
    Check,
    /// Refuse at once: the address failed too often; it may retry after
    /// this long.
    Refused(Duration),
}

impl Admission {
    /// The text a refused client is told.
    pub fn refusal_text(retry_after: Duration) -> String {
        format!(
            "too many failed logins from this address: logins refused for another {} s",
            retry_after.as_secs().max(1)
        )
    }
}

/// Failures of one address.
#[derive(Debug, Clone, Copy)]
struct Record {
    failures: u32,
    last_failure: Instant,
    blocked_until: Option<Instant>,
}

/// The failed-login table shared by every listener.
#[derive(Default)]
pub struct LoginThrottle {
    settings: ArcSwap<ThrottleSettings>,
    records: Mutex<FxHashMap<IpAddr, Record>>,
    failures: AtomicU64,
    refusals: AtomicU64,
}

impl LoginThrottle {
    /// Replaces the settings (at start-up and on a config reload).
    pub fn configure(&self, settings: ThrottleSettings) {
        if !settings.enabled {
            self.records.lock().clear();
        }
        self.settings.store(settings.into());
    }

    /// Whether a login from `ip` may be checked now.
    pub fn admit(&self, ip: IpAddr) -> Admission {
        let settings = self.settings.load();
        let Some(key) = key(&settings, ip) else {
            return Admission::Check;
        };
        let now = Instant::now();
        let mut records = self.records.lock();
        let Some(r) = records.get(&key) else {
            return Admission::Check;
        };
        match r.blocked_until {
            Some(until) if until > now => {
                self.refusals.fetch_add(1, Ordering::Relaxed);
                Admission::Refused(until - now)
            }
            Some(_) => {
                records.remove(&key);
                Admission::Check
            }
            None => Admission::Check,
        }
    }

    /// Records a failed login from `ip`; returns how long to wait before
    /// telling the client.
    pub fn failed(&self, ip: IpAddr) -> Duration {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let settings = self.settings.load();
        let Some(key) = key(&settings, ip) else {
            return Duration::ZERO;
        };
        let now = Instant::now();
        let mut records = self.records.lock();
        if !records.contains_key(&key) && records.len() >= MAX_TRACKED {
            records.retain(|_, r| !lapsed(r, now, settings.block_time));
            if records.len() >= MAX_TRACKED {
                return MAX_DELAY;
            }
        }
        let r = records.entry(key).or_insert(Record {
            failures: 0,
            last_failure: now,
            blocked_until: None,
        });
        if lapsed(r, now, settings.block_time) {
            r.failures = 0;
            r.blocked_until = None;
        }
        r.failures = r.failures.saturating_add(1);
        r.last_failure = now;
        if r.failures >= settings.max_failures && r.blocked_until.is_none() {
            r.blocked_until = Some(now + settings.block_time);
            tracing::warn!(
                source = %key,
                "{} failed logins in a row: logins from this address are refused for {} s",
                r.failures,
                settings.block_time.as_secs()
            );
        }
        delay(r.failures)
    }

    /// Records a successful login from `ip`: its failures are forgotten.
    pub fn succeeded(&self, ip: IpAddr) {
        let settings = self.settings.load();
        if let Some(key) = key(&settings, ip) {
            let mut records = self.records.lock();
            if !records.is_empty() {
                records.remove(&key);
            }
        }
    }

    /// Failed logins since start-up (a metric).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Logins refused unchecked because their address was blocked (a metric).
    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    /// Addresses refused right now (a metric).
    pub fn blocked_sources(&self) -> usize {
        let now = Instant::now();
        self.records
            .lock()
            .values()
            .filter(|r| r.blocked_until.is_some_and(|u| u > now))
            .count()
    }
}

/// The table key of `ip`, or `None` when it is not throttled.
fn key(settings: &ThrottleSettings, ip: IpAddr) -> Option<IpAddr> {
    let ip = ip.to_canonical();
    if !settings.enabled || settings.trusted.iter().any(|n| n.contains(&ip)) {
        return None;
    }
    Some(match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
    })
}

/// Whether a record no longer counts: its block ended, or (unblocked) its
/// last failure is older than the block time.
fn lapsed(r: &Record, now: Instant, block_time: Duration) -> bool {
    match r.blocked_until {
        Some(until) => until <= now,
        None => now.duration_since(r.last_failure) >= block_time,
    }
}

/// The wait before the refusal of failure number `failures`.
fn delay(failures: u32) -> Duration {
    if failures <= 1 {
        return Duration::ZERO;
    }
    let doublings = (failures - 2).min(16);
    (BASE_DELAY * (1u32 << doublings)).min(MAX_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn throttle(max_failures: u32, trusted: &str) -> LoginThrottle {
        let t = LoginThrottle::default();
        t.configure(ThrottleSettings {
            enabled: true,
            max_failures,
            block_time: Duration::from_secs(60),
            trusted: parse_networks(trusted).expect("networks"),
        });
        t
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    #[test]
    fn failures_slow_down_then_block_the_address_only() {
        let t = throttle(4, "");
        let a = ip("192.0.2.1");
        assert_eq!(t.failed(a), Duration::ZERO);
        assert_eq!(t.failed(a), BASE_DELAY);
        assert_eq!(t.failed(a), BASE_DELAY * 2);
        assert_eq!(t.admit(a), Admission::Check);
        t.failed(a);
        assert!(matches!(t.admit(a), Admission::Refused(d) if d > Duration::from_secs(59)));
        assert_eq!(
            t.admit(ip("192.0.2.2")),
            Admission::Check,
            "another address is not blocked"
        );
        assert_eq!((t.failures(), t.refusals(), t.blocked_sources()), (4, 1, 1));
    }

    #[test]
    fn a_success_forgets_the_failures() {
        let t = throttle(3, "");
        let a = ip("192.0.2.1");
        t.failed(a);
        t.failed(a);
        t.succeeded(a);
        t.failed(a);
        t.failed(a);
        assert_eq!(t.admit(a), Admission::Check);
    }

    #[test]
    fn trusted_networks_and_a_disabled_throttle_never_block() {
        let t = throttle(1, "10.0.0.0/8, ::1");
        for trusted in ["10.1.2.3", "::1", "::ffff:10.0.0.1"] {
            t.failed(ip(trusted));
            assert_eq!(t.admit(ip(trusted)), Admission::Check, "{trusted}");
        }
        t.configure(ThrottleSettings {
            enabled: false,
            ..ThrottleSettings::default()
        });
        t.failed(ip("192.0.2.1"));
        assert_eq!(t.admit(ip("192.0.2.1")), Admission::Check);
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_network() {
        let t = throttle(2, "");
        t.failed(ip("2001:db8::1"));
        t.failed(ip("2001:db8::2"));
        assert!(matches!(t.admit(ip("2001:db8::ffff")), Admission::Refused(_)));
        assert_eq!(t.admit(ip("2001:db8:0:1::1")), Admission::Check);
    }

    #[test]
    fn delays_are_capped() {
        assert_eq!(delay(1), Duration::ZERO);
        assert_eq!(delay(1000), MAX_DELAY);
    }

    #[test]
    fn default_trusts_loopback() {
        let s = ThrottleSettings::default();
        assert!(key(&s, ip("127.0.0.1")).is_none());
        assert!(key(&s, ip("192.0.2.1")).is_some());
    }

    #[test]
    fn bad_networks_are_named() {
        assert_eq!(parse_networks("nope").unwrap_err().0, "nope");
    }
}
