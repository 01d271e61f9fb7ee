//! The voters' web app and the library browser that `gym serve` serves at `/gov` and
//! `/libraries`.
//!
//! | page | what |
//! |---|---|
//! | `/gov` | every proposal: title, library, base → new version, deadline, live tally against the 66% rule and the quorum, status (open, accepted, rejected, executed, stale) |
//! | `/gov/proposals/{id}` | the review: each added, updated (with a word diff) and deleted experience with its provenance, validation evidence and helpful/harmful counts, the Merkle roots before and after, the votes cast with their weights, the chain anchor; voting with a browser wallet (EIP-1193 `personal_sign`) or by pasting a `gym gov vote --sign-only` ballot |
//! | `/libraries`, `/libraries/{name}` | the libraries, a library's versions with their ops and provenance, the diff between any two versions, an experience's history and its inclusion proof as a download `gym library verify-proof` accepts |
//!
//! **Why plain HTML, CSS and JavaScript, and no template engine.** The pages are three static
//! shells and four scripts, embedded in the binary with `include_str!` (nothing is fetched from
//! elsewhere, so the pages work offline, and there is no build step). Everything a page shows
//! comes from JSON routes ([`data`], and the `/v1/gov` and `/v1/libraries` routes other clients
//! use) and is drawn by the scripts with `document.createElement` and `textContent` only, never
//! `innerHTML`: no server-side string ever becomes markup, so escaping holds by construction
//! rather than by remembering to escape in each template, and an experience whose text is
//! `<script>…` shows as that text. A Rust template engine (`askama`, `maud`) would escape too,
//! but the tally moves and votes are refused without reloading, which needs the script and the
//! JSON anyway; rendering on both sides would be two renderings of one thing. Every response
//! here carries a strict Content-Security-Policy (only this origin's scripts, styles and
//! requests; no inline script or style, no frames, no form posts), so a script that did get in
//! would not run.
//!
//! A vote signed in the browser signs exactly the message `gym gov vote` signs: the server
//! hands the page [`crate::gov::VoteSubject::message`] for each choice, the wallet signs it with
//! `personal_sign` (EIP-191), and the ballot goes to `POST /v1/gov/proposals/{id}/votes`, where
//! it is checked like every other vote; refusals come back with the server's reason and are
//! shown on the page.

pub mod anchor;
pub mod data;
pub mod words;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::serve::AppState;

/// The Content-Security-Policy of every page, script, style and data response here.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// One embedded file: its name under `/assets/`, media type and contents.
struct Asset {
    name: &'static str,
    media: &'static str,
    body: &'static str,
}

const ASSETS: &[Asset] = &[
    Asset {
        name: "gym.css",
        media: "text/css; charset=utf-8",
        body: include_str!("assets/gym.css"),
    },
    Asset {
        name: "common.js",
        media: "text/javascript; charset=utf-8",
        body: include_str!("assets/common.js"),
    },
    Asset {
        name: "gov.js",
        media: "text/javascript; charset=utf-8",
        body: include_str!("assets/gov.js"),
    },
    Asset {
        name: "review.js",
        media: "text/javascript; charset=utf-8",
        body: include_str!("assets/review.js"),
    },
    Asset {
        name: "libraries.js",
        media: "text/javascript; charset=utf-8",
        body: include_str!("assets/libraries.js"),
    },
];

const GOV_PAGE: &str = include_str!("assets/gov.html");
const REVIEW_PAGE: &str = include_str!("assets/review.html");
const LIBRARIES_PAGE: &str = include_str!("assets/libraries.html");

/// The pages, their data and their assets, to merge into the server's router: the data routes
/// read through the server's own state (its catalog of libraries, its `--gov-dir` ledger and
/// `--rpc-url` chain).
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/gov", get(|| page(GOV_PAGE)))
        .route("/gov/", get(|| page(GOV_PAGE)))
        .route("/gov/proposals/{id}", get(|| page(REVIEW_PAGE)))
        .route("/libraries", get(|| page(LIBRARIES_PAGE)))
        .route("/libraries/", get(|| page(LIBRARIES_PAGE)))
        .route("/libraries/{name}", get(|| page(LIBRARIES_PAGE)))
        .route("/assets/{file}", get(asset))
        .route("/gov/data/proposals", get(data::proposals))
        .route("/gov/data/proposals/{id}", get(data::proposal))
        .route("/libraries/data/{name}", get(data::library))
        .route("/libraries/data/{name}/diff", get(data::diff))
        .route(
            "/libraries/data/{name}/experiences/{id}",
            get(data::experience),
        )
        .layer(axum::middleware::map_response(secure))
        .with_state(state)
}

async fn page(html: &'static str) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|asset| asset.name == file) {
        Some(asset) => ([(header::CONTENT_TYPE, asset.media)], asset.body).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "no such asset",
        )
            .into_response(),
    }
}

/// The security headers every response here carries.
async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-cache"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_load_only_embedded_files_and_carry_no_inline_script_or_style() {
        for html in [GOV_PAGE, REVIEW_PAGE, LIBRARIES_PAGE] {
            let scripts: Vec<&str> = html.split("<script").skip(1).collect();
            assert!(!scripts.is_empty());
            for script in scripts {
                let tag = &script[..script.find('>').unwrap()];
                let src = tag
                    .split("src=\"/assets/")
                    .nth(1)
                    .expect("a script has a src");
                let name = &src[..src.find('"').unwrap()];
                assert!(ASSETS.iter().any(|a| a.name == name), "{name}");
                assert!(
                    script[tag.len() + 1..].starts_with("</script>"),
                    "inline: {tag}"
                );
            }
            assert!(!html.contains("style="), "inline style");
            assert!(!html.contains("<style"), "inline style");
            let handler = html.match_indices(" on").any(|(at, _)| {
                let rest = &html[at + 3..];
                let letters = rest.bytes().take_while(u8::is_ascii_lowercase).count();
                letters > 0 && rest[letters..].starts_with('=')
            });
            assert!(!handler, "an event handler attribute");
            assert!(!html.contains("http://") && !html.contains("https://"));
            assert!(html.contains("name=\"viewport\""));
            assert!(html.contains("lang=\"en\""));
        }
        for asset in ASSETS {
            assert!(!asset.body.contains("innerHTML"), "{}", asset.name);
            assert!(!asset.body.contains("eval("), "{}", asset.name);
            assert!(!asset.body.contains("https://"), "{}", asset.name);
        }
    }
}
