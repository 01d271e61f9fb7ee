//! What a web page in the user's browser cannot make the server do.
//!
//! A page on any site may send requests to `127.0.0.1:8080`: a "simple" request (a `text/plain`
//! or form body, no custom header) goes out without a CORS preflight, so without a check here a
//! page could run generations, write traffic records or submit bodies of its choosing, reading
//! nothing back but causing all of it. And with DNS rebinding (a name the attacker controls
//! that resolves to 127.0.0.1 after the page loads) a page becomes same-origin with the server
//! in the browser's eyes and can read its unauthenticated GETs.
//!
//! [`guard`], around every route (API and web pages), refuses:
//! - a request whose `Host` is not one of the allowed names (`403 host_not_allowed`), when
//!   the server has an allowlist: by default the address it listens on and `localhost`,
//!   `127.0.0.1` and `[::1]` at its port, plus `--allowed-host` names. A server listening on
//!   every interface (`0.0.0.0`) answers by whatever name it is reached at and checks `Host`
//!   only when `--allowed-host` names are given;
//! - a request carrying an `Origin` (browsers send one on every cross-origin request and every
//!   POST) that is not the server's own: its host must be allowed, or, without an allowlist,
//!   equal to the request's `Host` (`403 origin_not_allowed`). Programs (the OpenAI SDKs, curl)
//!   send no `Origin` and are unaffected;
//! - a body-carrying request (POST, PUT, PATCH, DELETE) whose `Content-Type` is not
//!   `application/json` (`415 unsupported_media_type`). A browser sends `application/json`
//!   across origins only after a preflight, which this server does not grant.
//!
//! The checks run before the body is read and before anything is recorded: a refused request
//! costs no model time and leaves no trace in the traffic log; it is counted in `/metrics` as
//! `gym_requests_total{route="(refused)",status=…}`, so an operator sees the attempts. The web
//! pages only fetch JSON from their own origin, so they pass.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;

/// The `Host` names a server answers to.
#[derive(Debug, Clone, Default)]
pub struct HostPolicy {
    /// Lower-case `host` or `host:port` entries (an entry without a port allows any port);
    /// `None`: any `Host`, and an `Origin` must match the request's own `Host`.
    allowed: Option<Vec<String>>,
}

impl HostPolicy {
    /// The policy of a server listening on `address` that also answers to `extra` names: the
    /// address and the loopback names at its port, and `extra`; a server on every interface
    /// checks `Host` only against `extra` (and loopback) when there are some.
    pub fn for_listener(address: std::net::SocketAddr, extra: &[String]) -> Self {
        let port = address.port();
        let mut allowed: Vec<String> = extra.iter().map(|name| name.to_ascii_lowercase()).collect();
        if address.ip().is_unspecified() && extra.is_empty() {
            return Self { allowed: None };
        }
        if !address.ip().is_unspecified() {
            allowed.push(address.to_string().to_ascii_lowercase());
        }
        for loopback in ["localhost", "127.0.0.1", "[::1]"] {
            allowed.push(format!("{loopback}:{port}"));
        }
        Self {
            allowed: Some(allowed),
        }
    }

    /// Any `Host`; an `Origin` must still be the request's own.
    pub fn any_host() -> Self {
        Self { allowed: None }
    }

    fn allows(&self, authority: &str) -> bool {
        let authority = authority.to_ascii_lowercase();
        match &self.allowed {
            None => true,
            // An entry without a port (its host part is all of it) allows every port.
            Some(allowed) => allowed.iter().any(|entry| {
                entry == &authority
                    || host_part(entry) == entry && host_part(&authority) == entry.as_str()
            }),
        }
    }
}

/// `host` of `host:port` (`[::1]` of `[::1]:8080`).
fn host_part(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
    }
    authority.split(':').next().unwrap_or(authority)
}

/// Why a request is refused, if it is.
fn refusal(policy: &HostPolicy, method: &Method, headers: &HeaderMap) -> Option<ApiError> {
    let text = |name| {
        headers
            .get(name)
            .map(|value| value.to_str().unwrap_or("\u{fffd}"))
    };
    let host = text(header::HOST);
    if let Some(host) = host
        && !policy.allows(host)
    {
        return Some(ApiError::Forbidden {
            message: format!(
                "this server does not answer to the host name `{}`; start it with \
                 --allowed-host to add one",
                host.escape_debug()
            ),
            code: "host_not_allowed",
        });
    }
    if host.is_none() && policy.allowed.is_some() {
        return Some(ApiError::Forbidden {
            message: "a request without a Host header".into(),
            code: "host_not_allowed",
        });
    }
    if let Some(origin) = text(header::ORIGIN) {
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .filter(|rest| !rest.is_empty() && !rest.contains('/'));
        let own = match (authority, &policy.allowed) {
            (None, _) => false,
            (Some(authority), Some(_)) => policy.allows(authority),
            (Some(authority), None) => {
                host.is_some_and(|host| host.eq_ignore_ascii_case(authority))
            }
        };
        if !own {
            return Some(ApiError::Forbidden {
                message: format!(
                    "requests from the web page at `{}` are not accepted: only this server's own pages may call it from a browser",
                    origin.escape_debug()
                ),
                code: "origin_not_allowed",
            });
        }
    }
    let has_body = matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    if has_body {
        let content_type = text(header::CONTENT_TYPE).unwrap_or("");
        let essence = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if essence != "application/json" {
            return Some(ApiError::UnsupportedMediaType(format!(
                "the body must be JSON sent as `Content-Type: application/json`, not `{}`",
                if content_type.is_empty() {
                    "(none)".into()
                } else {
                    content_type.escape_debug().to_string()
                }
            )));
        }
    }
    None
}

