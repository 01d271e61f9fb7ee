//! Tests of `backend::grammar`, apart so the module stays readable.

use serde_json::json;

use super::*;

#[test]
fn required_keys_come_in_the_order_required_lists_them() {
    let schema = json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
        "required": ["c", "a"]
    });
    let grammar = json_schema_to_gbnf(&schema).unwrap();
    let root = grammar.lines().next().unwrap();
    let at = |key: &str| root.find(&format!("\"\\\"{key}\\\"\"")).unwrap();
    assert!(at("c") < at("a") && at("a") < at("b"), "{root}");
}

#[test]
fn an_object_schema_becomes_ordered_rules() {
    let schema = json!({
        "type": "object",
        "properties": {
            "op": {"enum": ["ADD", "UPDATE"]},
            "text": {"type": "string", "maxLength": 40},
            "ids": {"type": "array", "items": {"type": "integer"}, "maxItems": 3}
        },
        "required": ["op", "text"]
    });
    let grammar = json_schema_to_gbnf(&schema).unwrap();
    insta::assert_snapshot!(grammar.lines().take(4).collect::<Vec<_>>().join("\n"), @r#"
    root ::= "{" ws "\"op\"" ws ":" ws root-p1-op ws "," ws "\"text\"" ws ":" ws root-p2-text ws ("," ws "\"ids\"" ws ":" ws root-p0-ids ws)? "}"
    root-p0-ids ::= "[" ws (root-p0-ids-item ws ("," ws root-p0-ids-item ws){0,2})? "]"
    root-p0-ids-item ::= integer
    root-p1-op ::= ("\"ADD\"" | "\"UPDATE\"")
    "#);
}

/// Whether `grammar` (in the subset of GBNF this module writes) matches `text` whole: a
/// small matcher that follows every alternative, so tests can check what a grammar accepts
/// rather than how it is spelled.
fn accepts(grammar: &str, text: &str) -> bool {
    let rules: HashMap<String, Expr> = grammar
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let (name, body) = line.split_once(" ::= ").expect("a rule");
            let chars: Vec<char> = body.chars().collect();
            let mut at = 0;
            let expr = parse_alt(&chars, &mut at);
            assert_eq!(at, chars.len(), "unparsed rest of {line}");
            (name.to_string(), expr)
        })
        .collect();
    let text: Vec<char> = text.chars().collect();
    let mut memo = HashMap::new();
    ends(&rules, &mut memo, &Expr::Ref("root".into()), &text, 0).contains(&text.len())
}

#[derive(Debug)]
enum Expr {
    Alt(Vec<Vec<(Expr, usize, Option<usize>)>>),
    Literal(Vec<char>),
    Class(bool, Vec<(char, char)>),
    Ref(String),
}

fn skip_space(chars: &[char], at: &mut usize) {
    while chars.get(*at) == Some(&' ') {
        *at += 1;
    }
}

fn escaped(chars: &[char], at: &mut usize) -> char {
    let c = chars[*at];
    *at += 1;
    if c != '\\' {
        return c;
    }
    let e = chars[*at];
    *at += 1;
    match e {
        'n' => '\n',
        'r' => '\r',
        't' => '\t',
        'x' => {
            let hex: String = chars[*at..*at + 2].iter().collect();
            *at += 2;
            char::from(u8::from_str_radix(&hex, 16).unwrap())
        }
        other => other,
    }
}

