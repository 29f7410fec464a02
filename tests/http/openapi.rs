//! The OpenAPI document of the management API (`static/docs/openapi.json`,
//! served at `GET /api/openapi.json`): it is valid JSON of OpenAPI 3, the
//! served copy is the file, it describes exactly the routes the router in
//! `src/http/mod.rs` serves, and what the broker answers to its GETs matches
//! the status codes and fields it documents.

use std::collections::BTreeSet;

use crate::common::api::*;
use crate::common::*;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// The document as kept in the source tree.
const DOC: &str = include_str!("../../static/docs/openapi.json");
/// The router's source, whose `.route(...)` calls are the served routes.
const ROUTER_SRC: &str = include_str!("../../src/http/mod.rs");
/// HTTP methods as OpenAPI names them in a path item.
const METHODS: [&str; 8] = ["get", "put", "post", "delete", "patch", "head", "options", "trace"];
/// Calls that may be chained on a method router without adding a method.
const NOT_METHODS: [&str; 3] = ["layer", "route_layer", "with_state"];

fn doc() -> Value {
    serde_json::from_str(DOC).expect("static/docs/openapi.json is not valid JSON")
}

/// `src` without `//` comments (string literals kept intact).
fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut chars = src.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        if in_str {
            out.push(c);
            match c {
                '\\' => out.extend(chars.next()),
                '"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                out.push(c);
            }
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Reads a string literal starting at `chars[i]` (a `"`); returns its text and
/// the index after it.
fn string_literal(chars: &[char], mut i: usize) -> (String, usize) {
    assert_eq!(chars.get(i), Some(&'"'), "expected a string literal");
    i += 1;
    let mut text = String::new();
    while let Some(&c) = chars.get(i) {
        i += 1;
        match c {
            '"' => return (text, i),
            '\\' => {
                text.extend(chars.get(i));
                i += 1;
            }
            _ => text.push(c),
        }
    }
    panic!("unterminated string literal in src/http/mod.rs");
}

/// The method names called at the top level of a method-router expression
/// such as `get(a::b).put(a::c)` or `axum::routing::delete(a::d)`.
fn methods_of(expr: &[char], path: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < expr.len() {
        let c = expr[i];
        match c {
            '"' => {
                i = string_literal(expr, i).1;
                continue;
            }
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            c if depth == 0 && (c.is_alphabetic() || c == '_') => {
                let start = i;
                while i < expr.len() && (expr[i].is_alphanumeric() || expr[i] == '_') {
                    i += 1;
                }
                let ident: String = expr[start..i].iter().collect();
                if expr.get(i) == Some(&'(') {
                    if METHODS.contains(&ident.as_str()) {
                        found.push(ident);
                    } else if !NOT_METHODS.contains(&ident.as_str()) {
                        panic!(
                            "route {path}: unrecognised method-router call `{ident}(`; \
                             teach tests/http/openapi.rs which methods it serves"
                        );
                    }
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// Every `(path, method)` the router serves, read from the `.route(...)` calls
/// of `src/http/mod.rs`; axum's `{*rest}` becomes OpenAPI's `{rest}`.
fn served_routes(src: &str) -> BTreeSet<(String, String)> {
    let src = strip_comments(src);
    for unsupported in [".nest(", ".nest_service(", ".merge(", ".route_service("] {
        assert!(
            !src.contains(unsupported),
            "src/http/mod.rs uses `{unsupported}`, which tests/http/openapi.rs cannot read routes from"
        );
    }
    let chars: Vec<char> = src.chars().collect();
    let needle: Vec<char> = ".route(".chars().collect();
    let mut routes = BTreeSet::new();
    let mut i = 0;
    while i + needle.len() <= chars.len() {
        if chars[i..i + needle.len()] != needle[..] {
            i += 1;
            continue;
        }
        let mut j = i + needle.len();
        while chars[j].is_whitespace() {
            j += 1;
        }
        let (path, after) = string_literal(&chars, j);
        let path = path.replace("{*", "{");
        j = after;
        while chars[j].is_whitespace() {
            j += 1;
        }
        assert_eq!(chars[j], ',', "route {path}: expected `,` after the path");
        j += 1;
        // The method router runs to the `)` closing `.route(`.
        let start = j;
        let mut depth = 0usize;
        while j < chars.len() {
            match chars[j] {
                '"' => {
                    j = string_literal(&chars, j).1;
                    continue;
                }
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' if depth == 0 => break,
                ')' | ']' | '}' => depth -= 1,
                _ => {}
            }
            j += 1;
        }
        let methods = methods_of(&chars[start..j], &path);
        assert!(
            !methods.is_empty(),
            "route {path}: no method found in its method router"
        );
        for m in methods {
            assert!(
                routes.insert((path.clone(), m.clone())),
                "route {path} {m} is registered twice"
            );
        }
        i = j;
    }
    routes
}

/// Every `(path, method)` the document describes.
fn documented_routes(doc: &Value) -> BTreeSet<(String, String)> {
    let paths = doc["paths"].as_object().expect("the document has no `paths` object");
    let mut out = BTreeSet::new();
    for (path, item) in paths {
        let item = item
            .as_object()
            .unwrap_or_else(|| panic!("path {path} is not an object"));
        for key in item.keys() {
            if METHODS.contains(&key.as_str()) {
                out.insert((path.clone(), key.clone()));
            }
        }
    }
    out
}

/// The component a local `$ref` points to.
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    let Some(r) = v.get("$ref").and_then(Value::as_str) else {
        return v;
    };
    let pointer = r
        .strip_prefix('#')
        .unwrap_or_else(|| panic!("$ref {r} is not local to the document"));
    let target = doc
        .pointer(pointer)
        .unwrap_or_else(|| panic!("$ref {r} points to nothing"));
    resolve(doc, target)
}

/// Every `$ref` anywhere under `v`.
fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("$ref", Value::String(r)) => out.push(r),
                    _ => refs(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

/// The path parameters of a path template, `{name}` ones.
fn template_params(path: &str) -> BTreeSet<String> {
    path.split('{')
        .skip(1)
        .filter_map(|s| s.split_once('}').map(|(p, _)| p.to_string()))
        .collect()
}

/// The names of the path parameters declared for `method` on `path`, at the
/// path level or the operation level.
fn declared_path_params(doc: &Value, path: &str, method: &str) -> BTreeSet<String> {
    let item = &doc["paths"][path];
    let mut out = BTreeSet::new();
    for list in [&item["parameters"], &item[method]["parameters"]] {
        for p in list.as_array().into_iter().flatten() {
            let p = resolve(doc, p);
            if p["in"] == "path" {
                assert_eq!(
                    p["required"], true,
                    "{method} {path}: path parameter {} must be required",
                    p["name"]
                );
                out.insert(p["name"].as_str().unwrap_or_default().to_string());
            }
        }
    }
    out
}

#[test]
fn document_is_openapi_3_and_well_formed() {
    let doc = doc();
    let version = doc["openapi"].as_str().expect("`openapi` is not a string");
    assert!(version.starts_with("3."), "openapi is {version}, not 3.x");
    assert_eq!(
        doc["info"]["version"],
        env!("CARGO_PKG_VERSION"),
        "info.version of static/docs/openapi.json should be the crate version"
    );
    assert_eq!(doc["components"]["securitySchemes"]["basicAuth"]["scheme"], "basic");
    assert_eq!(doc["components"]["securitySchemes"]["bearerAuth"]["scheme"], "bearer");
    let error = &doc["components"]["schemas"]["Error"];
    assert_eq!(error["properties"]["error"]["type"], "string");
    assert_eq!(error["properties"]["reason"]["type"], "string");
    let mut all_refs = Vec::new();
    refs(&doc, &mut all_refs);
    for r in all_refs {
        let pointer = r.strip_prefix('#').unwrap_or_else(|| panic!("$ref {r} is not local"));
        assert!(doc.pointer(pointer).is_some(), "$ref {r} points to nothing");
    }
    for (path, method) in documented_routes(&doc) {
        let op = &doc["paths"][&path][&method];
        for field in ["summary", "description"] {
            let text = op[field].as_str().unwrap_or_default();
            assert!(!text.is_empty(), "{} {path}: no {field}", method.to_uppercase());
        }
        let responses = op["responses"].as_object();
        assert!(
            responses.is_some_and(|r| !r.is_empty()),
            "{} {path}: no responses",
            method.to_uppercase()
        );
        assert_eq!(
            declared_path_params(&doc, &path, &method),
            template_params(&path),
            "{} {path}: the declared path parameters differ from the template's",
            method.to_uppercase()
        );
        // Whatever needs credentials can answer 401, and errors use the shared schema.
        let public = op.get("security").and_then(Value::as_array).is_some_and(Vec::is_empty);
        if !public {
            assert!(
                op["responses"].get("401").is_some(),
                "{} {path}: needs authentication but documents no 401",
                method.to_uppercase()
            );
        }
        for (code, resp) in responses.into_iter().flatten() {
            let resp = resolve(&doc, resp);
            assert!(
                resp["description"].is_string(),
                "{} {path}: response {code} has no description",
                method.to_uppercase()
            );
            let json_schema = &resp["content"]["application/json"]["schema"];
            if matches!(code.as_str(), "400" | "401" | "403" | "404") {
                assert_eq!(
                    json_schema["$ref"],
                    "#/components/schemas/Error",
                    "{} {path}: response {code} should use the Error schema",
                    method.to_uppercase()
                );
            }
        }
    }
}

#[test]
fn route_extractor_reads_method_chains() {
    let src = r#"
        // .route("/commented", get(nothing))
        Router::new()
            .route("/a/{x}", get(m::show).put(m::set).delete(m::delete))
            .route(
                "/b",
                axum::routing::post(m::get),
            )
            .route("/c/{*rest}", put(m::put_it))
    "#;
    let expected: BTreeSet<(String, String)> = [
        ("/a/{x}", "delete"),
        ("/a/{x}", "get"),
        ("/a/{x}", "put"),
        ("/b", "post"),
        ("/c/{rest}", "put"),
    ]
    .into_iter()
    .map(|(p, m)| (p.to_string(), m.to_string()))
    .collect();
    assert_eq!(served_routes(src), expected);
}

#[test]
fn every_route_is_documented_and_every_documented_route_is_served() {
    let served = served_routes(ROUTER_SRC);
    assert!(
        served.len() > 50,
        "read only {} routes from src/http/mod.rs",
        served.len()
    );
    assert!(served.contains(&("/api/openapi.json".to_string(), "get".to_string())));
    let documented = documented_routes(&doc());
    let missing: Vec<String> = served
        .difference(&documented)
        .map(|(p, m)| format!("{} {p}", m.to_uppercase()))
        .collect();
    let extra: Vec<String> = documented
        .difference(&served)
        .map(|(p, m)| format!("{} {p}", m.to_uppercase()))
        .collect();
    assert!(
        missing.is_empty(),
        "routes served by src/http/mod.rs but missing from static/docs/openapi.json:\n  {}",
        missing.join("\n  ")
    );
    assert!(
        extra.is_empty(),
        "routes in static/docs/openapi.json that src/http/mod.rs does not serve:\n  {}",
        extra.join("\n  ")
    );
}

#[tokio::test]
async fn served_document_is_the_file() {
    let b = start().await;
    let api = Api::new(&b);
    // No credentials: the document is public.
    let resp = within(
        "GET /api/openapi.json",
        reqwest::Client::new()
            .get(format!("{}/api/openapi.json", api.base))
            .send(),
    )
    .await
    .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        content_type.starts_with("application/json"),
        "content type {content_type}"
    );
    let text = resp.text().await.expect("body");
    assert_eq!(text, DOC, "the served document differs from static/docs/openapi.json");
    let served: Value = serde_json::from_str(&text).expect("the served document is not JSON");
    assert!(served["openapi"].as_str().is_some_and(|v| v.starts_with("3.")));
    // Listing parameters leave it alone: it is no list.
    let (status, paged) = api.call(Method::GET, "/api/openapi.json?page=1", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(paged, served);
}

/// Checks that every field of `value` is one `schema` documents, where the
/// schema lists its fields (and does not allow others); `at` names the place
/// for failure messages.
fn check_fields(doc: &Value, schema: &Value, value: &Value, at: &str) {
    let schema = resolve(doc, schema);
    if let Some(branches) = schema["oneOf"].as_array() {
        let branch = branches.iter().map(|b| resolve(doc, b)).find(|b| {
            let is_array = b["type"] == "array";
            is_array == value.is_array()
        });
        if let Some(b) = branch {
            check_fields(doc, b, value, at);
        } else {
            panic!("{at}: no oneOf branch of the schema fits {value}");
        }
        return;
    }
    match value {
        Value::Array(items) => {
            if schema["type"].is_string() {
                assert_eq!(
                    schema["type"], "array",
                    "{at}: documented as {} but is a list",
                    schema["type"]
                );
            }
            for (i, item) in items.iter().enumerate() {
                check_fields(doc, &schema["items"], item, &format!("{at}[{i}]"));
            }
        }
        Value::Object(map) => {
            if schema["type"].is_string() {
                assert_eq!(
                    schema["type"], "object",
                    "{at}: documented as {} but is an object",
                    schema["type"]
                );
            }
            let Some(props) = schema["properties"].as_object() else {
                return;
            };
            if schema["additionalProperties"] == true {
                return;
            }
            for (k, v) in map {
                let Some(s) = props.get(k) else {
                    panic!("{at}: field `{k}` is not documented");
                };
                check_fields(doc, s, v, &format!("{at}.{k}"));
            }
        }
        _ => {}
    }
}

/// Streams that never end once a log subscriber is installed (another module
/// of this test binary installs one), so [`documented_gets_answer_as_documented`]
/// cannot read them whole; `livelog_stream.rs` tests them.
const STREAMS: [&str; 1] = ["/api/livelog"];

/// Listings the setup of [`documented_gets_answer_as_documented`] fills, so
/// that the fields of their items are checked against the document.
const NON_EMPTY: [&str; 14] = [
    "/api/connections",
    "/api/channels",
    "/api/consumers",
    "/api/vhosts",
    "/api/queues",
    "/api/exchanges",
    "/api/bindings",
    "/api/users",
    "/api/permissions",
    "/api/policies",
    "/api/operator-policies",
    "/api/parameters",
    "/api/global-parameters",
    "/api/vhost-limits",
];

#[tokio::test]
async fn documented_gets_answer_as_documented() {
    let b = start().await;
    let api = Api::new(&b);
    // Something in every listing, so that the fields of their items are checked.
    let (conn, ch) = b.channel().await;
    declare_queue(&ch, "openapi-q").await;
    let _consumer = consume(&ch, "openapi-q").await;
    publish(&ch, "", "openapi-q", b"hello").await;
    let (status, _) = api
        .post(
            "/api/bindings/%2F/e/amq.direct/q/openapi-q",
            json!({"routing_key": "k"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let policy = json!({"pattern": "^openapi", "definition": {"max-length": 10}, "apply-to": "queues"});
    assert_eq!(
        api.put("/api/policies/%2F/openapi-p", policy.clone()).await,
        StatusCode::CREATED
    );
    assert_eq!(
        api.put("/api/operator-policies/%2F/openapi-op", policy).await,
        StatusCode::CREATED
    );
    let value = json!({"value": {"uri": "amqp://"}});
    assert_eq!(
        api.put("/api/parameters/federation-upstream/%2F/openapi-u", value.clone())
            .await,
        StatusCode::CREATED
    );
    assert_eq!(
        api.put("/api/global-parameters/openapi-g", value).await,
        StatusCode::CREATED
    );
    assert_eq!(
        api.put("/api/vhost-limits/%2F/max-queues", json!({"value": 100})).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        api.put("/api/users/openapi-user", json!({"password": "pw", "tags": ""}))
            .await,
        StatusCode::CREATED
    );

    let doc = doc();
    let mut checked = 0;
    for (path, method) in documented_routes(&doc) {
        if method != "get" || path.contains('{') || STREAMS.contains(&path.as_str()) {
            continue;
        }
        let op = &doc["paths"][&path]["get"];
        let (status, body) = api.get(&path).await;
        let responses = op["responses"].as_object().expect("responses");
        assert!(
            responses.contains_key(status.as_str()),
            "GET {path} answered {status}, which the document does not list ({:?}): {body}",
            responses.keys().collect::<Vec<_>>()
        );
        if NON_EMPTY.contains(&path.as_str()) {
            assert!(
                body.as_array().is_some_and(|a| !a.is_empty()),
                "GET {path}: expected items to check, got {body}"
            );
        }
        let resp = resolve(&doc, &responses[status.as_str()]);
        if let Some(schema) = resp["content"].get("application/json").map(|c| &c["schema"]) {
            assert!(!body.is_null(), "GET {path}: documented as JSON, answered no JSON");
            check_fields(&doc, schema, &body, &format!("GET {path}"));
        }
        checked += 1;
    }
    assert!(checked > 20, "only {checked} GETs checked");

    // Some GETs with path parameters, filled with what the setup made.
    let conn_name = api.get_ok("/api/connections").await[0]["name"].as_str().map(enc);
    let channel_name = api.get_ok("/api/channels").await[0]["name"].as_str().map(enc);
    let (conn_name, channel_name) = (conn_name.expect("a connection"), channel_name.expect("a channel"));
    let concrete = [
        ("/api/vhosts/{vhost}", "/api/vhosts/%2F".to_string()),
        ("/api/queues/{vhost}/{name}", "/api/queues/%2F/openapi-q".into()),
        (
            "/api/queues/{vhost}/{name}/bindings",
            "/api/queues/%2F/openapi-q/bindings".into(),
        ),
        (
            "/api/queues/{vhost}/{name}/unacked",
            "/api/queues/%2F/openapi-q/unacked".into(),
        ),
        ("/api/exchanges/{vhost}/{name}", "/api/exchanges/%2F/amq.direct".into()),
        (
            "/api/bindings/{vhost}/e/{source}/q/{destination}/{props}",
            "/api/bindings/%2F/e/amq.direct/q/openapi-q/k".into(),
        ),
        ("/api/users/{user}", "/api/users/guest".into()),
        ("/api/permissions/{vhost}/{user}", "/api/permissions/%2F/guest".into()),
        (
            "/api/topic-permissions/{vhost}/{user}",
            "/api/topic-permissions/%2F/guest".into(),
        ),
        ("/api/policies/{vhost}/{name}", "/api/policies/%2F/openapi-p".into()),
        (
            "/api/parameters/{component}/{vhost}/{name}",
            "/api/parameters/federation-upstream/%2F/openapi-u".into(),
        ),
        (
            "/api/global-parameters/{name}",
            "/api/global-parameters/openapi-g".into(),
        ),
        ("/api/definitions/{vhost}", "/api/definitions/%2F".into()),
        ("/api/connections/{name}", format!("/api/connections/{conn_name}")),
        ("/api/channels/{name}", format!("/api/channels/{channel_name}")),
        ("/api/queues/{vhost}/{name}", "/api/queues/%2F/no-such-queue".into()),
    ];
    for (template, path) in concrete {
        let responses = doc["paths"][template]["get"]["responses"]
            .as_object()
            .unwrap_or_else(|| panic!("GET {template} is not documented"));
        let (status, body) = api.get(&path).await;
        assert!(
            responses.contains_key(status.as_str()),
            "GET {path} answered {status}, which the document does not list for GET {template}: {body}"
        );
        let resp = resolve(&doc, &responses[status.as_str()]);
        if let Some(schema) = resp["content"].get("application/json").map(|c| &c["schema"]) {
            check_fields(&doc, schema, &body, &format!("GET {path}"));
        }
    }
    conn.close(200, "bye".into()).await.expect("close");
}
