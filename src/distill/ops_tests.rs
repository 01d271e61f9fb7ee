//! Stage 2 and 3 replies as small models write them, and the ops read from each.

use super::*;
use crate::distill::testing::library;

/// A prompt with an example a model may copy.
const TEMPLATE: &str =
    "Reply like: {\"text\": \"When a recipe is scaled up, multiply every amount.\"}";

fn id(n: u32) -> ExperienceId {
    ExperienceId::new(n).unwrap()
}

fn add(text: &str) -> ProposedOp {
    ProposedOp::add(text)
}

/// Reads `output` against a library with E0001 and E0002 active and E0003 deleted.
fn read(output: &str) -> (Result<Vec<ProposedOp>, ParseError>, Vec<String>) {
    let state = library();
    let rules = Rules {
        library: &state,
        max_words: 12,
        template: TEMPLATE,
        problem: None,
        first_sentence: true,
    };
    let mut dropped = Vec::new();
    let result = read_ops(output, &rules, true, &mut dropped)
        .map(|read| read.items.into_iter().map(|item| item.op).collect());
    (result, dropped)
}

fn ops(output: &str) -> Vec<ProposedOp> {
    let (result, dropped) = read(output);
    let ops = result.unwrap_or_else(|error| panic!("{output}: {error}"));
    assert!(dropped.is_empty(), "{output}: {dropped:?}");
    ops
}

#[test]
fn many_shapes_give_the_same_ops() {
    let expected = vec![
        add("When a price rises, multiply by the rate."),
        ProposedOp::Update {
            id: id(2),
            text: "When counting, list items first.".into(),
        },
        ProposedOp::Delete { id: id(1) },
    ];
    let shapes = [
        r#"{"ops": [{"op": "add", "text": "When a price rises, multiply by the rate."}, {"op": "update", "id": "E0002", "text": "When counting, list items first."}, {"op": "delete", "id": "E0001"}]}"#,
        r#"[{"op": "ADD", "text": "When a price rises, multiply by the rate."}, {"op": "Modify", "id": "e2", "text": "When counting, list items first."}, {"op": "REMOVE", "id": 1}]"#,
        r#"{"experiences": [{"action": "add", "experience": "When a price rises, multiply by the rate."}, {"action": "edit", "id": "[E0002]", "content": "When counting, list items first."}, {"action": "remove", "id": "E1"}]}"#,
        r##"{"Operations": [{"Operation": "Add new", "Rule": "When a price rises, multiply by the rate."}, {"type": "update", "ID": "2", "text": "[E0002] When counting, list items first."}, {"type": "delete", "target": "#1"}]}"##,
        "```json\n{\"op\": \"add\", \"text\": \"When a price rises, multiply by the rate.\"}\n{\"op\": \"update\", \"id\": \"E0002\", \"text\": \"When counting, list items first.\"}\n{\"op\": \"delete\", \"id\": \"E0001\"}\n```",
        "1. ADD: When a price rises, multiply by the rate.\n2. UPDATE E0002: When counting, list items first.\n3. DELETE [E0001]",
        "Here are my lessons:\n- When a price rises, multiply by the rate.\n- update e2 - When counting, list items first.\n- Delete: E0001\nThese should help.",
        r#"{"ops": [{"text": "When a price rises, multiply by the rate."}, {"id": "E0002", "text": "When counting, list items first."}, {"op": "delete", "text": "[E0001] When stuck, guess."}]}"#,
    ];
    for shape in shapes {
        assert_eq!(ops(shape), expected, "{shape}");
    }
}

