//! A corpus of replies as small models write them, and what the reader makes of each.

use serde_json::json;

use super::*;

fn ok(text: &str) -> Value {
    parse_json(text).unwrap_or_else(|error| panic!("{text:?}: {error}"))
}

#[test]
fn well_formed_json_reads_as_serde_would() {
    let text =
        r#"{"ops": [{"op": "add", "text": "When a, b.", "n": -1.5e2, "ok": true, "x": null}]}"#;
    assert_eq!(ok(text), serde_json::from_str::<Value>(text).unwrap());
}

#[test]
fn corpus_of_malformed_replies() {
    let add = json!({"ops": [{"op": "add", "text": "When the total is asked, add all parts."}]});
    let cases: Vec<(&str, Value)> = vec![
        // Code fence with a language tag.
        (
            "```json\n{\"ops\": [{\"op\": \"add\", \"text\": \"When the total is asked, add all parts.\"}]}\n```",
            add.clone(),
        ),
        // Fence without a tag, prose around it.
        (
            "Sure! Here is the JSON:\n```\n{\"ops\": [{\"op\": \"add\", \"text\": \"When the total is asked, add all parts.\"}]}\n```\nLet me know if you need more.",
            add.clone(),
        ),
        // Prose before and after, no fence.
        (
            "Based on the attempts, {\"ops\": [{\"op\": \"add\", \"text\": \"When the total is asked, add all parts.\"}]} I hope this helps!",
            add.clone(),
        ),
        // Trailing commas everywhere.
        (
            "{\"ops\": [{\"op\": \"add\", \"text\": \"When the total is asked, add all parts.\",},],}",
            add.clone(),
        ),
        // Single quotes, Python style.
        (
            "{'ops': [{'op': 'add', 'text': 'When the total is asked, add all parts.'}]}",
            add.clone(),
        ),
        // Unquoted keys.
        (
            "{ops: [{op: \"add\", text: \"When the total is asked, add all parts.\"}]}",
            add.clone(),
        ),
        // Smart quotes from a chat template.
        (
            "{“ops”: [{“op”: “add”, “text”: “When the total is asked, add all parts.”}]}",
            add.clone(),
        ),
        // A forgotten comma between keys, on separate lines.
        (
            "{\"ops\": [{\"op\": \"add\"\n\"text\": \"When the total is asked, add all parts.\"}]}",
            add.clone(),
        ),
        // Mismatched closer.
        (
            "{\"ops\": [{\"op\": \"add\", \"text\": \"When the total is asked, add all parts.\"]}",
            add.clone(),
        ),
        // Comments.
        (
            "{\n  // the lesson\n  \"ops\": [{\"op\": \"add\", /* new */ \"text\": \"When the total is asked, add all parts.\"}]\n}",
            add.clone(),
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(ok(text), expected, "{text}");
    }
}

#[test]
fn apostrophes_and_inner_quotes_stay_inside_strings() {
    assert_eq!(
        ok("{'text': 'When it's odd, don't halve it.'}"),
        json!({"text": "When it's odd, don't halve it."})
    );
    assert_eq!(
        ok(r#"{"text": "When asked "how many" items, count them."}"#),
        json!({"text": "When asked \"how many\" items, count them."})
    );
}

#[test]
fn escapes_are_decoded() {
    assert_eq!(
        ok(r#"{"a": "line\nnext \"q\" \u00e9 \ud83d\ude00 \/ \x"}"#),
        json!({"a": "line\nnext \"q\" é 😀 / x"})
    );
}

#[test]
fn python_literals_and_bare_words() {
    assert_eq!(
        ok("{'ok': True, 'none': None, 'no': False, 'op': add}"),
        json!({"ok": true, "none": null, "no": false, "op": "add"})
    );
    assert_eq!(ok("{\"n\": +3, \"m\": .5}"), json!({"n": 3, "m": 0.5}));
    assert_eq!(ok("{\"rank\": 3rd}"), json!({"rank": "3rd"}));
}

#[test]
fn truncated_output_is_closed_and_the_cut_string_dropped() {
    let text = "{\"ops\": [{\"op\": \"add\", \"text\": \"When a, b.\"}, {\"op\": \"add\", \"text\": \"When the problem asks for tot";
    let extracted = extract_json(text).unwrap();
    assert!(extracted.truncated);
    assert_eq!(
        extracted.value,
        json!({"ops": [{"op": "add", "text": "When a, b."}, {"op": "add"}]})
    );
    assert_eq!(extracted.cut_off, vec!["When the problem asks for tot"]);
}

#[test]
fn truncation_in_every_position_never_fails_the_complete_part() {
    let full = r#"{"ops": [{"op": "add", "text": "When a, b."}, {"from": [1, 2], "op": "delete", "id": "E0001"}]}"#;
    for end in 1..full.len() {
        let prefix = &full[..end];
        let value = ok(prefix);
        assert!(value.is_object(), "{prefix}: {value}");
        if end > 46 {
            assert_eq!(
                value["ops"][0],
                json!({"op": "add", "text": "When a, b."}),
                "{prefix}"
            );
        }
    }
}

#[test]
fn a_cut_key_or_dangling_colon_is_dropped() {
    assert_eq!(ok("{\"op\": \"add\", \"te"), json!({"op": "add"}));
    assert_eq!(ok("{\"op\": \"add\", \"text\":"), json!({"op": "add"}));
    assert_eq!(ok("{\"op\": \"add\", \"text\": "), json!({"op": "add"}));
    assert_eq!(ok("{\"op\": add"), json!({}));
}

#[test]
fn several_objects_in_a_row_become_an_array() {
    let text =
        "{\"op\": \"add\", \"text\": \"When a, b.\"}\n{\"op\": \"delete\", \"id\": \"E0002\"}";
    assert_eq!(
        ok(text),
        json!([{"op": "add", "text": "When a, b."}, {"op": "delete", "id": "E0002"}])
    );
    let separated = "1. {\"op\": \"add\", \"text\": \"When a, b.\"}\n2. {\"op\": \"none\"}";
    assert_eq!(
        ok(separated),
        json!([{"op": "add", "text": "When a, b."}, {"op": "none"}])
    );
}

#[test]
fn objects_win_over_brackets_in_prose() {
    let text = "Attempt [2] was right. {\"ops\": []} See [1].";
    assert_eq!(ok(text), json!({"ops": []}));
    let arrays = "Attempts [1] and [2]: [{\"op\": \"add\", \"text\": \"When a, b.\"}]";
    assert_eq!(ok(arrays), json!([{"op": "add", "text": "When a, b."}]));
}

#[test]
fn a_bare_array_reads() {
    assert_eq!(
        ok("[\"When a, b.\", \"When c, d.\",]"),
        json!(["When a, b.", "When c, d."])
    );
    assert_eq!(
        ok("[\"When a, b.\"\n \"When c, d.\"]"),
        json!(["When a, b.", "When c, d."])
    );
}

#[test]
fn an_unparsable_prefix_does_not_hide_later_json() {
    let text = "{this is not json at all} but {\"summary\": \"It added.\"}";
    assert_eq!(ok(text), json!({"summary": "It added."}));
}

#[test]
fn failures_say_why() {
    assert_eq!(parse_json("   \n"), Err(ParseError::Empty));
    assert_eq!(
        parse_json("The first attempt was right."),
        Err(ParseError::NoJson)
    );
    assert!(matches!(
        parse_json("{@}"),
        Err(ParseError::Syntax {
            at: 1,
            found: '@',
            ..
        })
    ));
    let deep = "[".repeat(100);
    assert_eq!(
        parse_json(&deep),
        Err(ParseError::TooDeep { limit: MAX_DEPTH })
    );
}

#[test]
fn an_unterminated_fence_still_reads() {
    assert_eq!(
        ok("```json\n{\"summary\": \"It multiplied first.\"}"),
        json!({"summary": "It multiplied first."})
    );
}

#[test]
fn offsets_point_into_the_whole_output() {
    let text = "Here:\n```json\n{\"a\": @}\n```";
    match parse_json(text) {
        Err(ParseError::Syntax { at, found, .. }) => {
            assert_eq!(&text[at..at + 1], "@");
            assert_eq!(found, '@');
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn garbage_never_panics() {
    let inputs = [
        "{",
        "[",
        "}",
        "]",
        "{{{{",
        "[[[]]]",
        "{\"",
        "{'",
        "{“",
        "\\",
        "{\"a\":\"\\u12",
        "{\"a\":\"\\ud83d\\u",
        "[-]",
        "[1e]",
        "{a}",
        "{:}",
        "{,,,}",
        "[,,,]",
        "/*",
        "{/*",
        "{\"a\": [}",
        "ö{ü[",
        "{\"a\":-",
        "[.]",
    ];
    for input in inputs {
        let _ = extract_json(input);
    }
}
