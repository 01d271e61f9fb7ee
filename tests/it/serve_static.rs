//! `gym serve --query-embedder static`: the static table built by the real `gym embed distill`
//! from the MiniLM model, the real server on a real socket with the small local model. Each
//! question gets the one experience about its topic (top-k 1), named in `x-gym-experiences`.

use gym::library::{Change, Library, Provenance, Settings};
use serde_json::json;

use crate::common::{Scratch, post_raw};

/// POSTs a one-question chat to `url`'s `/chat/completions`; returns the status line and the
/// `x-gym-experiences` header.
fn ask(url: &str, question: &str) -> (String, String) {
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();
    let body = serde_json::to_vec(&json!({
        "model": "gym@math",
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 2,
        "temperature": 0,
    }))
    .unwrap();
    let response = post_raw(&address, "/v1/chat/completions", &body);
    let (head, _) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no body in {response:?}"));
    let status = head.lines().next().unwrap_or_default().to_owned();
    let experiences = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("x-gym-experiences"))
        .map(|(_, value)| value.trim().to_owned())
        .unwrap_or_default();
    (status, experiences)
}

#[test]
fn the_static_query_embedder_injects_the_experience_on_the_questions_topic() {
    let scratch = Scratch::new();
    let model = scratch.dir.path().join("minilm-static");
    let model_arg = model.to_str().unwrap();
    let output = scratch
        .model_command(&["embed", "distill", "--out", model_arg])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "gym embed distill failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("30522 tokens x 384 dimensions"), "{stdout}");
    assert!(stdout.contains("table sha256 "), "{stdout}");

    let mut library = Library::init(&scratch.libraries(), "math", Settings::default()).unwrap();
    library
        .commit(
            &[
                Change::add(
                    "When counting how often a letter occurs in a word, spell the word out one letter at a time.",
                ),
                Change::add(
                    "When a recipe is scaled to more servings, multiply every ingredient by the same factor.",
                ),
                Change::add(
                    "When comparing two decimals, line up the decimal points and compare digit by digit.",
                ),
                Change::add(
                    "When a train's speed and travel time are given, multiply them to get the distance.",
                ),
            ],
            Provenance::Init,
        )
        .unwrap();

    let (mut server, url) = scratch.serve(&[
        "--library",
        "math",
        "--top-k",
        "1",
        "--threads",
        "2",
        "--query-embedder",
        "static",
        "--static-model",
        model_arg,
    ]);
    let asked = [
        (
            "How many times does the letter r occur in strawberry?",
            "E0001",
        ),
        (
            "A recipe for 4 people needs 3 eggs. How many eggs for 10 people?",
            "E0002",
        ),
        (
            "Compare the two decimals 0.35 and 0.4: which is larger?",
            "E0003",
        ),
        (
            "A train goes 60 km per hour for 3 hours. How far does it go?",
            "E0004",
        ),
    ];
    let answers: Vec<_> = asked
        .iter()
        .map(|(question, _)| ask(&url, question))
        .collect();
    server.kill().unwrap();
    server.wait().unwrap();
    for ((question, expected), (status, experiences)) in asked.iter().zip(&answers) {
        assert!(status.contains(" 200 "), "{question}: {status}");
        assert_eq!(experiences, expected, "{question}");
    }
}

#[test]
fn a_missing_static_model_stops_the_server_with_the_command_that_builds_it() {
    let scratch = Scratch::new();
    let missing = scratch.dir.path().join("no-static-model");
    let output = scratch
        .model_command(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--query-embedder",
            "static",
            "--static-model",
            missing.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("gym embed distill"), "{stderr}");
    assert!(stderr.contains("manifest.json"), "{stderr}");
}
