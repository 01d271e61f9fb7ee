//! The llama.cpp backend on the real default model (SmolLM2-135M-Instruct, fetched by
//! `make setup`). Outputs are kept short so the suite stays fast on two CPU cores.

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::Instant;

use gym::backend::llama::{LlamaBackend, LlamaConfig, PromptMode};
use gym::backend::{
    Backend, BackendError, ChatMessage, Constraint, FinishReason, GroupRequest, Sampling,
};
use serde_json::{Value, json};

use crate::common::model_path;

/// One model shared by every test in this binary (the handle works from any runtime). It keeps
/// no prompt prefixes between rounds: the tests sharing it run in any order, and a prefix one
/// of them left behind would change the last bits of another's logits (see
/// `LlamaConfig::kept_prefixes`); the tests of kept prefixes load a model of their own.
pub fn backend() -> &'static LlamaBackend {
    static BACKEND: OnceLock<LlamaBackend> = OnceLock::new();
    BACKEND.get_or_init(|| {
        let mut config = LlamaConfig::new(model_path());
        config.kept_prefixes = 0;
        LlamaBackend::load(config).expect("load the default model (run `make setup`)")
    })
}

fn ask(question: &str, n: usize, sampling: Sampling) -> GroupRequest {
    GroupRequest {
        tools: Vec::new(),
        tool_choice: Default::default(),
        messages: vec![ChatMessage::user(question)],
        n,
        sampling,
    }
}

#[tokio::test]
async fn a_group_has_g_distinct_reproducible_seeded_answers_with_logprobs() {
    let sampling = Sampling {
        max_tokens: 24,
        temperature: 1.0,
        seed: 42,
        logprobs: true,
        ..Sampling::default()
    };
    let request = ask("Name a colour and say why you like it.", 3, sampling);
    let group = backend().generate(&request).await.unwrap();
    assert_eq!(group.completions.len(), 3);
    let texts: BTreeSet<_> = group.completions.iter().map(|c| c.text.clone()).collect();
    assert_eq!(texts.len(), 3, "seeded draws differ: {texts:?}");
    assert_eq!(
        group.completions.iter().map(|c| c.seed).collect::<Vec<_>>(),
        vec![42, 43, 44]
    );
    for completion in &group.completions {
        let logprobs = completion
            .logprobs
            .as_ref()
            .expect("llama.cpp has log-probabilities");
        assert_eq!(logprobs.len() as u32, completion.completion_tokens);
        assert!(
            logprobs
                .iter()
                .all(|t| t.logprob <= 0.0 && t.logprob.is_finite())
        );
    }
    assert!(group.usage.prompt_tokens > 5);
    assert_eq!(
        group.usage.completion_tokens,
        group
            .completions
            .iter()
            .map(|c| u64::from(c.completion_tokens))
            .sum::<u64>()
    );
    assert_eq!(group.cost_usd, Some(0.0));

    let again = backend().generate(&request).await.unwrap();
    assert_eq!(
        again.completions, group.completions,
        "the same seed gives the same group"
    );
}

#[tokio::test]
async fn sequences_that_stop_early_leave_the_others_running() {
    let sampling = Sampling {
        max_tokens: 40,
        temperature: 1.0,
        seed: 7,
        stop: vec![".".into(), "\n".into()],
        ..Sampling::default()
    };
    let group = backend()
        .generate(&ask("Tell me a short story about a cat.", 4, sampling))
        .await
        .unwrap();
    assert_eq!(group.completions.len(), 4);
    let lengths: BTreeSet<u32> = group
        .completions
        .iter()
        .map(|c| c.completion_tokens)
        .collect();
    assert!(
        lengths.len() > 1,
        "answers ended at different steps: {lengths:?}"
    );
    for c in &group.completions {
        assert!(
            !c.text.contains('.') && !c.text.contains('\n'),
            "stop strings are cut: {:?}",
            c.text
        );
        if c.finish == FinishReason::Length {
            assert_eq!(c.completion_tokens, 40);
        }
    }
}