fn parse_alt(chars: &[char], at: &mut usize) -> Expr {
    let mut alts = vec![Vec::new()];
    loop {
        skip_space(chars, at);
        let Some(&c) = chars.get(*at) else { break };
        let atom = match c {
            ')' => break,
            '|' => {
                *at += 1;
                alts.push(Vec::new());
                continue;
            }
            '(' => {
                *at += 1;
                let inner = parse_alt(chars, at);
                assert_eq!(chars[*at], ')');
                *at += 1;
                inner
            }
            '"' => {
                *at += 1;
                let mut text = Vec::new();
                while chars[*at] != '"' {
                    text.push(escaped(chars, at));
                }
                *at += 1;
                Expr::Literal(text)
            }
            '[' => {
                *at += 1;
                let negated = chars[*at] == '^';
                if negated {
                    *at += 1;
                }
                let mut ranges = Vec::new();
                while chars[*at] != ']' {
                    let low = escaped(chars, at);
                    let high = if chars[*at] == '-' && chars[*at + 1] != ']' {
                        *at += 1;
                        escaped(chars, at)
                    } else {
                        low
                    };
                    ranges.push((low, high));
                }
                *at += 1;
                Expr::Class(negated, ranges)
            }
            _ => {
                let start = *at;
                while chars
                    .get(*at)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '-')
                {
                    *at += 1;
                }
                assert!(*at > start, "unexpected {c:?} at {start}");
                Expr::Ref(chars[start..*at].iter().collect())
            }
        };
        let (min, max) = match chars.get(*at) {
            Some('?') => (0, Some(1)),
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('{') => {
                let close = *at + chars[*at..].iter().position(|c| *c == '}').unwrap();
                let inside: String = chars[*at + 1..close].iter().collect();
                *at = close;
                match inside.split_once(',') {
                    None => (inside.parse().unwrap(), Some(inside.parse().unwrap())),
                    Some((min, "")) => (min.parse().unwrap(), None),
                    Some((min, max)) => (min.parse().unwrap(), Some(max.parse().unwrap())),
                }
            }
            _ => (1, Some(1)),
        };
        if (min, max) != (1, Some(1)) {
            *at += 1;
        }
        alts.last_mut().unwrap().push((atom, min, max));
    }
    Expr::Alt(alts)
}

/// Every position where a match of `expr` starting at `from` can end.
fn ends(
    rules: &HashMap<String, Expr>,
    memo: &mut HashMap<(String, usize), HashSet<usize>>,
    expr: &Expr,
    text: &[char],
    from: usize,
) -> HashSet<usize> {
    match expr {
        Expr::Literal(literal) => text[from..]
            .starts_with(literal)
            .then_some(from + literal.len())
            .into_iter()
            .collect(),
        Expr::Class(negated, ranges) => text
            .get(from)
            .filter(|c| ranges.iter().any(|(l, h)| (l..=h).contains(c)) != *negated)
            .map(|_| from + 1)
            .into_iter()
            .collect(),
        Expr::Ref(name) => {
            let key = (name.clone(), from);
            if let Some(found) = memo.get(&key) {
                return found.clone();
            }
            let rule = rules.get(name).unwrap_or_else(|| panic!("no rule {name}"));
            let found = ends(rules, memo, rule, text, from);
            memo.insert(key, found.clone());
            found
        }
        Expr::Alt(alts) => {
            let mut all = HashSet::new();
            for sequence in alts {
                let mut here = HashSet::from([from]);
                for (item, min, max) in sequence {
                    let mut reached = if *min == 0 {
                        here.clone()
                    } else {
                        HashSet::new()
                    };
                    let mut frontier = here;
                    let mut count = 0;
                    while !frontier.is_empty() && max.is_none_or(|max| count < max) {
                        count += 1;
                        let mut next = HashSet::new();
                        for at in &frontier {
                            next.extend(ends(rules, memo, item, text, *at));
                        }
                        if count >= *min {
                            next.retain(|at| reached.insert(*at) || max.is_some());
                        }
                        frontier = next;
                    }
                    here = reached;
                }
                all.extend(here);
            }
            all
        }
    }
}

/// The object `{"k1": 1, "k2": 2, …}` with `keys` in that order.
fn object_text(keys: &[&str]) -> String {
    let pairs: Vec<String> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| format!("\"{key}\": {i}"))
        .collect();
    format!("{{{}}}", pairs.join(", "))
}