/// The state of [`guard`]: the policy, and the metrics refusals are counted in.
pub struct Guard {
    pub policy: HostPolicy,
    pub metrics: Arc<super::Metrics>,
}

/// Refuses what [`HostPolicy`] and the module's rules do not allow; see the module docs.
pub async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    match refusal(&guard.policy, request.method(), request.headers()) {
        Some(error) => {
            let response = error.into_response();
            guard.metrics.request(
                "(refused)",
                response.status().as_u16(),
                std::time::Duration::ZERO,
            );
            response
        }
        None => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn code(error: Option<ApiError>) -> Option<String> {
        error.map(|e| match e {
            ApiError::Forbidden { code, .. } => code.to_owned(),
            other => other.status().as_str().to_owned(),
        })
    }

    #[test]
    fn a_loopback_server_answers_to_its_own_names_only() {
        let policy = HostPolicy::for_listener("127.0.0.1:8080".parse().unwrap(), &[]);
        for host in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "[::1]:8080",
        ] {
            let asked = headers(&[(header::HOST, host)]);
            assert_eq!(code(refusal(&policy, &Method::GET, &asked)), None, "{host}");
        }
        for host in [
            "evil.example:8080",
            "127.0.0.1:9999",
            "localhost",
            "evil.example",
        ] {
            let asked = headers(&[(header::HOST, host)]);
            assert_eq!(
                code(refusal(&policy, &Method::GET, &asked)).as_deref(),
                Some("host_not_allowed"),
                "{host}"
            );
        }
        assert_eq!(
            code(refusal(&policy, &Method::GET, &HeaderMap::new())).as_deref(),
            Some("host_not_allowed")
        );
        // An extra name without a port matches every port.
        let policy =
            HostPolicy::for_listener("0.0.0.0:8080".parse().unwrap(), &["gym.example.org".into()]);
        let asked = headers(&[(header::HOST, "gym.example.org:8080")]);
        assert_eq!(code(refusal(&policy, &Method::GET, &asked)), None);
        let asked = headers(&[(header::HOST, "10.0.0.5:8080")]);
        assert!(refusal(&policy, &Method::GET, &asked).is_some());
        // Every interface and no names: any Host.
        let policy = HostPolicy::for_listener("0.0.0.0:8080".parse().unwrap(), &[]);
        let asked = headers(&[(header::HOST, "10.0.0.5:8080")]);
        assert_eq!(code(refusal(&policy, &Method::GET, &asked)), None);
    }

    #[test]
    fn a_foreign_origin_is_refused_and_the_server_s_own_accepted() {
        let json = (header::CONTENT_TYPE, "application/json");
        for policy in [
            HostPolicy::for_listener("127.0.0.1:8080".parse().unwrap(), &[]),
            HostPolicy::any_host(),
        ] {
            let own = headers(&[
                (header::HOST, "127.0.0.1:8080"),
                (header::ORIGIN, "http://127.0.0.1:8080"),
                json.clone(),
            ]);
            assert_eq!(code(refusal(&policy, &Method::POST, &own)), None);
            for origin in [
                "http://evil.example",
                "http://127.0.0.1:9999",
                "null",
                "http://127.0.0.1:8080/x",
            ] {
                let foreign = headers(&[
                    (header::HOST, "127.0.0.1:8080"),
                    (header::ORIGIN, origin),
                    json.clone(),
                ]);
                assert_eq!(
                    code(refusal(&policy, &Method::POST, &foreign)).as_deref(),
                    Some("origin_not_allowed"),
                    "{origin}"
                );
            }
        }
    }

    #[test]
    fn bodies_must_be_declared_json() {
        let policy = HostPolicy::any_host();
        for content_type in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
        ] {
            let asked = headers(&[(header::CONTENT_TYPE, content_type)]);
            assert_eq!(
                code(refusal(&policy, &Method::POST, &asked)),
                None,
                "{content_type}"
            );
        }
        for content_type in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
        ] {
            let asked = headers(&[(header::CONTENT_TYPE, content_type)]);
            assert_eq!(
                code(refusal(&policy, &Method::POST, &asked)).as_deref(),
                Some("415"),
                "{content_type}"
            );
        }
        assert_eq!(
            code(refusal(&policy, &Method::POST, &HeaderMap::new())).as_deref(),
            Some("415")
        );
        assert_eq!(
            code(refusal(&policy, &Method::GET, &HeaderMap::new())),
            None
        );
    }
}
