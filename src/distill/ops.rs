//! Reading proposed ops out of stage 2 and stage 3 replies, whatever shape they come in:
//! `{"ops": [...]}`, a bare array, `{"experiences": [...]}`, op names in any case and several
//! synonyms, ids spelled `E0003`, `e3`, `3` or `[E0003]`, the text under several keys, or plain
//! lines (`1. When …, ….`, `- ADD: When …`). Unusable items are dropped with a reason, never
//! repaired into something the model did not say: over-long texts are not truncated.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::copying::{copied_from, is_content_word, quotes_problem, shares_a_run};
use super::error::ParseError;
use super::generalize::generalize;
use super::json::extract_json;
use super::lint::{glued_lessons, lesson_flaw};
use super::proposal::ProposedOp;
use super::text::{clean_text, first_sentence, lower_first_word, normalize};
use crate::library::{ExperienceId, State};

/// What the reader checks items against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules<'a> {
    /// Updates and deletes must name one of its active experiences.
    pub library: &'a State,
    /// Most words in a text.
    pub max_words: usize,
    /// The prompt template: a text copied from its examples is dropped.
    pub template: &'a str,
    /// The problem the lesson was drawn from, when there is one: a lesson quoting it (a long
    /// run of its words, one of its names or numbers) is dropped.
    pub problem: Option<&'a str>,
    /// Whether a text that fails the checks whole may keep its first sentence when that
    /// passes (see `check_text`). Not for a procedure: cut to its first step it says
    /// something else.
    pub first_sentence: bool,
}

/// One usable op, with the proposal numbers it names (stage 3's `from`; empty otherwise).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Item {
    pub op: ProposedOp,
    pub from: Vec<usize>,
}

/// Everything one reply held.
#[derive(Debug, Default)]
pub(crate) struct Read {
    /// Usable ops, in the order given.
    pub items: Vec<Item>,
    /// Items that said "no change" (`none`, `keep`, …): a decision, not a failure.
    pub declined: usize,
    /// Items dropped because they copy the prompt (its examples or its instructions): a reply
    /// made only of these has no lesson of its own to give.
    pub copied: usize,
    /// Items looked at, usable or not.
    pub total: usize,
}

/// Reads the ops in `output`; reasons for dropped items go to `dropped`. `plain_text` allows
/// the fallback to plain lines when there is no usable JSON.
pub(crate) fn read_ops(
    output: &str,
    rules: &Rules<'_>,
    plain_text: bool,
    dropped: &mut Vec<String>,
) -> Result<Read, ParseError> {
    let lines = || -> Vec<Parsed> {
        if plain_text {
            output
                .lines()
                .filter_map(|line| parse_line(line, rules))
                .collect()
        } else {
            Vec::new()
        }
    };
    let useful = |parsed: &[Parsed]| {
        parsed
            .iter()
            .any(|p| !matches!(p, Parsed::Dropped(_) | Parsed::Copied(_)))
    };
    let mut cut_off = None;
    let parsed = match extract_json(output) {
        Ok(extracted) => {
            if extracted.truncated {
                cut_off = extracted.cut_off.last().cloned();
            }
            match items_of(extracted.value) {
                // JSON with nothing usable may be a stray bracket in a plain list.
                Ok(items) => {
                    let parsed: Vec<Parsed> = items
                        .into_iter()
                        .map(|item| parse_item(item, rules))
                        .collect();
                    match lines() {
                        plain if !useful(&parsed) && useful(&plain) => {
                            cut_off = None;
                            plain
                        }
                        _ => parsed,
                    }
                }
                Err(found) => match lines() {
                    plain if useful(&plain) => plain,
                    _ => return Err(ParseError::NoOps { found }),
                },
            }
        }
        Err(error) => match lines() {
            plain if !plain.is_empty() => plain,
            _ => return Err(error),
        },
    };
    let mut read = Read {
        total: parsed.len(),
        ..Read::default()
    };
    let last = parsed.len().saturating_sub(1);
    for (index, parsed) in parsed.into_iter().enumerate() {
        match parsed {
            Parsed::Op(item) => read.items.push(item),
            Parsed::Declined => read.declined += 1,
            Parsed::Copied(reason) => {
                read.copied += 1;
                dropped.push(reason);
            }
            Parsed::Dropped(reason) => dropped.push(match &cut_off {
                Some(cut) if index == last => {
                    format!("{reason} (the output was cut off inside \"{cut}\")")
                }
                _ => reason,
            }),
        }
    }
    Ok(read)
}

