//! `/api/bindings` and the binding lists of exchanges and queues, shaped like
//! RabbitMQ's management API.
//!
//! A binding is shown as `{"source", "vhost", "destination", "destination_type",
//! "routing_key", "arguments", "properties_key"}`; the default exchange is `""` in
//! the JSON and `amq.default` in paths. Every queue is listed with its implicit
//! binding from the default exchange (routing key = queue name), as RabbitMQ does.
//!
//! `properties_key` identifies a binding among those between the same source and
//! destination, as RabbitMQ packs it: `~` for an empty routing key without
//! arguments, the quoted routing key when there are no arguments, otherwise the
//! quoted routing key, `~` and a hash of the arguments. Quoting is RabbitMQ's
//! `quote_plus` (letters, digits, `.`, `-` and `_` kept, space as `+`, every other
//! byte, `~` included, as `%XX`). The hash is ours (RabbitMQ's hashes an Erlang
//! term): the first 4 bytes of the SHA-256 of the arguments' JSON with object keys
//! sorted, in unpadded base64url — 6 characters, like RabbitMQ's.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};
use super::listing::Listing;
use super::path::encode_segment;
use crate::core::binding_list::{BindingView, of_vhost};
use crate::core::definition_json::binding_def_json;
use crate::core::permissions::Access;
use crate::core::table_json::json_to_table;
use crate::core::topic_permissions::TopicAccess;
use crate::core::vhost::VHost;

/// The connection id the API acts as: no AMQP connection has it, so exclusive
/// queues of clients stay locked to the API, as they are in RabbitMQ.
const API_CONNECTION: u64 = 0;

/// A binding as RabbitMQ's API shows it: its exported shape with the
/// `properties_key` that identifies it among those between its two ends.
fn binding_json(b: &BindingView) -> Value {
    let mut json = binding_def_json(b);
    json["properties_key"] = Value::String(properties_key(&b.routing_key, &b.arguments));
    json
}

/// RabbitMQ's `properties_key` of a binding (see the module documentation).
pub fn properties_key(routing_key: &str, arguments: &Value) -> String {
    let no_args = arguments.as_object().is_none_or(Map::is_empty);
    match (routing_key.is_empty(), no_args) {
        (true, true) => "~".to_string(),
        (false, true) => quote_plus(routing_key),
        _ => format!("{}~{}", quote_plus(routing_key), arguments_hash(arguments)),
    }
}

/// Short stable hash of binding arguments: unpadded base64url of the first 4 bytes
/// of the SHA-256 of their JSON with sorted object keys.
pub fn arguments_hash(arguments: &Value) -> String {
    use base64::Engine;
    use sha2::Digest;
    let canonical = canonical_json(arguments).to_string();
    let digest = sha2::Sha256::digest(canonical.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..4])
}

/// `v` with the keys of every object inserted in sorted order, so that its text
/// does not depend on how the map keeps its keys.
fn canonical_json(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(keys.into_iter().map(|k| (k.clone(), canonical_json(&m[k]))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical_json).collect()),
        other => other.clone(),
    }
}

/// RabbitMQ's quoting of a routing key in a properties key.
fn quote_plus(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => out.push(char::from(b)),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Reverses [`quote_plus`]; a `%` not followed by two hex digits stays as it is.
fn unquote_plus(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
                continue;
            }
            (b'+', _) => out.push(b' '),
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The exchange a path names: `amq.default` is the default exchange.
fn exchange_name(path_name: &str) -> &str {
    if path_name == "amq.default" { "" } else { path_name }
}

fn to_json(bindings: impl IntoIterator<Item = BindingView>) -> Listing {
    Listing(bindings.into_iter().map(|b| binding_json(&b)).collect())
}

/// Every binding in the vhosts the user may see.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> Listing {
    to_json(s.visible_vhosts(&user).iter().flat_map(|v| of_vhost(v)))
}

/// Every binding of a vhost.
pub async fn list_vhost(State(s): State<Arc<HttpState>>, user: Authed, Path(v): Path<String>) -> ApiResult<Listing> {
    let v = s.vhost_for(&user, &v)?;
    Ok(to_json(of_vhost(&v)))
}

/// The bindings whose source is an exchange.
pub async fn exchange_source(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
) -> ApiResult<Listing> {
    let v = s.vhost_for(&user, &v)?;
    let name = exchange_name(&name);
    v.exchange(name).ok_or_else(ApiError::not_found)?;
    Ok(to_json(of_vhost(&v).into_iter().filter(|b| b.source == name)))
}

/// The bindings whose destination is an exchange.
pub async fn exchange_destination(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
) -> ApiResult<Listing> {
    let v = s.vhost_for(&user, &v)?;
    let name = exchange_name(&name);
    v.exchange(name).ok_or_else(ApiError::not_found)?;
    Ok(to_json(
        of_vhost(&v)
            .into_iter()
            .filter(|b| !b.to_queue && b.destination == name),
    ))
}

