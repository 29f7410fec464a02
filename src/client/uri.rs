//! `amqp://user:password@host:port/vhost`, `amqps://...`, `mqtt://...` and
//! `mqtts://...` parsing (the subset lavinmqperf needs).

use std::fmt;
use std::path::PathBuf;

/// Where and as whom to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpUri {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port (default 5672).
    pub port: u16,
    /// User name for PLAIN (default guest).
    pub user: String,
    /// Password for PLAIN (default guest).
    pub password: String,
    /// Virtual host (default `/`).
    pub vhost: String,
    /// Set for `amqps://` and `mqtts://`: connect over TLS.
    pub tls: Option<TlsParams>,
    /// `?heartbeat=SECONDS`, as in RabbitMQ's URIs: the heartbeat interval
    /// to ask for instead of the program's default.
    pub heartbeat: Option<u16>,
}

/// How an `amqps://` or `mqtts://` URI asks for the server to be verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsParams {
    /// Verify the server's certificate and name; `?verify=none` turns it off
    /// (for self-signed test certificates).
    pub verify: bool,
    /// CA certificates (PEM) to verify against instead of the system's
    /// (`?cacertfile=PATH`, RabbitMQ's parameter name).
    pub ca_file: Option<PathBuf>,
}

impl fmt::Display for AmqpUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls.is_some() { "amqps" } else { "amqp" };
        if self.host.contains(':') {
            write!(f, "{scheme}://{}@[{}]:{}", self.user, self.host, self.port)
        } else {
            write!(f, "{scheme}://{}@{}:{}", self.user, self.host, self.port)
        }
    }
}

/// Parses an AMQP URI. `amqps://` means TLS (port 5671 by default), with the
/// query parameters `verify=none` and `cacertfile=PATH`; other parameters
/// are accepted and ignored.
pub fn parse(input: &str) -> Result<AmqpUri, String> {
    let mut uri = if input.starts_with("amqps://") {
        let mut uri = parse_scheme(input, "amqps", 5671)?;
        uri.tls = Some(tls_params(input)?);
        uri
    } else {
        parse_scheme(input, "amqp", 5672)?
    };
    uri.heartbeat = query(input)
        .find(|(k, _)| *k == "heartbeat")
        .map(|(_, v)| {
            v.parse::<u16>()
                .map_err(|_| format!("invalid URI {input:?}: heartbeat={v} is not a number of seconds"))
        })
        .transpose()?;
    Ok(uri)
}

/// The `key=value` pairs of a URI's query (values not decoded).
fn query(input: &str) -> impl Iterator<Item = (&str, &str)> {
    input
        .split('#')
        .next()
        .unwrap_or("")
        .split_once('?')
        .map_or("", |(_, q)| q)
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
}

/// The TLS parameters in the query of an `amqps://` or `mqtts://` URI.
fn tls_params(input: &str) -> Result<TlsParams, String> {
    let mut params = TlsParams {
        verify: true,
        ca_file: None,
    };
    for (key, value) in query(input) {
        let value = decode(value).map_err(|e| format!("invalid URI {input:?}: {e}"))?;
        match key {
            "verify" => {
                params.verify = match value.as_str() {
                    "none" | "verify_none" | "false" => false,
                    "peer" | "verify_peer" | "true" => true,
                    other => return Err(format!("invalid URI {input:?}: verify={other} (use none or peer)")),
                }
            }
            "cacertfile" => params.ca_file = Some(PathBuf::from(value)),
            _ => {}
        }
    }
    Ok(params)
}

/// Parses an MQTT URI, `mqtt://user:password@host:port` (port 1883 by
/// default; the path, if any, is ignored by MQTT clients). `mqtts://` means
/// TLS (port 8883 by default) with the same query parameters as `amqps://`.
pub fn parse_mqtt(input: &str) -> Result<AmqpUri, String> {
    if input.starts_with("mqtts://") {
        let mut uri = parse_scheme(input, "mqtts", 8883)?;
        uri.tls = Some(tls_params(input)?);
        return Ok(uri);
    }
    parse_scheme(input, "mqtt", 1883)
}

/// Parses a stream protocol URI as RabbitMQ's stream clients write it,
/// `rabbitmq-stream://user:password@host:port/vhost` (port 5552 by
/// default); `rabbitmq-stream+tls://` means TLS (port 5551 by default) with
/// the same query parameters as `amqps://`.
pub fn parse_stream(input: &str) -> Result<AmqpUri, String> {
    if let Some(rest) = input.strip_prefix("rabbitmq-stream+tls://") {
        let mut uri = parse_scheme(&format!("rabbitmq-stream://{rest}"), "rabbitmq-stream", 5551)?;
        uri.tls = Some(tls_params(input)?);
        return Ok(uri);
    }
    parse_scheme(input, "rabbitmq-stream", 5552)
}

