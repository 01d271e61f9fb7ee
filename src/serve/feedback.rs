//! `POST /v1/feedback`: a client says how a served answer did, naming it by the
//! `x-request-id` of its response: `{"request_id": "...", "choice": 0, "reward": 0.8}`, or
//! `"thumbs": "up"|"down"`, or `"reference": "the right answer"` (at least one of the three).
//! Needs an API key, as the routes that write do. The feedback goes to the traffic log (when
//! there is one) and, when the answer had experiences injected, counts a good or bad served
//! outcome for each of them in `usage.json` (once per answer; a reference alone counts
//! nothing).

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use serde_json::{Map, Value, json};

use super::AppState;
use super::error::ApiError;
use super::request_id;
use super::traffic::record::{Thumbs, TrafficFeedback, TrafficRecord, now};

/// Largest feedback body, in bytes.
pub const MAX_BODY: usize = 256 << 10;
/// Longest reference answer, in bytes.
pub const MAX_REFERENCE: usize = 64 << 10;

/// The feedback a body asks to record, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Feedback {
    pub request_id: String,
    pub choice: usize,
    pub reward: Option<f64>,
    pub thumbs: Option<Thumbs>,
    pub reference: Option<String>,
}

impl Feedback {
    /// Reads a body, naming the field at fault.
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        if body.len() > MAX_BODY {
            return Err(ApiError::TooLarge { limit: MAX_BODY });
        }
        let value: Value = serde_json::from_slice(body)
            .map_err(|error| ApiError::bad(None, format!("the body is not JSON: {error}")))?;
        let Value::Object(fields) = value else {
            return Err(ApiError::bad(
                None,
                "the body must be a JSON object: {\"request_id\", \"choice\", and \"reward\", \"thumbs\" or \"reference\"}",
            ));
        };
        if let Some(unknown) = fields.keys().find(|k| {
            !["request_id", "choice", "reward", "thumbs", "reference"].contains(&k.as_str())
        }) {
            return Err(ApiError::bad(
                None,
                format!(
                    "unknown field `{unknown}`; feedback takes request_id, choice, reward, thumbs and reference"
                ),
            ));
        }
        let request_id = match fields.get("request_id") {
            Some(Value::String(id)) if request_id::is_valid(id) => id.clone(),
            Some(_) => {
                return Err(ApiError::bad(
                    "request_id",
                    "request_id must be the x-request-id of a response (1 to 128 visible ASCII characters)",
                ));
            }
            None => {
                return Err(ApiError::bad(
                    "request_id",
                    "request_id is missing: give the x-request-id header of the answer's response",
                ));
            }
        };
        let choice = match present(&fields, "choice") {
            None => 0,
            Some(value) => value
                .as_u64()
                .and_then(|c| usize::try_from(c).ok())
                .ok_or_else(|| {
                    ApiError::bad(
                        "choice",
                        "choice must be a whole number >= 0 (the answer's index)",
                    )
                })?,
        };
        let reward = match present(&fields, "reward") {
            None => None,
            Some(value) => Some(
                value
                    .as_f64()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| {
                        ApiError::bad("reward", "reward must be a number from 0 to 1")
                    })?,
            ),
        };
        let thumbs = match present(&fields, "thumbs").map(Value::as_str) {
            None => None,
            Some(Some("up")) => Some(Thumbs::Up),
            Some(Some("down")) => Some(Thumbs::Down),
            Some(_) => return Err(ApiError::bad("thumbs", "thumbs must be \"up\" or \"down\"")),
        };
        let reference = match present(&fields, "reference") {
            None => None,
            Some(Value::String(text)) if text.len() <= MAX_REFERENCE => Some(text.clone()),
            Some(Value::String(_)) => {
                return Err(ApiError::bad(
                    "reference",
                    format!("reference is longer than {MAX_REFERENCE} bytes"),
                ));
            }
            Some(_) => return Err(ApiError::bad("reference", "reference must be a string")),
        };
        if reward.is_none() && thumbs.is_none() && reference.is_none() {
            return Err(ApiError::bad(
                None,
                "feedback needs at least one of reward (0 to 1), thumbs (\"up\" or \"down\") and reference (the right answer)",
            ));
        }
        Ok(Self {
            request_id,
            choice,
            reward,
            thumbs,
            reference,
        })
    }

    /// Whether the feedback says the answer was good (`Some(true)`), bad, or neither (a
    /// reference alone). Thumbs decide when both thumbs and a reward are given.
    pub fn outcome(&self) -> Option<bool> {
        match (self.thumbs, self.reward) {
            (Some(thumbs), _) => Some(thumbs == Thumbs::Up),
            (None, Some(reward)) => Some(reward >= 0.5),
            (None, None) => None,
        }
    }
}

/// A field that is there and not `null`.
fn present<'a>(fields: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    fields.get(name).filter(|value| !value.is_null())
}

