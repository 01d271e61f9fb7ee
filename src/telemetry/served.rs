//! The span of one request `gym serve` answered (or refused): built by the traffic middleware
//! (`serve::traffic::record`), the one place every model route passes through, from what it
//! already reads for the traffic log: the request's model and messages, what the response
//! headers say was injected and which upstream answered, the answers, the status, and the
//! tokens the shared answer path reported.
//!
//! Message content follows the traffic log's rules (docs/traffic.md): it is written only when
//! asked for (`--otlp-content`, as the log only with `--traffic-log`), only for a request that
//! was answered (a failed request's body is whatever a client sent, and teaches nothing), and
//! only up to [`MAX_CONTENT_BYTES`](super::span::MAX_CONTENT_BYTES).

use std::time::SystemTime;

use super::span::{self, Kind, Span, Status};
use crate::backend::Usage;
use crate::data::conversation::Message;

/// What the span says the provider is: Gym served the request.
pub const PROVIDER: &str = "gym";

/// What the traffic middleware knows of a finished request.
#[derive(Debug, Clone, Default)]
pub struct Served<'a> {
    /// The server's request id (`x-request-id`).
    pub request_id: &'a str,
    /// The client's own id, when it sent a valid one.
    pub client_request_id: Option<&'a str>,
    pub route: &'a str,
    /// The model as the client named it (`gym@letters`).
    pub request_model: &'a str,
    /// The model that answered (after `MODEL@LIBRARY` was read, and escalation).
    pub response_model: Option<&'a str>,
    pub library: Option<&'a str>,
    pub version: Option<u64>,
    pub root: Option<&'a str>,
    /// The ids of the experiences injected.
    pub experiences: &'a [String],
    /// The upstream that answered (`x-gym-upstream`).
    pub upstream: Option<&'a str>,
    /// The stronger model the request was escalated to (`x-gym-escalated`).
    pub escalated: Option<&'a str>,
    pub status: u16,
    /// Tokens, when the answer path reported them (not for refused requests, nor for a stream
    /// the client left before its end).
    pub usage: Option<Usage>,
    pub finish_reasons: Vec<String>,
    /// The stream ended before its answers were complete (the client went away).
    pub incomplete: bool,
    pub messages: &'a [Message],
    pub answers: &'a [String],
    /// The client's W3C trace context (`traceparent`), when it sent one.
    pub traceparent: Option<&'a str>,
    pub start: Option<SystemTime>,
    pub end: Option<SystemTime>,
}

/// `gen_ai.operation.name` of a route.
pub fn operation(route: &str) -> &'static str {
    match route {
        "/v1/completions" => "text_completion",
        _ => "chat",
    }
}

