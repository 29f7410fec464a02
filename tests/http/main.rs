//! The management HTTP API, one test binary: each module covers one part of
//! it, its OpenAPI document, the UI pages it serves, and the same API on the
//! control socket, the live log, and the Prometheus metrics.

mod api;
mod bindings_definitions;
#[path = "../common/mod.rs"]
mod common;
mod connections;
mod control_socket;
mod livelog_stream;
mod messages;
mod metrics;
mod openapi;
mod parameters_limits;
mod queue_ops;
mod rabbitmq_http_client;
mod stats_channels;
mod ui;
mod users_auth;
