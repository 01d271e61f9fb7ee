//! A run's spans: [`RunSpans`] is an [`EventSink`] beside the progress lines and
//! `events.jsonl`, and turns the run's events into spans as they come.
//!
//! - one trace per run, its id derived from the run id, so the processes of a resumed run
//!   share it;
//! - a `gym.run` span per process of the run (ended when the run finishes or stops), a
//!   `gym.step` span per step under it (ended with the step), and under each step a span per
//!   rollout group (`chat MODEL`, stage `rollout`) and per stage call (`chat DISTILL_MODEL`,
//!   stage `summarize`, `extract`, `consolidate` or `integrate`), each with its tokens and the
//!   seconds it took (from the event);
//! - work read back from the journal on resume made no model call here and gets no span.
//!
//! A rollout span carries the query and the group's answers (best reward first) only with
//! `--otlp-content`; stage calls carry no message text (their prompts are Gym's templates over
//! the rollouts, which the journal keeps).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::Telemetry;
use super::span::{self, Kind, Span, Status};
use crate::data::conversation::Message;
use crate::run::{EventSink, RunEvent};

/// The spans of one run, sent through `telemetry`.
pub struct RunSpans {
    telemetry: Arc<Telemetry>,
    label: String,
    fold: Fold,
}

/// Events in, finished spans out.
struct Fold {
    /// Rollout spans carry the query and answers.
    content: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    run: Option<Run>,
    /// Steps begun and not ended: their span id, epoch and start.
    steps: HashMap<u32, ([u8; 8], u32, SystemTime)>,
}

struct Run {
    id: String,
    trace: [u8; 16],
    span: [u8; 8],
    start: SystemTime,
    resumed: bool,
    model: String,
    distill_model: String,
    backend: String,
    distill_backend: String,
    library: String,
    library_version: u64,
    ended: bool,
}

impl RunSpans {
    /// `label` (`gym grpo`) starts the line printed when the sink is dropped, saying how many
    /// spans went out.
    pub fn new(telemetry: Arc<Telemetry>, label: &str) -> Self {
        Self {
            fold: Fold::new(telemetry.content()),
            telemetry,
            label: label.to_owned(),
        }
    }
}

impl Fold {
    fn new(content: bool) -> Self {
        Self {
            content,
            state: Mutex::new(State::default()),
        }
    }

    /// The spans `event` ends (none for most events).
    fn spans(&self, event: &RunEvent, now: SystemTime) -> Vec<Span> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let content = self.content;
        match event {
            RunEvent::RunStarted {
                run,
                resumed,
                model,
                distill_model,
                library,
                library_version,
                backend,
                distill_backend,
                ..
            } => {
                state.run = Some(Run {
                    id: run.clone(),
                    trace: span::derived_id(&["gym run", run]),
                    span: span::random_span_id(),
                    start: now,
                    resumed: *resumed,
                    model: model.clone(),
                    distill_model: distill_model.clone(),
                    backend: backend.clone(),
                    distill_backend: distill_backend.clone(),
                    library: library.clone(),
                    library_version: *library_version,
                    ended: false,
                });
                state.steps.clear();
                Vec::new()
            }
            RunEvent::StepStarted {
                epoch,
                step,
                library_version,
                ..
            } => {
                if let Some(run) = state.run.as_mut() {
                    run.library_version = *library_version;
                }
                state
                    .steps
                    .insert(*step, (span::random_span_id(), *epoch, now));
                Vec::new()
            }
            RunEvent::Rollout { reused: false, .. } => rollout_span(&state, event, now, content),
            RunEvent::StageOutput { reused: false, .. } => stage_span(&state, event, now),
            RunEvent::StepEnded { .. } => step_span(&mut state, event, now),
            RunEvent::RunFinished {
                steps,
                tokens,
                cost_usd,
                elapsed_s,
                ..
            } => run_span(&mut state, now, "finished", *elapsed_s, |span| {
                span.set("gym.run.steps", *steps);
                span.set("gym.tokens.input", tokens.prompt_tokens);
                span.set("gym.tokens.output", tokens.completion_tokens);
                span.set("gym.cost_usd", *cost_usd);
            }),
            RunEvent::RunStopped { step, elapsed_s } => {
                run_span(&mut state, now, "stopped", *elapsed_s, |span| {
                    span.set("gym.step", *step);
                })
            }
            RunEvent::BudgetExhausted {
                step,
                tokens,
                cost_usd,
            } => run_span(&mut state, now, "budget_exhausted", 0.0, |span| {
                span.set("gym.step", *step);
                span.set("gym.tokens", *tokens);
                span.set("gym.cost_usd", *cost_usd);
            }),
            _ => Vec::new(),
        }
    }
}

