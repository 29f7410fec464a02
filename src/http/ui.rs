//! The management web UI: pages (`views/`) and assets (`static/`) built into
//! the binary and served on the management listener next to the API.
//!
//! Clean URLs name pages: `/` is the overview, `/queues` is
//! `views/queues.html`, and entity pages take their identity in the query
//! string (`/queue?vhost=%2F&name=q1`). A view is an HTML fragment that the
//! server wraps in `views/layout.html`, replacing `{{title}}`, `{{page}}`,
//! `{{content}}` and `{{script}}`. The pages hold no privileged path: their
//! scripts (`static/js/`) call the public API with the user's credentials,
//! which the login page keeps in cookie `m` (LavinMQ's name). Pages other than
//! `/login` need that cookie, else they redirect to `/login`; the password is
//! checked by the API on the first call, not on page loads.
//!
//! The files are embedded in every build (rust-embed's `debug-embed`), so the
//! tests see what a release serves. Cargo notices edits to embedded files but
//! not files added to `views/` or `static/`: after adding one, touch this
//! file (or `cargo clean -p lavinmq`) so that the next build embeds it.

use axum::Router;
use axum::extract::{Path, Request};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rust_embed::RustEmbed;

use super::auth::cookie_credentials;
use super::error::ApiError;
use super::path::encode_segment;

/// The page templates: one fragment per page, and the layout around them.
#[derive(RustEmbed)]
#[folder = "views/"]
struct Views;

/// The UI's scripts, styles, images and vendored libraries.
#[derive(RustEmbed)]
#[folder = "static/"]
struct Assets;

/// Content-Security-Policy of every page: scripts, styles and API calls from
/// this origin only, nothing inline, no framing.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; \
                   form-action 'self'; frame-ancestors 'none'";

/// Views that are not pages of their own.
const NOT_PAGES: [&str; 2] = ["layout", "404"];

/// Pages that can be opened without the login cookie.
const PUBLIC_PAGES: [&str; 1] = ["login"];

/// Adds the UI's routes and `sign_on` (its single sign-on, [`super::sso`])
/// to `api`, the API router, and a fallback that answers unknown pages with
/// the UI's 404 page (and unknown API paths with the API's JSON 404). The UI
/// routes are kept out of [`super::router`] so that they pass neither
/// through the listing layer nor into the OpenAPI document.
pub fn with_ui(api: Router, sign_on: Router) -> Router {
    let ui = Router::new()
        .route("/", get(root))
        .route("/{page}", get(page))
        .route("/static/{*path}", get(asset))
        .fallback(not_found);
    api.merge(sign_on)
        .merge(ui)
        .layer(axum::middleware::from_fn(quiet_basic_challenge))
}

/// Browsers answer a `WWW-Authenticate: Basic` challenge with their own login
/// dialog, even to a script's request; the UI's scripts mark their requests
/// with `X-Requested-With: XMLHttpRequest` and handle a 401 themselves (back to
/// the login page), so for those the challenge is left out.
async fn quiet_basic_challenge(req: Request, next: Next) -> Response {
    let from_script = req
        .headers()
        .get("x-requested-with")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"XMLHttpRequest"));
    let mut resp = next.run(req).await;
    if from_script && resp.status() == StatusCode::UNAUTHORIZED {
        resp.headers_mut().remove(header::WWW_AUTHENTICATE);
    }
    resp
}

/// `/`: the overview.
async fn root(headers: HeaderMap) -> Response {
    render_page("overview", &headers, "/")
}

/// `/{page}`: the view of that name, or the 404 page.
async fn page(Path(name): Path<String>, req: Request) -> Response {
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
    render_page(&name, req.headers(), &target)
}

/// Renders page `name` for a request to `target` (path and query), after the
/// login-cookie check.
fn render_page(name: &str, headers: &HeaderMap, target: &str) -> Response {
    if NOT_PAGES.contains(&name) || !is_page_name(name) {
        return not_found_page();
    }
    let Some(view) = Views::get(&format!("{name}.html")) else {
        return not_found_page();
    };
    if !PUBLIC_PAGES.contains(&name) && cookie_credentials(headers).is_none() {
        let location = format!("/login?next={}", encode_segment(target));
        return (
            StatusCode::TEMPORARY_REDIRECT,
            [
                (header::LOCATION, location),
                (header::CACHE_CONTROL, "no-store".to_string()),
            ],
        )
            .into_response();
    }
    html(StatusCode::OK, wrap(name, &String::from_utf8_lossy(&view.data)))
}

