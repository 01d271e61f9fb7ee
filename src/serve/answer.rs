//! What the three generation endpoints (`/v1/chat/completions`, `/v1/completions`,
//! `/v1/responses`) share, so a request gets the same library, the same experiences and the
//! same headers whichever of them it calls:
//!
//! 1. [`Target::resolve`]: the model (`MODEL@LIBRARY[@VERSION]`, the alias `gym`) and the
//!    library (from the model name, else the `x-gym-library` header, else the server's default);
//! 2. [`Target::inject`]: retrieval, the injection training uses, the usage note and metrics;
//! 3. [`reply`]: generation through the router (streamed, or whole with Θ escalation), the
//!    token and latency metrics, and the `x-gym-upstream`, `x-gym-hllm`, `x-gym-escalated`,
//!    `x-gym-library*` and `x-gym-experiences` headers.
//!
//! Each endpoint only reads its own request shape and writes its own response shape.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::sse::Sse;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::AppState;
use super::answered::Answered;
use super::error::ApiError;
use super::inject::{inject, query_text};
use super::metrics::Latency;
use super::stream::{self, Encoder, StreamPlan};
use super::uncertainty;
use super::upstream::UpstreamAnswer;
use crate::backend::{ChatMessage, Group, GroupRequest};
use crate::library::{Experience, ExperienceId, LibraryRef, ParseLibraryRefError};
use crate::retrieve::{Keep, Snapshot};

/// Splits `MODEL@LIBRARY[@VERSION]` into the model name and the library reference (see
/// [`LibraryRef`], which also reads the older `MODEL@LIBRARY:VERSION`). The model name ends
/// at the first `@`, so it may hold `:` (`llama3:8b@arith@2`).
pub fn parse_model(spec: &str) -> Result<(&str, Option<LibraryRef>), ApiError> {
    match spec.split_once('@') {
        None => Ok((spec, None)),
        Some((model, library)) => {
            let reference = library
                .parse()
                .map_err(|e: ParseLibraryRefError| ApiError::bad("model", e.to_string()))?;
            Ok((model, Some(reference)))
        }
    }
}

/// The library a request uses: from the model name, else the `x-gym-library` header
/// (`LIBRARY[@VERSION]`, a [`LibraryRef`]), else the server's default.
fn selection(
    from_model: Option<LibraryRef>,
    headers: &HeaderMap,
    default: Option<&str>,
) -> Result<Option<LibraryRef>, ApiError> {
    if from_model.is_some() {
        return Ok(from_model);
    }
    if let Some(value) = headers.get("x-gym-library") {
        let text = value
            .to_str()
            .map_err(|_| ApiError::bad("x-gym-library", "the x-gym-library header is not text"))?;
        return text
            .trim()
            .parse()
            .map(Some)
            .map_err(|e: ParseLibraryRefError| ApiError::bad("x-gym-library", e.to_string()));
    }
    Ok(default.map(LibraryRef::head))
}

fn top_k(headers: &HeaderMap, default: usize) -> Result<usize, ApiError> {
    match headers.get("x-gym-top-k") {
        None => Ok(default),
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| ApiError::bad("x-gym-top-k", "x-gym-top-k must be a whole number")),
    }
}

/// The body of a request, or the error for one over the size limit or cut short.
pub fn body(app: &AppState, body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge {
                limit: app.config.max_body_bytes,
            }
        } else {
            ApiError::bad(None, rejection.body_text())
        }
    })
}

/// What every generation endpoint starts with: when the request arrived, its body (within the
/// size limit) read as the endpoint's request, and the model and library it goes to.
pub struct Opened<T> {
    pub started: Instant,
    pub request: T,
    pub target: Target,
}

/// Opens a request to a generation endpoint: `what` names its shape in errors, `model` reads
/// the model the client named.
pub fn open<T: DeserializeOwned>(
    app: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    what: &str,
    model: fn(&T) -> &str,
) -> Result<Opened<T>, ApiError> {
    let started = Instant::now();
    let body = self::body(app, body)?;
    let request: T = parse(&body, what)?;
    let target = Target::resolve(app, headers, model(&request))?;
    Ok(Opened {
        started,
        request,
        target,
    })
}

