//! The two pieces of Erlang/OTP that decide where RabbitMQ's consistent-hash
//! exchange places a message, reproduced bit for bit so that a key goes to
//! the same bucket here as on RabbitMQ:
//!
//! * `erlang:phash2/1` for the terms a message key can be (binaries, atoms,
//!   floats). Erlang documents phash2 as stable across releases and
//!   platforms; it is Bob Jenkins' 96-bit mix over the term.
//! * The `exs1024` generator of the `rand` module (xorshift1024* seeded
//!   through xorshift64*), with its legacy `uniform_s` float, which the
//!   exchange's jump consistent hash draws from.
//!
//! Reference values in the tests come from OTP itself.

/// phash2's result range: 2^27.
const PHASH2_RANGE_MASK: u32 = (1 << 27) - 1;
/// The golden ratio constant phash2 mixes with.
const HCONST: u32 = 0x9e37_79b9;
/// `HCONST * 12 mod 2^32`: the float constant.
const HCONST_12: u32 = 0x6a99_b4ac;
/// `HCONST * 13 mod 2^32`: the binary constant.
const HCONST_13: u32 = 0x08d1_2e65;

/// Bob Jenkins' 96-bit mix, as Erlang's term hashing uses it.
fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    macro_rules! step {
        ($x:ident, $y:ident, $z:ident, $shift:expr, left) => {
            *$x = $x.wrapping_sub(*$y).wrapping_sub(*$z) ^ (*$z << $shift);
        };
        ($x:ident, $y:ident, $z:ident, $shift:expr, right) => {
            *$x = $x.wrapping_sub(*$y).wrapping_sub(*$z) ^ (*$z >> $shift);
        };
    }
    step!(a, b, c, 13, right);
    step!(b, c, a, 8, left);
    step!(c, a, b, 13, right);
    step!(a, b, c, 12, right);
    step!(b, c, a, 16, left);
    step!(c, a, b, 5, right);
    step!(a, b, c, 3, right);
    step!(b, c, a, 10, left);
    step!(c, a, b, 15, right);
}

fn le32(bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .enumerate()
        .fold(0, |acc, (i, &byte)| acc.wrapping_add(u32::from(byte) << (8 * i)))
}

/// Erlang's `block_hash`: the bytes twelve at a time, then the tail and the
/// length.
fn block_hash(bytes: &[u8], initval: u32) -> u32 {
    let (mut a, mut b, mut c) = (HCONST, HCONST, initval);
    let mut blocks = bytes.chunks_exact(12);
    for block in &mut blocks {
        a = a.wrapping_add(le32(&block[0..4]));
        b = b.wrapping_add(le32(&block[4..8]));
        c = c.wrapping_add(le32(&block[8..12]));
        mix(&mut a, &mut b, &mut c);
    }
    let tail = blocks.remainder();
    // Only the low 32 bits of the length take part, as in Erlang.
    c = c.wrapping_add(bytes.len() as u32);
    a = a.wrapping_add(le32(&tail[..tail.len().min(4)]));
    if tail.len() > 4 {
        b = b.wrapping_add(le32(&tail[4..tail.len().min(8)]));
    }
    if tail.len() > 8 {
        // The low byte of `c` holds the length, so the tail starts one byte up.
        c = c.wrapping_add(le32(&tail[8..]) << 8);
    }
    mix(&mut a, &mut b, &mut c);
    c
}

/// `erlang:phash2(Binary)`.
pub fn phash2_binary(bytes: &[u8]) -> u32 {
    let hash = if bytes.is_empty() {
        HCONST_13
    } else {
        block_hash(bytes, HCONST_13)
    };
    hash & PHASH2_RANGE_MASK
}

/// `erlang:phash2(Atom)` for an atom named in ASCII (`undefined`, `true`,
/// `false`): the atom table's hashpjw of the name.
pub fn phash2_atom(name: &str) -> u32 {
    let mut h: u32 = 0;
    for &byte in name.as_bytes() {
        h = (h << 4).wrapping_add(u32::from(byte));
        let g = h & 0xf000_0000;
        if g != 0 {
            h ^= g >> 24;
            h ^= g;
        }
    }
    h & PHASH2_RANGE_MASK
}

