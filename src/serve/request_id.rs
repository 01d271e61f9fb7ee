//! `x-request-id`: every response carries one, errors included, so a client can name the
//! request it got (to send feedback on it, `POST /v1/feedback`, or to find it in the traffic
//! log). The server makes each one (`req-` and 32 random hex digits), whatever the client
//! sent: ids must be unique in the traffic log, and a client's are not (a proxy retrying a 429
//! sends the same one again). The id a client sends, in `x-client-request-id` (OpenAI's name
//! for it) or in `x-request-id`, is kept beside it: echoed as `x-client-request-id` and
//! recorded as the traffic record's `client_request_id`. Only a valid one (1 to [`MAX_LEN`]
//! bytes of visible ASCII) is kept, so nothing a client sends is reflected into a header
//! unchecked.
//!
//! Hand-written rather than tower-http's request-id layer: that layer keeps whatever the
//! client sent. Applying this middleware twice (around the API routes and again around the
//! whole server) is harmless: the inner one finds the id the outer one assigned and keeps it.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

/// The header, on requests and on responses.
pub const HEADER: &str = "x-request-id";

/// The header with the client's own id, on requests and (echoed) on responses.
pub const CLIENT_HEADER: &str = "x-client-request-id";

/// The longest id kept from a client.
pub const MAX_LEN: usize = 128;

/// A request's id, in its extensions once [`assign`] has run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

/// The id the client sent, in a request's extensions when it sent a valid one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRequestId(pub String);

/// Whether `id` is one a client may choose: 1 to [`MAX_LEN`] bytes of visible ASCII.
pub fn is_valid(id: &str) -> bool {
    (1..=MAX_LEN).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

/// A fresh id: `req-` and 128 random bits in hex.
pub fn fresh() -> String {
    format!("req-{:032x}", rand::random::<u128>())
}

/// The middleware: gives the request a fresh id and keeps the client's valid one beside it,
/// in the request's headers and extensions and on the response.
pub async fn assign(mut request: Request, next: Next) -> Response {
    if request.extensions().get::<RequestId>().is_some() {
        return next.run(request).await;
    }
    let client = [CLIENT_HEADER, HEADER]
        .iter()
        .filter_map(|name| request.headers().get(*name))
        .filter_map(|value| value.to_str().ok())
        .find(|id| is_valid(id))
        .map(str::to_owned);
    let id = fresh();
    // Visible ASCII is always a valid header value.
    let value = HeaderValue::from_str(&id).expect("visible ASCII is a header value");
    let client_value = client
        .as_deref()
        .map(|client| HeaderValue::from_str(client).expect("visible ASCII is a header value"));
    request
        .headers_mut()
        .insert(HeaderName::from_static(HEADER), value.clone());
    request.extensions_mut().insert(RequestId(id));
    if let Some(client) = client {
        request.extensions_mut().insert(ClientRequestId(client));
    }
    let mut response = next.run(request).await;
    response
        .headers_mut()
        .insert(HeaderName::from_static(HEADER), value);
    if let Some(client_value) = client_value {
        response
            .headers_mut()
            .insert(HeaderName::from_static(CLIENT_HEADER), client_value);
    }
    response
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt as _;

    use super::*;

    #[test]
    fn only_short_visible_ascii_ids_are_kept() {
        assert!(is_valid("req-1"));
        assert!(is_valid(&"a".repeat(MAX_LEN)));
        for bad in ["", " lead", "tab\there", "é", "new\nline"] {
            assert!(!is_valid(bad), "{bad:?}");
        }
        assert!(!is_valid(&"a".repeat(MAX_LEN + 1)));
        let id = fresh();
        assert!(
            is_valid(&id) && id.starts_with("req-") && id.len() == 36,
            "{id}"
        );
        assert_ne!(fresh(), fresh());
    }

    /// (`x-request-id`, the id the handler saw, `x-client-request-id`) of a request that sent
    /// `sent` as its `x-request-id`.
    async fn id_of(sent: Option<&[u8]>) -> (String, String, Option<String>) {
        let app = Router::new()
            .route(
                "/",
                get(|request: Request| async move {
                    request.extensions().get::<RequestId>().unwrap().0.clone()
                }),
            )
            .layer(axum::middleware::from_fn(assign))
            .layer(axum::middleware::from_fn(assign));
        let mut request = Request::get("/");
        if let Some(sent) = sent {
            request = request.header("x-request-id", HeaderValue::from_bytes(sent).unwrap());
        }
        let response = app
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let header = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let client = response
            .headers()
            .get(CLIENT_HEADER)
            .map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        (header, String::from_utf8(body.to_vec()).unwrap(), client)
    }

    #[tokio::test]
    async fn every_request_gets_a_fresh_id_and_a_valid_client_id_is_kept_beside_it() {
        let (header, seen, client) = id_of(Some(b"client-42")).await;
        assert!(header.starts_with("req-"), "{header}");
        assert_eq!(header, seen, "the handler sees the id the client gets");
        assert_eq!(client.as_deref(), Some("client-42"));
        // The same client id twice (a retried request): two different ids.
        let (again, _, client) = id_of(Some(b"client-42")).await;
        assert_ne!(header, again);
        assert_eq!(client.as_deref(), Some("client-42"));
        for bad in [&b"has space"[..], b"\xff\xfe", &[b'x'; MAX_LEN + 1]] {
            let (header, seen, client) = id_of(Some(bad)).await;
            assert!(header.starts_with("req-"), "{header}");
            assert_eq!(header, seen);
            assert_eq!(client, None, "an invalid id is not echoed");
        }
        let (header, _, client) = id_of(None).await;
        assert!(header.starts_with("req-") && client.is_none());
    }
}
