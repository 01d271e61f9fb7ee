//! `POST /v1/completions`: OpenAI's legacy text completions, for the applications written
//! against vLLM's or llama-server's endpoint of that name.
//!
//! Each prompt is sent to the model as one user message through its chat template, so the
//! experiences go in exactly as they do for chat (and as training measured them); a raw
//! continuation of untemplated text is not offered, so `echo` (which would repeat the prompt
//! ahead of a continuation) is refused. Several prompts are answered as one request: the same
//! experiences for all, retrieved with all of them, and choice `p * n + i` is the `i`-th answer
//! to prompt `p`.

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::response::sse::Event;
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::answer::{self, Opened, Shape};
use super::error::ApiError;
use super::stream::{Encoder, StreamPlan};
use super::wire::MAX_N;
use crate::backend::openai::wire::{
    ChatRequest, Content, Stop, StreamOptions, WireMessage, finish_reason_name, usage_json,
};
use crate::backend::{ChatMessage, Completion, Group, GroupRequest};

/// The most log-probabilities per token OpenAI's `logprobs` asks for.
const MAX_LOGPROBS: u32 = 5;

/// The fields of a text completion request Gym reads; those it cannot honour are read too, to
/// be refused by name rather than ignored. Other fields (`user`, …) are ignored, as OpenAI
/// does.
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: Value,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub n: Option<usize>,
    #[serde(default)]
    pub stop: Option<Stop>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// How many of the most likely tokens to list per position (0 to 5).
    #[serde(default)]
    pub logprobs: Option<u32>,
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(default)]
    pub best_of: Option<usize>,
    #[serde(default)]
    pub logit_bias: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub presence_penalty: Option<f32>,
    #[serde(default)]
    pub frequency_penalty: Option<f32>,
}

/// A checked text completion request.
#[derive(Debug)]
pub struct CheckedCompletion {
    /// Each prompt as the one-message conversation the model is asked.
    pub prompts: Vec<Vec<ChatMessage>>,
    /// Answers per prompt.
    pub n: usize,
    pub sampling: crate::backend::Sampling,
    pub stream: bool,
    pub include_usage: bool,
    /// `logprobs`, when asked for.
    pub logprobs: Option<u32>,
}

impl CompletionRequest {
    /// Checks every field; the sampling fields are checked as chat's are.
    pub fn check(
        self,
        default_max_tokens: u32,
        random_seed: u64,
    ) -> Result<CheckedCompletion, ApiError> {
        let prompts = prompts(&self.prompt)?;
        let refused = |param: &'static str, why: &str| {
            Err(ApiError::bad(
                param,
                format!("`{param}` is not supported by Gym: {why}"),
            ))
        };
        if self.echo == Some(true) {
            return refused(
                "echo",
                "prompts go to the model through its chat template, so there is no plain \
                 continuation to echo the prompt ahead of",
            );
        }
        if self.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
            return refused("suffix", "the models are not asked to fill in the middle");
        }
        if self.best_of.is_some_and(|b| b > self.n.unwrap_or(1)) {
            return refused("best_of", "every sampled answer is returned; use `n`");
        }
        if self.logit_bias.as_ref().is_some_and(|b| !b.is_empty()) {
            return refused("logit_bias", "token biases are not applied");
        }
        for (param, value) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if value.is_some_and(|v| v != 0.0) {
                return refused(param, "repetition penalties are not applied");
            }
        }
        if let Some(count) = self.logprobs
            && count > MAX_LOGPROBS
        {
            return Err(ApiError::bad(
                "logprobs",
                format!("`logprobs` is {count}; it must be 0 to {MAX_LOGPROBS}"),
            ));
        }
        let n = self.n.unwrap_or(1);
        if n > 0 && prompts.len() * n > MAX_N {
            return Err(ApiError::bad(
                "prompt",
                format!(
                    "{} prompts with n = {n} ask for {} answers; one request may ask for at most {MAX_N}",
                    prompts.len(),
                    prompts.len() * n
                ),
            ));
        }
        // The sampling fields mean what chat's do: one check for both.
        let as_chat = ChatRequest {
            model: self.model.into(),
            messages: vec![WireMessage {
                role: "user".into(),
                content: Some(Content::Text("".into())),
                tool_calls: None,
                tool_call_id: None,
            }],
            n: self.n,
            temperature: self.temperature,
            top_p: self.top_p,
            max_tokens: self.max_tokens,
            stop: self.stop,
            logprobs: Some(self.logprobs.is_some()),
            seed: self.seed,
            stream: self.stream,
            stream_options: self.stream_options,
            ..ChatRequest::default()
        };
        let checked = as_chat.check(default_max_tokens, random_seed)?;
        Ok(CheckedCompletion {
            prompts: prompts
                .into_iter()
                .map(|prompt| vec![ChatMessage::user(prompt)])
                .collect(),
            n: checked.n,
            sampling: checked.sampling,
            stream: checked.stream,
            include_usage: checked.include_usage,
            logprobs: self.logprobs,
        })
    }
}