#[test]
fn condition_and_strategy_make_one_text() {
    assert_eq!(
        ops(
            r#"{"ops": [{"condition": "a price rises", "op": "add", "strategy": "multiply by the rate."}, {"condition": "When counting,", "id": "E0002", "op": "update", "strategy": "list items first"}, {"when": "if z, then", "then": "b"}]}"#
        ),
        vec![
            add("When a price rises, multiply by the rate."),
            ProposedOp::Update {
                id: id(2),
                text: "When counting, list items first.".into()
            },
            add("When z, then, b."),
        ]
    );
    let (result, dropped) =
        read(r#"{"ops": [{"condition": " ", "op": "add", "strategy": "guess"}]}"#);
    assert_eq!(result.unwrap(), Vec::new());
    assert_eq!(dropped, vec!["add with an empty text"]);
}

#[test]
fn strings_in_a_list_are_adds_or_labelled_ops() {
    assert_eq!(
        ops(r#"{"experiences": ["When z, do b.", "ADD: When c, do d.", "  \"When e, do f.\" "]}"#),
        vec![
            add("When z, do b."),
            add("When c, do d."),
            add("When e, do f.")
        ]
    );
}

#[test]
fn none_and_keep_are_decisions_not_failures() {
    let state = library();
    let rules = Rules {
        library: &state,
        max_words: 12,
        template: TEMPLATE,
        problem: None,
        first_sentence: true,
    };
    for output in [
        r#"{"ops": [{"op": "none"}]}"#,
        r#"{"ops": [{"op": "KEEP", "id": "E0001"}, {"op": "no_change"}]}"#,
        r#"{"ops": []}"#,
        r#"{"ops": null}"#,
        r#"{"ops": "none"}"#,
        "NONE",
    ] {
        let mut dropped = Vec::new();
        let read = read_ops(output, &rules, true, &mut dropped).unwrap();
        assert!(read.items.is_empty() && dropped.is_empty(), "{output}");
        assert_eq!(read.declined, read.total, "{output}");
    }
}

#[test]
fn unusable_items_are_dropped_with_reasons() {
    let long = "When the problem is long, read every word of it slowly and then read it again.";
    let output = format!(
        r#"{{"ops": [
            {{"op": "update", "id": "E0003", "text": "When x, y."}},
            {{"op": "delete", "id": "E0042"}},
            {{"op": "update", "id": "banana", "text": "When x, y."}},
            {{"op": "update", "text": "When x, y."}},
            {{"op": "add", "text": "   "}},
            {{"op": "add", "text": "{long}"}},
            {{"op": "upgrade", "text": "When x, y."}},
            {{"op": "add", "text": "When ..., ..."}},
            {{"op": "add", "text": "When [condition], [strategy]."}},
            {{"op": "add", "text": "when a recipe is scaled up: multiply every amount"}},
            {{"op": "add", "text": "The answer is 10 cents."}},
            {{"note": "nothing"}},
            42,
            {{"op": "add", "text": "When kept, keep it."}}
        ]}}"#
    );
    let (result, dropped) = read(&output);
    assert_eq!(result.unwrap(), vec![add("When kept, keep it.")]);
    let expected = [
        "update names E0003, which is not an active experience",
        "delete names E0042, which is not an active experience",
        "update names `banana`, which is not an experience id",
        "update names no experience id",
        "add with an empty text",
        "add of 16 words is over the limit of 12: \"When the problem is long",
        "unknown op `upgrade`",
        "add with a placeholder for a text: \"When ..., ...\"",
        "add with a placeholder for a text: \"When [condition], [strategy].\"",
        "add copies the prompt: \"when a recipe is scaled up: multiply every amount\"",
        "add is not of the form \"When <condition>, <strategy>.\": \"The answer is 10 cents.\"",
        "an object with keys note with no op or text",
        "an item that is the number 42",
    ];
    assert_eq!(dropped.len(), expected.len(), "{dropped:#?}");
    for (reason, want) in dropped.iter().zip(expected) {
        assert!(reason.starts_with(want), "{reason} / {want}");
    }
}

#[test]
fn a_cut_off_last_item_says_so() {
    let (result, dropped) = read(
        r#"{"ops": [{"op": "add", "text": "When z, do b."}, {"op": "add", "text": "When the tot"#,
    );
    assert_eq!(result.unwrap(), vec![add("When z, do b.")]);
    assert_eq!(
        dropped,
        vec!["add with an empty text (the output was cut off inside \"When the tot\")"]
    );
}