pub async fn post(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    app.keys.require(&headers, "sending feedback")?;
    let body = body.map_err(|_| ApiError::TooLarge { limit: MAX_BODY })?;
    let feedback = Feedback::parse(&body)?;
    let Some(served) = app.traffic.served(&feedback.request_id) else {
        return Err(ApiError::NotFound {
            message: format!(
                "no answered request `{}` is known: it was never served, failed, or is older than \
                 the last {} requests this server remembers (they are also forgotten when it \
                 restarts)",
                feedback.request_id,
                super::traffic::REMEMBERED
            ),
            code: "request_not_found",
        });
    };
    if feedback.choice >= served.answers {
        return Err(ApiError::bad(
            "choice",
            format!(
                "choice {} is out of range: request `{}` has {} answer(s)",
                feedback.choice, feedback.request_id, served.answers
            ),
        ));
    }
    let outcome = feedback.outcome();
    app.traffic.note_feedback(outcome);
    // Usage counts once per answer: later feedback on the same answer is logged (the last one
    // wins for training) but does not count again.
    let counted = match (outcome, &served.library) {
        (Some(good), Some(library))
            if !served.experiences.is_empty()
                && app
                    .traffic
                    .count_once(&feedback.request_id, feedback.choice) =>
        {
            app.usage.note_outcome(library, &served.experiences, good);
            true
        }
        _ => false,
    };
    let record = TrafficFeedback {
        request_id: feedback.request_id.clone(),
        at: now(),
        choice: feedback.choice,
        reward: feedback.reward,
        thumbs: feedback.thumbs,
        reference: feedback.reference.clone(),
    };
    let logged = app.traffic.log(&TrafficRecord::Feedback(record.clone()));
    let ids: Vec<String> = served.experiences.iter().map(ToString::to_string).collect();
    Ok(Json(json!({
        "request_id": record.request_id,
        "at": record.at,
        "choice": record.choice,
        "reward": record.reward,
        "thumbs": record.thumbs,
        "reference": record.reference,
        "outcome": outcome.map(|good| if good { "good" } else { "bad" }),
        "usage": {
            "counted": counted,
            "library": served.library,
            "experiences": if counted { ids } else { Vec::new() },
        },
        "logged": logged,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: Value) -> Result<Feedback, ApiError> {
        Feedback::parse(body.to_string().as_bytes())
    }

    fn param_of(body: Value) -> Option<String> {
        match parse(body) {
            Err(ApiError::BadRequest { param, .. }) => param,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_bad_field_is_named() {
        let id = "req-1";
        for (body, param) in [
            (json!({"choice": 0, "reward": 1}), "request_id"),
            (json!({"request_id": 5, "reward": 1}), "request_id"),
            (
                json!({"request_id": "has space", "reward": 1}),
                "request_id",
            ),
            (
                json!({"request_id": id, "choice": -1, "reward": 1}),
                "choice",
            ),
            (
                json!({"request_id": id, "choice": 0.5, "reward": 1}),
                "choice",
            ),
            (json!({"request_id": id, "reward": 1.5}), "reward"),
            (json!({"request_id": id, "reward": "high"}), "reward"),
            (json!({"request_id": id, "thumbs": "sideways"}), "thumbs"),
            (json!({"request_id": id, "reference": 7}), "reference"),
            (
                json!({"request_id": id, "reference": "x".repeat(MAX_REFERENCE + 1)}),
                "reference",
            ),
        ] {
            assert_eq!(param_of(body.clone()).as_deref(), Some(param), "{body}");
        }
        for body in [
            json!({"request_id": id}),
            json!({"request_id": id, "reward": null, "thumbs": null}),
            json!({"request_id": id, "reward": 1, "extra": true}),
            json!([1]),
        ] {
            assert!(
                matches!(parse(body.clone()), Err(ApiError::BadRequest { .. })),
                "{body}"
            );
        }
        let huge = vec![b' '; MAX_BODY + 1];
        assert!(matches!(
            Feedback::parse(&huge),
            Err(ApiError::TooLarge { .. })
        ));
    }

    #[test]
    fn thumbs_then_reward_decide_the_outcome() {
        let feedback = |body: Value| parse(body).unwrap();
        let id = "req-1";
        assert_eq!(
            feedback(json!({"request_id": id, "thumbs": "up"})).outcome(),
            Some(true)
        );
        assert_eq!(
            feedback(json!({"request_id": id, "thumbs": "down", "reward": 1})).outcome(),
            Some(false)
        );
        assert_eq!(
            feedback(json!({"request_id": id, "reward": 0.5})).outcome(),
            Some(true)
        );
        assert_eq!(
            feedback(json!({"request_id": id, "reward": 0.49})).outcome(),
            Some(false)
        );
        assert_eq!(
            feedback(json!({"request_id": id, "reference": "7"})).outcome(),
            None
        );
        let full = feedback(json!({"request_id": id, "choice": 2, "reward": 0, "reference": "7"}));
        assert_eq!(full.choice, 2);
        assert_eq!(full.reward, Some(0.0));
    }
}