#[tokio::test]
async fn json_schema_constrained_answers_parse() {
    let schema = json!({
        "type": "object",
        "properties": {
            "verdict": {"enum": ["correct", "incorrect"]},
            "score": {"type": "integer"}
        },
        "required": ["verdict", "score"]
    });
    let sampling = Sampling {
        max_tokens: 40,
        seed: 3,
        constraint: Some(Constraint::JsonSchema(schema)),
        ..Sampling::default()
    };
    let group = backend()
        .generate(&ask("Is 2 + 2 = 4? Reply in JSON.", 2, sampling))
        .await
        .unwrap();
    for completion in &group.completions {
        let value: Value = serde_json::from_str(&completion.text)
            .unwrap_or_else(|e| panic!("{e}: {:?}", completion.text));
        assert!(
            matches!(value["verdict"].as_str(), Some("correct" | "incorrect")),
            "{value}"
        );
        assert!(value["score"].is_i64(), "{value}");
    }
    let bad = Sampling {
        constraint: Some(Constraint::Grammar("root ::= (".into())),
        ..Sampling::default()
    };
    let error = backend().generate(&ask("x", 1, bad)).await.unwrap_err();
    assert!(matches!(error, BackendError::Grammar(_)), "{error}");
}

#[tokio::test]
async fn shared_and_independent_prompts_sample_the_same_answers() {
    let sampling = Sampling {
        max_tokens: 12,
        temperature: 0.0,
        seed: 1,
        ..Sampling::default()
    };
    let request = ask("What is the capital of France?", 2, sampling);
    let shared = backend()
        .generate_with(&request, PromptMode::Shared)
        .await
        .unwrap();
    let independent = backend()
        .generate_with(&request, PromptMode::Independent)
        .await
        .unwrap();
    let texts = |g: &gym::backend::Group| {
        g.completions
            .iter()
            .map(|c| c.text.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(texts(&shared), texts(&independent));
}

#[tokio::test]
async fn requests_sharing_a_prompt_prefix_sample_what_they_would_alone() {
    let sampling = Sampling {
        max_tokens: 10,
        temperature: 0.0,
        seed: 3,
        ..Sampling::default()
    };
    let instructions = "You are reviewing short answers to arithmetic problems. Read the \
        problem and the attempt below, then say in one sentence whether the attempt is right.";
    let requests: Vec<GroupRequest> = [
        "Problem: 2 + 2. Attempt: 4.",
        "Problem: 3 + 5. Attempt: 9.",
        "Problem: 7 - 4. Attempt: 3.",
    ]
    .iter()
    .enumerate()
    .map(|(i, data)| {
        ask(
            &format!("{instructions}\n\n{data}"),
            1 + i % 2,
            sampling.clone(),
        )
    })
    .collect();
    let texts = |groups: Vec<gym::backend::Group>| {
        groups
            .into_iter()
            .map(|g| {
                g.completions
                    .into_iter()
                    .map(|c| c.text)
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    let before = backend().stats().prompt_tokens_reused;
    // Sent together, they land in one round of the worker and share the instructions' cells.
    let shared = futures::future::try_join_all(
        requests
            .iter()
            .map(|r| backend().generate_with(r, PromptMode::Shared)),
    )
    .await
    .unwrap();
    assert!(
        backend().stats().prompt_tokens_reused > before,
        "the common prefix was evaluated once"
    );
    let independent = futures::future::try_join_all(
        requests
            .iter()
            .map(|r| backend().generate_with(r, PromptMode::Independent)),
    )
    .await
    .unwrap();
    let one_by_one = {
        let mut groups = Vec::new();
        for request in &requests {
            groups.push(backend().generate(request).await.unwrap());
        }
        groups
    };
    // Each answer says how much of its prompt it borrowed (OpenAI's `cached_tokens`).
    assert!(
        shared
            .iter()
            .map(|g| g.usage.cached_prompt_tokens)
            .sum::<u64>()
            > 0,
        "the borrowed prefix shows in the usage"
    );
    assert!(
        shared
            .iter()
            .all(|g| g.usage.cached_prompt_tokens < g.usage.prompt_tokens)
    );
    assert!(
        independent
            .iter()
            .all(|g| g.usage.cached_prompt_tokens == 0)
    );
    let shared = texts(shared);
    assert_eq!(shared, texts(independent));
    assert_eq!(shared, texts(one_by_one));
}

/// Its own model, so that no other test's rounds touch the prefixes it keeps.
fn own_backend() -> LlamaBackend {
    LlamaBackend::load(LlamaConfig::new(model_path())).expect("load the default model")
}

fn greedy(max_tokens: u32) -> Sampling {
    Sampling {
        max_tokens,
        temperature: 0.0,
        seed: 5,
        ..Sampling::default()
    }
}

fn completions(group: &gym::backend::Group) -> Vec<String> {
    group.completions.iter().map(|c| c.text.clone()).collect()
}

/// Instructions long enough to be worth keeping, for the tests of kept prefixes.
const REVIEW_INSTRUCTIONS: &str = "You are reviewing short answers to arithmetic problems. Read \
    the problem and the attempt below, then say in one sentence whether the attempt is right \
    and, when it is wrong, which step went wrong and what the right result of that step is.";

/// Sends `request` alone: it must borrow whole blocks of its prompt from a kept prefix (not
/// all of it) and write what a fresh, independent evaluation writes under greedy decoding.
/// Returns the tokens borrowed and the fresh answer.
async fn borrows_a_block_and_samples_fresh(
    backend: &LlamaBackend,
    request: &GroupRequest,
) -> (u64, gym::backend::Group) {
    let borrowed = backend.generate(request).await.unwrap();
    let cached = borrowed.usage.cached_prompt_tokens;
    assert!(
        cached >= 32 && cached % 32 == 0 && cached < borrowed.usage.prompt_tokens,
        "no kept prefix was borrowed as whole blocks: {:?}",
        borrowed.usage
    );
    let fresh = backend
        .generate_with(request, PromptMode::Independent)
        .await
        .unwrap();
    assert_eq!(fresh.usage.cached_prompt_tokens, 0);
    assert_eq!(completions(&borrowed), completions(&fresh));
    (cached, fresh)
}

#[tokio::test]
async fn a_prefix_kept_from_an_earlier_round_samples_what_a_fresh_prompt_does() {
    // Greedy and short: a kept prefix lays the cache out differently from an empty one, which
    // can move the last bits of the logits (see `LlamaConfig::kept_prefixes`), and this answer's
    // choices are not that close.
    let backend = own_backend();
    let instructions = REVIEW_INSTRUCTIONS;
    let first = ask(
        &format!("{instructions}\n\nProblem: 6 + 1. Attempt: 7."),
        1,
        greedy(10),
    );
    let second = ask(
        &format!("{instructions}\n\nProblem: 9 - 5. Attempt: 3."),
        2,
        greedy(10),
    );
    let alone = backend.generate(&first).await.unwrap();
    assert_eq!(alone.usage.cached_prompt_tokens, 0, "nothing kept yet");
    // A round of its own, after the first was answered: it borrows the instructions' cells.
    let (cached, fresh) = borrows_a_block_and_samples_fresh(&backend, &second).await;
    // Asked again, the whole prompt but its last block is kept.
    let again = backend.generate(&second).await.unwrap();
    assert!(
        again.usage.cached_prompt_tokens > cached,
        "{:?}",
        again.usage
    );
    assert_eq!(completions(&again), completions(&fresh));
}

#[tokio::test]
async fn retries_in_the_next_round_borrow_their_whole_prompts_not_only_the_instructions() {
    // A batched stage round: three calls of one kind answered together, then all three asked
    // again in the next round, as refused calls are. The end of the first round keeps one
    // prompt for the kind (the last one), so without more two retries would borrow only the
    // instructions and evaluate their own problem and attempts again.
    let backend = own_backend();
    let instructions = "You are reviewing short answers to arithmetic problems. Read the \
        problem and the attempts below, then say in one sentence which attempts are right \
        and, for each wrong one, which step went wrong and what the right result of it is.";
    let call = |problem: &str| {
        let lines: Vec<String> = (1..=6)
            .map(|i| {
                format!(
                    "Attempt {i}: for {problem} the student wrote {} after {i} steps.",
                    i * 7
                )
            })
            .collect();
        ask(
            &format!(
                "{instructions}\n\n{}\n\nProblem: {problem}\nWrite the problem again, exactly:",
                lines.join("\n")
            ),
            1,
            greedy(8),
        )
    };
    let calls = [call("12 + 30"), call("45 - 9"), call("7 * 6")];
    let backend = &backend;
    let round = || async {
        let (a, b, c) = tokio::join!(
            backend.generate(&calls[0]),
            backend.generate(&calls[1]),
            backend.generate(&calls[2])
        );
        [a.unwrap(), b.unwrap(), c.unwrap()]
    };
    let first = round().await;
    // One round: two of them borrowed the instructions from the one evaluated first.
    let borrowed: Vec<u64> = first.iter().map(|g| g.usage.cached_prompt_tokens).collect();
    assert_eq!(
        borrowed.iter().filter(|&&n| n == 0).count(),
        1,
        "{borrowed:?}"
    );
    let instructions_only = *borrowed.iter().max().unwrap();
    let retries = round().await;
    for (call, retry) in calls.iter().zip(&retries) {
        let prompt = retry.usage.prompt_tokens;
        let cached = retry.usage.cached_prompt_tokens;
        // Everything but the last block (it holds the last token, always evaluated).
        assert!(
            cached > instructions_only && cached + 32 >= prompt,
            "a retry borrowed {cached} of {prompt} prompt tokens; the instructions are {instructions_only}"
        );
        let fresh = backend
            .generate_with(call, PromptMode::Independent)
            .await
            .unwrap();
        // Each call ends by asking for its own problem again, an answer no near tie decides:
        // a retry reading another call's cells would write that call's problem.
        assert_eq!(completions(retry), completions(&fresh));
    }
    let problems = ["12 + 30", "45 - 9", "7 * 6"];
    for (problem, retry) in problems.iter().zip(&retries) {
        assert!(
            completions(retry)[0].starts_with(problem),
            "{:?}",
            completions(retry)
        );
    }
}

/// One answer of exactly `tokens` tokens, greedy: a call that keeps its round running.
fn long_story(tokens: u32) -> GroupRequest {
    ask(
        "Write a long story about a lighthouse keeper.",
        1,
        Sampling {
            ignore_eos: true,
            ..greedy(tokens)
        },
    )
}

#[tokio::test]
async fn a_retry_sent_while_its_round_runs_joins_it_and_borrows_its_refused_prompt() {
    // A batched stage round: one call writes long, another is answered early and its caller
    // asks again with the same prompt, as a call whose output the checks refused does. The
    // retry starts in the running round, beside the long call, instead of waiting for it to
    // end and then decoding alone.
    let backend = own_backend();
    let long = long_story(400);
    let short = ask(
        &format!(
            "{REVIEW_INSTRUCTIONS}\n\nProblem: 12 + 30. Attempt: 42.\nWrite the problem again, exactly:"
        ),
        1,
        greedy(6),
    );
    let backend = &backend;
    let long_call = async {
        let group = backend.generate(&long).await.unwrap();
        (group, Instant::now())
    };
    let short_calls = async {
        let first = backend.generate(&short).await.unwrap();
        let retry = backend.generate(&short).await.unwrap();
        (first, retry, Instant::now())
    };
    let ((long, long_done), (first, retry, retry_done)) = tokio::join!(long_call, short_calls);
    assert_eq!(long.completions[0].completion_tokens, 400);
    assert!(
        retry_done < long_done,
        "the retry waited for the long call's round to end"
    );
    // It borrowed its whole prompt but the last block from the answered first call, whose
    // cells stay while the round runs, and wrote what it wrote.
    let (prompt, cached) = (retry.usage.prompt_tokens, retry.usage.cached_prompt_tokens);
    assert!(
        cached + 32 >= prompt && cached > first.usage.cached_prompt_tokens,
        "the retry borrowed {cached} of {prompt} prompt tokens; the first call {:?}",
        first.usage
    );
    assert_eq!(completions(&retry), completions(&first));
}

#[tokio::test]
async fn jobs_keep_joining_a_long_round_as_earlier_ones_end_and_give_back_their_room() {
    // An evaluation's groups, or a trial's, sent as earlier ones are answered: each of these
    // asks room for 300 tokens and writes a few, 24 of them one after the other while a long
    // answer decodes. The round's context has 16 sequences and cells for about 14 such jobs
    // beside the long one: they join only if an answered job gives back its sequence and the
    // cells of its answer.
    let backend = own_backend();
    let long = long_story(500);
    let short = |i: usize| {
        ask(
            &format!("Reply with the single word yes. Request {i}."),
            1,
            Sampling {
                stop: vec![".".into(), "\n".into()],
                ..greedy(300)
            },
        )
    };
    let backend = &backend;
    let long_call = async {
        let group = backend.generate(&long).await.unwrap();
        (group, Instant::now())
    };
    let short_calls = async {
        for i in 0..24 {
            let group = backend.generate(&short(i)).await.unwrap();
            assert!(group.completions[0].completion_tokens < 300, "{group:?}");
        }
        Instant::now()
    };
    let ((long, long_done), shorts_done) = tokio::join!(long_call, short_calls);
    assert_eq!(long.completions[0].completion_tokens, 500);
    assert!(
        shorts_done < long_done,
        "a short job waited for the long answer's round to end"
    );
}

#[tokio::test]
async fn kept_prefixes_move_into_the_larger_context_a_round_needs() {
    // A run's steps differ in size: a step with more extract calls than any before needs a
    // larger context than the one held, and its consolidate call, alone in its round, would
    // evaluate its instructions again if the kept prefixes went with the old context.
    let backend = own_backend();
    let instructions = REVIEW_INSTRUCTIONS;
    let review = |problem: &str| ask(&format!("{instructions}\n\n{problem}"), 1, greedy(10));
    backend
        .generate(&review("Problem: 6 + 1. Attempt: 7."))
        .await
        .unwrap();
    let small = backend.stats().kv_cache_bytes;
    // Another kind of prompt whose answers need more cells than the context holds.
    let wide = Sampling {
        stop: vec![".".into(), "\n".into()],
        ..greedy(1200)
    };
    backend
        .generate(&ask("Reply with the single word yes.", 4, wide))
        .await
        .unwrap();
    assert!(
        backend.stats().kv_cache_bytes > small,
        "the second round was meant to need a larger context"
    );
    // The instructions were kept across the new context, and the moved cells hold what a
    // fresh evaluation computes.
    borrows_a_block_and_samples_fresh(&backend, &review("Problem: 9 - 5. Attempt: 3.")).await;
}

#[tokio::test]
async fn each_kind_of_prompt_keeps_a_slot_and_the_least_recently_used_goes() {
    let backend = own_backend();
    // Nine kinds of prompt, each with long instructions of its own.
    let prompt = |kind: usize, question: &str| {
        let rules: Vec<String> = (0..12)
            .map(|rule| format!("Rule {rule} of kind {kind}: answer in words about topic {kind}."))
            .collect();
        ask(
            &format!("Kind {kind}. {}\n\n{question}", rules.join(" ")),
            1,
            greedy(2),
        )
    };
    for kind in 0..9 {
        backend.generate(&prompt(kind, "First?")).await.unwrap();
    }
    // Kind 8 was kept last; kind 0 was the least recently used of nine, beyond the eight slots.
    let recent = backend.generate(&prompt(8, "Second?")).await.unwrap();
    let evicted = backend.generate(&prompt(0, "Second?")).await.unwrap();
    assert!(
        recent.usage.cached_prompt_tokens > 100,
        "the recent kind's instructions were kept: {:?}",
        recent.usage
    );
    assert!(
        evicted.usage.cached_prompt_tokens < recent.usage.cached_prompt_tokens / 2,
        "only the chat template's opening, kept by every kind: {:?}",
        evicted.usage
    );
}

#[test]
fn unreadable_and_invalid_model_files_are_clear_errors() {
    let missing = LlamaBackend::load(LlamaConfig::new("/nonexistent/model.gguf"))
        .err()
        .unwrap();
    assert!(
        missing
            .to_string()
            .contains("/nonexistent/model.gguf cannot be read"),
        "{missing}"
    );
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"this is not a model").unwrap();
    let invalid = LlamaBackend::load(LlamaConfig::new(&junk)).err().unwrap();
    assert!(
        invalid.to_string().contains("could not be loaded"),
        "{invalid}"
    );
    let too_big = ask(
        "hi",
        4,
        Sampling {
            max_tokens: 100_000,
            ..Sampling::default()
        },
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let error = runtime.block_on(backend().generate(&too_big)).unwrap_err();
    assert!(
        matches!(error, BackendError::ContextTooSmall { .. }),
        "{error}"
    );
}

#[tokio::test]
async fn streamed_text_joins_to_the_final_text_with_stop_strings_cut() {
    let sampling = Sampling {
        max_tokens: 48,
        temperature: 0.8,
        seed: 5,
        stop: vec![".".into(), "\n\n".into()],
        ..Sampling::default()
    };
    let request = ask("Describe the sea in two sentences.", 2, sampling);
    let (deltas, mut received) = tokio::sync::mpsc::unbounded_channel();
    let group = backend()
        .generate_streaming(&request, deltas)
        .await
        .unwrap();
    let mut texts = vec![String::new(); 2];
    let mut pieces = [0; 2];
    while let Ok(delta) = received.try_recv() {
        texts[delta.index].push_str(&delta.text);
        pieces[delta.index] += 1;
    }
    for (index, completion) in group.completions.iter().enumerate() {
        assert_eq!(texts[index], completion.text, "completion {index}");
        assert!(!completion.text.contains('.'), "{:?}", completion.text);
        assert!(
            pieces[index] > 1 || completion.completion_tokens <= 2,
            "sent token by token: {pieces:?}"
        );
    }
    // Same seeds, same answers as without streaming.
    let plain = backend().generate(&request).await.unwrap();
    let plain: Vec<_> = plain.completions.iter().map(|c| &c.text).collect();
    assert_eq!(plain, texts.iter().collect::<Vec<_>>());
}

#[tokio::test]
async fn a_listener_that_goes_away_stops_the_sampling() {
    let sampling = Sampling {
        max_tokens: 400,
        ignore_eos: true,
        seed: 9,
        ..Sampling::default()
    };
    let request = ask("Count from one to a thousand.", 1, sampling);
    let (deltas, mut received) = tokio::sync::mpsc::unbounded_channel();
    let generation = backend().generate_streaming(&request, deltas);
    let listener = async move {
        received.recv().await.expect("a first piece");
        drop(received);
    };
    let (group, ()) = tokio::join!(generation, listener);
    let completion = &group.unwrap().completions[0];
    assert_eq!(completion.finish, FinishReason::Other);
    assert!(
        completion.completion_tokens < 100,
        "stopped soon after the listener left: {} tokens",
        completion.completion_tokens
    );
}

#[tokio::test]
async fn required_tool_calls_follow_the_tool_schema_through_the_text_protocol() {
    let tool = gym::backend::ToolSpec {
        name: "calc".into(),
        description: "Evaluates an arithmetic expression.".into(),
        parameters: json!({
            "type": "object",
            "properties": {"expression": {"type": "string", "maxLength": 40}},
            "required": ["expression"],
        }),
    };
    let request = GroupRequest {
        tools: vec![tool],
        tool_choice: gym::backend::ToolChoice::Required,
        ..GroupRequest::new(
            vec![ChatMessage::user("What is 37 times 91?")],
            3,
            Sampling {
                max_tokens: 96,
                temperature: 0.8,
                seed: 5,
                ..Sampling::default()
            },
        )
    };
    let group = backend().generate(&request).await.unwrap();
    assert_eq!(group.completions.len(), 3);
    for completion in &group.completions {
        assert_eq!(completion.finish, FinishReason::ToolCalls, "{completion:?}");
        assert_eq!(completion.tool_calls.len(), 1);
        let call = &completion.tool_calls[0];
        assert_eq!(call.name, "calc");
        let arguments: Value = serde_json::from_str(&call.arguments).unwrap();
        assert!(arguments["expression"].is_string(), "{arguments}");
        assert!(!completion.text.contains("<tool_call>"));
        eprintln!("thought {:?} call {}", completion.text, call.arguments);
    }
}

/// A caller that leaves while a long prompt is being evaluated stops it at the next chunk of
/// 512 tokens, instead of holding the model for the rest of a prompt nobody waits for (a
/// 15,000-token prompt is minutes of the 135M model's time on a busy two-core machine).
#[tokio::test]
async fn a_caller_that_leaves_during_a_long_prompt_stops_its_evaluation() {
    // A model of its own: on the shared one, another test's round could keep the prompt
    // waiting in the queue, where leaving is a different path.
    let backend = LlamaBackend::load(LlamaConfig::new(model_path())).unwrap();
    let short = Sampling {
        max_tokens: 2,
        ..Sampling::default()
    };
    // About 15,000 tokens (five a repeat), under the 16,384-cell context.
    let long = ask(
        &"seven apples and nine pears ".repeat(3_000),
        1,
        short.clone(),
    );
    let waited = tokio::time::timeout(
        std::time::Duration::from_millis(300),
        backend.generate(&long),
    )
    .await;
    assert!(waited.is_err(), "15,000 prompt tokens evaluated in 300 ms");
    let answer = backend.generate(&ask("Say hi.", 1, short)).await.unwrap();
    assert_eq!(answer.completions.len(), 1);
    let stats = backend.stats();
    assert_eq!(stats.prompts_abandoned, 1, "{stats:?}");
    assert_eq!(stats.abandoned_requests, 1, "{stats:?}");
}
