//! How big a connection's read buffer is: small while the client is quiet,
//! large while it streams, and small again once it goes quiet.
//!
//! Thousands of connections are mostly idle (a heartbeat now and then, a
//! consumer waiting), and a buffer sized for a busy publisher, held by each of
//! them, would be most of the broker's memory. A client that fills the buffer
//! in one read probably has more waiting, so the next read gets a large
//! buffer; once a read brings no more than a quiet client sends and every
//! byte has been handled, the large buffer is given back. (A steady client
//! whose reads leave room to spare keeps it: giving it back would cost it a
//! new allocation on its next burst.)

use bytes::BytesMut;

/// The buffer a quiet connection reads into: enough for a heartbeat, an
/// acknowledgement, a small request or a small message in one read.
pub const QUIET_CAPACITY: usize = 512;

/// A drained buffer above this size is given back once the client is quiet
/// (twice [`QUIET_CAPACITY`], so that rounding by the allocator or the
/// buffer's own growth does not replace it after every read).
const GIVE_BACK_ABOVE: usize = 2 * QUIET_CAPACITY;

/// What a busy connection reads into at once.
const BUSY_CAPACITY: usize = 64 * 1024;

/// A busy connection's buffer is topped up to [`BUSY_CAPACITY`] when less
/// than this is left for the next read.
const BUSY_MIN_ROOM: usize = 4096;

/// A quiet connection's buffer gets [`QUIET_CAPACITY`] more when less than
/// this is left (a partial frame waits for its rest).
const QUIET_MIN_ROOM: usize = 128;

/// The sizing state of one connection's read buffer: call [`prepare`] right
/// before each read and [`read`] with what it brought.
///
/// [`prepare`]: ReadSizing::prepare
/// [`read`]: ReadSizing::read
#[derive(Debug, Default)]
pub struct ReadSizing {
    /// Room in the buffer when the last read started.
    room: usize,
    /// The last read filled that room: more is probably waiting.
    filled: bool,
    /// The last read brought more than [`QUIET_CAPACITY`] (false before
    /// the first: a new connection is quiet).
    large: bool,
}

impl ReadSizing {
    /// Makes room in `buf` for the next read, or gives back a large buffer
    /// that a burst left behind.
    pub fn prepare(&mut self, buf: &mut BytesMut) {
        let room = buf.capacity() - buf.len();
        if self.filled {
            if room < BUSY_MIN_ROOM {
                buf.reserve(BUSY_CAPACITY);
            }
        } else if !self.large && buf.is_empty() && buf.capacity() > GIVE_BACK_ABOVE {
            *buf = BytesMut::with_capacity(QUIET_CAPACITY);
        } else if room < QUIET_MIN_ROOM {
            buf.reserve(QUIET_CAPACITY);
        }
        self.room = buf.capacity() - buf.len();
    }

    /// Records that the read after [`ReadSizing::prepare`] brought `n` bytes.
    pub fn read(&mut self, n: usize) {
        self.filled = n >= self.room;
        self.large = n > QUIET_CAPACITY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `n` bytes into `buf` as a socket read would.
    fn fill(buf: &mut BytesMut, n: usize) {
        buf.extend(std::iter::repeat_n(0u8, n));
    }

    #[test]
    fn a_new_connection_reads_into_a_small_buffer() {
        let (mut sizing, mut buf) = (ReadSizing::default(), BytesMut::new());
        sizing.prepare(&mut buf);
        assert!(buf.capacity() >= QUIET_MIN_ROOM && buf.capacity() <= GIVE_BACK_ABOVE);
    }

    #[test]
    fn a_full_read_grows_the_buffer_and_a_quiet_one_gives_it_back() {
        let (mut sizing, mut buf) = (ReadSizing::default(), BytesMut::new());
        sizing.prepare(&mut buf);
        let room = buf.capacity();
        fill(&mut buf, room);
        sizing.read(room);
        // Frames handled, except a partial one.
        let _ = buf.split_to(room - 10);
        sizing.prepare(&mut buf);
        assert!(buf.capacity() - buf.len() >= BUSY_CAPACITY, "busy: {}", buf.capacity());
        // A steady client's read leaves room to spare: the buffer stays.
        fill(&mut buf, 30_000);
        sizing.read(30_000);
        buf.clear();
        sizing.prepare(&mut buf);
        assert!(buf.capacity() >= BUSY_CAPACITY, "steady: {}", buf.capacity());
        fill(&mut buf, 100);
        sizing.read(100);
        buf.clear();
        sizing.prepare(&mut buf);
        assert_eq!(
            buf.capacity(),
            QUIET_CAPACITY,
            "quiet again: the large buffer is given back"
        );
    }

    #[test]
    fn a_quiet_client_with_a_partial_frame_keeps_its_bytes_and_gets_room() {
        let (mut sizing, mut buf) = (ReadSizing::default(), BytesMut::new());
        sizing.prepare(&mut buf);
        let room = buf.capacity();
        fill(&mut buf, room - 100);
        sizing.read(room - 100);
        sizing.prepare(&mut buf);
        assert_eq!(buf.len(), room - 100, "pending bytes stay");
        assert!(buf.capacity() - buf.len() >= QUIET_MIN_ROOM);
    }

    #[test]
    fn a_busy_buffer_with_room_left_is_not_reallocated() {
        let (mut sizing, mut buf) = (ReadSizing::default(), BytesMut::with_capacity(BUSY_CAPACITY));
        sizing.filled = true;
        fill(&mut buf, 10);
        let before = buf.as_ptr();
        sizing.prepare(&mut buf);
        assert_eq!(buf.as_ptr(), before);
    }
}