/// The span of a rollout group sampled in this process: its answers' rewards and usage, and
/// with `content` its query and answers.
fn rollout_span(state: &State, event: &RunEvent, now: SystemTime, content: bool) -> Vec<Span> {
    let RunEvent::Rollout {
        step,
        sample_id,
        rewards,
        usage,
        reused: false,
        query,
        answers,
        retries,
        elapsed_s,
    } = event
    else {
        return Vec::new();
    };
    let Some(run) = &state.run else {
        return Vec::new();
    };
    let mut span = call_span(run, state, *step, &run.model, "rollout", now, *elapsed_s);
    span.set_provider(&run.backend);
    span.set(span::CHOICE_COUNT, rewards.len());
    span.set_usage(*usage);
    span.set("gym.sample.id", sample_id.as_str());
    span.set("gym.library", run.library.as_str());
    span.set("gym.library.version", run.library_version);
    span.attributes
        .push(("gym.rewards", span::Value::Floats(rewards.clone())));
    if !rewards.is_empty() {
        span.set(
            "gym.reward.mean",
            rewards.iter().sum::<f64>() / rewards.len() as f64,
        );
    }
    span.set("gym.retries", *retries);
    span.status = Status::Ok;
    if content {
        let mut ranked: Vec<_> = answers.iter().collect();
        ranked.sort_by(|a, b| b.reward.total_cmp(&a.reward));
        let answers: Vec<(String, String)> = ranked
            .into_iter()
            .map(|a| (a.text.clone(), String::new()))
            .collect();
        span.set_content(&[Message::new("user", query.as_str())], &answers);
    }
    vec![span]
}

/// The span of a stage call made in this process: its usage, attempts and failures.
fn stage_span(state: &State, event: &RunEvent, now: SystemTime) -> Vec<Span> {
    let RunEvent::StageOutput {
        step,
        stage,
        key,
        ok,
        attempts,
        parse_failures,
        rejections,
        backend_errors,
        usage,
        reused: false,
        elapsed_s,
        ..
    } = event
    else {
        return Vec::new();
    };
    let Some(run) = &state.run else {
        return Vec::new();
    };
    let mut span = call_span(
        run,
        state,
        *step,
        &run.distill_model,
        stage.as_str(),
        now,
        *elapsed_s,
    );
    span.set_provider(&run.distill_backend);
    span.set_usage(*usage);
    span.set("gym.stage.key", key.as_str());
    span.set("gym.stage.ok", *ok);
    span.set("gym.stage.attempts", *attempts);
    span.set("gym.stage.parse_failures", *parse_failures);
    span.set("gym.stage.rejections", *rejections);
    span.set("gym.stage.backend_errors", *backend_errors);
    if *ok {
        span.status = Status::Ok;
    } else {
        span.set(span::ERROR_TYPE, "stage_failed");
        span.status = Status::Error(format!(
            "the {} call failed after {attempts} attempt(s)",
            stage.as_str()
        ));
    }
    vec![span]
}

/// The span of a step that ended, from when it started in this process (or its own
/// seconds before `now`).
fn step_span(state: &mut State, event: &RunEvent, now: SystemTime) -> Vec<Span> {
    let RunEvent::StepEnded {
        epoch,
        step,
        mean_reward,
        kept_groups,
        groups,
        end,
        tokens,
        cost_usd,
        elapsed_s,
        ..
    } = event
    else {
        return Vec::new();
    };
    let started = state.steps.remove(step);
    let Some(run) = &state.run else {
        return Vec::new();
    };
    let (id, start) = match started {
        Some((id, _, start)) => (id, start),
        None => (span::random_span_id(), before(now, *elapsed_s)),
    };
    let mut span = Span::new("gym.step", Kind::Internal, start, now);
    span.trace_id = run.trace;
    span.span_id = id;
    span.parent = Some((run.span, false));
    span.set("gym.run.id", run.id.as_str());
    span.set("gym.epoch", *epoch);
    span.set("gym.step", *step);
    span.set("gym.library", run.library.as_str());
    let status = serde_json::to_value(end)
        .ok()
        .and_then(|v| v["status"].as_str().map(str::to_owned))
        .unwrap_or_default();
    span.set("gym.step.end", status.clone());
    span.set("gym.step.outcome", end.to_string());
    span.set("gym.reward.mean", *mean_reward);
    span.set("gym.groups", *groups);
    span.set("gym.groups.kept", *kept_groups);
    span.set("gym.tokens.input", tokens.prompt_tokens);
    span.set("gym.tokens.output", tokens.completion_tokens);
    span.set("gym.cost_usd", *cost_usd);
    span.status = if status == "failed" {
        Status::Error(end.to_string())
    } else {
        Status::Ok
    };
    vec![span]
}