/// `prompt`: a string or a non-empty list of strings.
fn prompts(prompt: &Value) -> Result<Vec<String>, ApiError> {
    let bad = |message: String| Err(ApiError::bad("prompt", message));
    match prompt {
        Value::String(text) => Ok(vec![text.clone()]),
        Value::Array(items) if items.is_empty() => bad("`prompt` is an empty list".into()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(index, item)| match item {
                Value::String(text) => Ok(text.clone()),
                _ => Err(ApiError::bad(
                    "prompt",
                    format!(
                        "prompt[{index}] is not a string; Gym takes prompts as text, not token ids"
                    ),
                )),
            })
            .collect(),
        _ => bad("`prompt` must be a string or a list of strings".into()),
    }
}

pub async fn completions(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let Opened {
        started,
        request,
        target,
    } = answer::open(
        &app,
        &headers,
        body,
        "text completion",
        |r: &CompletionRequest| &r.model,
    )?;
    let mut checked = request.check(app.config.default_max_tokens, rand::random())?;
    let answers = (checked.prompts.len() * checked.n) as u64;
    let injected = target.inject(&app, &mut checked.prompts, answers).await?;
    let requests: Vec<GroupRequest> = std::mem::take(&mut checked.prompts)
        .into_iter()
        .map(|messages| GroupRequest::new(messages, checked.n, checked.sampling.clone()))
        .collect();
    let plan = StreamPlan {
        id: format!("cmpl-{:016x}", rand::random::<u64>()),
        created: answer::created_now(),
        model_label: target.label.clone(),
        include_usage: checked.include_usage,
        client_logprobs: checked.logprobs.is_some(),
        psi: injected.as_ref().map_or(0.0, |i| i.psi),
        library: injected.as_ref().map(answer::Injected::library),
        started,
    };
    let writer = TextChunks {
        id: plan.id.clone(),
        created: plan.created,
        model: plan.model_label.clone(),
        include_usage: plan.include_usage,
        logprobs: checked.logprobs,
        sent: Vec::new(),
    };
    let shape = if checked.stream {
        Shape::Stream(Box::new(writer))
    } else {
        Shape::Whole(Box::new(move |group: &Group| writer.whole(group)))
    };
    answer::reply(&app, &target, requests, plan, shape, injected.as_ref()).await
}

/// The legacy `logprobs` object of a choice: its tokens, their log-probabilities, where each
/// starts in the text, and per token the `top` most likely tokens. Gym knows the probability
/// of the sampled token only, so those lists hold that one token.
pub fn legacy_logprobs(completion: &Completion, top: u32) -> Value {
    let Some(tokens) = &completion.logprobs else {
        return Value::Null;
    };
    let mut offset = 0;
    let mut offsets = Vec::with_capacity(tokens.len());
    for token in tokens {
        offsets.push(offset);
        offset += token.token.chars().count();
    }
    json!({
        "tokens": tokens.iter().map(|t| t.token.as_str()).collect::<Vec<_>>(),
        "token_logprobs": tokens.iter().map(|t| t.logprob).collect::<Vec<_>>(),
        "top_logprobs": (top > 0).then(|| {
            tokens.iter().map(|t| json!({t.token.as_str(): t.logprob})).collect::<Vec<_>>()
        }),
        "text_offset": offsets,
    })
}

