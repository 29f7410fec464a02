//! Waiting for the group commit from the API: a published message answers
//! once it is on disk, and, clustered, every successful change (any method
//! but GET, HEAD and OPTIONS: a declared queue, a user, a policy, an import)
//! answers only once the in-sync followers hold it too, as an AMQP `-ok` does.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;

use super::HttpState;
use super::error::ApiError;
use crate::core::broker::Broker;
use crate::store::SyncWaiter;

/// Tells a request handler once the group commit it waits for is done.
struct SyncSignal(Mutex<Option<tokio::sync::oneshot::Sender<bool>>>);

impl SyncWaiter for SyncSignal {
    fn synced(&self, _token: u64, ok: bool) {
        if let Some(tx) = self.0.lock().take() {
            let _ = tx.send(ok);
        }
    }
}

/// Waits until everything written so far is synced (and, clustered, held by
/// the in-sync followers). False if that failed.
pub async fn group_commit(broker: &Broker) -> bool {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let waiter: Arc<dyn SyncWaiter> = Arc::new(SyncSignal(Mutex::new(Some(tx))));
    broker.sync.register(&waiter, 1);
    rx.await.unwrap_or(false)
}

/// The layer: clustered, holds a successful change's answer until it is
/// replicated; a change that could not be replicated (leadership lost)
/// answers 503.
pub async fn layer(State(s): State<Arc<HttpState>>, req: Request, next: Next) -> Response {
    let change = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let resp = next.run(req).await;
    if !change || !resp.status().is_success() || crate::store::replication::sink().is_none() {
        return resp;
    }
    if group_commit(&s.broker).await {
        resp
    } else {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            error: "not_replicated",
            reason: "the change could not be replicated to the cluster".into(),
        }
        .into_response()
    }
}