/// What one item was.
#[derive(Debug, PartialEq)]
enum Parsed {
    Op(Item),
    Declined,
    /// Dropped for copying the prompt, told apart from other drops (see [`Read::copied`]).
    Copied(String),
    Dropped(String),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Add,
    Update,
    Delete,
    None,
}

/// Keys whose value lists the ops (compared lower-case, letters and digits only).
const LIST_KEYS: &[&str] = &[
    "ops",
    "operations",
    "experiences",
    "newexperiences",
    "changes",
    "updates",
    "lessons",
    "items",
    "actions",
    "result",
    "results",
    "output",
    "final",
    "finalops",
    "finalchanges",
    "proposals",
    "insights",
    "rules",
];
const OP_KEYS: &[&str] = &["op", "operation", "action", "type", "kind", "option"];
const TEXT_KEYS: &[&str] = &[
    "text",
    "experience",
    "content",
    "rule",
    "lesson",
    "newtext",
    "insight",
    "description",
];
const CONDITION_KEYS: &[&str] = &["condition", "when", "if"];
const STRATEGY_KEYS: &[&str] = &["strategy", "then", "do"];
const ID_KEYS: &[&str] = &["id", "experienceid", "target", "targetid", "ref"];
const TOPIC_KEYS: &[&str] = &["topic", "category", "skill", "situation", "domain"];
const FROM_KEYS: &[&str] = &["from", "sources", "source", "proposals", "refs", "basedon"];

fn norm_key(key: &str) -> String {
    key.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

fn field<'v>(map: &'v Map<String, Value>, keys: &[&str]) -> Option<&'v Value> {
    keys.iter().find_map(|want| {
        map.iter()
            .find(|(key, value)| norm_key(key) == *want && !value.is_null())
            .map(|(_, value)| value)
    })
}

fn describe(value: &Value) -> String {
    match value {
        Value::Object(map) if map.is_empty() => "an empty object".to_owned(),
        Value::Object(map) => {
            let keys: Vec<&str> = map.keys().map(String::as_str).take(5).collect();
            format!("an object with keys {}", keys.join(", "))
        }
        Value::Array(_) => "an array".to_owned(),
        Value::String(_) => "a string".to_owned(),
        Value::Number(n) => format!("the number {n}"),
        Value::Bool(b) => format!("`{b}`"),
        Value::Null => "`null`".to_owned(),
    }
}

fn looks_like_item(map: &Map<String, Value>) -> bool {
    [OP_KEYS, TEXT_KEYS, ID_KEYS, CONDITION_KEYS]
        .iter()
        .any(|keys| field(map, keys).is_some())
}

/// The items of a reply's JSON, or a description of what was there instead.
fn items_of(value: Value) -> Result<Vec<Value>, String> {
    match value {
        Value::Array(items) => Ok(flatten(items)),
        Value::Object(map) if looks_like_item(&map) => Ok(vec![Value::Object(map)]),
        Value::Object(map) => {
            let listed = map
                .iter()
                .find(|(key, _)| LIST_KEYS.contains(&norm_key(key).as_str()))
                .map(|(_, value)| value.clone());
            let only_array = || {
                let mut arrays = map.values().filter(|value| value.is_array());
                match (arrays.next(), arrays.next()) {
                    (Some(array), None) => Some(array.clone()),
                    _ => None,
                }
            };
            match listed.or_else(only_array) {
                Some(Value::Null) => Ok(Vec::new()),
                Some(inner @ (Value::Array(_) | Value::Object(_) | Value::String(_))) => {
                    items_of(inner)
                }
                _ => Err(describe(&Value::Object(map))),
            }
        }
        Value::String(text) => Ok(vec![Value::String(text)]),
        other => Err(describe(&other)),
    }
}