/// Writes text completions: whole, or as `text_completion` chunks.
struct TextChunks {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    logprobs: Option<u32>,
    /// Per choice, the text sent so far.
    sent: Vec<String>,
}

impl TextChunks {
    fn body(&self, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "system_fingerprint": null,
        })
    }

    fn choice(&self, index: usize, text: &str, completion: Option<&Completion>) -> Value {
        json!({
            "index": index,
            "text": text,
            "logprobs": match (completion, self.logprobs) {
                (Some(completion), Some(top)) => legacy_logprobs(completion, top),
                _ => Value::Null,
            },
            "finish_reason": completion.map(|c| finish_reason_name(c.finish)),
        })
    }

    fn chunk(&self, choices: Value, usage: Option<Value>) -> Event {
        let mut body = self.body(choices);
        if self.include_usage {
            body["usage"] = usage.unwrap_or(Value::Null);
        }
        Event::default().data(body.to_string())
    }

    fn whole(&self, group: &Group) -> Value {
        let choices: Vec<Value> = group
            .completions
            .iter()
            .enumerate()
            .map(|(index, completion)| self.choice(index, &completion.text, Some(completion)))
            .collect();
        let mut body = self.body(Value::from(choices));
        body["usage"] = usage_json(group.usage);
        body
    }
}

impl Encoder for TextChunks {
    fn delta(&mut self, index: usize, text: &str) -> Vec<Event> {
        if text.is_empty() {
            return Vec::new();
        }
        if index >= self.sent.len() {
            self.sent.resize(index + 1, String::new());
        }
        self.sent[index].push_str(text);
        vec![self.chunk(json!([self.choice(index, text, None)]), None)]
    }