/// The bindings of a queue, the default-exchange one first.
pub async fn queue_bindings(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
) -> ApiResult<Listing> {
    let v = s.vhost_for(&user, &v)?;
    v.queue(&name).ok_or_else(ApiError::not_found)?;
    Ok(to_json(
        of_vhost(&v).into_iter().filter(|b| b.to_queue && b.destination == name),
    ))
}

/// The two ends of the bindings a path names, checked to exist.
struct Ends {
    vhost: Arc<VHost>,
    source: String,
    destination: String,
    to_queue: bool,
}

impl Ends {
    fn resolve(
        s: &HttpState,
        user: &Authed,
        v: &str,
        source: &str,
        destination: &str,
        to_queue: bool,
    ) -> ApiResult<Self> {
        let vhost = s.vhost_for(user, v)?;
        let source = exchange_name(source).to_string();
        vhost.exchange(&source).ok_or_else(ApiError::not_found)?;
        let exists = if to_queue {
            vhost.queue(destination).is_some()
        } else {
            vhost.exchange(exchange_name(destination)).is_some()
        };
        if !exists {
            return Err(ApiError::not_found());
        }
        let destination = if to_queue {
            destination.to_string()
        } else {
            exchange_name(destination).to_string()
        };
        Ok(Ends {
            vhost,
            source,
            destination,
            to_queue,
        })
    }

    /// Fails with 403 unless `user` may bind or unbind these ends, as over
    /// AMQP: write on the destination, read on the source.
    fn authorize(&self, s: &HttpState, user: &Authed) -> ApiResult<()> {
        let kind = if self.to_queue { "queue" } else { "exchange" };
        let vhost = &self.vhost.name;
        user.check(s, vhost, Access::Write, kind, &self.destination)?;
        user.check(s, vhost, Access::Read, "exchange", &self.source)
    }

    /// The bindings between the two ends.
    fn bindings(&self) -> Vec<BindingView> {
        of_vhost(&self.vhost)
            .into_iter()
            .filter(|b| b.source == self.source && b.to_queue == self.to_queue && b.destination == self.destination)
            .collect()
    }

    /// The binding a properties key (as decoded from the path) names.
    fn find(&self, props: &str) -> ApiResult<BindingView> {
        let (key, hash) = match props.split_once('~') {
            Some((k, h)) => (unquote_plus(k), h),
            None => (unquote_plus(props), ""),
        };
        self.bindings()
            .into_iter()
            .find(|b| {
                let no_args = b.arguments.as_object().is_none_or(Map::is_empty);
                b.routing_key == key
                    && if hash.is_empty() {
                        no_args
                    } else {
                        !no_args && arguments_hash(&b.arguments) == hash
                    }
            })
            .ok_or_else(ApiError::not_found)
    }

    /// The API path of one binding between the two ends.
    fn location(&self, props: &str) -> String {
        let source = if self.source.is_empty() {
            "amq.default"
        } else {
            &self.source
        };
        format!(
            "/api/bindings/{}/e/{}/{}/{}/{}",
            encode_segment(&self.vhost.name),
            encode_segment(source),
            if self.to_queue { "q" } else { "e" },
            encode_segment(&self.destination),
            encode_segment(props)
        )
    }
}

/// Routing key and arguments of a new binding, from a POST body (both optional).
fn parse_body(body: &[u8]) -> ApiResult<(String, Value)> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok((String::new(), json!({})));
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("invalid JSON: {e}")))?;
    let o = v
        .as_object()
        .ok_or_else(|| ApiError::bad_request("the body must be a JSON object"))?;
    let routing_key = match o.get("routing_key") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(k)) => k.clone(),
        Some(_) => return Err(ApiError::bad_request("routing_key must be a string")),
    };
    let arguments = match o.get("arguments") {
        None | Some(Value::Null) => json!({}),
        // Several management clients spell "no arguments" as an empty list,
        // which RabbitMQ accepts.
        Some(Value::Array(a)) if a.is_empty() => json!({}),
        Some(a @ Value::Object(_)) => a.clone(),
        Some(_) => return Err(ApiError::bad_request("arguments must be a JSON object")),
    };
    Ok((routing_key, arguments))
}

fn list_between(s: &HttpState, user: &Authed, path: (String, String, String), to_queue: bool) -> ApiResult<Listing> {
    let (v, source, destination) = path;
    let ends = Ends::resolve(s, user, &v, &source, &destination, to_queue)?;
    Ok(to_json(ends.bindings()))
}

