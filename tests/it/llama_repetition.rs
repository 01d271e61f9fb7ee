//! The DRY repetition penalty (`Sampling::dry`) on the real default model: asked for a long
//! story, greedy decoding falls into saying one thing over and over; with the penalty no run
//! of eight words comes back word for word more than once, in free text and inside a JSON
//! string the grammar holds open.
//!
//! Word for word, punctuation included: DRY penalizes a repeat of the same tokens, so the
//! model can still vary a sign and go on ("a happy, happy cat who loves to …", then "a
//! happy-happy cat who loves to …", in the JSON story of one run), which a penalty on tokens
//! does not see. "More than once", not "at all": DRY matches repeats only between its sequence
//! breakers (a newline, a colon, a quote), so a run that straddles a paragraph break can come
//! back once unpenalized, and whether greedy decoding takes it depends on the last bits of the
//! logits, which differ between CPUs: the stricter test held here and failed on a CI machine.
//! A loop repeats its runs three times and more (ten times on the story here).

use std::collections::HashMap;

use gym::backend::{Backend, ChatMessage, Constraint, Dry, GroupRequest, Sampling};
use serde_json::json;

use crate::llama_backend::backend;

const ASK: &str = "Write a long story about a cat named Tom.";

fn request(dry: Option<Dry>, constraint: Option<Constraint>) -> GroupRequest {
    GroupRequest::new(
        vec![ChatMessage::user(ASK)],
        1,
        Sampling {
            max_tokens: 300,
            temperature: 0.0,
            dry,
            constraint,
            ..Sampling::default()
        },
    )
}

/// The most times any run of eight words appears word for word in `text` (words as split by
/// blanks, their punctuation kept): a loop repeats its runs many times, varied text hardly
/// ever.
fn most_repeated_run(text: &str) -> usize {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut counts: HashMap<&[&str], usize> = HashMap::new();
    for run in words.windows(8) {
        *counts.entry(run).or_default() += 1;
    }
    counts.into_values().max().unwrap_or(0)
}

/// A loop: some run of eight words comes back at least twice after its first time.
const LOOP: usize = 3;

async fn text(request: &GroupRequest) -> String {
    let group = backend().generate(request).await.unwrap();
    group.completions[0].text.clone()
}

#[tokio::test]
async fn the_dry_penalty_stops_a_greedy_loop_in_free_text() {
    let plain = text(&request(None, None)).await;
    let penalized = text(&request(Some(Dry::default()), None)).await;
    // The prompt does make the model loop, or the test would prove nothing.
    assert!(
        most_repeated_run(&plain) >= LOOP,
        "no loop without the penalty: {plain:?}"
    );
    assert!(
        most_repeated_run(&penalized) < LOOP,
        "the penalty let a loop through: {penalized:?} (without it: {plain:?})"
    );
}

#[tokio::test]
async fn the_dry_penalty_holds_inside_a_json_string_the_grammar_keeps_open() {
    let schema = json!({
        "type": "object",
        "properties": {"story": {"type": "string", "minLength": 800, "maxLength": 4000}},
        "required": ["story"],
        "additionalProperties": false
    });
    let constrained = || Some(Constraint::JsonSchema(schema.clone()));
    let plain = text(&request(None, constrained())).await;
    let penalized = text(&request(Some(Dry::default()), constrained())).await;
    // The story's 800 characters at least outlast the 300 tokens: the output is the
    // document's opening and the story so far.
    let story = |output: &str| -> String {
        assert!(output.starts_with('{'), "not the schema's JSON: {output:?}");
        output.split_once(':').map_or("", |(_, s)| s).to_string()
    };
    assert!(
        most_repeated_run(&story(&plain)) >= LOOP,
        "no loop without the penalty: {plain:?}"
    );
    assert!(
        most_repeated_run(&story(&penalized)) < LOOP,
        "the penalty let a loop through: {penalized:?} (without it: {plain:?})"
    );
}