/// Lists inside lists (`[{"ops": [...]}, {"ops": [...]}]`, several replies in a row) are
/// opened up; an object that is neither an item nor a list stays, to be dropped with a reason.
fn flatten(items: Vec<Value>) -> Vec<Value> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Value::Object(map) if !looks_like_item(&map) => {
                match items_of(Value::Object(map.clone())) {
                    Ok(inner) => out.extend(inner),
                    Err(_) => out.push(Value::Object(map)),
                }
            }
            Value::Array(inner) => out.extend(flatten(inner)),
            other => out.push(other),
        }
    }
    out
}

fn parse_item(item: Value, rules: &Rules<'_>) -> Parsed {
    match item {
        Value::String(text) => {
            parse_line(&text, rules).unwrap_or_else(|| build(Kind::Add, None, Some(&text), rules))
        }
        Value::Object(map) => parse_object(&map, rules),
        other => Parsed::Dropped(format!("an item that is {}", describe(&other))),
    }
}

fn as_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

fn parse_object(map: &Map<String, Value>, rules: &Rules<'_>) -> Parsed {
    let op = field(map, OP_KEYS).and_then(as_text);
    let text = field(map, TEXT_KEYS)
        .and_then(as_text)
        .or_else(|| compose(map));
    let id = field(map, ID_KEYS).and_then(as_text);
    let topic = field(map, TOPIC_KEYS).and_then(as_text);
    let from = field(map, FROM_KEYS).map(numbers).unwrap_or_default();
    let kind = match (&op, &id, &text) {
        (Some(word), _, _) => match op_kind(word) {
            Some(kind) => kind,
            None => return Parsed::Dropped(format!("unknown op `{word}`")),
        },
        (None, Some(_), Some(_)) => Kind::Update,
        (None, None, Some(_)) => Kind::Add,
        (None, Some(id), None) => return Parsed::Dropped(format!("no op given for `{id}`")),
        (None, None, None) => {
            return Parsed::Dropped(format!(
                "{} with no op or text",
                describe(&Value::Object(map.clone()))
            ));
        }
    };
    match build(kind, id.as_deref(), text.as_deref(), rules) {
        Parsed::Op(mut item) => {
            if let (ProposedOp::Add { topic: slot, .. }, Some(topic)) = (&mut item.op, topic) {
                *slot = topic_tag(&topic);
            }
            Parsed::Op(Item { from, ..item })
        }
        other => other,
    }
}

/// "When <condition>, <strategy>." from separate `condition` and `strategy` fields (the shape
/// the stage schemas ask for, since it makes small models state a condition at all), without
/// doubling a "When" or a final period the model wrote itself.
fn compose(map: &Map<String, Value>) -> Option<String> {
    static WHEN: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?i)^\s*(when|whenever|if)\b\s*").expect("valid regex"));
    let condition = field(map, CONDITION_KEYS).and_then(as_text)?;
    let strategy = field(map, STRATEGY_KEYS).and_then(as_text)?;
    let condition = WHEN.replace(&condition, "");
    let condition = condition
        .trim()
        .trim_end_matches([',', '.', ';', ':'])
        .trim();
    let strategy = strategy.trim().trim_end_matches(['.', ';', ',']).trim();
    if condition.is_empty() || strategy.is_empty() {
        return Some(String::new());
    }
    Some(format!(
        "When {}, {}.",
        lower_first_word(condition),
        lower_first_word(strategy)
    ))
}

