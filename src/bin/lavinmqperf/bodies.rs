//! Message bodies for the throughput modes and the check behind `--verify`.
//!
//! Publishers either send LavinMQ's fixed pattern (`i % 27 + 64`) or, with
//! `--random-bodies`, a different slice of one pool of random bytes for every
//! message: the pool is filled once at start, so a random body costs a copy,
//! not a trip through a random number generator. Consumers check a received
//! body against the same pool, finding the slice from its first bytes.

use std::collections::HashMap;

/// Number of distinct random bodies (slices of the pool).
const RANDOM_SLOTS: usize = 65_536;
/// Distance between the starts of two random slices.
const STRIDE: usize = 8;
/// Bytes of a body that identify its slice of the random pool.
const KEY_LEN: usize = 8;

/// The bodies publishers send, shared by every client of a run.
pub struct Bodies {
    /// The fixed pattern, or the random pool.
    pool: Vec<u8>,
    /// Size of every body.
    size: usize,
    /// Distinct bodies: 1 for the fixed pattern.
    slots: usize,
    /// Leading bytes publishers overwrite (the `--measure-latency`
    /// timestamp), which the check skips.
    skip: usize,
    /// Slot of each random body by its key bytes; built only for `--verify`.
    index: HashMap<u64, usize>,
}

impl Bodies {
    /// Bodies of `size` bytes: the fixed pattern, or random ones. `skip`
    /// leading bytes are overwritten by publishers and not verified;
    /// `verify` builds what consumers need to check random bodies.
    pub fn new(size: usize, skip: usize, random: bool, verify: bool) -> Bodies {
        if !random {
            return Bodies {
                pool: (0..size).map(|i| (i % 27 + 64) as u8).collect(),
                size,
                slots: 1,
                skip,
                index: HashMap::new(),
            };
        }
        let mut pool = vec![0u8; (RANDOM_SLOTS - 1) * STRIDE + size];
        rand::fill(&mut pool[..]);
        let mut bodies = Bodies {
            pool,
            size,
            slots: RANDOM_SLOTS,
            skip: skip.min(size),
            index: HashMap::new(),
        };
        if verify {
            let mut index = HashMap::with_capacity(RANDOM_SLOTS);
            for slot in 0..RANDOM_SLOTS {
                // The first slot with a key wins: with short bodies several
                // slots may share one, and then they are equal anyway.
                index.entry(bodies.key(bodies.body(slot))).or_insert(slot);
            }
            bodies.index = index;
        }
        bodies
    }

    /// Size of every body.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether every message gets a different body.
    pub fn is_random(&self) -> bool {
        self.slots > 1
    }

    /// Number of distinct bodies, for [`SlotPicker::next`].
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Body number `slot`.
    pub fn body(&self, slot: usize) -> &[u8] {
        let at = slot * STRIDE;
        &self.pool[at..at + self.size]
    }

    /// The key of a body: up to [`KEY_LEN`] bytes after the skipped ones.
    fn key(&self, first: &[u8]) -> u64 {
        let from = self.skip.min(first.len());
        let n = KEY_LEN.min(self.size - self.skip).min(first.len() - from);
        let mut key = [0u8; KEY_LEN];
        key[..n].copy_from_slice(&first[from..from + n]);
        u64::from_le_bytes(key)
    }

    /// The body a received one should equal, given its first bytes (the
    /// first body frame, which holds the key): `None` when no body sent
    /// starts like that.
    pub fn locate(&self, first: &[u8]) -> Option<usize> {
        if self.slots == 1 {
            return Some(0);
        }
        self.index.get(&self.key(first)).copied()
    }

    /// Whether `chunk`, found `at` bytes into a received body, equals that
    /// part of body `slot` (the skipped leading bytes always match).
    pub fn matches(&self, slot: usize, at: usize, chunk: &[u8]) -> bool {
        let Some(end) = at.checked_add(chunk.len()).filter(|&e| e <= self.size) else {
            return false;
        };
        let from = self.skip.clamp(at, end);
        let body = self.body(slot);
        body[from..end] == chunk[from - at..]
    }

    /// Whether a whole received body equals one that was sent.
    pub fn check(&self, body: &[u8]) -> bool {
        body.len() == self.size && self.locate(body).is_some_and(|slot| self.matches(slot, 0, body))
    }
}

/// Picks random body slots for one publisher (xorshift64*: a few
/// instructions a message, no shared state).
pub struct SlotPicker(u64);

