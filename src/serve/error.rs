//! Errors of the HTTP API, answered in OpenAI's error shape
//! (`{"error": {"message", "type", "param", "code"}}`) so the OpenAI SDKs raise the right
//! exception with the message intact. A 429 (the model's queue is full) also says in
//! `Retry-After` how many seconds to wait.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::upstream::RouteError;
use crate::backend::{BackendError, GrammarError};
use crate::gov::{GovError, VoteRejected};
use crate::library::LibraryError;
use crate::retrieve::{NotServed, RetrieveError};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed or asks for something out of range.
    #[error("{message}")]
    BadRequest {
        message: String,
        param: Option<String>,
    },
    /// No model, library or version by that name.
    #[error("{message}")]
    NotFound { message: String, code: &'static str },
    /// The body is over the size limit.
    #[error("the request body is over the limit of {limit} bytes")]
    TooLarge { limit: usize },
    /// The model did not answer in time.
    #[error("the model did not answer within {seconds} s")]
    Timeout { seconds: f64 },
    /// The client did not send its whole body in time.
    #[error("the request body did not arrive within {seconds} s")]
    BodyTimeout { seconds: f64 },
    /// The model backend failed.
    #[error("the model backend failed: {0}")]
    Backend(#[from] BackendError),
    /// Embedding or searching failed.
    #[error("retrieval failed: {0}")]
    Retrieval(#[from] RetrieveError),
    /// A library could not be read.
    #[error("the library could not be read: {0}")]
    Library(LibraryError),
    /// A request without a valid API key where one is needed (a write, or asking for the
    /// server's tools); the message says what needed it and what was missing.
    #[error("{0}")]
    Unauthorized(String),
    /// The library changed under a write (another writer committed first).
    #[error("{0}")]
    Conflict(String),
    /// The model's queue is full; the client should try again in `retry_after` seconds.
    #[error("{message}")]
    Busy { message: String, retry_after: u64 },
    /// The server is shutting down.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// A request a browser page sent, or one to a host name the server does not answer to
    /// ([`super::origin`]).
    #[error("{message}")]
    Forbidden { message: String, code: &'static str },
    /// A body that is not declared JSON.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The governance ledger cannot be read, or a governed version's root is not the one it
    /// adopted ([`crate::retrieve::governed`]): nothing is served rather than an unvoted version.
    #[error("{0}")]
    Governance(String),
}

impl ApiError {
    pub fn bad(param: impl Into<Option<&'static str>>, message: impl Into<String>) -> Self {
        Self::BadRequest {
            message: message.into(),
            param: param.into().map(str::to_string),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::NotFound { .. } => StatusCode::NOT_FOUND,
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::Backend(
                BackendError::InvalidRequest { .. } | BackendError::ContextTooSmall { .. },
            ) => StatusCode::BAD_REQUEST,
            // The client's schema asks for what no grammar is built for (`$ref`, a bad
            // pattern): its request is at fault, not the model. A grammar llama.cpp rejects
            // after Gym built it stays a 502.
            Self::Backend(BackendError::Grammar(error))
                if !matches!(error, GrammarError::Rejected) =>
            {
                StatusCode::BAD_REQUEST
            }
            Self::Backend(_) => StatusCode::BAD_GATEWAY,
            Self::Retrieval(_) | Self::Library(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Busy { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            Self::Forbidden { .. } => StatusCode::FORBIDDEN,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Governance(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn kind(&self) -> &'static str {
        match self.status() {
            StatusCode::BAD_REQUEST
            | StatusCode::NOT_FOUND
            | StatusCode::PAYLOAD_TOO_LARGE
            | StatusCode::REQUEST_TIMEOUT
            | StatusCode::CONFLICT
            | StatusCode::UNSUPPORTED_MEDIA_TYPE => "invalid_request_error",
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::FORBIDDEN => "permission_error",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            _ => "server_error",
        }
    }

    fn param(&self) -> Option<String> {
        match self {
            Self::BadRequest { param, .. } => param.clone(),
            Self::Backend(BackendError::InvalidRequest { field, .. }) => Some((*field).into()),
            _ => None,
        }
    }

    fn code(&self) -> Option<&'static str> {
        match self {
            Self::NotFound { code, .. } => Some(code),
            Self::TooLarge { .. } => Some("request_too_large"),
            Self::Unauthorized(_) => Some("invalid_api_key"),
            Self::Timeout { .. } => Some("timeout"),
            Self::BodyTimeout { .. } => Some("body_timeout"),
            Self::Busy { .. } => Some("queue_full"),
            Self::Forbidden { code, .. } => Some(code),
            Self::UnsupportedMediaType(_) => Some("unsupported_media_type"),
            Self::Governance(_) => Some("governance_unavailable"),
            _ => None,
        }
    }
}

impl From<RouteError> for ApiError {
    fn from(error: RouteError) -> Self {
        match error {
            RouteError::UnknownModel { .. } => Self::NotFound {
                message: error.to_string(),
                code: "model_not_found",
            },
            RouteError::Rejected(error) => Self::Backend(error),
            RouteError::AllFailed { last, .. } => Self::Backend(last),
            RouteError::Busy { retry_after, .. } => Self::Busy {
                message: error.to_string(),
                retry_after,
            },
            RouteError::Interrupted { error, .. } => Self::Backend(error),
        }
    }
}

/// The HTTP error a governance error answers with (the `/v1/gov` routes and the web pages' data).
impl From<GovError> for ApiError {
    fn from(error: GovError) -> Self {
        match error {
            GovError::NoLedger { .. } => Self::NotFound {
                message: error.to_string(),
                code: "no_ledger",
            },
            GovError::UnknownProposal { .. }
            | GovError::Vote(VoteRejected::UnknownProposal { .. }) => Self::NotFound {
                message: error.to_string(),
                code: "proposal_not_found",
            },
            GovError::Vote(
                VoteRejected::AlreadyVoted { .. }
                | VoteRejected::VotingClosed { .. }
                | VoteRejected::Executed { .. },
            ) => Self::Conflict(error.to_string()),
            GovError::Vote(_) => Self::bad("signature", error.to_string()),
            GovError::Library(error) => Self::Library(error),
            other => Self::Conflict(other.to_string()),
        }
    }
}

impl From<NotServed> for ApiError {
    fn from(error: NotServed) -> Self {
        match error {
            NotServed::Library(error) => error.into(),
            NotServed::Ledger(message) => Self::Governance(message),
            NotServed::NotAdopted(message) => Self::Forbidden {
                message,
                code: "version_not_governed",
            },
        }
    }
}

impl From<LibraryError> for ApiError {
    fn from(error: LibraryError) -> Self {
        match error {
            LibraryError::NotFound { name, .. } => Self::NotFound {
                message: format!("no library named `{name}`"),
                code: "library_not_found",
            },
            LibraryError::InvalidName { .. }
            | LibraryError::VersionNotFound { .. }
            | LibraryError::NotActive { .. } => Self::NotFound {
                message: error.to_string(),
                code: "library_not_found",
            },
            LibraryError::Change { .. } | LibraryError::NothingToCommit => Self::BadRequest {
                message: error.to_string(),
                param: Some("changes".into()),
            },
            LibraryError::ConcurrentWrite { .. } => Self::Conflict(error.to_string()),
            other => Self::Library(other),
        }
    }
}

impl ApiError {
    /// The `error` object of OpenAI's error shape.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "message": self.to_string(),
            "type": self.kind(),
            "param": self.param(),
            "code": self.code(),
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": self.body() });
        let mut response = (self.status(), Json(body)).into_response();
        if let Self::Busy { retry_after, .. } = self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
        }
        response
    }
}

/// The field a refused request's error names (`param` in its body; empty when none), for the
/// request checks' tests.
#[cfg(test)]
pub(super) fn param(error: ApiError) -> String {
    error.param().unwrap_or_default()
}
