//! AMQP and MQTT over WebSocket on the HTTP listener: a request with
//! `Upgrade: websocket` on any path becomes a protocol connection instead of
//! an API call. The subprotocol (or the path) picks the protocol, as in
//! LavinMQ; the connection then logs in like any other client.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::header::{SEC_WEBSOCKET_PROTOCOL, UPGRADE};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::HttpState;
use crate::amqp::AmqpContext;
use crate::mqtt::MqttContext;
use crate::transport::peer::Peer;
use crate::transport::websocket::{WsProtocol, WsStream};

/// Where WebSocket connections go.
pub struct WsTargets {
    /// Served as AMQP connections.
    pub amqp: Arc<AmqpContext>,
    /// Served as MQTT connections.
    pub mqtt: Arc<MqttContext>,
    /// The plain HTTP listener's address, shown as the connection's local end
    /// (the HTTPS listener supplies its own [`Peer`] per connection).
    pub local: SocketAddr,
}

fn is_websocket_upgrade(req: &Request) -> bool {
    req.headers()
        .get(UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Middleware of the HTTP and HTTPS listeners: upgrades WebSocket requests to
/// AMQP or MQTT connections and passes every other request on. Over HTTPS the
/// connection's [`Peer`] (TLS, client certificate) is in the request's
/// `ConnectInfo<Peer>`; over plain HTTP only the address is known.
pub async fn upgrade(
    State(state): State<Arc<HttpState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    let Some(targets) = state.websocket.as_ref() else {
        return next.run(req).await;
    };
    if !is_websocket_upgrade(&req) {
        return next.run(req).await;
    }
    let offered: Vec<String> = req
        .headers()
        .get_all(SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::to_string)
        .collect();
    let (protocol, confirm) = WsProtocol::choose(offered.iter().map(String::as_str), req.uri().path());
    let stream_peer = match req.extensions().get::<ConnectInfo<Peer>>() {
        Some(ConnectInfo(p)) => p.clone(),
        None => Peer::plain(peer, targets.local),
    };
    let confirm = confirm.map(str::to_string);
    let (mut parts, _body) = req.into_parts();
    let ws = match WebSocketUpgrade::from_request_parts(&mut parts, &state).await {
        Ok(ws) => ws,
        Err(rejection) => return rejection.into_response(),
    };
    let ws = match confirm {
        Some(name) => ws.protocols([name]),
        None => ws,
    };
    let (amqp, mqtt) = (targets.amqp.clone(), targets.mqtt.clone());
    tracing::debug!(%peer, ?protocol, "WebSocket upgrade");
    ws.on_upgrade(move |socket| async move {
        let stream = WsStream::new(socket);
        match protocol {
            WsProtocol::Amqp => {
                let serve = crate::amqp::connection::serve(amqp.clone(), stream, stream_peer);
                amqp.tasks.track_future(serve).await;
            }
            WsProtocol::Mqtt => {
                let serve = crate::mqtt::connection::serve(mqtt.clone(), stream, stream_peer);
                mqtt.tasks.track_future(serve).await;
            }
        }
    })
}
