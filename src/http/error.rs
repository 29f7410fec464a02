//! Errors of the management API, answered as RabbitMQ does: a status code and
//! a JSON body `{"error": ..., "reason": ...}`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::core::Error;

/// A failed API request.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Short error kind (`not_found`, `bad_request`, …).
    pub error: &'static str,
    /// What went wrong, for people.
    pub reason: String,
}

/// Result of an API handler.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// 400 with `reason`.
    pub fn bad_request(reason: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            error: "bad_request",
            reason: reason.into(),
        }
    }

    /// 404, as RabbitMQ words it.
    pub fn not_found() -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            error: "Object Not Found",
            reason: "Not Found".into(),
        }
    }

    /// 401: no or wrong credentials.
    pub fn unauthorized(reason: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            error: "not_authorized",
            reason: reason.into(),
        }
    }

    /// 429: too many failed logins from the client's address.
    pub fn too_many_requests(reason: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            error: "too_many_requests",
            reason: reason.into(),
        }
    }

    /// 422: the object is not in a state that allows the request (a shovel
    /// that is not paused cannot be resumed).
    pub fn unprocessable(reason: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            error: "unprocessable_entity",
            reason: reason.into(),
        }
    }

    /// 403: authenticated, but not allowed.
    pub fn forbidden(reason: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::FORBIDDEN,
            error: "not_authorised",
            reason: reason.into(),
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let reason = e.text().to_string();
        match e {
            Error::NotFound(_) => ApiError {
                status: StatusCode::NOT_FOUND,
                error: "Object Not Found",
                reason,
            },
            Error::AccessRefused(_) => ApiError::forbidden(reason),
            Error::Internal(_) => ApiError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                error: "internal_error",
                reason,
            },
            _ => ApiError::bad_request(reason),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, Json(json!({"error": self.error, "reason": self.reason}))).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"LavinMQ\""),
            );
        }
        resp
    }
}
