//! What every protocol adapter needs from a connection's byte stream, whatever
//! it arrives over.

pub mod delivery_loop;
pub mod outbox;
pub mod websocket;
