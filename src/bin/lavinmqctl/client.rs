//! One HTTP/1.1 request to the broker, over the control socket or TCP. Uses
//! hyper's connection-level client (hyper is in the build already through
//! axum), so response framing (Content-Length, chunked) is hyper's job. Each
//! request opens its own connection: a command makes a handful at most.

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderName, USER_AGENT};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

use crate::error::{CtlError, CtlResult};
use crate::target::Target;

/// A response, read in full.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: StatusCode,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The body.
    pub body: Bytes,
}

/// Sends requests to one broker.
#[derive(Debug)]
pub struct Client {
    target: Target,
}

impl Client {
    /// A client for `target`.
    pub fn new(target: Target) -> Self {
        Client { target }
    }

    /// Sends `method path` with an optional JSON `body` and extra `headers`,
    /// and reads the whole response. Fails only when no HTTP exchange took
    /// place; an error status is a successful [`Response`].
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        headers: &[(HeaderName, String)],
    ) -> CtlResult<Response> {
        let mut req = Request::builder()
            .method(method)
            .header(USER_AGENT, concat!("lavinmqctl/", env!("CARGO_PKG_VERSION")));
        match &self.target {
            Target::Unix(_) => req = req.uri(path).header(HOST, "localhost"),
            Target::Tcp(e) => {
                req = req
                    .uri(format!("{}{path}", e.base_path))
                    .header(HOST, e.authority.as_str());
                if let Some((user, password)) = &e.credentials {
                    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                    req = req.header(AUTHORIZATION, format!("Basic {token}"));
                }
            }
        }
        if body.is_some() {
            req = req.header(CONTENT_TYPE, "application/json");
        }
        for (name, value) in headers {
            req = req.header(name, value.as_str());
        }
        let req = req.body(Full::new(body.unwrap_or_default()))?;
        let target = self.target.describe();
        match &self.target {
            Target::Unix(path) => {
                let stream = UnixStream::connect(path).await.map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => CtlError::SocketMissing(path.clone()),
                    std::io::ErrorKind::PermissionDenied => CtlError::PermissionDenied(path.clone()),
                    _ => CtlError::Connect {
                        target: target.clone(),
                        source: e,
                    },
                })?;
                exchange(stream, req, &target).await
            }
            Target::Tcp(e) => {
                let stream =
                    TcpStream::connect((e.host.as_str(), e.port))
                        .await
                        .map_err(|source| CtlError::Connect {
                            target: target.clone(),
                            source,
                        })?;
                exchange(stream, req, &target).await
            }
        }
    }
}

/// Runs one request/response exchange on a fresh connection.
async fn exchange<S>(stream: S, req: Request<Full<Bytes>>, target: &str) -> CtlResult<Response>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let http = |source| CtlError::Http {
        target: target.to_string(),
        source,
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(http)?;
    // The connection task drives the socket; it ends once `sender` is dropped.
    let driver = tokio::spawn(conn);
    let resp = sender.send_request(req).await.map_err(http)?;
    let status = resp.status();
    let content_type = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = resp.into_body().collect().await.map_err(http)?.to_bytes();
    drop(sender);
    driver.abort();
    Ok(Response {
        status,
        content_type,
        body,
    })
}
