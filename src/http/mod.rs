//! The RabbitMQ-compatible HTTP management API, served on the `[mgmt]` listener.
//! Handlers are thin: they authenticate, check tags and vhost access, call the
//! core and shape RabbitMQ's JSON.

pub mod auth;
pub mod bindings;
pub mod body;
pub mod channels;
pub mod connections;
pub mod control_socket;
pub mod definitions;
pub mod docs;
pub mod error;
pub mod exchanges;
pub mod federation_links;
pub mod https;
pub mod listing;
pub mod livelog;
pub mod messages;
pub mod metrics;
pub mod node_stats;
pub mod nodes;
pub mod overview;
pub mod parameters;
pub mod path;
pub mod policies;
pub mod queues;
pub mod replicated;
pub mod shovels;
pub mod sso;
pub mod stats_json;
pub mod stream_clients;
pub mod stream_read;
pub mod super_streams;
pub mod topic_permissions;
pub mod ui;
pub mod user_limits;
pub mod users;
pub mod vhosts;
pub mod websocket;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post, put};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::core::broker::Broker;
use crate::core::vhost::VHost;

/// What every handler can reach.
pub struct HttpState {
    /// The broker the API manages.
    pub broker: Arc<Broker>,
    /// The user that may log in only from a loopback address (the default
    /// user when `default_user_only_loopback` is on), as over AMQP.
    pub loopback_only_user: Option<String>,
    /// Bound listeners as `(protocol, address)`, for the overview.
    pub listeners: Vec<(&'static str, std::net::SocketAddr)>,
    /// The protocol adapters WebSocket upgrades on the HTTP listener lead to.
    pub websocket: Option<websocket::WsTargets>,
    /// The broker's shovels, for `/api/shovels` and to hear of changed
    /// `shovel` parameters.
    pub shovels: Arc<crate::shovel::Shovels>,
    /// The broker's federation links, for `/api/federation-links` and to
    /// hear of changed upstreams and policies.
    pub federation: Arc<crate::federation::Federation>,
}

impl HttpState {
    /// Vhost `name` for `user`: 403 without access to it, 404 when it does not exist.
    pub fn vhost_for(&self, user: &auth::Authed, name: &str) -> error::ApiResult<Arc<VHost>> {
        user.require_vhost(name)?;
        self.broker.vhost(name).ok_or_else(error::ApiError::not_found)
    }