/// `seconds` before `now` (now when the event gave none).
fn before(now: SystemTime, seconds: f64) -> SystemTime {
    let elapsed = Duration::try_from_secs_f64(seconds).unwrap_or_default();
    now.checked_sub(elapsed).unwrap_or(now)
}

/// The span of one model call of step `step`: a rollout group or a stage call.
fn call_span(
    run: &Run,
    state: &State,
    step: u32,
    model: &str,
    stage: &str,
    now: SystemTime,
    elapsed_s: f64,
) -> Span {
    let mut span = Span::new(
        format!("chat {model}"),
        Kind::Client,
        before(now, elapsed_s),
        now,
    );
    span.trace_id = run.trace;
    let (parent, epoch) = match state.steps.get(&step) {
        Some((id, epoch, _)) => (*id, Some(*epoch)),
        None => (run.span, None),
    };
    span.parent = Some((parent, false));
    span.set(span::OPERATION, "chat");
    span.set(span::REQUEST_MODEL, model);
    span.set(span::RESPONSE_MODEL, model);
    span.set("gym.run.id", run.id.as_str());
    if let Some(epoch) = epoch {
        span.set("gym.epoch", epoch);
    }
    span.set("gym.step", step);
    span.set("gym.stage", stage);
    span
}

/// The run's span, once: it ends with the first of finished, stopped, budget exhausted.
fn run_span(
    state: &mut State,
    now: SystemTime,
    end: &str,
    elapsed_s: f64,
    add: impl FnOnce(&mut Span),
) -> Vec<Span> {
    let Some(run) = state.run.as_mut() else {
        return Vec::new();
    };
    if std::mem::replace(&mut run.ended, true) {
        return Vec::new();
    }
    let start = if elapsed_s > 0.0 && !run.resumed {
        before(now, elapsed_s).min(run.start)
    } else {
        run.start
    };
    let mut span = Span::new("gym.run", Kind::Internal, start, now);
    span.trace_id = run.trace;
    span.span_id = run.span;
    span.set("gym.run.id", run.id.as_str());
    span.set("gym.run.resumed", run.resumed);
    span.set("gym.run.end", end);
    span.set("gym.library", run.library.as_str());
    span.set("gym.library.version", run.library_version);
    span.set(span::REQUEST_MODEL, run.model.as_str());
    span.set("gym.distill.model", run.distill_model.as_str());
    span.status = Status::Ok;
    add(&mut span);
    vec![span]
}

impl EventSink for RunSpans {
    fn emit(&self, event: &RunEvent) {
        for span in self.fold.spans(event, SystemTime::now()) {
            self.telemetry.record(span);
        }
    }
}