impl Served<'_> {
    /// The span: GenAI attributes, Gym's own, and the messages when `content`.
    pub fn span(&self, content: bool) -> Span {
        let start = self.start.unwrap_or_else(SystemTime::now);
        let end = self.end.unwrap_or_else(SystemTime::now);
        let operation = operation(self.route);
        let name = match self.request_model {
            "" => operation.to_owned(),
            model => format!("{operation} {model}"),
        };
        let mut span = Span::new(name, Kind::Server, start, end);
        if let Some((trace, parent)) = self.traceparent.and_then(span::parse_traceparent) {
            span.trace_id = trace;
            span.parent = Some((parent, true));
        }
        span.set(span::OPERATION, operation);
        span.set_provider(PROVIDER);
        if !self.request_model.is_empty() {
            span.set(span::REQUEST_MODEL, self.request_model);
        }
        if let Some(model) = self.escalated.or(self.response_model) {
            span.set(span::RESPONSE_MODEL, model);
        }
        if let Some(usage) = self.usage {
            span.set_usage(usage);
        }
        if !self.finish_reasons.is_empty() {
            span.set(span::FINISH_REASONS, self.finish_reasons.clone());
        }
        span.set("http.route", self.route);
        span.set("http.request.method", "POST");
        span.set("http.response.status_code", u32::from(self.status));
        span.set("gym.request.id", self.request_id);
        if let Some(id) = self.client_request_id {
            span.set("gym.client_request.id", id);
        }
        if let Some(library) = self.library {
            span.set("gym.library", library);
        }
        if let Some(version) = self.version {
            span.set("gym.library.version", version);
        }
        if let Some(root) = self.root {
            span.set("gym.library.root", root);
        }
        span.set("gym.experiences.injected", self.experiences.to_vec());
        if let Some(upstream) = self.upstream {
            span.set("gym.upstream", upstream);
        }
        if let Some(model) = self.escalated {
            span.set("gym.escalated", model);
        }
        let answered = (200..300).contains(&self.status);
        let outcome = match (answered, self.incomplete) {
            (true, false) => "ok",
            (true, true) => "incomplete",
            (false, _) => "error",
        };
        span.set("gym.outcome", outcome);
        span.status = match outcome {
            "ok" => Status::Ok,
            "incomplete" => {
                Status::Error("the stream ended before its answers were complete".into())
            }
            _ => Status::Error(format!("HTTP {}", self.status)),
        };
        if !answered {
            span.set(span::ERROR_TYPE, self.status.to_string());
        }
        if content && answered {
            let answers: Vec<(String, String)> = self
                .answers
                .iter()
                .enumerate()
                .map(|(i, text)| {
                    let finish = self.finish_reasons.get(i).cloned().unwrap_or_default();
                    (text.clone(), finish)
                })
                .collect();
            span.set_content(self.messages, &answers);
        } else if content {
            span.set(
                span::CONTENT_OMITTED,
                format!("the request failed (HTTP {})", self.status),
            );
        }
        span
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::span::Value;

    fn served<'a>(messages: &'a [Message], answers: &'a [String], ids: &'a [String]) -> Served<'a> {
        Served {
            request_id: "req-1",
            client_request_id: Some("mine"),
            route: "/v1/chat/completions",
            request_model: "gym@letters",
            response_model: Some("smol"),
            library: Some("letters"),
            version: Some(2),
            root: Some("ab12"),
            experiences: ids,
            upstream: Some("local"),
            status: 200,
            usage: Some(Usage {
                prompt_tokens: 40,
                completion_tokens: 7,
                cached_prompt_tokens: 32,
            }),
            finish_reasons: vec!["stop".into()],
            messages,
            answers,
            ..Served::default()
        }
    }

    fn text<'s>(span: &'s Span, key: &str) -> &'s str {
        match span.get(key) {
            Some(Value::Str(text)) => text,
            other => panic!("{key}: {other:?}"),
        }
    }

    #[test]
    fn a_served_request_carries_the_genai_and_gym_attributes() {
        let messages = [Message::new("user", "How many r in strawberry?")];
        let answers = ["3".to_string()];
        let ids = ["E0001".to_string(), "E0003".to_string()];
        let span = served(&messages, &answers, &ids).span(false);
        assert_eq!(span.name, "chat gym@letters");
        assert_eq!(span.kind, Kind::Server);
        assert_eq!(span.status, Status::Ok);
        assert_eq!(text(&span, "gen_ai.operation.name"), "chat");
        assert_eq!(text(&span, "gen_ai.provider.name"), "gym");
        assert_eq!(text(&span, "gen_ai.system"), "gym");
        assert_eq!(text(&span, "gen_ai.request.model"), "gym@letters");
        assert_eq!(text(&span, "gen_ai.response.model"), "smol");
        assert_eq!(span.get("gen_ai.usage.input_tokens"), Some(&Value::Int(40)));
        assert_eq!(span.get("gen_ai.usage.output_tokens"), Some(&Value::Int(7)));
        assert_eq!(
            span.get("gen_ai.usage.cache_read.input_tokens"),
            Some(&Value::Int(32))
        );
        assert_eq!(text(&span, "gym.library"), "letters");
        assert_eq!(span.get("gym.library.version"), Some(&Value::Int(2)));
        assert_eq!(
            span.get("gym.experiences.injected"),
            Some(&Value::Strs(ids.to_vec()))
        );
        assert_eq!(text(&span, "gym.upstream"), "local");
        assert_eq!(text(&span, "gym.request.id"), "req-1");
        assert_eq!(text(&span, "gym.client_request.id"), "mine");
        assert_eq!(text(&span, "gym.outcome"), "ok");
        assert_eq!(
            span.get("http.response.status_code"),
            Some(&Value::Int(200))
        );
        assert_eq!(span.parent, None);
    }

    #[test]
    fn no_message_content_unless_asked_and_never_for_a_failed_request() {
        let messages = [Message::new("user", "a secret question")];
        let answers = ["a secret answer".to_string()];
        let off = served(&messages, &answers, &[]).span(false);
        let everything = format!("{:?}", off.attributes);
        assert!(!everything.contains("secret"), "{everything}");
        assert!(off.get(span::CONTENT_OMITTED).is_none());

        let on = served(&messages, &answers, &[]).span(true);
        assert!(text(&on, span::INPUT_MESSAGES).contains("a secret question"));
        assert!(text(&on, span::OUTPUT_MESSAGES).contains("a secret answer"));

        let failed = Served {
            status: 400,
            usage: None,
            ..served(&messages, &answers, &[])
        }
        .span(true);
        let everything = format!("{:?}", failed.attributes);
        assert!(!everything.contains("secret"), "{everything}");
        assert_eq!(
            text(&failed, span::CONTENT_OMITTED),
            "the request failed (HTTP 400)"
        );
        assert_eq!(text(&failed, "gym.outcome"), "error");
        assert_eq!(text(&failed, "error.type"), "400");
        assert_eq!(failed.status, Status::Error("HTTP 400".into()));
        assert!(failed.get("gen_ai.usage.input_tokens").is_none());
    }

    #[test]
    fn a_client_trace_context_makes_the_span_its_child() {
        let span = Served {
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            ..served(&[], &[], &[])
        }
        .span(false);
        assert_eq!(
            hex::encode(span.trace_id),
            "0af7651916cd43dd8448eb211c80319c"
        );
        let (parent, remote) = span.parent.unwrap();
        assert_eq!(hex::encode(parent), "b7ad6b7169203331");
        assert!(remote);
    }

    #[test]
    fn text_completions_and_incomplete_streams() {
        let span = Served {
            route: "/v1/completions",
            incomplete: true,
            ..served(&[], &[], &[])
        }
        .span(false);
        assert_eq!(text(&span, "gen_ai.operation.name"), "text_completion");
        assert_eq!(span.name, "text_completion gym@letters");
        assert_eq!(text(&span, "gym.outcome"), "incomplete");
        assert!(matches!(span.status, Status::Error(_)));
    }
}
