//! `/api/definitions`: export and import of the broker's definitions in
//! RabbitMQ's format (see [`crate::core::definitions_export`] and
//! [`crate::core::definitions_import`]), so that a file exported from RabbitMQ
//! (or from here) can be loaded into another broker. Administrators only.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Multipart, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};
use crate::core::definitions_export::{export_all, export_vhost};
use crate::core::definitions_import::{DefinitionsError, import, parse};

impl From<DefinitionsError> for ApiError {
    fn from(e: DefinitionsError) -> Self {
        match e {
            DefinitionsError::Invalid(reason) => ApiError::bad_request(reason),
            DefinitionsError::Internal(reason) => ApiError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                error: "bad_request",
                reason,
            },
        }
    }
}

/// Exports the definitions of the whole broker.
pub async fn show(State(s): State<Arc<HttpState>>, user: Authed) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    Ok(Json(export_all(&s.broker)))
}

/// Exports the definitions of one vhost.
pub async fn show_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(v): Path<String>,
) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    let v = s.broker.vhost(&v).ok_or_else(ApiError::not_found)?;
    Ok(Json(export_vhost(&v)))
}

/// Imports definitions into the broker (204).
pub async fn upload(State(s): State<Arc<HttpState>>, user: Authed, body: Bytes) -> ApiResult<StatusCode> {
    user.require_admin()?;
    import(&s.broker, &parse(&body)?, None)?;
    s.shovels.changed();
    s.federation.changed();
    Ok(StatusCode::NO_CONTENT)
}

/// Imports definitions into one vhost (204).
pub async fn upload_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(v): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    let v = s.broker.vhost(&v).ok_or_else(ApiError::not_found)?;
    import(&s.broker, &parse(&body)?, Some(&v))?;
    s.shovels.changed();
    s.federation.changed();
    Ok(StatusCode::NO_CONTENT)
}

/// The definitions file of a browser form upload (multipart, as LavinMQ's and
/// RabbitMQ's UIs send it): the field named `file`, or else the first field
/// that carries a file name.
async fn form_file(mut form: Multipart) -> ApiResult<Bytes> {
    let bad = |e: axum::extract::multipart::MultipartError| ApiError::bad_request(format!("invalid upload: {e}"));
    while let Some(field) = form.next_field().await.map_err(bad)? {
        if field.name() == Some("file") || field.file_name().is_some() {
            return field.bytes().await.map_err(bad);
        }
    }
    Err(ApiError::bad_request("invalid upload: no file field"))
}

/// Where a form upload answers: back to the page that sent it (303), or 204.
fn after_form(headers: &HeaderMap) -> Response {
    match headers.get(header::REFERER) {
        Some(back) => (StatusCode::SEE_OTHER, [(header::LOCATION, back.clone())]).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

/// Imports an uploaded definitions file into the broker (`POST
/// /api/definitions/upload`).
pub async fn upload_form(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    headers: HeaderMap,
    form: Multipart,
) -> ApiResult<Response> {
    import_form(&s, &user, None, &headers, form).await
}

/// Imports an uploaded definitions file into one vhost (`POST
/// /api/definitions/{vhost}/upload`).
pub async fn upload_form_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(v): Path<String>,
    headers: HeaderMap,
    form: Multipart,
) -> ApiResult<Response> {
    import_form(&s, &user, Some(&v), &headers, form).await
}

/// What both form uploads do: into vhost `only`, or the whole broker.
async fn import_form(
    s: &HttpState,
    user: &Authed,
    only: Option<&str>,
    headers: &HeaderMap,
    form: Multipart,
) -> ApiResult<Response> {
    user.require_admin()?;
    let only = match only {
        Some(v) => Some(s.broker.vhost(v).ok_or_else(ApiError::not_found)?),
        None => None,
    };
    let body = form_file(form).await?;
    import(&s.broker, &parse(&body)?, only.as_ref())?;
    Ok(after_form(headers))
}
