//! AMQP reply codes and the errors that close a channel or a connection.

use crate::core::Error as CoreError;

/// Reply codes of AMQP 0-9-1 used by the broker.
pub mod code {
    /// Normal close.
    pub const REPLY_SUCCESS: u16 = 200;
    /// Operator or shutdown forced the close.
    pub const CONNECTION_FORCED: u16 = 320;
    /// Mandatory message had no route.
    pub const NO_ROUTE: u16 = 312;
    /// Immediate message had no ready consumer.
    pub const NO_CONSUMERS: u16 = 313;
    /// Permission or reserved name.
    pub const ACCESS_REFUSED: u16 = 403;
    /// Entity missing.
    pub const NOT_FOUND: u16 = 404;
    /// Exclusive to another connection.
    pub const RESOURCE_LOCKED: u16 = 405;
    /// Precondition failed.
    pub const PRECONDITION_FAILED: u16 = 406;
    /// Malformed frame.
    pub const FRAME_ERROR: u16 = 501;
    /// Invalid field values.
    pub const SYNTAX_ERROR: u16 = 502;
    /// Invalid command.
    pub const COMMAND_INVALID: u16 = 503;
    /// Channel misuse.
    pub const CHANNEL_ERROR: u16 = 504;
    /// Frame arrived out of sequence.
    pub const UNEXPECTED_FRAME: u16 = 505;
    /// Resource limit.
    pub const RESOURCE_ERROR: u16 = 506;
    /// Not allowed.
    pub const NOT_ALLOWED: u16 = 530;
    /// Not implemented.
    pub const NOT_IMPLEMENTED: u16 = 540;
    /// Internal error.
    pub const INTERNAL_ERROR: u16 = 541;

    /// RabbitMQ's name of a reply code, used as the prefix of reply texts.
    pub fn name(code: u16) -> &'static str {
        match code {
            200 => "OK",
            320 => "CONNECTION_FORCED",
            312 => "NO_ROUTE",
            313 => "NO_CONSUMERS",
            403 => "ACCESS_REFUSED",
            404 => "NOT_FOUND",
            405 => "RESOURCE_LOCKED",
            406 => "PRECONDITION_FAILED",
            501 => "FRAME_ERROR",
            502 => "SYNTAX_ERROR",
            503 => "COMMAND_INVALID",
            504 => "CHANNEL_ERROR",
            505 => "UNEXPECTED_FRAME",
            506 => "RESOURCE_ERROR",
            530 => "NOT_ALLOWED",
            540 => "NOT_IMPLEMENTED",
            541 => "INTERNAL_ERROR",
            _ => "ERROR",
        }
    }
}

/// Whether an error closes the channel or the whole connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Close the channel only (soft error).
    Channel,
    /// Close the connection (hard error).
    Connection,
}

/// An error to report to the client with a close method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpError {
    /// What to close.
    pub scope: Scope,
    /// Reply code.
    pub code: u16,
    /// Reply text, prefixed with the code's name as RabbitMQ does.
    pub text: String,
    /// Class of the method that failed (0 if none).
    pub class_id: u16,
    /// Method id of the method that failed (0 if none).
    pub method_id: u16,
}

impl AmqpError {
    /// A channel-closing error.
    pub fn channel(code: u16, text: impl std::fmt::Display) -> Self {
        Self::new(Scope::Channel, code, text)
    }

    /// A connection-closing error.
    pub fn connection(code: u16, text: impl std::fmt::Display) -> Self {
        Self::new(Scope::Connection, code, text)
    }

    fn new(scope: Scope, code: u16, text: impl std::fmt::Display) -> Self {
        let mut text = format!("{} - {}", code::name(code), text);
        if text.len() > 255 {
            let mut end = 255;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        AmqpError {
            scope,
            code,
            text,
            class_id: 0,
            method_id: 0,
        }
    }

    /// Names the method that caused the error.
    pub fn on(mut self, class_id: u16, method_id: u16) -> Self {
        self.class_id = class_id;
        self.method_id = method_id;
        self
    }
}

impl From<CoreError> for AmqpError {
    fn from(e: CoreError) -> Self {
        let (scope, c) = match &e {
            CoreError::NotFound(_) => (Scope::Channel, code::NOT_FOUND),
            CoreError::AccessRefused(_) => (Scope::Channel, code::ACCESS_REFUSED),
            CoreError::ResourceLocked(_) => (Scope::Channel, code::RESOURCE_LOCKED),
            CoreError::PreconditionFailed(_) => (Scope::Channel, code::PRECONDITION_FAILED),
            CoreError::ResourceError(_) => (Scope::Channel, code::RESOURCE_ERROR),
            CoreError::NotAllowed(_) => (Scope::Connection, code::NOT_ALLOWED),
            CoreError::CommandInvalid(_) => (Scope::Connection, code::COMMAND_INVALID),
            CoreError::Internal(_) => (Scope::Connection, code::INTERNAL_ERROR),
        };
        AmqpError::new(scope, c, e.text())
    }
}

/// Result of handling one frame.
pub type AmqpResult<T = ()> = Result<T, AmqpError>;
