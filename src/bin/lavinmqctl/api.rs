//! The management API as the commands use it: JSON requests whose status is
//! checked against what success looks like, the broker's reason surfaced on
//! failure, paged listings read to the end, and path segments encoded.

use bytes::Bytes;
use hyper::header::HeaderName;
use hyper::{Method, StatusCode};
use serde_json::Value;

use crate::client::{Client, Response};
use crate::error::{CtlError, CtlResult};
use crate::percent::encode_segment;

/// Largest page the API hands out; listings are read page by page.
const PAGE_SIZE: usize = 500;

/// `/api/` followed by the percent-encoded `segments`.
pub fn path<const N: usize>(segments: [&str; N]) -> String {
    let mut out = String::from("/api");
    for s in segments {
        out.push('/');
        out.push_str(&encode_segment(s));
    }
    out
}

/// The broker's API, reached through a [`Client`].
#[derive(Debug)]
pub struct Api {
    client: Client,
}

impl Api {
    /// Uses `client` for every request.
    pub fn new(client: Client) -> Self {
        Api { client }
    }

    /// Sends a request with an optional JSON body; any status outside `ok`
    /// becomes [`CtlError::Api`] with the broker's reason.
    pub async fn call(&self, method: Method, path: &str, body: Option<&Value>, ok: &[u16]) -> CtlResult<Response> {
        let body = body.map(|b| Bytes::from(b.to_string()));
        self.call_raw(method, path, body, &[], ok).await
    }

    /// Like [`Api::call`], with a body that is already serialized and extra headers.
    pub async fn call_raw(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        headers: &[(HeaderName, String)],
        ok: &[u16],
    ) -> CtlResult<Response> {
        let resp = self.client.send(method, path, body, headers).await?;
        if ok.contains(&resp.status.as_u16()) {
            Ok(resp)
        } else {
            Err(api_error(&resp))
        }
    }

    /// GETs `path` (200 expected) and parses its JSON body.
    pub async fn get_json(&self, path: &str) -> CtlResult<Value> {
        let resp = self.call(Method::GET, path, None, &[200]).await?;
        parse_json(path, &resp.body)
    }

    /// Every item of the listing at `path`, following pages until the last.
    pub async fn get_list(&self, path: &str) -> CtlResult<Vec<Value>> {
        let mut items = Vec::new();
        let mut page = 1;
        loop {
            let value = self
                .get_json(&format!("{path}?page={page}&page_size={PAGE_SIZE}"))
                .await?;
            let bad = |detail: &str| CtlError::BadResponse {
                path: path.to_string(),
                detail: detail.to_string(),
            };
            match value {
                // A broker that does not page answers with the whole list.
                Value::Array(all) => return Ok(all),
                Value::Object(mut obj) => {
                    match obj.remove("items") {
                        Some(Value::Array(part)) => items.extend(part),
                        _ => return Err(bad("a page without items")),
                    }
                    let page_count = obj.get("page_count").and_then(Value::as_u64).unwrap_or(1);
                    if page >= page_count {
                        return Ok(items);
                    }
                    page += 1;
                }
                _ => return Err(bad("expected a list")),
            }
        }
    }
}

/// Parses a JSON body, naming the request when it is not JSON.
pub fn parse_json(path: &str, body: &[u8]) -> CtlResult<Value> {
    serde_json::from_slice(body).map_err(|e| CtlError::BadResponse {
        path: path.to_string(),
        detail: format!("invalid JSON: {e}"),
    })
}

/// The error a failed response stands for: the `reason` of RabbitMQ's JSON
/// error body, else the body as text (unless it is an HTML page), else the
/// status's own wording.
fn api_error(resp: &Response) -> CtlError {
    let from_json = serde_json::from_slice::<Value>(&resp.body).ok().and_then(|v| {
        ["reason", "error"].iter().find_map(|k| {
            v.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        })
    });
    let is_html = resp.content_type.as_deref().is_some_and(|t| t.starts_with("text/html"));
    let text = String::from_utf8_lossy(&resp.body).trim().to_string();
    let reason = from_json
        .or_else(|| (!is_html && !text.is_empty()).then_some(text))
        .unwrap_or_else(|| resp.status.canonical_reason().unwrap_or("error").to_string());
    CtlError::Api {
        status: resp.status,
        reason,
    }
}

/// Whether `err` is the broker saying the object does not exist.
pub fn is_not_found(err: &CtlError) -> bool {
    matches!(err, CtlError::Api { status, .. } if *status == StatusCode::NOT_FOUND)
}
