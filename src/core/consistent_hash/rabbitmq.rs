//! RabbitMQ's placement for `x-consistent-hash` exchanges (the
//! `rabbitmq_consistent_hash_exchange` plugin), so that a topology moved from
//! RabbitMQ keeps sending every key to the same queue.
//!
//! Each destination owns as many consecutive buckets as its binding's weight,
//! in the order the destinations were bound; removing one shifts the buckets
//! after it down. A key is reduced to an integer (an integer key as it is,
//! anything else through `erlang:phash2`), which seeds Erlang's `exs1024`
//! generator for a jump consistent hash over the bucket count.

use super::erlang::{Exs1024, phash2_atom, phash2_binary, phash2_float};

/// What a message is placed by, as RabbitMQ sees it: the routing key, a
/// header's value or a property (see [`super::HashInput`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Term<'a> {
    /// A binary: a routing key, a string header or property.
    Binary(&'a [u8]),
    /// An integer header, used as the seed directly.
    Integer(i64),
    /// A float header.
    Float(f64),
    /// A boolean header (the atoms `true` and `false`).
    Bool(bool),
    /// A missing header or property (the atom `undefined`).
    Undefined,
}

impl Term<'_> {
    /// The integer the generator is seeded with.
    fn seed(self) -> i64 {
        let hash = match self {
            Term::Integer(value) => return value,
            Term::Binary(bytes) => phash2_binary(bytes),
            Term::Float(value) => phash2_float(value),
            Term::Bool(true) => phash2_atom("true"),
            Term::Bool(false) => phash2_atom("false"),
            Term::Undefined => phash2_atom("undefined"),
        };
        i64::from(hash)
    }
}

/// The plugin's `jump_consistent_hash`: the bucket in `0..buckets` for `key`
/// (`buckets` >= 1).
pub fn bucket(key: Term<'_>, buckets: u64) -> u64 {
    if buckets <= 1 {
        return 0;
    }
    let mut state = Exs1024::seed(key.seed());
    let mut b: u64 = 0;
    let mut j: u64 = 0;
    while j < buckets {
        b = j;
        let r = state.uniform();
        if r == 0.0 {
            // Erlang fails the division here (one draw in 2^64); staying in
            // the current bucket is as good an answer as any.
            break;
        }
        // `as` saturates a float past u64::MAX, which ends the loop.
        j = ((b + 1) as f64 / r) as u64;
    }
    b
}

/// The plugin's bucket map: destinations in binding order, each with its
/// weight in buckets. The buckets are not materialized: `ends[i]` is the
/// bucket just past destination `i`.
#[derive(Debug, Clone)]
pub struct BucketMap<T> {
    destinations: Vec<(T, u32)>,
    ends: Vec<u64>,
}

impl<T> Default for BucketMap<T> {
    fn default() -> Self {
        BucketMap {
            destinations: Vec::new(),
            ends: Vec::new(),
        }
    }
}

impl<T: PartialEq> BucketMap<T> {
    /// Gives `dest` `weight` buckets after all others; a destination that
    /// already has buckets keeps them (RabbitMQ counts a destination's first
    /// binding only).
    pub fn add(&mut self, weight: u32, dest: T) {
        if self.destinations.iter().any(|(d, _)| *d == dest) {
            return;
        }
        self.destinations.push((dest, weight));
        self.rebuild();
    }

    /// Takes `dest`'s buckets away; the buckets after them move down.
    pub fn remove(&mut self, dest: &T) {
        self.destinations.retain(|(d, _)| d != dest);
        self.rebuild();
    }

    fn rebuild(&mut self) {
        self.ends = super::bucket_ends(self.destinations.iter().map(|(_, weight)| *weight));
    }