/// Proposal numbers: `[1, 3]`, `2`, `"1, 3"`, `["#1", "P3"]`.
fn numbers(value: &Value) -> Vec<usize> {
    static DIGITS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\d+").expect("valid regex"));
    match value {
        Value::Number(n) => n.as_u64().map(|n| n as usize).into_iter().collect(),
        Value::String(text) => DIGITS
            .find_iter(text)
            .filter_map(|m| m.as_str().parse().ok())
            .collect(),
        Value::Array(items) => items.iter().flat_map(numbers).collect(),
        _ => Vec::new(),
    }
}

fn op_kind(word: &str) -> Option<Kind> {
    let kind = |w: &str| match w {
        "add" | "new" | "create" | "insert" | "append" | "addition" => Some(Kind::Add),
        "update" | "modify" | "edit" | "change" | "revise" | "replace" | "refine" | "rewrite"
        | "merge" | "improve" => Some(Kind::Update),
        "delete" | "remove" | "drop" | "discard" | "erase" => Some(Kind::Delete),
        "none" | "keep" | "noop" | "nochange" | "nothing" | "skip" | "ignore" | "pass"
        | "unchanged" | "na" => Some(Kind::None),
        _ => None,
    };
    let lower = word.to_lowercase();
    let letters: String = lower.chars().filter(char::is_ascii_alphabetic).collect();
    kind(&letters).or_else(|| {
        let first: String = lower
            .split(|c: char| !c.is_ascii_alphabetic())
            .find(|w| !w.is_empty())?
            .to_owned();
        kind(&first)
    })
}

/// Reads an experience id however a model spells it: `E0003`, `e3`, `3`, `[E0003]`, `#3`.
pub(crate) fn parse_id(text: &str) -> Option<ExperienceId> {
    let text = text.trim().trim_matches(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '[' | ']' | '(' | ')' | '#' | '"' | '\'' | '`' | '*' | '.' | ':'
            )
    });
    let digits = text
        .strip_prefix(['E', 'e'])
        .unwrap_or(text)
        .trim_start_matches(['-', '_']);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    ExperienceId::new(digits.parse().ok()?)
}

/// A leading `[E0003]` or `E0003:` tag (a library line copied back, or the id of a delete
/// written as its text) and the text after it.
fn split_tag(text: &str) -> (Option<ExperienceId>, &str) {
    static TAG: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^\[?\s*([Ee]\d+)\s*\]?(?:\s*[:\-.]\s*|\s+|$)").expect("valid regex")
    });
    match TAG.captures(text) {
        Some(captures) => (
            parse_id(&captures[1]),
            &text[captures.get(0).expect("whole match").end()..],
        ),
        None => (None, text),
    }
}

fn build(kind: Kind, id: Option<&str>, text: Option<&str>, rules: &Rules<'_>) -> Parsed {
    let cleaned = text.map(clean_text).unwrap_or_default();
    let (tagged, body) = split_tag(&cleaned);
    let op = match kind {
        Kind::None => return Parsed::Declined,
        Kind::Add => check_text("add", body, rules).map(ProposedOp::add),
        Kind::Update => check_id("update", id, tagged, rules).and_then(|id| {
            let text = check_text("update", body, rules)?;
            Ok(ProposedOp::Update { id, text })
        }),
        Kind::Delete => check_id("delete", id, tagged, rules).map(|id| ProposedOp::Delete { id }),
    };
    match op {
        Ok(op) => Parsed::Op(Item {
            op,
            from: Vec::new(),
        }),
        Err(reason) if kind != Kind::Delete && copies_prompt(body, rules) => Parsed::Copied(reason),
        Err(reason) => Parsed::Dropped(reason),
    }
}

/// Whether `text` is lifted from the prompt: one of its examples, or a run of its words.
fn copies_prompt(text: &str, rules: &Rules<'_>) -> bool {
    copied_from(rules.template, text) || shares_a_run(rules.template, text)
}

