//! The management UI served on the HTTP listener: every page answers with the
//! login cookie and redirects to the login page without it, assets carry
//! their content type and a weak ETag that revalidates to 304, the API takes
//! the login cookie as credentials, unknown pages get the 404 page, and every
//! module a page script imports is in the tree.

use std::path::{Path, PathBuf};

use crate::common::*;
use reqwest::redirect::Policy;
use reqwest::{Client, StatusCode, header};

/// Every page of the UI, as its clean URL (entity pages with an identity).
const PAGES: [&str; 25] = [
    "/",
    "/login",
    "/queues",
    "/queue?vhost=%2F&name=q1",
    "/stream?vhost=%2F&name=s1",
    "/exchanges",
    "/exchange?vhost=%2F&name=amq.topic",
    "/connections",
    "/connection?name=x",
    "/stream-connections",
    "/stream-connection?vhost=%2F&name=x",
    "/channels",
    "/channel?name=x%20(1)",
    "/consumers",
    "/vhosts",
    "/vhost?name=%2F",
    "/users",
    "/user?name=guest",
    "/policies",
    "/operator-policies",
    "/shovels",
    "/federation",
    "/definitions",
    "/nodes",
    "/logs",
];

/// Cookie `m` for guest/guest: URL-encoded base64 of `guest:guest`.
const GUEST_COOKIE: &str = "m=Z3Vlc3Q6Z3Vlc3Q%3D";

fn client() -> Client {
    Client::builder().redirect(Policy::none()).build().expect("client")
}

fn base(b: &TestBroker) -> String {
    format!("http://{}", b.server().http_addr())
}

async fn get(url: &str, cookie: Option<&str>) -> reqwest::Response {
    let mut req = client().get(url);
    if let Some(c) = cookie {
        req = req.header(header::COOKIE, c);
    }
    within("HTTP request", req.send()).await.expect("request")
}

