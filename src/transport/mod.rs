//! What every protocol adapter needs from a connection's byte stream, whatever
//! it arrives over: TCP and Unix socket accept loops, socket options, the
//! PROXY protocol, TLS, WebSocket, and the outbox that batches writes.

/// A read at least this big means a busy client, whose connection yields to
/// other tasks after handling it; a smaller one is a client waiting for an
/// answer, and a yield would only wake an idle worker thread.
pub const BUSY_READ: usize = 16 * 1024;

/// The `host:port` a listener binds for the ini's `bind` and `port`: an IPv6
/// address (written without brackets there) gets its brackets.
pub fn listen_address(bind: &str, port: u16) -> String {
    match bind.contains(':') {
        true => format!("[{bind}]:{port}"),
        false => format!("{bind}:{port}"),
    }
}

pub mod accept;
pub mod close_linger;
pub mod delivery_loop;
pub mod outbox;
pub mod peer;
pub mod protocol_listener;
pub mod proxy_protocol;
pub mod quick_ack;
pub mod read_sizing;
pub mod shared_tcp;
pub mod socket_options;
pub mod tls;
pub mod unix_socket;
pub mod websocket;
