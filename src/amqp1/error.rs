//! The error conditions AMQP 1.0 defines, and the core's errors mapped onto
//! them as RabbitMQ 4 does.

use super::codec::performative::AmqpError;

/// Condition symbols.
pub mod condition {
    /// The node (queue, exchange) does not exist.
    pub const NOT_FOUND: &str = "amqp:not-found";
    /// The user may not do this.
    pub const UNAUTHORIZED: &str = "amqp:unauthorized-access";
    /// A limit was reached.
    pub const RESOURCE_LIMIT: &str = "amqp:resource-limit-exceeded";
    /// The bytes did not decode.
    pub const DECODE: &str = "amqp:decode-error";
    /// Against the rules of the protocol.
    pub const NOT_ALLOWED: &str = "amqp:not-allowed";
    /// Valid, but not something we do.
    pub const NOT_IMPLEMENTED: &str = "amqp:not-implemented";
    /// A field had a value we cannot take.
    pub const INVALID_FIELD: &str = "amqp:invalid-field";
    /// Something failed inside the broker.
    pub const INTERNAL: &str = "amqp:internal-error";
    /// A frame on a channel or handle that is not in use.
    pub const UNATTACHED_HANDLE: &str = "amqp:session:unattached-handle";
    /// A frame larger than the negotiated size, or otherwise broken framing.
    pub const FRAMING: &str = "amqp:connection:framing-error";
    /// The session's window was exceeded.
    pub const WINDOW_VIOLATION: &str = "amqp:session:window-violation";
    /// A transfer beyond the credit granted.
    pub const TRANSFER_LIMIT: &str = "amqp:link:transfer-limit-exceeded";
    /// A message larger than the link allows.
    pub const MESSAGE_SIZE: &str = "amqp:link:message-size-exceeded";
    /// Another connection holds the node exclusively.
    pub const RESOURCE_LOCKED: &str = "amqp:resource-locked";
    /// The link was taken over.
    pub const STOLEN: &str = "amqp:link:stolen";
    /// The broker is shutting down or the connection was closed by an operator.
    pub const FORCED: &str = "amqp:connection:forced";
}

/// The core's error as an AMQP 1.0 error.
pub fn from_core(e: &crate::core::Error) -> AmqpError {
    use crate::core::Error as E;
    let c = match e {
        E::NotFound(_) => condition::NOT_FOUND,
        E::AccessRefused(_) => condition::UNAUTHORIZED,
        E::PreconditionFailed(_) => condition::NOT_ALLOWED,
        E::ResourceLocked(_) => condition::RESOURCE_LOCKED,
        E::NotAllowed(_) | E::CommandInvalid(_) => condition::NOT_ALLOWED,
        E::ResourceError(_) => condition::RESOURCE_LIMIT,
        E::Internal(_) => condition::INTERNAL,
    };
    AmqpError::new(c, e.text())
}
