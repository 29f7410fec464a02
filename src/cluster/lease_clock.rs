//! How long this node may still act on its etcd lease, as seen by its own clock.
//!
//! etcd expires a lease TTL seconds after the last keep-alive it received; the
//! node counts from the moment it *sent* the keep-alive that etcd answered, so
//! its deadline is never later than etcd's. A leader checks it before every
//! confirm: a process that was frozen (SIGSTOP) past its lease finds it expired
//! the moment it runs again, before anything else can be confirmed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The lease deadline, shared by the keep-alive task and the confirm path.
pub struct LeaseClock {
    epoch: Instant,
    /// Milliseconds after `epoch` until which the lease holds (0: no lease).
    valid_until_ms: AtomicU64,
}

impl Default for LeaseClock {
    fn default() -> Self {
        LeaseClock {
            epoch: Instant::now(),
            valid_until_ms: AtomicU64::new(0),
        }
    }
}

impl LeaseClock {
    /// etcd answered a keep-alive sent at `sent` with `ttl` left.
    pub fn renewed(&self, sent: Instant, ttl: Duration) {
        let until = sent.saturating_duration_since(self.epoch) + ttl;
        self.valid_until_ms
            .fetch_max(until.as_millis() as u64, Ordering::AcqRel);
    }

    /// The lease is gone (revoked, expired, or never granted).
    pub fn invalidate(&self) {
        self.valid_until_ms.store(0, Ordering::Release);
    }

    /// True while the lease holds.
    pub fn valid(&self) -> bool {
        let now = self.epoch.elapsed().as_millis() as u64;
        now < self.valid_until_ms.load(Ordering::Acquire)
    }

    /// Time left on the lease (zero when expired).
    pub fn remaining(&self) -> Duration {
        let now = self.epoch.elapsed().as_millis() as u64;
        Duration::from_millis(self.valid_until_ms.load(Ordering::Acquire).saturating_sub(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expires_after_the_ttl_counted_from_the_send() {
        let clock = LeaseClock::default();
        assert!(!clock.valid());
        clock.renewed(Instant::now(), Duration::from_secs(60));
        assert!(clock.valid());
        clock.renewed(Instant::now() - Duration::from_secs(120), Duration::from_secs(60));
        assert!(clock.valid(), "an older renewal does not shorten the lease");
        clock.invalidate();
        assert!(!clock.valid());
    }
}
