//! Options set on every accepted client TCP socket, from the `[main]`
//! settings `tcp_nodelay`, `tcp_keepalive`, `tcp_recv_buffer_size` and
//! `tcp_send_buffer_size`.

use socket2::{SockRef, TcpKeepalive};
use tokio::net::TcpStream;

use crate::config::{MainConfig, TcpKeepalive as KeepaliveSetting};

/// What to set on an accepted socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketOptions {
    /// Disable Nagle's algorithm.
    pub nodelay: bool,
    /// Kernel keepalive probes, when on.
    pub keepalive: Option<KeepaliveSetting>,
    /// `SO_RCVBUF`, when set.
    pub recv_buffer: Option<usize>,
    /// `SO_SNDBUF`, when set.
    pub send_buffer: Option<usize>,
}

impl Default for SocketOptions {
    /// Nagle off, keepalive and buffers left to the OS: what tests and
    /// in-process listeners without a config get.
    fn default() -> Self {
        SocketOptions {
            nodelay: true,
            keepalive: None,
            recv_buffer: None,
            send_buffer: None,
        }
    }
}

impl SocketOptions {
    /// The options `[main]` asks for.
    pub fn from_config(main: &MainConfig) -> SocketOptions {
        SocketOptions {
            nodelay: main.tcp_nodelay,
            keepalive: main.tcp_keepalive,
            recv_buffer: main.tcp_recv_buffer_size,
            send_buffer: main.tcp_send_buffer_size,
        }
    }

    /// Sets the options on `stream`. A failure is logged and the connection
    /// kept: a socket without keepalive still serves its client.
    pub fn apply(&self, stream: &TcpStream) {
        if let Err(e) = self.try_apply(stream) {
            tracing::warn!("cannot set socket options on an accepted connection: {e}");
        }
    }

    fn try_apply(&self, stream: &TcpStream) -> std::io::Result<()> {
        stream.set_nodelay(self.nodelay)?;
        let socket = SockRef::from(stream);
        if let Some(k) = self.keepalive {
            let keepalive = TcpKeepalive::new()
                .with_time(k.idle)
                .with_interval(k.interval)
                .with_retries(k.count);
            socket.set_tcp_keepalive(&keepalive)?;
        }
        if let Some(size) = self.recv_buffer {
            socket.set_recv_buffer_size(size)?;
        }
        if let Some(size) = self.send_buffer {
            socket.set_send_buffer_size(size)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn options_reach_the_socket() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let options = SocketOptions {
            nodelay: false,
            keepalive: Some(KeepaliveSetting {
                idle: Duration::from_secs(42),
                interval: Duration::from_secs(7),
                count: 5,
            }),
            recv_buffer: Some(64 * 1024),
            send_buffer: Some(64 * 1024),
        };
        options.apply(&client);
        let socket = SockRef::from(&client);
        assert!(!client.nodelay().expect("nodelay"));
        assert!(socket.keepalive().expect("keepalive"));
        assert_eq!(socket.tcp_keepalive_time().expect("idle"), Duration::from_secs(42));
        assert_eq!(
            socket.tcp_keepalive_interval().expect("interval"),
            Duration::from_secs(7)
        );
        assert_eq!(socket.tcp_keepalive_retries().expect("count"), 5);
        // Linux doubles the requested size for its own bookkeeping.
        assert!(socket.recv_buffer_size().expect("rcvbuf") >= 64 * 1024);
    }
}