    fn finish(&mut self, group: &Group) -> Vec<Event> {
        let mut events = Vec::new();
        for (index, completion) in group.completions.iter().enumerate() {
            let sent = self.sent.get(index).map_or("", String::as_str);
            let rest = completion.text.strip_prefix(sent).unwrap_or("").to_owned();
            events.extend(self.delta(index, &rest));
            events.push(self.chunk(json!([self.choice(index, "", Some(completion))]), None));
        }
        if self.include_usage {
            events.push(self.chunk(json!([]), Some(usage_json(group.usage))));
        }
        events.push(Event::default().data("[DONE]"));
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{FinishReason, TokenLogprob, Usage};
    use crate::serve::error::param;

    fn request(body: Value) -> Result<CheckedCompletion, ApiError> {
        serde_json::from_value::<CompletionRequest>(body)
            .unwrap()
            .check(16, 7)
    }

    #[test]
    fn prompts_are_strings_or_lists_of_strings() {
        let one = request(json!({"model": "gym", "prompt": "Say hi", "max_tokens": 4})).unwrap();
        assert_eq!(one.prompts, vec![vec![ChatMessage::user("Say hi")]]);
        assert_eq!(
            (one.n, one.sampling.max_tokens, one.sampling.seed),
            (1, 4, 7)
        );
        let two = request(json!({"model": "gym", "prompt": ["a", "b"], "n": 2})).unwrap();
        assert_eq!(two.prompts.len(), 2);
        assert_eq!(two.sampling.max_tokens, 16, "the server's default");
        for bad in [json!([]), json!([1, 2]), json!(3), json!(["a", null])] {
            let error = request(json!({"model": "gym", "prompt": bad})).unwrap_err();
            assert_eq!(param(error), "prompt", "{bad}");
        }
        let many: Vec<String> = (0..5).map(|i| format!("p{i}")).collect();
        let error = request(json!({"model": "gym", "prompt": many, "n": 4})).unwrap_err();
        assert_eq!(param(error), "prompt");
    }

    #[test]
    fn unsupported_parameters_are_refused_by_name() {
        for (field, value) in [
            ("echo", json!(true)),
            ("suffix", json!("tail")),
            ("best_of", json!(3)),
            ("logit_bias", json!({"50256": -100})),
            ("presence_penalty", json!(0.5)),
            ("frequency_penalty", json!(1.0)),
            ("logprobs", json!(6)),
            ("temperature", json!(3.0)),
            ("max_tokens", json!(0)),
            ("n", json!(0)),
            ("stop", json!(["a", "b", "c", "d", "e"])),
        ] {
            let mut body = json!({"model": "gym", "prompt": "x"});
            body[field] = value;
            let error = request(body).unwrap_err();
            assert_eq!(param(error), field);
        }
        // Their neutral values are fine.
        request(
            json!({"model": "gym", "prompt": "x", "echo": false, "best_of": 1,
            "presence_penalty": 0.0, "logit_bias": {}, "logprobs": 0}),
        )
        .unwrap();
    }

    fn group() -> Group {
        Group {
            completions: vec![Completion {
                text: "Hi there".into(),
                finish: FinishReason::Length,
                seed: 0,
                completion_tokens: 2,
                logprobs: Some(vec![
                    TokenLogprob {
                        token: "Hi".into(),
                        logprob: -0.5,
                        entropy: None,
                    },
                    TokenLogprob {
                        token: " there".into(),
                        logprob: -1.5,
                        entropy: None,
                    },
                ]),
                tool_calls: Vec::new(),
            }],
            usage: Usage {
                prompt_tokens: 40,
                completion_tokens: 2,
                cached_prompt_tokens: 32,
            },
            cost_usd: None,
            retries: 0,
        }
    }

    fn writer(logprobs: Option<u32>, include_usage: bool) -> TextChunks {
        TextChunks {
            id: "cmpl-1".into(),
            created: 5,
            model: "gym@letters".into(),
            include_usage,
            logprobs,
            sent: Vec::new(),
        }
    }

    #[test]
    fn a_whole_completion_has_openai_shape_with_cached_tokens() {
        let body = writer(Some(1), false).whole(&group());
        assert_eq!(body["object"], "text_completion");
        assert_eq!(body["choices"][0]["text"], "Hi there");
        assert_eq!(body["choices"][0]["finish_reason"], "length");
        let logprobs = &body["choices"][0]["logprobs"];
        assert_eq!(logprobs["tokens"], json!(["Hi", " there"]));
        assert_eq!(logprobs["token_logprobs"], json!([-0.5, -1.5]));
        assert_eq!(logprobs["text_offset"], json!([0, 2]));
        assert_eq!(logprobs["top_logprobs"][1], json!({" there": -1.5}));
        assert_eq!(body["usage"]["total_tokens"], 42);
        assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
        let without = writer(None, false).whole(&group());
        assert!(without["choices"][0]["logprobs"].is_null());
        let no_top = writer(Some(0), false).whole(&group());
        assert!(no_top["choices"][0]["logprobs"]["top_logprobs"].is_null());
    }

    #[test]
    fn streamed_chunks_carry_the_whole_text_once_and_end_with_usage_and_done() {
        let mut writer = writer(None, true);
        let mut events = writer.delta(0, "Hi");
        events.extend(writer.finish(&group()));
        let datas: Vec<String> = events.iter().map(|event| format!("{event:?}")).collect();
        // Event has no getter: its Debug output holds the data line.
        assert_eq!(datas.len(), 5, "{datas:#?}");
        assert!(datas[0].contains(r#"\"text\":\"Hi\""#), "{}", datas[0]);
        assert!(datas[1].contains(r#"\"text\":\" there\""#), "{}", datas[1]);
        assert!(datas[2].contains(r#"\"finish_reason\":\"length\""#));
        assert!(datas[3].contains(r#"\"cached_tokens\":32"#), "{}", datas[3]);
        assert!(datas[4].contains("[DONE]"));
    }
}
