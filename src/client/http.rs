//! Outbound HTTP/1.1 over TCP or TLS, for the broker's own requests to other
//! services (shovels posting to webhooks; the identity provider's signing
//! keys, and the token for the UI's sign-in code). HTTPS servers are
//! verified against the system's CA certificates.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{ACCEPT, CONTENT_TYPE, HOST, USER_AGENT};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::uri::TlsParams;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The URL cannot be used.
    #[error("invalid URL {0:?}")]
    BadUrl(String),
    /// Connecting or talking to the server failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// HTTP-level failure.
    #[error("{0}")]
    Http(#[from] hyper::Error),
    /// The server did not answer in time.
    #[error("timed out")]
    Timeout,
    /// The server answered with something other than 2xx.
    #[error("the server answered {0}")]
    Status(hyper::StatusCode),
    /// The answer was not what was asked for.
    #[error("unusable answer: {0}")]
    Body(String),
}

/// Starts HTTP/1.1 on `stream`; a task drives the connection until the
/// sender is dropped.
async fn handshake<S>(stream: S) -> Result<SendRequest<Full<Bytes>>, HttpError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// Opens a connection to the server of `uri` (`http` or `https`).
pub async fn connect(uri: &Uri) -> Result<SendRequest<Full<Bytes>>, HttpError> {
    let host = uri.host().ok_or_else(|| HttpError::BadUrl(uri.to_string()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(HttpError::BadUrl(uri.to_string())),
    };
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let tcp = TcpStream::connect((host, port)).await?;
    tcp.set_nodelay(true)?;
    if tls {
        let params = TlsParams {
            verify: true,
            ca_file: None,
        };
        handshake(super::tls::connect(tcp, host, &params).await?).await
    } else {
        handshake(tcp).await
    }
}

/// GETs `url` and parses its JSON answer, which must come within `timeout`
/// and be at most `limit` bytes.
pub async fn get_json(url: &str, timeout: Duration, limit: usize) -> Result<serde_json::Value, HttpError> {
    send_json(url, Method::GET, None, timeout, limit).await
}

/// POSTs the form `fields` (`application/x-www-form-urlencoded`) to `url`
/// and parses its JSON answer, within `timeout` and `limit` as [`get_json`].
pub async fn post_form_json(
    url: &str,
    fields: &[(&str, &str)],
    timeout: Duration,
    limit: usize,
) -> Result<serde_json::Value, HttpError> {
    let form = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish();
    send_json(url, Method::POST, Some(form), timeout, limit).await
}

/// Sends one request with an optional form body and parses the JSON answer.
async fn send_json(
    url: &str,
    method: Method,
    form: Option<String>,
    timeout: Duration,
    limit: usize,
) -> Result<serde_json::Value, HttpError> {
    let uri: Uri = url.parse().map_err(|_| HttpError::BadUrl(url.to_owned()))?;
    let mut request = Request::builder()
        .method(method)
        .uri(uri.path_and_query().map(|pq| pq.as_str()).unwrap_or("/"))
        .header(HOST, uri.authority().map(|a| a.as_str()).unwrap_or_default())
        .header(USER_AGENT, "lavinmq")
        .header(ACCEPT, "application/json");
    if form.is_some() {
        request = request.header(CONTENT_TYPE, "application/x-www-form-urlencoded");
    }
    let request = request
        .body(Full::new(form.map(Bytes::from).unwrap_or_default()))
        .map_err(|e| HttpError::BadUrl(format!("{url}: {e}")))?;
    let fetching = async {
        let mut sender = connect(&uri).await?;
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        if !status.is_success() {
            return Err(HttpError::Status(status));
        }
        let body = Limited::new(response.into_body(), limit)
            .collect()
            .await
            .map_err(|e| HttpError::Body(e.to_string()))?
            .to_bytes();
        serde_json::from_slice(&body).map_err(|e| HttpError::Body(e.to_string()))
    };
    tokio::time::timeout(timeout, fetching)
        .await
        .map_err(|_| HttpError::Timeout)?
}