fn header_of(resp: &reqwest::Response, name: header::HeaderName) -> String {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn every_page_answers_with_the_cookie_and_redirects_without() {
    let b = start().await;
    let base = base(&b);
    for page in PAGES {
        let resp = get(&format!("{base}{page}"), Some(GUEST_COOKIE)).await;
        assert_eq!(resp.status(), StatusCode::OK, "{page}");
        assert!(
            header_of(&resp, header::CONTENT_TYPE).starts_with("text/html"),
            "{page}"
        );
        assert_eq!(header_of(&resp, header::X_FRAME_OPTIONS), "DENY", "{page}");
        let csp = header_of(&resp, header::CONTENT_SECURITY_POLICY);
        assert!(
            csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
            "{page}: {csp}"
        );
        let html = resp.text().await.expect("body");
        assert!(html.starts_with("<!DOCTYPE html>"), "{page}");
        assert!(!html.contains("{{"), "{page}: a placeholder is left: {html}");
        assert!(!html.contains("<script>"), "{page}: inline script");
        assert!(html.contains("id=\"error-banner\""), "{page}: no error banner");
        let name = page.trim_start_matches('/').split('?').next().unwrap_or_default();
        let name = if name.is_empty() { "overview" } else { name };
        assert!(
            html.contains(&format!("/static/js/pages/{name}.js")),
            "{page}: its script is not loaded"
        );

        let resp = get(&format!("{base}{page}"), None).await;
        if page == "/login" {
            assert_eq!(resp.status(), StatusCode::OK, "the login page needs no cookie");
            continue;
        }
        assert_eq!(resp.status(), StatusCode::TEMPORARY_REDIRECT, "{page}");
        let location = header_of(&resp, header::LOCATION);
        assert!(location.starts_with("/login?next="), "{page}: {location}");
    }
    // The way back is kept, encoded.
    let resp = get(&format!("{base}/queue?vhost=%2F&name=q1"), None).await;
    assert_eq!(
        header_of(&resp, header::LOCATION),
        "/login?next=%2Fqueue%3Fvhost%3D%252F%26name%3Dq1"
    );
    // A cookie that is not credentials is no login.
    let resp = get(&format!("{base}/queues"), Some("m=not-base64!")).await;
    assert_eq!(resp.status(), StatusCode::TEMPORARY_REDIRECT);
}

#[tokio::test]
async fn unknown_pages_get_the_404_page_and_unknown_api_paths_json() {
    let b = start().await;
    let base = base(&b);
    for path in ["/no-such-page", "/layout", "/404", "/static", "/a/b/c"] {
        let resp = get(&format!("{base}{path}"), Some(GUEST_COOKIE)).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{path}");
        assert!(
            header_of(&resp, header::CONTENT_TYPE).starts_with("text/html"),
            "{path}"
        );
        assert!(
            resp.text().await.expect("body").contains("data-testid=\"not-found\""),
            "{path}"
        );
    }
    let resp = get(&format!("{base}/api/no-such-thing"), None).await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(body["reason"], "Not Found");
}

#[tokio::test]
async fn assets_have_types_and_revalidate_with_etags() {
    let b = start().await;
    let base = base(&b);
    for (path, mime) in [
        ("/static/js/api.js", "javascript"),
        ("/static/js/pages/overview.js", "javascript"),
        ("/static/css/main.css", "text/css"),
        ("/static/vendor/uplot.iife.min.js", "javascript"),
        ("/static/vendor/uplot.min.css", "text/css"),
        ("/static/img/favicon.svg", "image/svg+xml"),
    ] {
        let resp = get(&format!("{base}{path}"), None).await;
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        assert!(header_of(&resp, header::CONTENT_TYPE).contains(mime), "{path}");
        assert_eq!(header_of(&resp, header::CACHE_CONTROL), "no-cache", "{path}");
        let etag = header_of(&resp, header::ETAG);
        assert!(etag.starts_with("W/\""), "{path}: {etag}");
        assert!(!resp.bytes().await.expect("body").is_empty(), "{path}");

        let again = within(
            "HTTP request",
            client()
                .get(format!("{base}{path}"))
                .header(header::IF_NONE_MATCH, &etag)
                .send(),
        )
        .await
        .expect("request");
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{path}");
        assert_eq!(header_of(&again, header::ETAG), etag, "{path}");

        let stale = within(
            "HTTP request",
            client()
                .get(format!("{base}{path}"))
                .header(header::IF_NONE_MATCH, "W/\"0000\"")
                .send(),
        )
        .await
        .expect("request");
        assert_eq!(stale.status(), StatusCode::OK, "{path}");
    }
    for path in ["/static/nope.js", "/static/js/../../Cargo.toml", "/static/"] {
        let resp = get(&format!("{base}{path}"), None).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{path}");
    }
}

#[tokio::test]
async fn the_api_takes_the_login_cookie_as_credentials() {
    let b = start().await;
    let base = base(&b);
    let resp = get(&format!("{base}/api/whoami"), Some(GUEST_COOKIE)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let me: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(me["name"], "guest");
    // LavinMQ's form too: a prefix ending in ':' before the credentials.
    let resp = get(&format!("{base}/api/whoami"), Some("a=1; m=%7C:Z3Vlc3Q6Z3Vlc3Q%3D")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    // A plain link downloads the definitions.
    let resp = get(&format!("{base}/api/definitions"), Some(GUEST_COOKIE)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    // Wrong password (guest:x), or no cookie: 401.
    let resp = get(&format!("{base}/api/whoami"), Some("m=Z3Vlc3Q6eA%3D%3D")).await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let resp = get(&format!("{base}/api/whoami"), None).await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(!header_of(&resp, header::WWW_AUTHENTICATE).is_empty());
    // An Authorization header wins over the cookie.
    let resp = within(
        "HTTP request",
        client()
            .get(format!("{base}/api/whoami"))
            .basic_auth("guest", Some("wrong"))
            .header(header::COOKIE, GUEST_COOKIE)
            .send(),
    )
    .await
    .expect("request");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    // The UI's scripts get no browser login dialog on a 401.
    let resp = within(
        "HTTP request",
        client()
            .get(format!("{base}/api/whoami"))
            .header("X-Requested-With", "XMLHttpRequest")
            .send(),
    )
    .await
    .expect("request");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(resp.headers().get(header::WWW_AUTHENTICATE).is_none());
}

/// The `.js` files under `dir`, recursively.
fn js_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            js_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "js") {
            out.push(path);
        }
    }
}

#[test]
fn every_imported_module_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    js_files(&root.join("static/js"), &mut files);
    assert!(files.len() > 10, "the UI's scripts are missing");
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        for line in text.lines() {
            let line = line.trim();
            let Some(rest) = line
                .strip_prefix("import ")
                .or_else(|| line.strip_prefix("} from "))
                .or_else(|| line.strip_prefix("export {"))
            else {
                continue;
            };
            let Some(spec) = rest.split('"').nth(1).filter(|s| s.starts_with('.')) else {
                continue;
            };
            let target = file.parent().expect("parent").join(spec);
            assert!(
                target.exists(),
                "{}: imports {spec}, which does not exist",
                file.display()
            );
        }
    }
    // Every view has its script and every page script its view.
    for entry in std::fs::read_dir(root.join("views")).expect("views") {
        let path = entry.expect("entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        if name == "layout" || name == "404" {
            continue;
        }
        assert!(
            root.join(format!("static/js/pages/{name}.js")).exists(),
            "views/{name}.html has no static/js/pages/{name}.js"
        );
    }
}
