//! Creation rate limits: a token bucket allowing `rate` events per second
//! with a burst of as many, for new connections (node-wide) and new channels
//! (per connection). A client reconnecting or reopening channels in a tight
//! loop costs the broker a login and a registration each time; the limit
//! refuses the excess with a clear error instead of letting one client take
//! the CPU from all the others.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

/// A token bucket for one rate, owned by one task.
#[derive(Debug)]
pub struct TokenBucket {
    /// Tokens left; capped at the rate (the burst) when refilled.
    tokens: f64,
    /// When the bucket was last refilled.
    refilled: Instant,
}

impl Default for TokenBucket {
    fn default() -> Self {
        TokenBucket {
            tokens: f64::MAX,
            refilled: Instant::now(),
        }
    }
}

impl TokenBucket {
    /// Takes a token at `now` for a limit of `rate` per second (0 = no limit);
    /// false when none is left.
    pub fn try_take(&mut self, rate: u32, now: Instant) -> bool {
        if rate == 0 {
            return true;
        }
        let rate = f64::from(rate);
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(rate);
        self.refilled = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// A token bucket shared by many tasks, with a rate that can be changed
/// while it runs (a configuration reload).
#[derive(Debug, Default)]
pub struct RateLimiter {
    rate: AtomicU32,
    bucket: Mutex<TokenBucket>,
}

impl RateLimiter {
    /// Sets the events allowed per second (0 = no limit).
    pub fn set_rate(&self, rate: u32) {
        self.rate.store(rate, Ordering::Relaxed);
    }

    /// The events allowed per second (0 = no limit).
    pub fn rate(&self) -> u32 {
        self.rate.load(Ordering::Relaxed)
    }

    /// Takes a token now; false when the rate is used up.
    pub fn try_acquire(&self) -> bool {
        let rate = self.rate();
        rate == 0 || self.bucket.lock().try_take(rate, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn allows_a_burst_of_the_rate_then_refills_with_time() {
        let mut bucket = TokenBucket::default();
        let start = Instant::now();
        for _ in 0..5 {
            assert!(bucket.try_take(5, start));
        }
        assert!(!bucket.try_take(5, start));
        // A fifth of a second brings one token back at 5 per second.
        assert!(bucket.try_take(5, start + Duration::from_millis(200)));
        assert!(!bucket.try_take(5, start + Duration::from_millis(200)));
        // A long pause refills only up to the burst.
        let later = start + Duration::from_secs(60);
        assert_eq!((0..10).filter(|_| bucket.try_take(5, later)).count(), 5);
    }

    #[test]
    fn zero_is_no_limit() {
        let limiter = RateLimiter::default();
        assert!((0..10_000).all(|_| limiter.try_acquire()));
        limiter.set_rate(2);
        assert_eq!((0..10).filter(|_| limiter.try_acquire()).count(), 2);
    }
}
