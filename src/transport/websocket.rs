//! A WebSocket as a byte stream, so that the AMQP and MQTT adapters serve
//! browser clients unchanged: binary (and text) messages in are bytes to read,
//! every write goes out as one binary message. Message boundaries mean nothing
//! to either protocol, which frame their own packets.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::extract::ws::{Message, WebSocket};
use bytes::{Buf, Bytes};
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Which protocol a WebSocket carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsProtocol {
    /// AMQP 0-9-1.
    Amqp,
    /// MQTT 3.1.1 / 3.1.
    Mqtt,
}

impl WsProtocol {
    /// Picks the protocol for an upgrade request, as LavinMQ does: the first
    /// offered subprotocol starting with `amqp` or `mqtt` (any case) decides,
    /// and returns the name to confirm to the client; without one, the paths
    /// `/mqtt` and `/ws/mqtt` mean MQTT and any other path AMQP.
    pub fn choose<'a>(offered: impl Iterator<Item = &'a str>, path: &str) -> (WsProtocol, Option<&'a str>) {
        for name in offered {
            let lower = name.trim().to_ascii_lowercase();
            if lower.starts_with("mqtt") {
                return (WsProtocol::Mqtt, Some(name.trim()));
            }
            if lower.starts_with("amqp") {
                return (WsProtocol::Amqp, Some(name.trim()));
            }
        }
        let path = path.trim_end_matches('/');
        if path == "/mqtt" || path == "/ws/mqtt" {
            (WsProtocol::Mqtt, None)
        } else {
            (WsProtocol::Amqp, None)
        }
    }
}

/// A WebSocket read and written as a stream of bytes.
pub struct WsStream {
    ws: WebSocket,
    /// What is left of the last message received.
    pending: Bytes,
    /// The peer closed the WebSocket: reads return end of file.
    eof: bool,
}

impl WsStream {
    /// Wraps an upgraded WebSocket.
    pub fn new(ws: WebSocket) -> Self {
        WsStream {
            ws,
            pending: Bytes::new(),
            eof: false,
        }
    }
}

impl AsyncRead for WsStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(buf.remaining());
                buf.put_slice(&this.pending[..n]);
                this.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut this.ws).poll_next(cx)) {
                Some(Ok(Message::Binary(data))) => this.pending = data,
                Some(Ok(Message::Text(text))) => this.pending = Bytes::from(text),
                // Pings are answered by the WebSocket layer itself.
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_))) | None => this.eof = true,
                Some(Err(e)) => return Poll::Ready(Err(io::Error::other(e))),
            }
        }
    }
}

impl AsyncWrite for WsStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(Pin::new(&mut this.ws).poll_ready(cx)).map_err(io::Error::other)?;
        Pin::new(&mut this.ws)
            .start_send(Message::Binary(Bytes::copy_from_slice(buf)))
            .map_err(io::Error::other)?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().ws)
            .poll_flush(cx)
            .map_err(io::Error::other)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().ws)
            .poll_close(cx)
            .map_err(io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_choice() {
        let none = std::iter::empty();
        assert_eq!(WsProtocol::choose(none, "/mqtt"), (WsProtocol::Mqtt, None));
        assert_eq!(
            WsProtocol::choose(std::iter::empty(), "/ws/mqtt/"),
            (WsProtocol::Mqtt, None)
        );
        assert_eq!(WsProtocol::choose(std::iter::empty(), "/"), (WsProtocol::Amqp, None));
        assert_eq!(
            WsProtocol::choose(["mqttv3.1"].into_iter(), "/"),
            (WsProtocol::Mqtt, Some("mqttv3.1"))
        );
        assert_eq!(
            WsProtocol::choose(["chat", " MQTT"].into_iter(), "/ws"),
            (WsProtocol::Mqtt, Some("MQTT"))
        );
        assert_eq!(
            WsProtocol::choose(["amqp"].into_iter(), "/mqtt"),
            (WsProtocol::Amqp, Some("amqp"))
        );
    }
}
