//! The RabbitMQ-compatible HTTP management API, served on the `[mgmt]` listener.
//! Handlers are thin: they authenticate, check tags and vhost access, call the
//! core and shape RabbitMQ's JSON.

pub mod auth;
pub mod bindings;
pub mod connections;
pub mod definitions;
pub mod error;
pub mod exchanges;
pub mod overview;
pub mod policies;
pub mod queues;
pub mod users;
pub mod vhosts;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, put};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::core::broker::Broker;
use crate::core::vhost::VHost;

/// What every handler can reach.
pub struct HttpState {
    /// The broker the API manages.
    pub broker: Arc<Broker>,
}

impl HttpState {
    /// Vhost `name` for `user`: 403 without access to it, 404 when it does not exist.
    pub fn vhost_for(&self, user: &auth::Authed, name: &str) -> error::ApiResult<Arc<VHost>> {
        user.require_vhost(name)?;
        self.broker.vhost(name).ok_or_else(error::ApiError::not_found)
    }

    /// The vhosts `user` may see, by name.
    pub fn visible_vhosts(&self, user: &auth::Authed) -> Vec<Arc<VHost>> {
        let mut all: Vec<_> = self
            .broker
            .vhosts()
            .into_iter()
            .filter(|v| user.can_access(&v.name))
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }
}

/// RabbitMQ's answer to a PUT: 201 when it created the entity, 204 when it existed.
pub fn created_or_updated(existed: bool) -> axum::http::StatusCode {
    if existed {
        axum::http::StatusCode::NO_CONTENT
    } else {
        axum::http::StatusCode::CREATED
    }
}

/// All routes of the API.
pub fn router(state: Arc<HttpState>) -> Router {
    Router::new()
        .route("/api/overview", get(overview::overview))
        .route("/api/whoami", get(overview::whoami))
        .route("/api/aliveness-test/{vhost}", get(overview::aliveness))
        .route("/api/connections", get(connections::list))
        .route(
            "/api/connections/{name}",
            get(connections::show).delete(connections::close),
        )
        .route("/api/vhosts/{vhost}/connections", get(connections::list_vhost))
        .route("/api/vhosts", get(vhosts::list))
        .route(
            "/api/vhosts/{vhost}",
            get(vhosts::show).put(vhosts::create).delete(vhosts::delete),
        )
        .route("/api/users", get(users::list))
        .route("/api/users/without-permissions", get(users::without_permissions))
        .route("/api/users/bulk-delete", axum::routing::post(users::bulk_delete))
        .route("/api/users/{user}/permissions", get(users::user_permissions))
        .route("/api/auth/hash_password", put(users::hash_password))
        .route(
            "/api/users/{user}",
            get(users::show).put(users::create).delete(users::delete),
        )
        .route("/api/permissions", get(users::permissions))
        .route(
            "/api/permissions/{vhost}/{user}",
            get(users::show_permission)
                .put(users::set_permission)
                .delete(users::clear_permission),
        )
        .route("/api/queues", get(queues::list))
        .route("/api/queues/{vhost}", get(queues::list_vhost))
        .route(
            "/api/queues/{vhost}/{name}",
            get(queues::show).put(queues::declare).delete(queues::delete),
        )
        .route(
            "/api/queues/{vhost}/{name}/contents",
            axum::routing::delete(queues::purge),
        )
        .route("/api/exchanges", get(exchanges::list))
        .route("/api/exchanges/{vhost}", get(exchanges::list_vhost))
        .route(
            "/api/exchanges/{vhost}/{name}",
            get(exchanges::show).put(exchanges::declare).delete(exchanges::delete),
        )
        .route("/api/queues/{vhost}/{name}/bindings", get(bindings::queue_bindings))
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/source",
            get(bindings::exchange_source),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/destination",
            get(bindings::exchange_destination),
        )
        .route("/api/bindings", get(bindings::list))
        .route("/api/bindings/{vhost}", get(bindings::list_vhost))
        .route(
            "/api/bindings/{vhost}/e/{source}/q/{destination}",
            get(bindings::list_eq).post(bindings::create_eq),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/e/{destination}",
            get(bindings::list_ee).post(bindings::create_ee),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/q/{destination}/{props}",
            get(bindings::show_eq).delete(bindings::delete_eq),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/e/{destination}/{props}",
            get(bindings::show_ee).delete(bindings::delete_ee),
        )
        .route("/api/definitions", get(definitions::show).post(definitions::upload))
        .route(
            "/api/definitions/{vhost}",
            get(definitions::show_vhost).post(definitions::upload_vhost),
        )
        .route("/api/policies", get(policies::list))
        .route("/api/policies/{vhost}", get(policies::list_vhost))
        .route(
            "/api/policies/{vhost}/{name}",
            get(policies::show).put(policies::set).delete(policies::delete),
        )
        .route("/api/operator-policies", get(policies::list_operator))
        .route("/api/operator-policies/{vhost}", get(policies::list_operator_vhost))
        .route(
            "/api/operator-policies/{vhost}/{name}",
            put(policies::set_operator).delete(policies::delete_operator),
        )
        .with_state(state)
}

/// Serves the API on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, state: Arc<HttpState>, shutdown: CancellationToken) {
    let app = router(state);
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
    if let Err(e) = result {
        tracing::error!("HTTP server failed: {e}");
    }
}