impl Drop for RunSpans {
    /// Sends what is queued (waiting at most the export timeout) and says how it went.
    fn drop(&mut self) {
        let totals = self.telemetry.close();
        eprintln!("{}", self.telemetry.summary(&self.label, totals));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Usage;
    use crate::run::AnswerView;
    use crate::run::journal::{Stage, StepEnd};
    use crate::telemetry::span::Value;

    fn usage(prompt: u64, completion: u64) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            cached_prompt_tokens: 0,
        }
    }

    fn events() -> Vec<RunEvent> {
        vec![
            RunEvent::RunStarted {
                run: "r1".into(),
                resumed: false,
                steps: 1,
                queries: 1,
                group_size: 2,
                model: "policy".into(),
                distill_model: "teacher".into(),
                library: "letters".into(),
                library_version: 0,
                backend: "openai".into(),
                distill_backend: "anthropic".into(),
                epochs: 1,
                experiences: 0,
                reward: "numeric".into(),
            },
            RunEvent::StepStarted {
                epoch: 1,
                step: 1,
                queries: 1,
                library_version: 0,
                experiences: 0,
            },
            RunEvent::Rollout {
                step: 1,
                sample_id: "q1".into(),
                rewards: vec![0.0, 1.0],
                usage: usage(100, 40),
                reused: false,
                query: "How many r in strawberry?".into(),
                answers: vec![
                    AnswerView {
                        reward: 0.0,
                        text: "2".into(),
                        tools: Vec::new(),
                    },
                    AnswerView {
                        reward: 1.0,
                        text: "3".into(),
                        tools: Vec::new(),
                    },
                ],
                retries: 0,
                elapsed_s: 2.0,
            },
            RunEvent::StageOutput {
                step: 1,
                stage: Stage::Extract,
                key: "q1".into(),
                ok: false,
                attempts: 2,
                parse_failures: 2,
                rejections: 0,
                dropped: 0,
                reused: false,
                backend_errors: 0,
                usage: usage(300, 60),
                proposals: Vec::new(),
                elapsed_s: 4.0,
            },
            RunEvent::StepEnded {
                epoch: 1,
                step: 1,
                mean_reward: 0.5,
                kept_groups: 1,
                groups: 1,
                end: StepEnd::Failed {
                    reason: "every extract call failed".into(),
                },
                tokens: usage(400, 100),
                cost_usd: 0.0,
                elapsed_s: 7.0,
                ops: Vec::new(),
                experiences: 0,
                usage: Vec::new(),
            },
            RunEvent::RunFinished {
                steps: 1,
                tokens: usage(400, 100),
                cost_usd: 0.0,
                elapsed_s: 8.0,
                final_evaluation: false,
            },
            RunEvent::RunStopped {
                step: 1,
                elapsed_s: 9.0,
            },
        ]
    }

    /// The spans the events make (the sink's fold, without an exporter).
    fn spans_of(content: bool) -> Vec<Span> {
        let fold = Fold::new(content);
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        events()
            .iter()
            .flat_map(|event| fold.spans(event, now))
            .collect()
    }

    fn text<'s>(span: &'s Span, key: &str) -> &'s str {
        match span.get(key) {
            Some(Value::Str(text)) => text,
            other => panic!("{key}: {other:?}"),
        }
    }

    #[test]
    fn a_run_gives_rollout_stage_step_and_run_spans_in_one_trace() {
        let spans = spans_of(false);
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["chat policy", "chat teacher", "gym.step", "gym.run"]
        );
        let [rollout, stage, step, run] = &spans[..] else {
            unreachable!()
        };
        let trace: [u8; 16] = span::derived_id(&["gym run", "r1"]);
        assert!(spans.iter().all(|s| s.trace_id == trace));
        assert_eq!(rollout.parent, Some((step.span_id, false)));
        assert_eq!(stage.parent, Some((step.span_id, false)));
        assert_eq!(step.parent, Some((run.span_id, false)));
        assert_eq!(run.parent, None);

        assert_eq!(text(rollout, "gym.run.id"), "r1");
        assert_eq!(text(rollout, "gym.stage"), "rollout");
        assert_eq!(text(rollout, "gen_ai.request.model"), "policy");
        assert_eq!(text(rollout, "gen_ai.provider.name"), "openai");
        assert_eq!(rollout.get("gym.step"), Some(&Value::Int(1)));
        assert_eq!(
            rollout.get("gen_ai.usage.input_tokens"),
            Some(&Value::Int(100))
        );
        assert_eq!(
            rollout.get("gen_ai.usage.output_tokens"),
            Some(&Value::Int(40))
        );
        assert_eq!(
            rollout.end.duration_since(rollout.start).unwrap(),
            Duration::from_secs(2)
        );
        assert!(
            rollout.get(span::INPUT_MESSAGES).is_none(),
            "no content by default"
        );

        assert_eq!(text(stage, "gym.stage"), "extract");
        assert_eq!(text(stage, "gen_ai.request.model"), "teacher");
        assert_eq!(text(stage, "gen_ai.provider.name"), "anthropic");
        assert_eq!(
            stage.get("gen_ai.usage.input_tokens"),
            Some(&Value::Int(300))
        );
        assert_eq!(text(stage, "error.type"), "stage_failed");
        assert!(matches!(stage.status, Status::Error(_)));

        assert_eq!(text(step, "gym.step.end"), "failed");
        assert!(matches!(step.status, Status::Error(_)));
        assert_eq!(
            text(run, "gym.run.end"),
            "finished",
            "the run span is sent once"
        );
    }

    #[test]
    fn rollout_content_only_when_asked_best_answer_first() {
        let spans = spans_of(true);
        let rollout = &spans[0];
        assert!(text(rollout, span::INPUT_MESSAGES).contains("How many r in strawberry?"));
        let output: serde_json::Value =
            serde_json::from_str(text(rollout, span::OUTPUT_MESSAGES)).unwrap();
        assert_eq!(output[0]["parts"][0]["content"], "3", "{output}");
        assert!(
            spans[1].get(span::INPUT_MESSAGES).is_none(),
            "stage calls carry none"
        );
    }
}
