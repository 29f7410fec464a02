//! A small client for the management HTTP API of a [`TestBroker`].

use reqwest::{Client, Method, StatusCode};
use serde_json::Value;

use super::{TestBroker, within};

/// The default administrator's credentials.
pub const GUEST: Option<(&str, &str)> = Some(("guest", "guest"));

/// Talks to one broker's management API.
pub struct Api {
    /// `http://host:port` of the API.
    pub base: String,
    client: Client,
}

impl Api {
    /// A client for `b`'s API.
    pub fn new(b: &TestBroker) -> Self {
        Api::at(format!("http://{}", b.server().http_addr()))
    }

    /// A client for the API at `base` (`http://host:port`), such as a relay
    /// in front of the broker.
    pub fn at(base: String) -> Self {
        Api {
            base,
            client: Client::new(),
        }
    }

    /// A client for `b`'s API whose requests come from `source` (a loopback
    /// address other than 127.0.0.1 looks like another host to the broker).
    pub fn from_source(b: &TestBroker, source: std::net::IpAddr) -> Self {
        Api {
            base: format!("http://{}", b.server().http_addr()),
            client: Client::builder().local_address(source).build().expect("HTTP client"),
        }
    }

    /// Sends a request with a raw body; returns status, `Location` and JSON body
    /// (`Value::Null` when the body is not JSON).
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        auth: Option<(&str, &str)>,
        body: Option<String>,
    ) -> (StatusCode, Option<String>, Value) {
        let mut req = self.client.request(method, format!("{}{}", self.base, path));
        if let Some((u, p)) = auth {
            req = req.basic_auth(u, Some(p));
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        let resp = within("HTTP request", req.send()).await.expect("request");
        let status = resp.status();
        let location = resp
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = resp.text().await.unwrap_or_default();
        (status, location, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Sends a JSON request as `auth`; returns status and JSON body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        auth: Option<(&str, &str)>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let (status, _, body) = self.raw(method, path, auth, body.map(|b| b.to_string())).await;
        (status, body)
    }

    /// GET as guest.
    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, GUEST, None).await
    }

    /// GET as guest, asserting 200.
    pub async fn get_ok(&self, path: &str) -> Value {
        let (status, body) = self.get(path).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
        body
    }

    /// POST as guest; returns status and `Location`.
    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Option<String>) {
        let (status, location, _) = self.raw(Method::POST, path, GUEST, Some(body.to_string())).await;
        (status, location)
    }

    /// PUT as guest; returns the status.
    pub async fn put(&self, path: &str, body: Value) -> StatusCode {
        self.call(Method::PUT, path, GUEST, Some(body)).await.0
    }

    /// DELETE as guest; returns the status.
    pub async fn delete(&self, path: &str) -> StatusCode {
        self.call(Method::DELETE, path, GUEST, None).await.0
    }
}

/// Percent-encodes `s` for one path segment of an API URL.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
