//! Who is at the other end of a connection and how it arrived, so protocol
//! adapters can log, authenticate and list it the same way whatever the
//! transport (TCP, TLS, WebSocket, Unix socket, behind a PROXY protocol
//! load balancer).

use std::net::SocketAddr;

/// The two ends of a client connection and, when it came over TLS, what the
/// handshake established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The client's address.
    pub addr: SocketAddr,
    /// The broker's address the client connected to.
    pub local: SocketAddr,
    /// Set when the connection is encrypted.
    pub tls: Option<TlsPeer>,
    /// The load balancer's address, when the connection came through one
    /// speaking the PROXY protocol ([`Peer::addr`] is then the client's).
    pub proxy: Option<SocketAddr>,
    /// Set for a connection the broker opened to itself (a shovel's local
    /// end): the user it acts as, trusted without a password because the
    /// broker chose it.
    pub in_process_user: Option<String>,
}

/// What a TLS handshake told about the client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsPeer {
    /// The server name the client asked for (SNI), if it sent one.
    pub server_name: Option<String>,
    /// The subject common name of the client certificate. Only certificates
    /// that chained to the configured CA get this far, so it identifies the
    /// client (SASL EXTERNAL for AMQP, the default user name for MQTT).
    pub client_cn: Option<String>,
    /// Negotiated protocol version, as RabbitMQ names it (`tlsv1.3`).
    pub protocol: &'static str,
    /// Negotiated cipher suite, by its IANA name.
    pub cipher: &'static str,
}

impl Peer {
    /// An unencrypted connection.
    pub fn plain(addr: SocketAddr, local: SocketAddr) -> Peer {
        Peer {
            addr,
            local,
            tls: None,
            proxy: None,
            in_process_user: None,
        }
    }

    /// A connection the broker opens to itself, acting as `user`. It is shown
    /// as coming from the loopback address.
    pub fn in_process(user: &str) -> Peer {
        Peer {
            in_process_user: Some(user.to_owned()),
            ..Peer::unix()
        }
    }

    /// A connection over a Unix socket. It has no IP address; it is shown as
    /// the loopback address, which is what it is: a process on this host
    /// (so loopback-only users may log in over it).
    pub fn unix() -> Peer {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        Peer::plain(loopback, loopback)
    }

    /// Whether the connection is encrypted.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// What the management API shows of the connection's encryption.
    pub fn tls_info(&self) -> Option<crate::core::connections::TlsInfo> {
        self.tls.as_ref().map(|t| crate::core::connections::TlsInfo {
            protocol: t.protocol,
            cipher: t.cipher,
            peer_cn: t.client_cn.clone(),
        })
    }

    /// Who the connection is without a password (SASL EXTERNAL): the
    /// in-process user, else the verified client certificate's common name.
    pub fn external_identity(&self) -> Option<&str> {
        self.in_process_user.as_deref().or_else(|| self.client_cn())
    }

    /// The verified client certificate's common name, if any.
    pub fn client_cn(&self) -> Option<&str> {
        self.tls.as_ref()?.client_cn.as_deref()
    }
}
