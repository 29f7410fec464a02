//! The connection's byte stream, plain TCP, TLS (`amqps://`) or an in-process
//! pipe to this broker, split into a reader and a writer that the hot loops
//! drive from separate tasks.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_rustls::client::TlsStream;

use super::tls;
use super::uri::AmqpUri;

/// The receive half.
pub enum Reader {
    /// Plain TCP.
    Tcp(OwnedReadHalf),
    /// TLS.
    Tls(ReadHalf<TlsStream<TcpStream>>),
    /// A pipe to this broker.
    InProcess(ReadHalf<DuplexStream>),
}

/// The send half. Write with [`Writer::send`], which flushes: TLS sends what
/// it buffered only then.
pub enum Writer {
    /// Plain TCP.
    Tcp(OwnedWriteHalf),
    /// TLS.
    Tls(WriteHalf<TlsStream<TcpStream>>),
    /// A pipe to this broker.
    InProcess(WriteHalf<DuplexStream>),
}

/// Connects to the URI's host and port, over TLS for `amqps://`.
pub async fn connect(uri: &AmqpUri) -> io::Result<(Reader, Writer)> {
    let tcp = TcpStream::connect((uri.host.as_str(), uri.port)).await?;
    tcp.set_nodelay(true)?;
    match &uri.tls {
        None => {
            let (rd, wr) = tcp.into_split();
            Ok((Reader::Tcp(rd), Writer::Tcp(wr)))
        }
        Some(params) => {
            let stream = tls::connect(tcp, &uri.host, params).await?;
            let (rd, wr) = tokio::io::split(stream);
            Ok((Reader::Tls(rd), Writer::Tls(wr)))
        }
    }
}

/// Splits the client's end of an in-process pipe.
pub fn in_process(stream: DuplexStream) -> (Reader, Writer) {
    let (rd, wr) = tokio::io::split(stream);
    (Reader::InProcess(rd), Writer::InProcess(wr))
}

impl Writer {
    /// Writes all of `buf` and flushes.
    pub async fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        self.write_all(buf).await?;
        self.flush().await
    }
}

impl AsyncRead for Reader {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Reader::Tcp(r) => Pin::new(r).poll_read(cx, buf),
            Reader::Tls(r) => Pin::new(r).poll_read(cx, buf),
            Reader::InProcess(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Writer {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            Writer::Tls(w) => Pin::new(w).poll_write(cx, buf),
            Writer::InProcess(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_flush(cx),
            Writer::Tls(w) => Pin::new(w).poll_flush(cx),
            Writer::InProcess(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            Writer::Tls(w) => Pin::new(w).poll_shutdown(cx),
            Writer::InProcess(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}