/// The text of an op, checked as the library will check it: never truncated.
fn check_text(name: &str, text: &str, rules: &Rules<'_>) -> Result<String, String> {
    let tidied = tidy(text);
    let text = tidied.as_str();
    // A lesson followed by its explanation, an example or a second lesson keeps the lesson
    // when it passes alone: the 1.5B distiller's commonest drops were a lesson with an added
    // "This is equivalent to …" (over the word limit), "For example, 10% of $360 is …"
    // (quoting the problem), or itself (or its condition) again after a comma (a loop).
    // A lesson that quotes one problem's letter or word keeps its method with the quote named
    // by its kind (`generalize`).
    check_whole(name, text, rules).or_else(|reason| {
        let first = match rules.first_sentence {
            true => first_sentence(text).unwrap_or(text),
            false => text,
        };
        let (one, other) = glued_lessons(first).unzip();
        let parts: Vec<String> = [Some(first.to_owned()), one, other]
            .into_iter()
            .flatten()
            .collect();
        // Then the whole and each part with its quoted instances named by their kind.
        let general: Vec<String> = std::iter::once(text)
            .chain(
                parts
                    .iter()
                    .map(String::as_str)
                    .filter(|part| *part != text),
            )
            .filter_map(generalize)
            .collect();
        parts
            .into_iter()
            .chain(general)
            .filter(|lesson| lesson != text)
            .find_map(|lesson| check_whole(name, &lesson, rules).ok())
            .ok_or(reason)
    })
}

fn check_whole(name: &str, text: &str, rules: &Rules<'_>) -> Result<String, String> {
    let words = text.split_whitespace().count();
    if words == 0 {
        Err(format!("{name} with an empty text"))
    } else if is_placeholder(text) {
        Err(format!("{name} with a placeholder for a text: \"{text}\""))
    } else if copies_prompt(text, rules) {
        Err(format!("{name} copies the prompt: \"{text}\""))
    } else if let Some(quoted) = rules
        .problem
        .and_then(|problem| quotes_problem(problem, text))
    {
        Err(format!(
            "{name} quotes the problem ({quoted}) instead of naming its kind: \"{text}\""
        ))
    } else if !has_form(text) {
        Err(format!(
            "{name} is not of the form \"When <condition>, <strategy>.\": \"{text}\""
        ))
    } else if let Some(flaw) = lesson_flaw(text) {
        Err(format!("{name} is not a lesson (it {flaw}): \"{text}\""))
    } else if words > rules.max_words {
        Err(format!(
            "{name} of {words} words is over the limit of {}: \"{text}\"",
            rules.max_words
        ))
    } else {
        Ok(text.to_owned())
    }
}

/// `text` without what a small distiller leaves around a lesson: a JSON brace or bracket
/// that closes nothing before its last full stop ("… for each increase.}.", kept in the third paper-setting run's
/// library), and sentences after the first that talk about the lessons rather than the task
/// ("This is the same advice provided in the new lesson."): a user reads them in the library
/// and the policy in its prompt, and they say nothing about the problem.
fn tidy(text: &str) -> String {
    static STRAY: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r#"[.\s]*"?[}\]]+[.\s]*$"#).expect("valid regex"));
    static ABOUT_LESSONS: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?i)\b(?:lessons?|advice|the library|experiences? (?:above|below|list))\b")
            .expect("valid regex")
    });
    let mut text = text.trim().to_owned();
    let unclosed =
        |open: char, close: char| text.matches(close).count() > text.matches(open).count();
    if let Some(stray) = STRAY.find(&text)
        && stray.start() > 0
        && (unclosed('{', '}') || unclosed('[', ']'))
    {
        text.truncate(stray.start());
        text.push('.');
    }
    match first_sentence(&text) {
        Some(first) if ABOUT_LESSONS.is_match(&text[first.len()..]) => first.to_owned(),
        _ => text,
    }
}

/// Whether `text` stands in for a text rather than being one: `When ..., ...`,
/// `<text>`, `When [condition], [strategy]`, or fewer than three words.
pub(crate) fn is_placeholder(text: &str) -> bool {
    const MARKS: &[&str] = &[
        "...",
        "…",
        "<condition>",
        "[condition]",
        "<strategy>",
        "[strategy]",
    ];
    let trimmed = text.trim();
    (trimmed.starts_with('<') && trimmed.ends_with('>'))
        || MARKS.iter().any(|mark| trimmed.contains(mark))
        || normalize(text).split(' ').count() < 3
}

