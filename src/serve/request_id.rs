//! `x-request-id`: every response carries one, errors included, so a client can name the
//! request it got (to send feedback on it, `POST /v1/feedback`, or to find it in the traffic
//! log). A valid id the client sent is kept; an invalid one (too long, empty, or with bytes
//! other than visible ASCII) is replaced rather than echoed, so nothing a client sends is
//! reflected into a header unchecked; otherwise the server makes one: `req-` and 32 random hex
//! digits.
//!
//! Hand-written rather than tower-http's request-id layer: that layer keeps whatever the
//! client sent, and the rule here is to replace an invalid id. Applying this middleware twice
//! (around the API routes and again around the whole server) is harmless: the inner one sees
//! the valid id the outer one set and keeps it.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

/// The header, on requests and on responses.
pub const HEADER: &str = "x-request-id";

/// The longest id kept from a client.
pub const MAX_LEN: usize = 128;

/// A request's id, in its extensions once [`assign`] has run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

/// Whether `id` is one a client may choose: 1 to [`MAX_LEN`] bytes of visible ASCII.
pub fn is_valid(id: &str) -> bool {
    (1..=MAX_LEN).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

/// A fresh id: `req-` and 128 random bits in hex.
pub fn fresh() -> String {
    format!("req-{:032x}", rand::random::<u128>())
}

/// The middleware: keeps a valid client id or makes one, puts it in the request's headers and
/// extensions, and on the response.
pub async fn assign(mut request: Request, next: Next) -> Response {
    let sent = request
        .headers()
        .get(HEADER)
        .and_then(|value| value.to_str().ok())
        .filter(|id| is_valid(id))
        .map(str::to_owned);
    let id = sent.unwrap_or_else(fresh);
    // Visible ASCII is always a valid header value.
    let value = HeaderValue::from_str(&id).expect("visible ASCII is a header value");
    request
        .headers_mut()
        .insert(HeaderName::from_static(HEADER), value.clone());
    request.extensions_mut().insert(RequestId(id));
    let mut response = next.run(request).await;
    response
        .headers_mut()
        .insert(HeaderName::from_static(HEADER), value);
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

    async fn id_of(sent: Option<&[u8]>) -> (String, String) {
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
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        (header, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn a_valid_client_id_is_echoed_and_an_invalid_one_replaced() {
        let (header, seen) = id_of(Some(b"client-42")).await;
        assert_eq!((header.as_str(), seen.as_str()), ("client-42", "client-42"));
        for bad in [&b"has space"[..], b"\xff\xfe", &[b'x'; MAX_LEN + 1]] {
            let (header, seen) = id_of(Some(bad)).await;
            assert!(header.starts_with("req-"), "{header}");
            assert_eq!(header, seen, "the handler sees the id the client gets");
        }
        let (header, _) = id_of(None).await;
        assert!(header.starts_with("req-"));
    }
}
