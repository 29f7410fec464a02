//! What every protocol adapter needs from a connection's byte stream, whatever
//! it arrives over: TCP accept loops, TLS, WebSocket, and the outbox that
//! batches writes.

pub mod accept;
pub mod delivery_loop;
pub mod outbox;
pub mod peer;
pub mod protocol_listener;
pub mod tls;
pub mod websocket;
