//! A deadline for reading a request's body.
//!
//! Without one, a client that sends its headers and then trickles its body (a byte now and
//! then) or stops sending holds a connection and a task for as long as it likes; enough of them
//! exhaust the server's file descriptors. Every request's body must arrive whole, within the
//! size limit, before [`BODY_DEADLINE`] (`gym serve --body-timeout`) runs out, or it is answered
//! 408 and its connection closed. The body is read here once and handed on in memory (the
//! handlers read it whole anyway, as JSON).

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};

use super::ApiError;

/// How long a body may take to arrive by default.
pub const BODY_DEADLINE: Duration = Duration::from_secs(30);

/// Reads the body of `request` within `deadline` and `limit` bytes, then runs the rest.
pub async fn read_body_in_time(
    deadline: Duration,
    limit: usize,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let read = tokio::time::timeout(deadline, Limited::new(body, limit).collect()).await;
    let bytes = match read {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            return ApiError::TooLarge { limit }.into_response();
        }
        Ok(Err(error)) => {
            return ApiError::bad(None, format!("the request body could not be read: {error}"))
                .into_response();
        }
        Err(_) => {
            let mut response = ApiError::BodyTimeout {
                seconds: deadline.as_secs_f64(),
            }
            .into_response();
            // The rest of the body will not be read: the connection cannot be reused.
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
            return response;
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
