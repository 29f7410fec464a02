//! Request bodies: JSON parsed into the handler's type, with every failure
//! (not JSON, a missing or mistyped field) answered as RabbitMQ does: 400 with
//! the `{"error", "reason"}` body, whatever the Content-Type header says.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A JSON request body of type `T`; an empty body reads as `{}`, so bodies
/// whose fields all have defaults may be left out.
pub struct JsonBody<T>(pub T);

/// Parses `bytes` as a `T`, an empty body as `{}`.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let bytes = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        bytes
    };
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::bad_request(format!("cannot read body: {e}")))?;
        parse(&bytes).map(JsonBody)
    }
}