/// Seconds since the Unix epoch: the `created` time of a response.
pub fn created_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `body` read as a `T`; `what` names the request in the error.
pub fn parse<T: DeserializeOwned>(body: &[u8], what: &str) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|error| {
        ApiError::bad(
            None,
            format!("the body is not a valid {what} request: {error}"),
        )
    })
}

/// Where a request goes: the model that answers it and the library it asked for.
#[derive(Debug)]
pub struct Target {
    /// The model the router sends it to.
    pub model: String,
    /// The model as the client named it, echoed in the response.
    pub label: String,
    chosen: Option<LibraryRef>,
    top_k: usize,
    /// The request carries one of the server's API keys (it may pin a version of a governed
    /// library that no vote adopted).
    keyed: bool,
}

/// What was injected into a request.
pub struct Injected {
    pub snapshot: Arc<Snapshot>,
    pub ids: Vec<ExperienceId>,
    /// The injected experiences' summed confidence (Ψ).
    pub psi: f64,
}

impl Target {
    /// The model and library of a request whose `model` field is `requested`.
    pub fn resolve(app: &AppState, headers: &HeaderMap, requested: &str) -> Result<Self, ApiError> {
        let (model, from_model) = parse_model(requested)?;
        let model = if model == super::MODEL_ALIAS {
            app.router.default_model().unwrap_or_default()
        } else {
            model.to_owned()
        };
        if !app.router.serves(&model) {
            return Err(ApiError::NotFound {
                message: format!(
                    "no model `{model}`; this server serves {} (and `{}` for the first)",
                    app.router.models().join(", "),
                    super::MODEL_ALIAS
                ),
                code: "model_not_found",
            });
        }
        Ok(Self {
            chosen: selection(from_model, headers, app.config.default_library.as_deref())?,
            top_k: top_k(headers, app.config.top_k)?,
            keyed: app.keys.holder(headers).is_some(),
            model,
            label: requested.to_owned(),
        })
    }

    /// Injects the experiences of the chosen library version (if any) into every one of
    /// `prompts` (the prompts of one request: retrieval searches with their last user
    /// messages together, so they all get the same experiences), and notes `answers`
    /// injections in the library's usage (one per answer asked for, as training counts one
    /// per sampled answer).
    pub async fn inject(
        &self,
        app: &AppState,
        prompts: &mut [Vec<ChatMessage>],
        answers: u64,
    ) -> Result<Option<Injected>, ApiError> {
        let Some(LibraryRef {
            name: library,
            version,
        }) = self.chosen.clone()
        else {
            return Ok(None);
        };
        let started = Instant::now();
        let catalog = Arc::clone(&app.catalog);
        let keyed = self.keyed;
        let snapshot =
            tokio::task::spawn_blocking(move || catalog.served(&library, version, keyed))
                .await
                .map_err(|_| ApiError::ShuttingDown)??;
        let all = self.top_k == 0 || self.top_k >= snapshot.state.active_count();
        let ids: Vec<ExperienceId> = match (&app.retriever, all) {
            (Some(retriever), false) => {
                let query = prompts
                    .iter()
                    .map(|messages| query_text(messages))
                    .collect::<Vec<_>>()
                    .join("\n");
                // Anonymous pins of other versions are searched in a scratch index, so they
                // cannot store every version in a shared Qdrant (`Keep`).
                let keep = if version.is_none() || keyed {
                    Keep::Index
                } else {
                    Keep::Scratch
                };
                retriever
                    .retrieve(&snapshot, &query, self.top_k, keep)
                    .await?
                    .into_iter()
                    .map(|hit| hit.id)
                    .collect()
            }
            _ => snapshot.state.active().map(|e| e.id).collect(),
        };
        let shown: Vec<&Experience> = ids
            .iter()
            .filter_map(|id| snapshot.state.get_active(*id))
            .collect();
        for messages in prompts.iter_mut() {
            *messages = inject(std::mem::take(messages), &shown);
        }
        let psi = uncertainty::psi(&shown);
        app.metrics.injected(
            &snapshot.library,
            snapshot.version,
            ids.len(),
            started.elapsed(),
        );
        app.usage.note(&snapshot.library, &ids, answers);
        Ok(Some(Injected { snapshot, ids, psi }))
    }
}