/// Whether `text` states a condition first, as experiences do ("When …, …"; "If …, …"):
/// small models otherwise fill the field with an answer ("15 - 7 = 8") or a restated question.
fn has_form(text: &str) -> bool {
    let first = normalize(text);
    let first = first.split(' ').next().unwrap_or_default();
    matches!(first, "when" | "whenever" | "if")
}

/// Longest topic, in words: a topic names a kind of situation, not a lesson.
const TOPIC_MAX_WORDS: usize = 4;

/// A model's topic as a domain tag: lower-case words of letters and digits, at most
/// [`TOPIC_MAX_WORDS`] of them, joined by spaces; `None` when nothing is left or it is a
/// placeholder ("topic", "general", "none").
pub(crate) fn topic_tag(raw: &str) -> Option<String> {
    let normalized = normalize(raw);
    let words: Vec<&str> = normalized.split(' ').filter(|w| !w.is_empty()).collect();
    if words.is_empty() || words.len() > TOPIC_MAX_WORDS * 2 {
        return None;
    }
    // A long topic loses its common words first ("percent of a changed amount" → "percent
    // changed amount"), then its tail.
    let words: Vec<&str> = if words.len() > TOPIC_MAX_WORDS {
        words.into_iter().filter(|w| is_content_word(w)).collect()
    } else {
        words
    };
    let tag = words[..words.len().min(TOPIC_MAX_WORDS)].join(" ");
    let placeholder = matches!(
        tag.as_str(),
        "topic" | "general" | "none" | "other" | "misc" | "n a" | "unknown" | "lesson"
    );
    (!placeholder).then_some(tag)
}

/// The id an update or delete names (given, or tagged at the start of its text), which must be
/// an active experience.
fn check_id(
    name: &str,
    given: Option<&str>,
    tagged: Option<ExperienceId>,
    rules: &Rules<'_>,
) -> Result<ExperienceId, String> {
    let id = match (given, tagged) {
        (Some(given), _) => parse_id(given)
            .ok_or_else(|| format!("{name} names `{given}`, which is not an experience id"))?,
        (None, Some(tagged)) => tagged,
        (None, None) => return Err(format!("{name} names no experience id")),
    };
    match rules.library.get_active(id) {
        Some(_) => Ok(id),
        None => Err(format!(
            "{name} names {id}, which is not an active experience"
        )),
    }
}

/// One plain-text line as an op: `ADD: When …`, `UPDATE E0003: When …`, `DELETE [E0003]`,
/// `NONE`, or a list item or line starting `When …, …`. Other lines (prose) are `None`.
fn parse_line(line: &str, rules: &Rules<'_>) -> Option<Parsed> {
    static MARKER: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^\s*(?:[-*•+]|\d{1,2}[.)]|\(\d{1,2}\))\s+").expect("valid regex")
    });
    static LABEL: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"(?i)^(add|new|update|modify|edit|delete|remove|none|keep|no change)\b\s*(\[?\s*e?\d+\s*\]?)?\s*(?:[:\-–—.]\s*|$)(.*)$",
        )
        .expect("valid regex")
    });
    static WHEN: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?i)^when\b[^,]+,.*\S").expect("valid regex"));
    let line = MARKER.replace(line, "");
    let line = line.trim().trim_matches(['*', '_', '`', '#']).trim();
    if let Some(captures) = LABEL.captures(line) {
        let kind = op_kind(&captures[1]).expect("the label pattern lists op names");
        let id = captures.get(2).map(|m| m.as_str());
        return Some(build(kind, id, Some(&captures[3]), rules));
    }
    let text = clean_text(line);
    WHEN.is_match(&text)
        .then(|| build(Kind::Add, None, Some(&text), rules))
}

#[cfg(test)]
#[path = "ops_tests.rs"]
mod tests;
