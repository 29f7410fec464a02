//! A shovel's HTTP destination: each message is POSTed to a URL, its body as
//! the request body and its properties as headers (as LavinMQ's shovels do).
//! A message leaves the source only after a 2xx answer; any other answer
//! ends the session, so the message goes back to its queue and is posted
//! again when the shovel reconnects.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderName, HeaderValue, USER_AGENT};
use hyper::{Method, Request, Uri};

use crate::client::http::HttpError;
use crate::wire::{BasicProperties, FieldValue};

/// How long connecting and each request may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Why a message could not be posted.
pub type WebhookError = HttpError;

/// An open connection to a webhook URL.
pub struct Webhook {
    uri: Uri,
    authorization: Option<HeaderValue>,
    shovel: HeaderValue,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Webhook {
    /// Prepares posting to `url` for shovel `name`; connects on first use.
    pub fn new(url: &str, name: &str) -> Result<Webhook, WebhookError> {
        let uri: Uri = url.parse().map_err(|_| WebhookError::BadUrl(url.to_owned()))?;
        let authorization = uri.authority().and_then(|a| {
            let (userinfo, _) = a.as_str().rsplit_once('@')?;
            let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, userinfo);
            HeaderValue::from_str(&format!("Basic {encoded}")).ok()
        });
        Ok(Webhook {
            uri,
            authorization,
            shovel: HeaderValue::from_str(name).unwrap_or(HeaderValue::from_static("shovel")),
            sender: None,
        })
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, WebhookError> {
        crate::client::http::connect(&self.uri).await
    }

    /// POSTs one message; `Ok` only for a 2xx answer.
    pub async fn post(&mut self, properties: &BasicProperties, body: Bytes) -> Result<(), WebhookError> {
        let request = self.request(properties, body)?;
        let sending = async {
            let mut sender = match self.sender.take() {
                Some(s) if !s.is_closed() => s,
                _ => self.connect().await?,
            };
            sender.ready().await?;
            let response = sender.send_request(request).await?;
            let status = response.status();
            // Read the answer out so that the connection can be used again.
            response.into_body().collect().await?;
            self.sender = Some(sender);
            if status.is_success() {
                Ok(())
            } else {
                Err(WebhookError::Status(status))
            }
        };
        tokio::time::timeout(TIMEOUT, sending)
            .await
            .map_err(|_| WebhookError::Timeout)?
    }

    /// The request for one message: the path of the URL, else the message's
    /// `uri_path` header, else `/`.
    fn request(&self, p: &BasicProperties, body: Bytes) -> Result<Request<Full<Bytes>>, WebhookError> {
        let headers = p.headers.as_ref();
        let path = match self.uri.path_and_query().map(|pq| pq.as_str()) {
            Some(pq) if pq != "/" => pq.to_owned(),
            _ => headers
                .and_then(|h| h.get("uri_path"))
                .and_then(FieldValue::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| "/".to_owned()),
        };
        let authority = self.uri.authority().map(|a| a.as_str()).unwrap_or_default();
        let host = authority.rsplit('@').next().unwrap_or_default();
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(HOST, host)
            .header(USER_AGENT, "lavinmq")
            .header("x-shovel", self.shovel.clone());
        if let Some(auth) = &self.authorization {
            req = req.header(AUTHORIZATION, auth.clone());
        }
        let text = |s: &crate::wire::ShortStr| HeaderValue::from_bytes(s.as_bytes()).ok();
        if let Some(v) = p.content_type.as_ref().and_then(text) {
            req = req.header(CONTENT_TYPE, v);
        }
        for (name, value) in [
            ("x-message-id", &p.message_id),
            ("x-correlation-id", &p.correlation_id),
            ("x-content-encoding", &p.content_encoding),
            ("x-type", &p.kind),
            ("x-app-id", &p.app_id),
        ] {
            if let Some(v) = value.as_ref().and_then(text) {
                req = req.header(name, v);
            }
        }
        for (key, value) in headers.into_iter().flat_map(|h| h.iter()) {
            let Ok(name) = HeaderName::from_bytes(format!("x-{key}").as_bytes()) else {
                continue;
            };
            let shown = match value {
                FieldValue::LongStr(b) | FieldValue::ByteArray(b) => HeaderValue::from_bytes(b).ok(),
                other => HeaderValue::from_str(&crate::core::table_json::value_to_json(other).to_string()).ok(),
            };
            if let Some(v) = shown {
                req = req.header(name, v);
            }
        }
        req.body(Full::new(body))
            .map_err(|e| WebhookError::BadUrl(format!("{}: {e}", self.uri)))
    }
}
