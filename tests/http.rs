//! The management HTTP API, one test binary: each module covers one part of
//! it, its OpenAPI document, the UI pages it serves, and the same API on the
//! control socket (the live log, which installs its own log subscriber, has a
//! binary of its own in `http_livelog_stream.rs`).

#[path = "http/api.rs"]
mod api;
#[path = "http/bindings_definitions.rs"]
mod bindings_definitions;
mod common;
#[path = "http/connections.rs"]
mod connections;
#[path = "http/control_socket.rs"]
mod control_socket;
#[path = "http/messages.rs"]
mod messages;
#[path = "http/openapi.rs"]
mod openapi;
#[path = "http/parameters_limits.rs"]
mod parameters_limits;
#[path = "http/queue_ops.rs"]
mod queue_ops;
#[path = "http/stats_channels.rs"]
mod stats_channels;
#[path = "http/ui.rs"]
mod ui;
#[path = "http/users_auth.rs"]
mod users_auth;