/// `erlang:phash2(Float)`: the two 32-bit halves of the IEEE double.
pub fn phash2_float(value: f64) -> u32 {
    let bits = value.to_bits();
    let mut a = HCONST_12.wrapping_add((bits >> 32) as u32);
    let mut b = HCONST_12.wrapping_add(bits as u32);
    let mut c = 0;
    mix(&mut a, &mut b, &mut c);
    c & PHASH2_RANGE_MASK
}

/// Erlang's `exs1024` generator state: xorshift1024* over a ring of sixteen
/// words. `rand` keeps the ring as two lists; the order they describe is the
/// ring read from `position`.
pub struct Exs1024 {
    ring: [u64; 16],
    position: usize,
}

/// One step of xorshift64*, which seeds the ring.
fn exs64_next(r: u64) -> (u64, u64) {
    let r1 = r ^ (r >> 12);
    let r2 = r1 ^ (r1 << 25);
    let r3 = r2 ^ (r2 >> 27);
    (r3.wrapping_mul(2_685_821_657_736_338_717), r3)
}

impl Exs1024 {
    /// `rand:seed_s(exs1024, {A, A, A})`: the three-integer seed, of which
    /// only the low 21 bits of each take part.
    pub fn seed(a: i64) -> Self {
        const MASK21: u64 = (1 << 21) - 1;
        // Erlang's `band` on a negative integer sees its two's complement.
        let low = a as u64 & MASK21;
        let b1 = ((low + 1) * 2_097_131) & MASK21;
        let b2 = ((low + 1) * 2_097_133) & MASK21;
        let b3 = ((low + 1) * 2_097_143) & MASK21;
        let mut r = (b1 << 43) | (b2 << 22) | (b3 << 1) | 1;
        let mut ring = [0u64; 16];
        // `rand` prepends each word to a list, so the last one generated
        // comes first in the ring.
        for slot in ring.iter_mut().rev() {
            let (x, next) = exs64_next(r);
            *slot = x;
            r = next;
        }
        Exs1024 { ring, position: 0 }
    }

    /// The next 64-bit output.
    fn next(&mut self) -> u64 {
        let s0 = self.ring[self.position];
        let following = (self.position + 1) & 15;
        let s1 = self.ring[following];
        let s11 = s1 ^ (s1 << 31);
        let s12 = s11 ^ (s11 >> 11);
        let s01 = s0 ^ (s0 >> 30);
        let ns1 = s01 ^ s12;
        self.ring[following] = ns1;
        self.position = following;
        ns1.wrapping_mul(1_181_783_497_276_652_981)
    }

    /// `rand:uniform_s/1` for `exs1024`: the output divided by 2^64 (the
    /// generator's legacy float, which can be 0.0).
    pub fn uniform(&mut self) -> f64 {
        self.next() as f64 / 18_446_744_073_709_551_616.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by `erlang:phash2/1` on OTP.
    #[test]
    fn phash2_matches_erlang() {
        assert_eq!(phash2_binary(b""), 13_708_901);
        assert_eq!(phash2_binary(b"a"), 112_802_447);
        assert_eq!(phash2_binary(b"abc"), 98_228_475);
        assert_eq!(phash2_binary(b"hello world"), 33_550_279);
        assert_eq!(phash2_binary(b"0123456789ab"), 115_360_506);
        assert_eq!(phash2_binary(b"0123456789abc"), 67_923_675);
        assert_eq!(phash2_binary(b"a much longer routing key that spans blocks"), 1_274_355);
        assert_eq!(phash2_binary(&[255, 0, 128]), 70_739_353);
        assert_eq!(phash2_atom("undefined"), 45_914_356);
        assert_eq!(phash2_atom("true"), 506_293);
        assert_eq!(phash2_atom("false"), 7_111_573);
        assert_eq!(phash2_float(1.5), 10_380_315);
    }

    /// `rand:uniform_s(rand:seed_s(exs1024, {5, 5, 5}))` and the draw after it.
    #[test]
    fn exs1024_matches_erlang() {
        let mut state = Exs1024::seed(5);
        assert_eq!(state.uniform(), 0.352_440_983_626_264_2);
        assert_eq!(state.uniform(), 0.670_908_919_654_443_3);
    }
}
