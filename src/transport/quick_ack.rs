//! When to acknowledge a client's bytes at once rather than when the kernel
//! would (`TCP_QUICKACK`).
//!
//! Many clients leave Nagle's algorithm on (LavinMQ's load generator and the
//! Crystal AMQP client it is built on, for two): a small write waits until
//! everything sent before it is acknowledged. Linux delays
//! the acknowledgement of small segments by up to 40 ms when it has nothing
//! to send back on the connection, and a publisher's connection has nothing
//! to send back, so at a moderate rate 1 % of messages waited 20-30 ms.
//!
//! Acknowledging every read at once fixes that but costs a packet per read,
//! and on a busy connection it makes the client's kernel send smaller
//! segments, which means more reads: publishing at 2 M msgs/s cost twice the
//! CPU. So the socket is told to acknowledge at once only while the
//! connection reads little: less than [`SLOW_BYTES`] in the previous
//! [`WINDOW_MS`] and so far in the current one. A busy connection's segments
//! fill up anyway, and full segments are acknowledged at once by the kernel.
//! Asking for quick acknowledgements also takes the socket out of the
//! kernel's interactive mode for good, so when the connection turns busy it
//! is put back (`TCP_QUICKACK` = 0): otherwise each read still sends an
//! acknowledgement of its own.
//!
//! [`super::shared_tcp::SharedTcp`] applies the policy to its own reads.

use crate::core::message::Message;

/// The length of the window over which a connection's reads are measured.
const WINDOW_MS: i64 = 10;

/// At most this many bytes per [`WINDOW_MS`] (6.5 MB/s) count as a slow
/// connection, whose reads are acknowledged at once.
const SLOW_BYTES: usize = 64 * 1024;

/// The acknowledgement policy of one plain TCP connection.
pub struct QuickAck {
    /// Coarse clock (ms) at the start of the current window.
    window_start: i64,
    /// Bytes read since then.
    window_bytes: usize,
    /// The previous window read less than [`SLOW_BYTES`].
    slow: bool,
    /// The last read was acknowledged at once (the socket is out of the
    /// kernel's interactive mode).
    acking_at_once: bool,
}

impl QuickAck {
    /// The policy of a new connection, which counts as slow.
    pub fn new() -> QuickAck {
        QuickAck {
            window_start: Message::coarse_now_ms(),
            window_bytes: 0,
            slow: true,
            acking_at_once: false,
        }
    }

    /// After a read of `n` bytes: the `TCP_QUICKACK` value to set on the
    /// socket (true while the connection is slow, false once when it turns
    /// busy), or `None` when nothing needs to change.
    pub fn after_read(&mut self, n: usize) -> Option<bool> {
        let slow = self.counts_as_slow(n, Message::coarse_now_ms());
        let change = (slow || self.acking_at_once).then_some(slow);
        self.acking_at_once = slow;
        change
    }

    /// Adds a read of `n` bytes at `now` (ms) and says whether the
    /// connection is slow.
    fn counts_as_slow(&mut self, n: usize, now: i64) -> bool {
        if now - self.window_start >= WINDOW_MS {
            // A window without any read at all also counts as slow.
            self.slow = now - self.window_start >= 2 * WINDOW_MS || self.window_bytes < SLOW_BYTES;
            self.window_start = now;
            self.window_bytes = 0;
        }
        self.window_bytes += n;
        self.slow && self.window_bytes < SLOW_BYTES
    }
}

impl Default for QuickAck {
    fn default() -> Self {
        QuickAck::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection reading a little at a time stays slow; one that reads a
    /// lot in a window stops being acknowledged at once, for the rest of that
    /// window and the next; a quiet spell makes it slow again.
    #[test]
    fn only_connections_that_read_little_are_acknowledged_at_once() {
        let mut q = QuickAck::new();
        q.window_start = 0;
        assert!(q.counts_as_slow(1000, 1));
        assert!(q.counts_as_slow(1000, 5));
        assert!(q.counts_as_slow(1000, 12), "a new window after a slow one");
        assert!(!q.counts_as_slow(SLOW_BYTES, 13), "this window read a lot");
        assert!(!q.counts_as_slow(100, 15));
        assert!(!q.counts_as_slow(100, 23), "the window before read a lot");
        assert!(q.counts_as_slow(100, 33), "the window before read little");
        assert!(!q.counts_as_slow(2 * SLOW_BYTES, 34));
        assert!(q.counts_as_slow(100, 60), "quiet for more than a window");
    }

    /// The socket option is set on every slow read, cleared once when the
    /// connection turns busy, and left alone while it stays busy.
    #[test]
    fn the_option_is_cleared_once_when_a_connection_turns_busy() {
        let mut q = QuickAck::new();
        assert_eq!(q.after_read(100), Some(true));
        assert_eq!(q.after_read(SLOW_BYTES), Some(false));
        assert_eq!(q.after_read(100), None);
    }
}