/// Every ordering of every subset of `keys`.
fn arrangements<'a>(keys: &[&'a str]) -> Vec<Vec<&'a str>> {
    let mut out = vec![Vec::new()];
    for (i, key) in keys.iter().enumerate() {
        let mut rest = keys.to_vec();
        rest.remove(i);
        for mut tail in arrangements(&rest) {
            tail.insert(0, key);
            out.push(tail);
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn the_matcher_reads_the_primitives() {
    let grammar = json_schema_to_gbnf(&json!({})).unwrap();
    for good in [
        r#"{"a": [1, -2.5e3, "x\"y"], "b": {"c": null}}"#,
        "true",
        "[]",
    ] {
        assert!(accepts(&grammar, good), "{good}");
    }
    for bad in ["{,}", "[1,]", "tru", r#""a"b""#] {
        assert!(!accepts(&grammar, bad), "{bad}");
    }
}

#[test]
fn optional_properties_are_accepted_in_order_any_of_them_left_out() {
    let integer = json!({"type": "integer"});
    let schema = json!({
        "type": "object",
        "properties": {"a": integer, "b": integer, "c": integer, "d": integer},
    });
    let grammar = json_schema_to_gbnf(&schema).unwrap();
    let all = arrangements(&["a", "b", "c", "d"]);
    assert_eq!(all.len(), 65);
    for keys in &all {
        // Properties may be left out but keep their order: an increasing sequence.
        let expected = keys.windows(2).all(|pair| pair[0] < pair[1]);
        let text = object_text(keys);
        assert_eq!(accepts(&grammar, &text), expected, "{text}\n{grammar}");
    }
    for bad in [
        r#"{"a": 1,}"#,
        r#"{, "a": 1}"#,
        r#"{"a": 1 "b": 2}"#,
        r#"{"e": 1}"#,
    ] {
        assert!(!accepts(&grammar, bad), "{bad}");
    }
    // With a required property: it comes first, then the optional ones in order.
    let schema = json!({
        "type": "object",
        "properties": {"a": integer, "b": integer, "c": integer},
        "required": ["b"],
    });
    let grammar = json_schema_to_gbnf(&schema).unwrap();
    for keys in arrangements(&["a", "b", "c"]) {
        let expected = keys.first() == Some(&"b") && keys[1..].windows(2).all(|p| p[0] < p[1]);
        let text = object_text(&keys);
        assert_eq!(accepts(&grammar, &text), expected, "{text}\n{grammar}");
    }
    // One optional property, and nested optional ones.
    let schema = json!({
        "type": "object",
        "properties": {"x": {"type": "object", "properties": {"y": integer, "z": integer}}},
    });
    let grammar = json_schema_to_gbnf(&schema).unwrap();
    for (text, expected) in [
        ("{}", true),
        (r#"{"x": {}}"#, true),
        (r#"{"x": {"z": 1}}"#, true),
        (r#"{"x": {"y": 1, "z": 2}}"#, true),
        (r#"{"x": {"z": 1, "y": 2}}"#, false),
        (r#"{"x": 1}"#, false),
    ] {
        assert_eq!(accepts(&grammar, text), expected, "{text}\n{grammar}");
    }
}

fn optional_properties(count: usize) -> Value {
    let properties: serde_json::Map<String, Value> = (0..count)
        .map(|i| (format!("field_{i}"), json!({"type": "integer"})))
        .collect();
    json!({"type": "object", "properties": properties})
}

#[test]
fn the_grammar_grows_linearly_with_optional_properties() {
    let started = std::time::Instant::now();
    let small = json_schema_to_gbnf(&optional_properties(2_000))
        .unwrap()
        .len();
    let large = json_schema_to_gbnf(&optional_properties(4_000))
        .unwrap()
        .len();
    let ratio = large as f64 / small as f64;
    // Quadratic construction made this ratio about 4 (and 4,000 properties ~1 GB).
    assert!(ratio < 2.5, "{small} → {large} bytes: ×{ratio:.2}");
    assert!(large < 2_000_000, "{large} bytes");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Many required properties (sorted by their place in `required`) are linear too.
    let mut schema = optional_properties(4_000);
    schema["required"] = (0..4_000)
        .rev()
        .map(|i| json!(format!("field_{i}")))
        .collect();
    let started = std::time::Instant::now();
    let grammar = json_schema_to_gbnf(&schema).unwrap();
    assert!(grammar.len() < 2_000_000, "{} bytes", grammar.len());
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let root = grammar.lines().next().unwrap();
    assert!(root.find("field_3999").unwrap() < root.find("field_0\\").unwrap());
}

#[test]
fn schemas_beyond_the_grammar_bounds_are_refused_not_built() {
    let error = json_schema_to_gbnf(&optional_properties(MAX_GRAMMAR_SCHEMAS)).unwrap_err();
    assert!(
        matches!(&error, GrammarError::TooLarge { what: "schemas", limit: MAX_GRAMMAR_SCHEMAS, pointer } if pointer.starts_with("/properties/field_")),
        "{error}"
    );
    let mut deep = json!({"type": "integer"});
    for _ in 0..=MAX_GRAMMAR_DEPTH {
        deep = json!({"type": "array", "items": deep});
    }
    let error = json_schema_to_gbnf(&deep).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "JSON schema at `{}`: more than {MAX_GRAMMAR_DEPTH} levels of nested schemas, the most a grammar is built for",
            "/items".repeat(MAX_GRAMMAR_DEPTH + 1)
        )
    );
    // A repeated type would build the same properties again for each repetition.
    let twice = json!({"type": ["object", "null", "object"], "properties": {"a": {}}});
    assert!(
        json_schema_to_gbnf(&twice)
            .unwrap_err()
            .to_string()
            .contains("`type` lists `object` twice")
    );
    // A long property name is cut in its rule's name (the literal keeps it whole).
    let long = "k".repeat(10_000);
    let schema = json!({"properties": {long.clone(): {"properties": {long.clone(): {}}}}});
    let grammar = json_schema_to_gbnf(&schema).unwrap();
    assert!(grammar.len() < 3 * long.len(), "{} bytes", grammar.len());
    assert!(accepts(
        &grammar,
        &format!("{{\"{long}\": {{\"{long}\": [1]}}}}")
    ));
}

#[test]
fn a_tool_over_the_bounds_falls_back_to_any_object() {
    let big = optional_properties(MAX_GRAMMAR_SCHEMAS);
    let small =
        json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]});
    let grammar = tool_call_gbnf(&[("big", &big), ("small", &small)], "<c>", "</c>", true);
    assert!(
        grammar.contains("\"\\\"big\\\"\" ws \",\" ws \"\\\"arguments\\\"\" ws \":\" ws object"),
        "{}",
        &grammar[..400]
    );
    // The small tool keeps its schema: the big one's share of the bound was given back.
    assert!(grammar.contains("\ntool1-args ::= "), "{}", &grammar[..400]);
    assert!(accepts(
        &grammar,
        r#"<c>{"name": "small", "arguments": {"x": 1}}</c>"#
    ));
    assert!(!accepts(
        &grammar,
        r#"<c>{"name": "small", "arguments": {"y": 1}}</c>"#
    ));
    assert!(accepts(
        &grammar,
        r#"<c>{"name": "big", "arguments": {"y": 1}}</c>"#
    ));
}

#[test]
fn unsupported_keywords_are_refused_with_their_place() {
    let schema =
        json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "x+"}}});
    assert_eq!(
        json_schema_to_gbnf(&schema),
        Err(GrammarError::Unsupported {
            pointer: "/properties/a".into(),
            keyword: "pattern".into()
        })
    );
    let schema = json!({"type": "object", "properties": {"a": {}}, "required": ["b"]});
    assert!(
        json_schema_to_gbnf(&schema)
            .unwrap_err()
            .to_string()
            .contains("`b`")
    );
}