    /// Queue `name` of vhost `vhost` for `user`, who must have `access` to it:
    /// 404 when either does not exist, 403 without access.
    pub fn queue_for(
        &self,
        user: &auth::Authed,
        vhost: &str,
        name: &str,
        access: crate::core::permissions::Access,
    ) -> error::ApiResult<Arc<crate::core::queue::Queue>> {
        let v = self.vhost_for(user, vhost)?;
        let q = v.queue(name).ok_or_else(error::ApiError::not_found)?;
        user.check(self, &v.name, access, "queue", name)?;
        Ok(q)
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

/// All routes of the API, with the listing parameters every list accepts;
/// clustered, changes answer once replicated ([`replicated`]).
pub fn router(state: Arc<HttpState>) -> Router {
    routes(state.clone())
        .layer(axum::middleware::from_fn_with_state(state, replicated::layer))
        .layer(axum::middleware::from_fn(listing::layer))
}

/// The routes, each answered by its handler.
fn routes(state: Arc<HttpState>) -> Router {
    Router::new()
        .route("/api/openapi.json", get(docs::openapi))
        .route("/api/overview", get(overview::overview))
        .route("/api/whoami", get(overview::whoami))
        .route("/api/nodes", get(nodes::list))
        .route("/api/nodes/{name}", get(nodes::show))
        .route("/api/extensions", get(nodes::extensions))
        .route("/api/auth", get(nodes::auth))
        .route(
            "/api/cluster-name",
            get(nodes::cluster_name).put(nodes::set_cluster_name),
        )
        .route("/api/healthchecks/node", get(nodes::node_health))
        .route("/api/health/checks/alarms", get(nodes::alarms))
        .route("/api/health/checks/local-alarms", get(nodes::alarms))
        .route("/api/health/checks/virtual-hosts", get(nodes::virtual_hosts))
        .route("/api/health/checks/port-listener/{port}", get(nodes::port_listener))
        .route(
            "/api/health/checks/protocol-listener/{protocol}",
            get(nodes::protocol_listener),
        )
        .route(
            "/api/health/checks/node-is-quorum-critical",
            get(nodes::node_is_quorum_critical),
        )
        .route("/metrics", get(metrics::metrics))
        .route("/metrics/detailed", get(metrics::detailed))
        .route("/api/aliveness-test/{vhost}", get(overview::aliveness))
        .route("/api/connections", get(connections::list))
        .route("/api/stream/connections", get(stream_clients::connections))
        .route(
            "/api/stream/connections/{vhost}",
            get(stream_clients::connections_vhost),
        )
        .route(
            "/api/stream/connections/{vhost}/{name}",
            get(stream_clients::connection),
        )
        .route(
            "/api/stream/connections/{vhost}/{name}/publishers",
            get(stream_clients::connection_publishers),
        )
        .route(
            "/api/stream/connections/{vhost}/{name}/consumers",
            get(stream_clients::connection_consumers),
        )
        .route("/api/stream/publishers", get(stream_clients::publishers))
        .route("/api/stream/publishers/{vhost}", get(stream_clients::publishers_vhost))
        .route(
            "/api/stream/publishers/{vhost}/{stream}",
            get(stream_clients::publishers_stream),
        )
        .route("/api/stream/super-streams/{vhost}/{name}", put(super_streams::create))
        .route("/api/stream/consumers", get(stream_clients::consumers))
        .route("/api/stream/consumers/{vhost}", get(stream_clients::consumers_vhost))
        .route(
            "/api/connections/{name}",
            get(connections::show).delete(connections::close),
        )
        .route("/api/vhosts/{vhost}/connections", get(connections::list_vhost))
        .route(
            "/api/connections/username/{username}",
            get(connections::list_username).delete(connections::close_username),
        )
        .route("/api/connections/{name}/channels", get(channels::list_connection))
        .route("/api/channels", get(channels::list))
        .route("/api/channels/{name}", get(channels::show).put(channels::update))
        .route("/api/vhosts/{vhost}/channels", get(channels::list_vhost))
        .route("/api/vhosts/{vhost}/permissions", get(users::vhost_permissions))
        .route(
            "/api/vhosts/{vhost}/topic-permissions",
            get(topic_permissions::of_vhost),
        )
        .route("/api/consumers", get(channels::consumers))
        .route("/api/consumers/{vhost}", get(channels::consumers_vhost))
        .route(
            "/api/consumers/{vhost}/{connection}/{channel}/{consumer}",
            axum::routing::delete(channels::cancel),
        )
        .route("/api/vhosts", get(vhosts::list))
        .route(
            "/api/vhosts/{vhost}",
            get(vhosts::show).put(vhosts::create).delete(vhosts::delete),
        )
        .route("/api/users", get(users::list))
        .route("/api/users/without-permissions", get(users::without_permissions))
        .route("/api/users/bulk-delete", axum::routing::post(users::bulk_delete))
        .route("/api/users/{user}/permissions", get(users::user_permissions))
        .route("/api/users/{user}/topic-permissions", get(topic_permissions::of_user))
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
        .route("/api/topic-permissions", get(topic_permissions::list))
        .route(
            "/api/topic-permissions/{vhost}/{user}",
            get(topic_permissions::show)
                .put(topic_permissions::set)
                .delete(topic_permissions::clear),
        )
        .route("/api/queues", get(queues::list))
        .route("/api/queues/detailed", get(queues::list))
        .route("/api/queues/{vhost}", get(queues::list_vhost))
        .route(
            "/api/queues/{vhost}/{name}",
            get(queues::show).put(queues::declare).delete(queues::delete),
        )
        .route("/api/queues/{vhost}/{name}/unacked", get(queues::unacked))
        .route("/api/queues/{vhost}/{name}/pause", put(queues::pause))
        .route("/api/queues/{vhost}/{name}/resume", put(queues::resume))
        .route("/api/queues/{vhost}/{name}/restart", put(queues::restart))
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
        .route("/api/definitions/upload", post(definitions::upload_form))
        .route("/api/definitions/{vhost}/upload", post(definitions::upload_form_vhost))
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
        .route(
            "/api/exchanges/{vhost}/{name}/publish",
            axum::routing::post(messages::publish),
        )
        .route("/api/queues/{vhost}/{name}/get", axum::routing::post(messages::get))
        .route(
            "/api/queues/{vhost}/{name}/stream",
            axum::routing::post(stream_read::read),
        )
        .route("/api/livelog", get(livelog::livelog))
        .route("/api/logs", get(livelog::download))
        .route("/api/parameters", get(parameters::list))
        .route("/api/parameters/{component}", get(parameters::list_component))
        .route(
            "/api/parameters/{component}/{vhost}",
            get(parameters::list_component_vhost),
        )
        .route(
            "/api/parameters/{component}/{vhost}/{name}",
            get(parameters::show).put(parameters::set).delete(parameters::delete),
        )
        .route("/api/federation-links", get(federation_links::list))
        .route("/api/federation-links/{vhost}", get(federation_links::list_vhost))
        .route("/api/shovels", get(shovels::list))
        .route("/api/shovels/{vhost}", get(shovels::list_vhost))
        .route("/api/shovels/{vhost}/{name}", get(shovels::show))
        .route("/api/shovels/{vhost}/{name}/pause", put(shovels::pause))
        .route("/api/shovels/{vhost}/{name}/resume", put(shovels::resume))
        .route(
            "/api/shovels/vhost/{vhost}/{name}",
            get(shovels::show).delete(shovels::delete),
        )
        .route(
            "/api/shovels/vhost/{vhost}/{name}/restart",
            axum::routing::delete(shovels::restart),
        )
        .route("/api/global-parameters", get(parameters::list_global))
        .route(
            "/api/global-parameters/{name}",
            get(parameters::show_global)
                .put(parameters::set_global)
                .delete(parameters::delete_global),
        )
        .route("/api/user-limits", get(user_limits::list))
        .route("/api/user-limits/{user}", get(user_limits::show))
        .route(
            "/api/user-limits/{user}/{name}",
            put(user_limits::set).delete(user_limits::clear),
        )
        .route("/api/vhost-limits", get(vhosts::list_limits))
        .route("/api/vhost-limits/{vhost}", get(vhosts::show_limits))
        .route(
            "/api/vhost-limits/{vhost}/{name}",
            put(vhosts::set_limit).delete(vhosts::clear_limit),
        )
        .route("/api/operator-policies", get(policies::list_operator))
        .route("/api/operator-policies/{vhost}", get(policies::list_operator_vhost))
        .route(
            "/api/operator-policies/{vhost}/{name}",
            get(policies::show_operator)
                .put(policies::set_operator)
                .delete(policies::delete_operator),
        )
        .with_state(state)
}

/// The API and the browser UI, with the WebSocket upgrade in front: what the HTTP and HTTPS
/// listeners serve.
pub fn app(state: Arc<HttpState>) -> Router {
    let ws = axum::middleware::from_fn_with_state(state.clone(), websocket::upgrade);
    let inner = ui::with_ui(router(state.clone()), sso::routes(state)).layer(ws);
    // A router's own layers run after its routing: the path is trimmed by an
    // outer router whose every request falls through to the inner one.
    Router::new()
        .fallback_service(inner)
        .layer(axum::middleware::map_request(trim_trailing_slash))
}

/// `/api/users/` is `/api/users`, as RabbitMQ and LavinMQ answer it: several
/// management clients build collection URLs with a trailing slash.
async fn trim_trailing_slash(mut req: axum::extract::Request) -> axum::extract::Request {
    let uri = req.uri();
    let path = uri.path();
    if path.len() > "/api/".len() && path.starts_with("/api/") && path.ends_with('/') {
        let trimmed = path.trim_end_matches('/');
        let rebuilt = match uri.query() {
            Some(q) => format!("{trimmed}?{q}"),
            None => trimmed.to_string(),
        };
        if let Ok(pq) = rebuilt.parse::<axum::http::uri::PathAndQuery>() {
            let mut parts = uri.clone().into_parts();
            parts.path_and_query = Some(pq);
            if let Ok(new) = axum::http::Uri::from_parts(parts) {
                *req.uri_mut() = new;
            }
        }
    }
    req
}

/// Serves the API (and WebSocket upgrades) on the Unix socket `listener`
/// (`[mgmt] unix_path`) until `shutdown`. Requests need credentials as over
/// TCP; their peer counts as loopback, since it is a process on this host.
pub async fn serve_unix(listener: tokio::net::UnixListener, state: Arc<HttpState>, shutdown: CancellationToken) {
    let peer = axum::extract::ConnectInfo(crate::transport::peer::Peer::unix().addr);
    let app = app(state).layer(axum::Extension(peer));
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
    if let Err(e) = result {
        tracing::error!("HTTP server on the unix socket failed: {e}");
    }
}

/// Serves the API on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, state: Arc<HttpState>, shutdown: CancellationToken) {
    // The peer address lets authentication restrict the default user to loopback.
    let app = app(state).into_make_service_with_connect_info::<std::net::SocketAddr>();
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
    if let Err(e) = result {
        tracing::error!("HTTP server failed: {e}");
    }
}