#[test]
fn replies_with_nothing_usable_are_errors() {
    assert!(matches!(read("").0, Err(ParseError::Empty)));
    assert!(matches!(
        read("The second attempt forgot to carry the one.").0,
        Err(ParseError::NoJson)
    ));
    assert!(matches!(
        read(r#"{"summary": "it was fine"}"#).0,
        Err(ParseError::NoOps { found }) if found == "an object with keys summary"
    ));
}

#[test]
fn proposal_numbers_are_read_in_any_spelling() {
    let state = library();
    let rules = Rules {
        library: &state,
        max_words: 12,
        template: TEMPLATE,
        problem: None,
        first_sentence: true,
    };
    let output = r##"[{"from": [1, 3], "op": "add", "text": "When z, do b."}, {"sources": "2, 4", "op": "add", "text": "When c, do d."}, {"from": ["#5", "P6"], "op": "add", "text": "When e, do f."}, {"op": "add", "text": "When g, do h."}]"##;
    let read = read_ops(output, &rules, false, &mut Vec::new()).unwrap();
    let from: Vec<Vec<usize>> = read.items.into_iter().map(|item| item.from).collect();
    assert_eq!(from, vec![vec![1, 3], vec![2, 4], vec![5, 6], vec![]]);
}

#[test]
fn plain_text_needs_permission() {
    let state = library();
    let rules = Rules {
        library: &state,
        max_words: 12,
        template: TEMPLATE,
        problem: None,
        first_sentence: true,
    };
    let output = "1. When z, do b.";
    assert!(read_ops(output, &rules, false, &mut Vec::new()).is_err());
    assert_eq!(
        read_ops(output, &rules, true, &mut Vec::new())
            .unwrap()
            .items
            .len(),
        1
    );
}

#[test]
fn ids_read_in_every_spelling() {
    for (text, n) in [
        ("E0003", Some(3)),
        ("e3", Some(3)),
        ("3", Some(3)),
        ("[E0003]", Some(3)),
        (" #12 ", Some(12)),
        ("E12345", Some(12345)),
        ("E0", None),
        ("0", None),
        ("G3", None),
        ("E3a", None),
        ("", None),
    ] {
        assert_eq!(parse_id(text).map(ExperienceId::number), n, "{text}");
    }
}

/// Stage 2 and 3 replies SmolLM2-135M gave under the JSON-schema grammar in a real run: valid
/// JSON, but no lesson in any of them. Every item is dropped with its reason.
#[test]
fn valid_json_without_a_lesson_is_dropped_item_by_item() {
    let corpus = [
        (
            "{\n\n\"ops\"\n\n:\n\n[\n\n{\n\n\"condition\"\n\n:\n\n\"dabbababa\"\n\n,\n\n\"op\"\n\n:\n\n\"add\"\n\n,\n\n\"strategy\"\n\n:\n\n\"fabbababa\"\n\n}\n\n]\n\n\n}",
            vec!["only 2 word(s)"],
        ),
        (
            "{\n  \"ops\": [\n   {\n   \"condition\": \"The correct answer is: 4\",\n   \"op\" : \"add\",\n   \"strategy\": \"The correct answer is: 4\"\n  },{\n   \"condition\": \"The correct answer is: 4\",\n   \"op\" : \"add\",\n   \"strategy\": \"The correct answer is: 4\"\n  }]\n}",
            vec!["repeats its condition"; 2],
        ),
        (
            "{\n  \"ops\": [\n   { \"condition\": \"The correct answer is 2\", \"from\": \n[\n   1, 2, 3, 4, 5\n  ]\n,\"op\" : \"add\"\n  , \"strategy\" : \"adcde\"\n  },\n  {\n   \"condition\": \"the letters\", \"from\": [4, 5],\"op\" : \"add\", \"strategy\" : \"12: 12: 12: 12: 12: 12\"\n  }\n]\n}",
            vec!["one problem's answer", "without a word"],
        ),
    ];
    for (output, reasons) in corpus {
        let (result, dropped) = read(output);
        assert_eq!(result.unwrap(), vec![], "{output}");
        assert_eq!(dropped.len(), reasons.len(), "{dropped:?}");
        for (reason, why) in reasons.iter().zip(&dropped) {
            assert!(why.contains(reason), "{why} should say {reason}");
        }
    }
}

#[test]
fn when_and_do_read_as_one_sentence_and_a_copied_example_condition_is_dropped() {
    assert_eq!(
        ops(
            r#"{"mistake": "They guessed.", "ops": [{"when": "A word is spelled", "do": "Count each letter in turn", "op": "add"}]}"#
        ),
        vec![add("When a word is spelled, count each letter in turn.")]
    );
    // The template's example with a new strategy is still the template's example.
    let (result, dropped) = read(
        r#"{"ops": [{"when": "a cake recipe is scaled up", "do": "multiply every amount by two", "op": "add"}]}"#,
    );
    assert_eq!(result.unwrap(), Vec::<ProposedOp>::new());
    assert!(dropped[0].contains("copies the prompt"), "{dropped:?}");
}

#[test]
fn a_lesson_that_opens_like_the_examples_is_not_a_copy_of_them() {
    // "a problem asks how many times" shares common words with the template's instructions
    // and is the usual opening of any lesson: not a copy.
    let template = crate::distill::prompt::EXTRACT;
    let lesson = "When a problem asks for the number of times a letter appears in a word, \
                  spell the word out and count the matches.";
    assert!(!shares_a_run(template, lesson));
    // The example itself, with its strategy changed, still is.
    let copied = "When counting the days from one date to the next, count on a calendar.";
    assert!(shares_a_run(template, copied));
}

#[test]
fn natural_openings_pass_and_quoted_problem_text_does_not() {
    let template = crate::distill::prompt::EXTRACT;
    for lesson in [
        "When a problem asks how many times a letter appears in a word, count each match.",
        "When a problem asks how many full boxes can be filled, divide and round down.",
        "When the answer is asked in a different unit than the data, convert at the end.",
    ] {
        assert!(!shares_a_run(template, lesson), "{lesson}");
    }
    let problem = "Maria packs 250 apples into boxes of 12. How many boxes does she fill \
                   completely, and how many apples are left over?";
    // The problem's common wording is fine, as are small numbers.
    assert_eq!(
        quotes_problem(
            problem,
            "When asked how many boxes are filled completely, divide by 2 sizes and round down."
        ),
        None
    );
    assert_eq!(
        quotes_problem(problem, "When maria packs apples, divide.").as_deref(),
        Some("its name Maria")
    );
    assert_eq!(
        quotes_problem(problem, "When packing 250 items, divide.").as_deref(),
        Some("its number 250")
    );
    assert_eq!(
        quotes_problem(
            problem,
            "When a problem says how many boxes does she fill completely, round down."
        )
        .as_deref(),
        Some("\"how many boxes does she fill\"")
    );
    // A common word opening a sentence is no name; one found in lower case elsewhere neither.
    assert_eq!(
        quotes_problem(
            "Each box holds 12. Boxes are full when the boxes hold 12. Tom packs.",
            "When each box holds items and boxes are full, divide."
        ),
        None
    );
}

#[test]
fn topics_become_short_tags() {
    assert_eq!(topic_tag("Remainders!").as_deref(), Some("remainders"));
    assert_eq!(
        topic_tag("percent of a changed amount").as_deref(),
        Some("percent changed amount")
    );
    assert_eq!(topic_tag("General"), None);
    assert_eq!(topic_tag("  "), None);
    assert_eq!(
        topic_tag("a whole sentence that goes on and on about many things at once"),
        None
    );
}

#[test]
fn what_a_small_distiller_leaves_around_a_lesson_is_tidied_away() {
    for (written, kept) in [
        // Both from the third paper-setting run's library (the 1.5B distiller).
        (
            "When calculating interest increases, multiply by 1 + the rate each time.}.",
            "When calculating interest increases, multiply by 1 + the rate each time.",
        ),
        (
            "When solving for a variable, isolate it. This is the same advice provided in the new lesson.",
            "When solving for a variable, isolate it.",
        ),
        ("When a list ends, stop.\"]", "When a list ends, stop."),
        // Within the word limit, so only the tidying cuts the second sentence.
        (
            "When solving for a variable, isolate it. It repeats the lesson.",
            "When solving for a variable, isolate it.",
        ),
    ] {
        let json = serde_json::json!({"ops": [{"op": "add", "text": written}]}).to_string();
        assert_eq!(ops(&json), vec![add(kept)], "{written}");
    }
    // A second sentence about the task stays (within the word limit), and so do brackets
    // that close what the lesson opened.
    let bracketed = "When a list is given, read it all [twice].";
    let json = serde_json::json!({"ops": [{"op": "add", "text": bracketed}]}).to_string();
    assert_eq!(ops(&json), vec![add(bracketed)]);
    let explained = "When a price rises twice, apply each rise. Rises compound.";
    let json = serde_json::json!({"ops": [{"op": "add", "text": explained}]}).to_string();
    assert_eq!(ops(&json), vec![add(explained)]);
}

#[test]
fn a_lesson_written_twice_keeps_its_first_copy() {
    // The fifth paper-setting run's integrate stage, over the limit and a loop as written.
    let twice = "When a price rises, multiply it by 1 plus the rise, when a price rises, multiply it by 1 plus the rise.";
    let json = serde_json::json!({"ops": [{"op": "add", "text": twice}]}).to_string();
    assert_eq!(
        ops(&json),
        vec![add("When a price rises, multiply it by 1 plus the rise.")]
    );
    // Its condition twice before one strategy: the second part is the lesson.
    let json = serde_json::json!({"ops": [{"op": "add", "text": "When a price rises, when a price rises, multiply it by 1 plus the rise."}]}).to_string();
    assert_eq!(
        ops(&json),
        vec![add("When a price rises, multiply it by 1 plus the rise.")]
    );
    // A first copy that is no lesson on its own is still dropped.
    let (result, dropped) = read(
        r#"{"ops": [{"op": "add", "text": "When multiplying, multiply correctly, when multiplying, multiply correctly."}]}"#,
    );
    assert_eq!(result.unwrap(), Vec::new());
    assert!(dropped[0].contains("not a lesson"), "{dropped:?}");
}

#[test]
fn a_lesson_over_the_limit_keeps_its_first_sentence_when_that_is_a_lesson() {
    // 12 words at most here. A lesson and its explanation: the lesson stays.
    assert_eq!(
        ops(
            r#"{"ops": [{"op": "add", "text": "When a price rises twice, apply each rise to the new price. This is not the same as adding both rises together."}]}"#
        ),
        vec![add(
            "When a price rises twice, apply each rise to the new price."
        )]
    );
    // One long sentence, or a first sentence that is no lesson, is still dropped.
    for text in [
        "When a price rises twice, apply each rise to the price it has after the rise before.",
        "When rising, add. Apply each rise to the price it has after the rise before it.",
    ] {
        let (result, dropped) = read(&format!(
            r#"{{"ops": [{{"op": "add", "text": "{text}"}}]}}"#
        ));
        assert_eq!(result.unwrap(), Vec::new(), "{text}");
        assert!(dropped[0].contains("over the limit of 12"), "{dropped:?}");
    }
}

#[test]
fn a_lesson_that_quotes_one_problems_letter_keeps_its_method() {
    assert_eq!(
        ops(
            r#"{"ops": [{"op": "add", "text": "When counting, spell the word and count each 'r'."}]}"#
        ),
        vec![add(
            "When counting, spell the word and count each occurrence of the letter."
        )]
    );
    // A lesson that is about the instance is still dropped.
    let (result, dropped) =
        read(r#"{"ops": [{"op": "add", "text": "When the word 'kiwi' has 2 'i's, answer 2."}]}"#);
    assert_eq!(result.unwrap(), Vec::new());
    assert!(dropped[0].contains("quotes \"kiwi\""), "{dropped:?}");
}
