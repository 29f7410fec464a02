//! What every adapter does after it closed a connection (its close written,
//! the write side shut down): read and drop what the client still sends until
//! it closes its end, for at most [`CLOSE_LINGER`]. A socket closed with
//! unread bytes in it is reset, and the reset can destroy the close before
//! the client read it (a client closing while another of its threads
//! publishes).

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

/// How long a closed connection's socket is kept open to read what the
/// client still sends.
pub const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// Drains `rd` into `buf` (the connection's read buffer) until the client
/// closes, for at most [`CLOSE_LINGER`].
pub async fn linger<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut BytesMut) {
    let drain = async {
        loop {
            buf.clear();
            buf.reserve(4096);
            match rd.read_buf(buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    };
    let _ = tokio::time::timeout(CLOSE_LINGER, drain).await;
}
