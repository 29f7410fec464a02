//! Errors of broker operations, named by what went wrong rather than by a wire code;
//! each protocol adapter maps them onto its own reply codes.

/// What a broker operation can fail with.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// The named entity does not exist.
    #[error("NOT_FOUND - {0}")]
    NotFound(String),
    /// The user may not do this (permissions, reserved names).
    #[error("ACCESS_REFUSED - {0}")]
    AccessRefused(String),
    /// The entity belongs exclusively to another connection.
    #[error("RESOURCE_LOCKED - {0}")]
    ResourceLocked(String),
    /// The request conflicts with the entity's state or definition.
    #[error("PRECONDITION_FAILED - {0}")]
    PreconditionFailed(String),
    /// The request is not allowed in this context (missing vhost, limits).
    #[error("NOT_ALLOWED - {0}")]
    NotAllowed(String),
    /// An unknown type or an invalid command.
    #[error("COMMAND_INVALID - {0}")]
    CommandInvalid(String),
    /// A resource limit was reached.
    #[error("RESOURCE_ERROR - {0}")]
    ResourceError(String),
    /// Storage or another internal failure.
    #[error("INTERNAL_ERROR - {0}")]
    Internal(String),
}

impl Error {
    /// The human-readable text, without the kind prefix.
    pub fn text(&self) -> &str {
        match self {
            Error::NotFound(s)
            | Error::AccessRefused(s)
            | Error::ResourceLocked(s)
            | Error::PreconditionFailed(s)
            | Error::NotAllowed(s)
            | Error::CommandInvalid(s)
            | Error::ResourceError(s)
            | Error::Internal(s) => s,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Internal(e.to_string())
    }
}

/// Result of a broker operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;