fn parse_scheme(input: &str, scheme: &str, default_port: u16) -> Result<AmqpUri, String> {
    let bad = |why: &str| format!("invalid URI {input:?}: {why}");
    let rest = if let Some(rest) = input.strip_prefix(scheme).and_then(|r| r.strip_prefix("://")) {
        rest
    } else if input.starts_with(&format!("{scheme}s://")) {
        return Err(bad(&format!("{scheme}s (TLS) is not supported")));
    } else {
        return Err(bad(&format!("scheme must be {scheme}://")));
    };
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (userinfo, hostport) = match authority.rfind('@') {
        Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
        None => (None, authority),
    };
    let (user, password) = match userinfo {
        Some(ui) => match ui.split_once(':') {
            Some((u, p)) => (decode(u).map_err(|e| bad(&e))?, decode(p).map_err(|e| bad(&e))?),
            None => (decode(ui).map_err(|e| bad(&e))?, String::new()),
        },
        None => ("guest".to_owned(), "guest".to_owned()),
    };
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or_else(|| bad("unterminated IPv6 address"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(bad("garbage after IPv6 address")),
        };
        (h.to_owned(), port)
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (hostport.to_owned(), None),
        }
    };
    let port = match port {
        Some("") | None => default_port,
        Some(p) => p.parse::<u16>().map_err(|_| bad("bad port"))?,
    };
    let host = if host.is_empty() { "localhost".to_owned() } else { host };
    let vhost = match path {
        "" | "/" => "/".to_owned(),
        p => decode(&p[1..]).map_err(|e| bad(&e))?,
    };
    Ok(AmqpUri {
        host,
        port,
        user,
        password,
        vhost,
        tls: None,
        heartbeat: None,
    })
}

/// Percent-decodes a URI component into UTF-8.
fn decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or("truncated percent escape")?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| "bad percent escape")?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "percent escape is not UTF-8".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let u = parse("amqp://guest:guest@localhost").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.vhost.as_str()), ("localhost", 5672, "/"));
        let u = parse("amqp://").unwrap();
        assert_eq!(
            (u.host.as_str(), u.user.as_str(), u.password.as_str()),
            ("localhost", "guest", "guest")
        );
    }

    #[test]
    fn full() {
        let u = parse("amqp://us%40r:p%3Ass@127.0.0.1:5699/%2F?heartbeat=0").unwrap();
        assert_eq!(u.user, "us@r");
        assert_eq!(u.password, "p:ss");
        assert_eq!(u.host, "127.0.0.1");
        assert_eq!(u.port, 5699);
        assert_eq!(u.vhost, "/");
        let u = parse("amqp://a:b@[::1]:1234/vh").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.vhost.as_str()), ("::1", 1234, "vh"));
    }

    #[test]
    fn mqtt() {
        let u = parse_mqtt("mqtt://localhost").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("localhost", 1883));
        assert_eq!(parse_mqtt("mqtt://u:p@h:1999").unwrap().port, 1999);
        assert!(parse_mqtt("amqp://h").is_err());
        assert_eq!(parse_mqtt("mqtt://h?verify=none").unwrap().tls, None);
    }

    #[test]
    fn mqtts() {
        let u = parse_mqtt("mqtts://u:p@broker.example?verify=none").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.user.as_str()),
            ("broker.example", 8883, "u")
        );
        assert_eq!(u.tls.as_ref().map(|t| t.verify), Some(false));
        let u = parse_mqtt("mqtts://localhost:8884?cacertfile=%2Ftmp%2Fca.pem").unwrap();
        assert_eq!(u.port, 8884);
        assert_eq!(u.tls.unwrap().ca_file, Some(PathBuf::from("/tmp/ca.pem")));
        assert!(parse_mqtt("mqtts://localhost?verify=maybe").is_err());
    }

    #[test]
    fn amqps() {
        let u = parse("amqps://u:p@broker.example:5999/v?verify=none&heartbeat=0").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.vhost.as_str()),
            ("broker.example", 5999, "v")
        );
        assert_eq!(u.tls.as_ref().map(|t| t.verify), Some(false));
        assert_eq!(u.to_string(), "amqps://u@broker.example:5999");
        let u = parse("amqps://localhost?cacertfile=%2Fetc%2Fca.pem").unwrap();
        assert_eq!(u.port, 5671);
        let tls = u.tls.unwrap();
        assert!(tls.verify);
        assert_eq!(tls.ca_file, Some(PathBuf::from("/etc/ca.pem")));
        assert!(parse("amqps://localhost?verify=maybe").is_err());
        assert_eq!(parse("amqp://localhost?verify=none").unwrap().tls, None);
    }

    #[test]
    fn errors() {
        assert!(parse("amqpss://localhost").is_err());
        assert!(parse("http://localhost").is_err());
        assert!(parse("amqp://h:notaport").is_err());
        assert!(parse("amqp://h/%zz").is_err());
    }
}
