//! `GET /api/openapi.json`: the OpenAPI 3.0 description of the management API,
//! built into the binary from `static/docs/openapi.json`. It is documentation,
//! so it is served without authentication. `tests/http/openapi.rs` checks that it
//! describes exactly the routes of [`super::router`].

use axum::http::header;
use axum::response::IntoResponse;

/// The OpenAPI document, as kept in the source tree.
pub const OPENAPI_JSON: &str = include_str!("../../static/docs/openapi.json");

/// Answers the OpenAPI document as `application/json`.
pub async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI_JSON)
}