impl SlotPicker {
    /// A picker seeded from the system's random source.
    pub fn new() -> SlotPicker {
        let mut seed = [0u8; 8];
        rand::fill(&mut seed);
        SlotPicker(u64::from_le_bytes(seed) | 1)
    }

    /// A slot below `slots`.
    pub fn next(&mut self, slots: usize) -> usize {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as usize % slots.max(1)
    }
}

/// The running check of one received body, fed frame by frame.
#[derive(Default)]
pub struct BodyCheck {
    /// The sent body this one must equal; `None` once it differs.
    slot: Option<usize>,
    /// Bytes of the body checked so far.
    at: usize,
}

impl BodyCheck {
    /// A new body of `size` bytes begins.
    pub fn start(&mut self, bodies: &Bodies, size: u64) {
        self.at = 0;
        // A body of the wrong size never matches; slot 0 is a placeholder
        // until the first frame names the real one.
        self.slot = (size == bodies.size() as u64).then_some(0);
    }

    /// The next body frame's payload.
    pub fn frame(&mut self, bodies: &Bodies, payload: &[u8]) {
        if self.at == 0 {
            self.slot = self.slot.and_then(|_| bodies.locate(payload));
        }
        if let Some(slot) = self.slot
            && !bodies.matches(slot, self.at, payload)
        {
            self.slot = None;
        }
        self.at += payload.len();
    }

    /// Whether the body, now complete, equals one that was sent.
    pub fn ok(&self) -> bool {
        self.slot.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_pattern_matches_only_itself() {
        let b = Bodies::new(40, 0, false, true);
        assert_eq!(&b.body(0)[..4], b"@ABC");
        assert!(b.check(b.body(0)));
        let mut other = b.body(0).to_vec();
        other[39] ^= 1;
        assert!(!b.check(&other));
        assert!(!b.check(&other[..39]), "a shorter body differs");
        assert!(!b.check(&[]));
        assert!(Bodies::new(0, 0, false, true).check(&[]));
    }

    #[test]
    fn skipped_bytes_are_not_checked() {
        let b = Bodies::new(16, 8, false, true);
        let mut body = b.body(0).to_vec();
        body[..8].copy_from_slice(&123i64.to_le_bytes());
        assert!(b.check(&body));
        body[8] ^= 1;
        assert!(!b.check(&body));
    }

    #[test]
    fn random_bodies_differ_and_are_found() {
        let b = Bodies::new(100, 0, true, true);
        let mut pick = SlotPicker::new();
        assert!((0..1000).all(|_| pick.next(b.slots()) < b.slots()));
        let (s1, s2) = (1, 2);
        assert_ne!(b.body(s1), b.body(s2));
        for slot in [0, s1, s2, b.slots() - 1] {
            assert!(b.check(b.body(slot)), "slot {slot}");
        }
        let mut bad = b.body(s1).to_vec();
        bad[50] ^= 0x80;
        assert!(!b.check(&bad));
        bad[0] ^= 0x80;
        assert!(!b.check(&bad));
        // The fixed pattern is not one of the random bodies.
        assert!(!b.check(Bodies::new(100, 0, false, false).body(0)));
    }

    #[test]
    fn short_random_bodies_and_timestamps() {
        let b = Bodies::new(3, 0, true, true);
        assert!(b.check(b.body(77)));
        let b = Bodies::new(12, 8, true, true);
        let mut body = b.body(1234).to_vec();
        body[..8].copy_from_slice(&[9; 8]);
        assert!(b.check(&body));
        body[11] ^= 1;
        assert!(!b.check(&body));
        // Nothing but the timestamp: only the size is checked.
        let b = Bodies::new(8, 8, true, true);
        assert!(b.check(&[1; 8]));
        assert!(!b.check(&[1; 9]));
    }

    #[test]
    fn frame_by_frame_check() {
        let b = Bodies::new(10_000, 8, true, true);
        let body = b.body(4321);
        let mut c = BodyCheck::default();
        c.start(&b, 10_000);
        for chunk in body.chunks(4088) {
            c.frame(&b, chunk);
        }
        assert!(c.ok());

        let mut bad = body.to_vec();
        bad[9_999] ^= 1;
        c.start(&b, 10_000);
        for chunk in bad.chunks(4088) {
            c.frame(&b, chunk);
        }
        assert!(!c.ok());

        c.start(&b, 9_999);
        c.frame(&b, &body[..9_999]);
        assert!(!c.ok(), "a body of another size differs");
    }
}