fn create(
    s: &HttpState,
    user: &Authed,
    path: (String, String, String),
    body: &[u8],
    to_queue: bool,
) -> ApiResult<Response> {
    let (v, source, destination) = path;
    let ends = Ends::resolve(s, user, &v, &source, &destination, to_queue)?;
    ends.authorize(s, user)?;
    let (routing_key, arguments) = parse_body(body)?;
    user.check_topic(s, &ends.vhost, TopicAccess::Read, &ends.source, &routing_key)?;
    let table = json_to_table(&arguments);
    if to_queue {
        ends.vhost.bind_queue(
            &ends.destination,
            &ends.source,
            &routing_key,
            table,
            Some(API_CONNECTION),
        )?;
    } else {
        ends.vhost
            .bind_exchange(&ends.destination, &ends.source, &routing_key, table)?;
    }
    let location = ends.location(&properties_key(&routing_key, &arguments));
    let location = HeaderValue::from_str(&location).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((StatusCode::CREATED, [(header::LOCATION, location)]).into_response())
}

fn show(
    s: &HttpState,
    user: &Authed,
    path: (String, String, String, String),
    to_queue: bool,
) -> ApiResult<Json<Value>> {
    let (v, source, destination, props) = path;
    let ends = Ends::resolve(s, user, &v, &source, &destination, to_queue)?;
    Ok(Json(binding_json(&ends.find(&props)?)))
}

fn delete(
    s: &HttpState,
    user: &Authed,
    path: (String, String, String, String),
    to_queue: bool,
) -> ApiResult<StatusCode> {
    let (v, source, destination, props) = path;
    let ends = Ends::resolve(s, user, &v, &source, &destination, to_queue)?;
    ends.authorize(s, user)?;
    let b = ends.find(&props)?;
    user.check_topic(s, &ends.vhost, TopicAccess::Read, &ends.source, &b.routing_key)?;
    let table = json_to_table(&b.arguments);
    let removed = ends.vhost.remove_binding(
        &b.source,
        &b.destination,
        to_queue,
        &b.routing_key,
        &table,
        Some(API_CONNECTION),
    )?;
    if !removed {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The bindings from an exchange to a queue.
pub async fn list_eq(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(path): Path<(String, String, String)>,
) -> ApiResult<Listing> {
    list_between(&s, &user, path, true)
}

/// The bindings from an exchange to an exchange.
pub async fn list_ee(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(path): Path<(String, String, String)>,
) -> ApiResult<Listing> {
    list_between(&s, &user, path, false)
}

/// Binds a queue to an exchange: 201 with the new binding's path in `Location`.
pub async fn create_eq(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(path): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    create(&s, &user, path, &body, true)
}

/// Binds an exchange to an exchange: 201 with the new binding's path in `Location`.
pub async fn create_ee(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(path): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    create(&s, &user, path, &body, false)
}

/// One exchange-to-queue binding, by properties key.
pub async fn show_eq(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(path): Path<(String, String, String, String)>,
) -> ApiResult<Json<Value>> {
    show(&s, &user, path, true)
}

/// One exchange-to-exchange binding, by properties key.
pub async fn show_ee(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(path): Path<(String, String, String, String)>,
) -> ApiResult<Json<Value>> {
    show(&s, &user, path, false)
}

/// Removes an exchange-to-queue binding.
pub async fn delete_eq(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(path): Path<(String, String, String, String)>,
) -> ApiResult<StatusCode> {
    delete(&s, &user, path, true)
}

/// Removes an exchange-to-exchange binding.
pub async fn delete_ee(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(path): Path<(String, String, String, String)>,
) -> ApiResult<StatusCode> {
    delete(&s, &user, path, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_keys_as_rabbitmq_packs_them() {
        assert_eq!(properties_key("", &json!({})), "~");
        assert_eq!(properties_key("a.b", &json!({})), "a.b");
        assert_eq!(properties_key("logs.*", &json!({})), "logs.%2A");
        assert_eq!(properties_key("a b~c", &json!(null)), "a+b%7Ec");
        let k = properties_key("k", &json!({"x-match": "all", "a": 1}));
        let (key, hash) = k.split_once('~').unwrap();
        assert_eq!(key, "k");
        assert_eq!(hash.len(), 6);
        assert_eq!(k, properties_key("k", &json!({"a": 1, "x-match": "all"})));
        assert_ne!(k, properties_key("k", &json!({"a": 2, "x-match": "all"})));
        assert!(properties_key("", &json!({"a": 1})).starts_with('~'));
    }

    #[test]
    fn unquote_reverses_quote() {
        for s in ["", "a.b", "a b", "x~y", "50%", "é/#*", "+"] {
            assert_eq!(unquote_plus(&quote_plus(s)), s);
        }
        assert_eq!(unquote_plus("50%"), "50%");
        assert_eq!(unquote_plus("a%2"), "a%2");
        assert_eq!(unquote_plus("%+1"), "% 1");
    }
}
