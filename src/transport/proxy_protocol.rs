//! The PROXY protocol (HAProxy's, versions 1 and 2): a load balancer that
//! accepted the client's TCP connection sends one header with the client's
//! real address before the client's own bytes. With `[amqp]
//! tcp_proxy_protocol` on, every AMQP and AMQPS connection must start with
//! one, so logs, the management API and loopback-only logins see the client
//! rather than the balancer.
//!
//! Only sources in `proxy_protocol_trusted_sources` may send headers (anyone
//! else could claim any address); connections from elsewhere are refused.
//! The header is read with exact-length reads, so not one byte of the
//! protocol behind it is consumed, and within [`HEADER_TIMEOUT`].

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::peer::Peer;

/// How long a connection may take to send its header.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The 12 bytes a version 2 header starts with.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// The longest version 1 header, CRLF included (from the specification).
const V1_MAX_LEN: usize = 107;

/// Why a connection's header was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The connection came from outside `proxy_protocol_trusted_sources`.
    #[error("{0} is not in proxy_protocol_trusted_sources")]
    Untrusted(IpAddr),
    /// The first bytes are not a PROXY header.
    #[error("no PROXY protocol header")]
    Missing,
    /// The header is malformed.
    #[error("malformed PROXY protocol header: {0}")]
    Malformed(String),
    /// The header did not arrive in time.
    #[error("no PROXY protocol header within {HEADER_TIMEOUT:?}")]
    Timeout,
    /// The connection failed or closed while sending the header.
    #[error("connection lost while reading the PROXY protocol header: {0}")]
    Io(#[from] std::io::Error),
}

/// A `proxy_protocol_trusted_sources` entry that is neither an address nor a
/// CIDR range.
#[derive(Debug, thiserror::Error)]
#[error("proxy_protocol_trusted_sources: '{0}' is not an IP address or CIDR range")]
pub struct BadTrustedSource(pub String);

/// Who may send PROXY headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyPolicy {
    /// Trusted networks; empty trusts everyone.
    trusted: Vec<IpNet>,
}