    /// The number of buckets.
    pub fn buckets(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    /// The destination owning the bucket `key` falls in, or `None` when
    /// there are no buckets.
    pub fn get(&self, key: Term<'_>) -> Option<&T> {
        let buckets = self.buckets();
        if buckets == 0 {
            return None;
        }
        let chosen = bucket(key, buckets);
        let index = self.ends.partition_point(|&end| end <= chosen);
        self.destinations.get(index).map(|(d, _)| d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buckets printed by the plugin's `jump_consistent_hash` on OTP for 4,
    /// 10 and 1,000 buckets.
    #[test]
    fn buckets_match_rabbitmq() {
        let cases: [(Term<'_>, [u64; 3]); 17] = [
            (Term::Binary(b""), [0, 9, 161]),
            (Term::Binary(b"a"), [1, 6, 47]),
            (Term::Binary(b"abc"), [1, 5, 543]),
            (Term::Binary(b"hello world"), [1, 1, 342]),
            (Term::Binary(b"0123456789ab"), [1, 5, 563]),
            (Term::Binary(b"0123456789abc"), [2, 7, 836]),
            (
                Term::Binary(b"a much longer routing key that spans blocks"),
                [3, 4, 486],
            ),
            (Term::Binary(&[255, 0, 128]), [2, 9, 931]),
            (Term::Undefined, [1, 1, 491]),
            (Term::Bool(true), [0, 0, 393]),
            (Term::Bool(false), [0, 8, 709]),
            (Term::Float(1.5), [0, 0, 366]),
            (Term::Integer(0), [3, 4, 807]),
            (Term::Integer(1), [3, 3, 856]),
            (Term::Integer(42), [3, 6, 6]),
            (Term::Integer(-7), [1, 1, 408]),
            (Term::Integer(1_700_000_000), [1, 1, 432]),
        ];
        for (term, expected) in cases {
            let got = [bucket(term, 4), bucket(term, 10), bucket(term, 1000)];
            assert_eq!(got, expected, "{term:?}");
        }
        assert_eq!(bucket(Term::Binary(b"anything"), 1), 0);
    }

    /// The keys `k0` to `k39` over six buckets, as OTP places them.
    #[test]
    fn key_series_matches_rabbitmq() {
        let expected = [
            1, 3, 5, 1, 2, 4, 1, 3, 5, 2, 4, 4, 2, 2, 1, 0, 0, 5, 0, 1, 4, 3, 4, 1, 3, 0, 5, 3, 4, 2, 2, 3, 2, 4, 5, 2,
            0, 5, 1, 0,
        ];
        for (i, want) in expected.into_iter().enumerate() {
            let key = format!("k{i}");
            assert_eq!(bucket(Term::Binary(key.as_bytes()), 6), want, "{key}");
        }
    }

    /// Ten thousand keys over four buckets, counted on OTP.
    #[test]
    fn spread_matches_rabbitmq() {
        let mut counts = [0u32; 4];
        for i in 0..10_000 {
            let key = i.to_string();
            counts[bucket(Term::Binary(key.as_bytes()), 4) as usize] += 1;
        }
        assert_eq!(counts, [2386, 2474, 2555, 2585]);
    }

    #[test]
    fn weights_are_buckets_in_binding_order() {
        let mut map = BucketMap::default();
        map.add(1, "one");
        map.add(3, "three");
        map.add(5, "three"); // ignored: "three" has its buckets

        map.add(2, "two");
        assert_eq!(map.buckets(), 6);
        // Buckets: 0 one, 1..=3 three, 4..=5 two.
        let owner = |i: usize| map.get(Term::Binary(format!("k{i}").as_bytes())).copied();
        let by_bucket = ["one", "three", "three", "three", "two", "two"];
        let series = [1, 3, 5, 1, 2, 4];
        for (i, bucket) in series.into_iter().enumerate() {
            assert_eq!(owner(i), Some(by_bucket[bucket]), "k{i}");
        }
        map.remove(&"three");
        assert_eq!(map.buckets(), 3);
        map.remove(&"one");
        map.remove(&"two");
        assert_eq!(map.get(Term::Undefined), None);
    }
}