/// Page names are plain words: letters, digits and dashes.
fn is_page_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The view's title: its leading `<!-- title: ... -->` comment, else its name.
fn title_of(name: &str, view: &str) -> String {
    view.trim_start()
        .strip_prefix("<!-- title:")
        .and_then(|rest| rest.split_once("-->"))
        .map(|(title, _)| title.trim().to_string())
        .unwrap_or_else(|| name.to_string())
}

/// Wraps view `name` in the layout, with its script when it has one.
fn wrap(name: &str, view: &str) -> String {
    let layout = Views::get("layout.html")
        .map(|f| String::from_utf8_lossy(&f.data).into_owned())
        .unwrap_or_else(|| "{{content}}".to_string());
    let script_path = format!("js/pages/{name}.js");
    let script = if Assets::get(&script_path).is_some() {
        format!(r#"<script type="module" src="/static/{script_path}"></script>"#)
    } else {
        String::new()
    };
    // The view goes in last, so that its text is never searched for placeholders.
    layout
        .replace("{{title}}", &escape_html(&title_of(name, view)))
        .replace("{{page}}", name)
        .replace("{{script}}", &script)
        .replace("{{content}}", view)
}

/// Escapes text for HTML.
fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An HTML answer with the pages' security headers.
fn html(status: StatusCode, body: String) -> Response {
    let mut resp = (status, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    resp
}

/// The UI's 404 page.
fn not_found_page() -> Response {
    let view = Views::get("404.html")
        .map(|f| String::from_utf8_lossy(&f.data).into_owned())
        .unwrap_or_else(|| "<h1>Not found</h1>".to_string());
    html(StatusCode::NOT_FOUND, wrap("404", &view))
}

/// Unknown paths: the API's JSON 404 under `/api/`, the 404 page elsewhere.
async fn not_found(req: Request) -> Response {
    if req.uri().path().starts_with("/api/") {
        return ApiError::not_found().into_response();
    }
    not_found_page()
}

/// `/static/{path}`: an embedded asset with its Content-Type, a weak ETag and
/// `Cache-Control: no-cache` (browsers revalidate, and get 304 when unchanged).
async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    let Some(file) = Assets::get(&path) else {
        return (StatusCode::NOT_FOUND, "Not found").into_response();
    };
    let hash = file.metadata.sha256_hash();
    let etag = format!(
        "W/\"{}\"",
        hash[..12].iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let mut mime = file.metadata.mimetype().to_string();
    if (mime.starts_with("text/") || mime.ends_with("javascript") || mime.ends_with("json"))
        && !mime.contains("charset")
    {
        mime.push_str("; charset=utf-8");
    }
    let fresh = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == "*" || t == etag.trim_start_matches("W/"));
    let common = [
        (header::ETAG, etag.clone()),
        (header::CACHE_CONTROL, "no-cache".to_string()),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
    ];
    if fresh {
        return (StatusCode::NOT_MODIFIED, common).into_response();
    }
    (
        StatusCode::OK,
        common,
        [(header::CONTENT_TYPE, mime)],
        // Embedded files are static in release builds: served without a copy.
        match file.data {
            std::borrow::Cow::Borrowed(bytes) => axum::body::Body::from(bytes),
            std::borrow::Cow::Owned(bytes) => axum::body::Body::from(bytes),
        },
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_come_from_the_leading_comment() {
        assert_eq!(title_of("queues", "<!-- title: Queues -->\n<h1>"), "Queues");
        assert_eq!(title_of("queues", "<h1>"), "queues");
    }

    #[test]
    fn page_names_are_plain_words() {
        assert!(is_page_name("operator-policies"));
        assert!(!is_page_name("../etc"));
        assert!(!is_page_name(""));
    }
}