impl ProxyPolicy {
    /// Parses `proxy_protocol_trusted_sources`: addresses and CIDR ranges
    /// separated by commas or whitespace.
    pub fn parse(sources: &str) -> Result<ProxyPolicy, BadTrustedSource> {
        let trusted = sources
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .map(|s| {
                IpNet::from_str(s)
                    .or_else(|_| IpAddr::from_str(s).map(IpNet::from))
                    .map_err(|_| BadTrustedSource(s.to_owned()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if trusted.is_empty() {
            tracing::warn!(
                "tcp_proxy_protocol is on and proxy_protocol_trusted_sources is empty: \
                 any client can claim any address"
            );
        }
        Ok(ProxyPolicy { trusted })
    }

    /// A policy that takes a header from anyone, for connections already known
    /// to come from a trusted forwarder (a cluster follower).
    pub fn trusting_all() -> ProxyPolicy {
        ProxyPolicy { trusted: Vec::new() }
    }

    /// Whether `ip` may send a header.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.trusted.is_empty() || self.trusted.iter().any(|net| net.contains(&ip))
    }

    /// Reads the header `peer` must start with and answers the peer it
    /// describes: the client's address, the address it connected to, and the
    /// balancer's in [`Peer::proxy`]. A `LOCAL` or `UNKNOWN` header (a
    /// balancer's own health check) leaves the addresses as they are.
    pub async fn receive<S: AsyncRead + Unpin>(&self, stream: &mut S, peer: Peer) -> Result<Peer, ProxyError> {
        if !self.trusts(peer.addr.ip()) {
            return Err(ProxyError::Untrusted(peer.addr.ip()));
        }
        let header = tokio::time::timeout(HEADER_TIMEOUT, read_header(stream))
            .await
            .map_err(|_| ProxyError::Timeout)??;
        Ok(match parse(&header)? {
            Some((source, destination)) => Peer {
                addr: source,
                local: destination,
                proxy: Some(peer.addr),
                ..peer
            },
            None => peer,
        })
    }
}

/// Reads exactly one header's bytes: version 2's length is in its fixed
/// 16-byte part; version 1 ends at its CRLF (after as few as 15 bytes), so
/// it is read a byte at a time and nothing after it is taken.
async fn read_header<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Vec<u8>, ProxyError> {
    // Eight bytes tell a header from anything else (an AMQP client sends
    // just eight and then waits), so a client without one is refused at once.
    let mut header = vec![0; 8];
    stream.read_exact(&mut header).await?;
    if V2_SIGNATURE.starts_with(&header) {
        header.resize(16, 0);
        stream.read_exact(&mut header[8..]).await?;
        let len = u16::from_be_bytes([header[14], header[15]]) as usize;
        header.resize(16 + len, 0);
        stream.read_exact(&mut header[16..]).await?;
        return Ok(header);
    }
    if !header.starts_with(b"PROXY ") {
        return Err(ProxyError::Missing);
    }
    while !header.ends_with(b"\r\n") {
        if header.len() >= V1_MAX_LEN {
            return Err(ProxyError::Malformed("version 1 header longer than 107 bytes".into()));
        }
        header.push(stream.read_u8().await?);
    }
    Ok(header)
}

/// A header's source and destination as socket addresses. The four address
/// types of `ppp` (v1 and v2, IPv4 and IPv6) share field names but no trait.
macro_rules! ends {
    ($a:expr) => {
        Some((
            SocketAddr::new($a.source_address.into(), $a.source_port),
            SocketAddr::new($a.destination_address.into(), $a.destination_port),
        ))
    };
}

/// The source and destination a whole header names, or `None` for one that
/// names none.
fn parse(header: &[u8]) -> Result<Option<(SocketAddr, SocketAddr)>, ProxyError> {
    let malformed = |e: &dyn std::fmt::Display| ProxyError::Malformed(e.to_string());
    if header.starts_with(V2_SIGNATURE) {
        use ppp::v2::{Addresses, Command, Header};
        let h = Header::try_from(header).map_err(|e| malformed(&e))?;
        if h.command == Command::Local {
            return Ok(None);
        }
        return Ok(match h.addresses {
            Addresses::IPv4(a) => ends!(a),
            Addresses::IPv6(a) => ends!(a),
            Addresses::Unspecified | Addresses::Unix(_) => None,
        });
    }
    use ppp::v1::{Addresses, Header};
    let h = Header::try_from(header).map_err(|e| malformed(&e))?;
    Ok(match h.addresses {
        Addresses::Tcp4(a) => ends!(a),
        Addresses::Tcp6(a) => ends!(a),
        Addresses::Unknown => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(addr: &str) -> Peer {
        let addr = addr.parse().expect("addr");
        Peer::plain(addr, "127.0.0.1:5672".parse().expect("addr"))
    }

    async fn receive(policy: &ProxyPolicy, from: &str, bytes: &[u8]) -> (Result<Peer, ProxyError>, Vec<u8>) {
        let mut stream = bytes;
        let result = policy.receive(&mut stream, peer(from)).await;
        (result, stream.to_vec())
    }

    #[tokio::test]
    async fn version_1_gives_the_client_address_and_leaves_the_rest() {
        let policy = ProxyPolicy::parse("").expect("empty");
        let bytes = b"PROXY TCP4 192.0.2.9 127.0.0.1 40000 5672\r\nAMQP\x00\x00\x09\x01";
        let (peer, rest) = receive(&policy, "10.0.0.1:1234", bytes).await;
        let peer = peer.expect("accepted");
        assert_eq!(peer.addr, "192.0.2.9:40000".parse().expect("addr"));
        assert_eq!(peer.local, "127.0.0.1:5672".parse().expect("addr"));
        assert_eq!(peer.proxy, Some("10.0.0.1:1234".parse().expect("addr")));
        assert_eq!(rest, b"AMQP\x00\x00\x09\x01");
    }

    #[tokio::test]
    async fn version_2_with_tlvs_gives_the_client_address() {
        let policy = ProxyPolicy::parse("10.0.0.0/8").expect("cidr");
        let header = ppp::v2::Builder::with_addresses(
            ppp::v2::Version::Two | ppp::v2::Command::Proxy,
            ppp::v2::Protocol::Stream,
            (
                "[2001:db8::7]:50000".parse::<SocketAddr>().expect("addr"),
                "[2001:db8::1]:5671".parse::<SocketAddr>().expect("addr"),
            ),
        )
        .write_tlv(ppp::v2::Type::NoOp, b"pad")
        .expect("tlv")
        .build()
        .expect("header");
        let mut bytes = header.clone();
        bytes.extend_from_slice(b"AMQP");
        let (peer, rest) = receive(&policy, "10.1.2.3:999", &bytes).await;
        assert_eq!(
            peer.expect("accepted").addr,
            "[2001:db8::7]:50000".parse().expect("addr")
        );
        assert_eq!(rest, b"AMQP");
    }

    #[tokio::test]
    async fn local_and_unknown_keep_the_real_addresses() {
        let policy = ProxyPolicy::parse("").expect("empty");
        let (p, rest) = receive(&policy, "10.0.0.1:1", b"PROXY UNKNOWN\r\nX").await;
        assert_eq!(p.expect("accepted").addr, "10.0.0.1:1".parse().expect("addr"));
        assert_eq!(rest, b"X");
        let local = ppp::v2::Builder::new(
            ppp::v2::Version::Two | ppp::v2::Command::Local,
            ppp::v2::AddressFamily::Unspecified | ppp::v2::Protocol::Unspecified,
        )
        .build()
        .expect("header");
        let (p, _) = receive(&policy, "10.0.0.1:1", &local).await;
        assert_eq!(p.expect("accepted").proxy, None);
    }

    #[tokio::test]
    async fn untrusted_missing_and_malformed_headers_are_refused() {
        let policy = ProxyPolicy::parse("10.0.0.1, 192.168.0.0/24").expect("list");
        let v1 = b"PROXY TCP4 192.0.2.9 127.0.0.1 40000 5672\r\n";
        assert!(matches!(
            receive(&policy, "192.168.1.1:1", v1).await.0,
            Err(ProxyError::Untrusted(_))
        ));
        assert!(receive(&policy, "192.168.0.77:1", v1).await.0.is_ok());
        assert!(receive(&policy, "[::ffff:10.0.0.1]:1", v1).await.0.is_ok());
        let (r, _) = receive(&policy, "10.0.0.1:1", b"AMQP\x00\x00\x09\x01 and more").await;
        assert!(matches!(r, Err(ProxyError::Missing)), "{r:?}");
        let (r, _) = receive(&policy, "10.0.0.1:1", b"PROXY TCP4 nonsense here please\r\n").await;
        assert!(matches!(r, Err(ProxyError::Malformed(_))), "{r:?}");
        let long = [b"PROXY TCP4 ".as_slice(), &[b'1'; 200]].concat();
        let (r, _) = receive(&policy, "10.0.0.1:1", &long).await;
        assert!(matches!(r, Err(ProxyError::Malformed(_))), "{r:?}");
        let (r, _) = receive(&policy, "10.0.0.1:1", b"PROXY TCP4 1.2").await;
        assert!(matches!(r, Err(ProxyError::Io(_))), "{r:?}");
    }

    #[test]
    fn trusted_sources_parse_or_name_the_bad_entry() {
        assert!(ProxyPolicy::parse("10.0.0.1 2001:db8::/32,192.168.0.0/16").is_ok());
        let err = ProxyPolicy::parse("10.0.0.1, example.com").expect_err("bad");
        assert_eq!(err.0, "example.com");
    }
}