impl Injected {
    /// The library and version, for the per-version metrics.
    pub fn library(&self) -> (String, String) {
        (
            self.snapshot.library.clone(),
            self.snapshot.version.to_string(),
        )
    }
}

/// Sets the `x-gym-library`, `x-gym-library-version`, `x-gym-library-root` and
/// `x-gym-experiences` headers: what was injected (nothing when nothing was).
pub fn injected_headers(response: &mut Response, injected: Option<&Injected>) {
    let Some(injected) = injected else { return };
    let headers = response.headers_mut();
    let ids: Vec<String> = injected.ids.iter().map(ToString::to_string).collect();
    for (name, value) in [
        ("x-gym-library", injected.snapshot.library.clone()),
        (
            "x-gym-library-version",
            injected.snapshot.version.to_string(),
        ),
        ("x-gym-library-root", injected.snapshot.root.to_string()),
        ("x-gym-experiences", ids.join(",")),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
}

/// `request` through the router to an upstream of `model`, within the generation timeout.
pub async fn generate(
    app: &AppState,
    model: &str,
    request: &GroupRequest,
) -> Result<UpstreamAnswer, ApiError> {
    let timeout = app.config.request_timeout;
    tokio::time::timeout(timeout, app.router.generate(model, request))
        .await
        .map_err(|_| ApiError::Timeout {
            seconds: timeout.as_secs_f64(),
        })?
        .map_err(ApiError::from)
}

/// Every one of `requests`, at once (the model batches them), within one generation timeout;
/// their answers as one group, choices in request order.
async fn generate_all(
    app: &AppState,
    model: &str,
    requests: &[GroupRequest],
) -> Result<UpstreamAnswer, ApiError> {
    if let [request] = requests {
        return generate(app, model, request).await;
    }
    let timeout = app.config.request_timeout;
    let all = futures::future::try_join_all(
        requests
            .iter()
            .map(|request| app.router.generate(model, request)),
    );
    let routed = tokio::time::timeout(timeout, all)
        .await
        .map_err(|_| ApiError::Timeout {
            seconds: timeout.as_secs_f64(),
        })?
        .map_err(ApiError::from)?;
    Ok(UpstreamAnswer::merge(routed))
}

/// How an endpoint writes its answer.
pub enum Shape {
    /// Server-sent events.
    Stream(Box<dyn Encoder>),
    /// One JSON document made from the finished group.
    Whole(Box<dyn FnOnce(&Group) -> Value + Send>),
}

/// Generates the answers to `requests` (the prompts of one request, already injected) and
/// writes them in `shape`, with the headers every generation endpoint sets. Log-probabilities
/// are always asked of the model, to measure Θ; the client gets them only when
/// `plan.client_logprobs`.
pub async fn reply(
    app: &AppState,
    target: &Target,
    requests: Vec<GroupRequest>,
    plan: StreamPlan,
    shape: Shape,
    injected: Option<&Injected>,
) -> Result<Response, ApiError> {
    let requests: Vec<GroupRequest> = requests
        .into_iter()
        .map(|mut request| {
            request.sampling.logprobs = true;
            request
        })
        .collect();
    let model = &target.model;
    // Escalation needs Θ of the whole answer before anything is sent, so with it configured a
    // streamed request is answered when complete.
    let shape = match shape {
        Shape::Stream(encoder) if app.config.escalate_theta.is_none() => {
            let mut response =
                stream::respond(app.clone(), model.clone(), requests, plan, encoder).await?;
            injected_headers(&mut response, injected);
            return Ok(response);
        }
        other => other,
    };

    let routed = generate_all(app, model, &requests).await?;
    let mut group = routed.group;
    let mut upstream = routed.upstream;
    let mut figures = uncertainty::figures(&group.completions, plan.psi);
    let mut escalated = None;
    if let (Some(threshold), Some(stronger), Some(measured)) = (
        app.config.escalate_theta,
        app.config.escalate_model.as_deref(),
        figures,
    ) && measured.theta > threshold
        && stronger != model
    {
        let retried = generate_all(app, stronger, &requests).await?;
        app.metrics.escalated(model, stronger);
        app.metrics.tokens(group.usage);
        group = retried.group;
        upstream = retried.upstream;
        figures = uncertainty::figures(&group.completions, plan.psi);
        escalated = Some(stronger.to_owned());
    }
    if let Some(figures) = figures {
        let (library, version) = plan.library.clone().unwrap_or_default();
        app.metrics.hllm(&library, &version, figures);
    }
    if !plan.client_logprobs {
        for completion in &mut group.completions {
            completion.logprobs = None;
        }
    }
    app.metrics.tokens(group.usage);
    app.metrics.latency(
        model,
        Latency {
            end_to_end: plan.started.elapsed(),
            first_token: None,
            tokens: group.usage.completion_tokens,
        },
    );

    let mut response = match shape {
        Shape::Stream(mut encoder) => {
            let events = encoder.finish(&group);
            Sse::new(futures::stream::iter(
                events.into_iter().map(Ok::<_, Infallible>),
            ))
            .into_response()
        }
        Shape::Whole(body) => axum::Json(body(&group)).into_response(),
    };
    Answered::attach(
        &mut response,
        escalated.as_deref().unwrap_or(model),
        group.usage,
    );
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&upstream) {
        headers.insert("x-gym-upstream", value);
    }
    if let Some(figures) = figures
        && let Ok(value) = HeaderValue::from_str(&figures.header())
    {
        headers.insert("x-gym-hllm", value);
    }
    if let Some(model) = escalated
        && let Ok(value) = HeaderValue::from_str(&model)
    {
        headers.insert("x-gym-escalated", value);
    }
    injected_headers(&mut response, injected);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_carry_a_library_and_version() {
        assert_eq!(parse_model("gym").unwrap(), ("gym", None));
        let at_3 = Some(LibraryRef {
            name: "letters".into(),
            version: Some(3),
        });
        assert_eq!(
            parse_model("smol@letters@3").unwrap(),
            ("smol", at_3.clone())
        );
        assert_eq!(
            parse_model("smol@letters:3").unwrap(),
            ("smol", at_3.clone()),
            "the older spelling"
        );
        assert_eq!(
            parse_model("llama3:8b@letters@3").unwrap(),
            ("llama3:8b", at_3)
        );
        let (_, selection) = parse_model("smol@letters").unwrap();
        assert_eq!(selection.unwrap().version, None);
        for bad in ["smol@", "smol@letters:x", "smol@:3", "smol@../x"] {
            assert!(
                matches!(parse_model(bad), Err(ApiError::BadRequest { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_header_applies_when_the_model_names_no_library() {
        let mut headers = HeaderMap::new();
        headers.insert("x-gym-library", HeaderValue::from_static("arith@2"));
        let chosen = selection(None, &headers, Some("default")).unwrap().unwrap();
        assert_eq!((chosen.name.as_str(), chosen.version), ("arith", Some(2)));
        let from_model = LibraryRef::head("letters");
        let chosen = selection(Some(from_model.clone()), &headers, None).unwrap();
        assert_eq!(chosen, Some(from_model));
        let chosen = selection(None, &HeaderMap::new(), Some("default")).unwrap();
        assert_eq!(chosen.unwrap().name, "default");
        assert_eq!(selection(None, &HeaderMap::new(), None).unwrap(), None);
    }
}
