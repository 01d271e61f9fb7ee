//! From one record (a JSON object or a CSV row) to the question, answer, id and split it holds.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::error::RecordError;

/// Field names tried for the question when none is given, in order.
///
/// youtu-agent's Training-Free GRPO datasets use `question` or `problem`; the rest cover common
/// exports (prompt/completion pairs, instruction data).
pub const QUESTION_FIELDS: &[&str] = &[
    "question",
    "problem",
    "prompt",
    "input",
    "query",
    "raw_question",
];

/// Field names tried for the reference answer when none is given, in order.
pub const ANSWER_FIELDS: &[&str] = &[
    "answer",
    "solution",
    "ground_truth",
    "groundtruth",
    "correct_answer",
    "target",
    "output",
];

/// The id field when none is given; when it is absent the loader makes an id from the position.
pub const ID_FIELD: &str = "id";

/// A field whose presence makes a file carry its own train/held-out split.
pub const SPLIT_FIELD: &str = "split";

/// Which field holds what.
#[derive(Debug, Clone)]
pub(crate) struct FieldMap {
    question: Vec<String>,
    answer: Vec<String>,
    id: String,
    /// An id field the user named must be there; the default one may be absent.
    id_required: bool,
}

impl FieldMap {
    /// A given name replaces the defaults entirely, so a typo is an error rather than a
    /// silent fall-back to another column.
    pub(crate) fn new(question: Option<&str>, answer: Option<&str>, id: Option<&str>) -> Self {
        let names = |given: Option<&str>, defaults: &[&str]| match given {
            Some(name) => vec![name.to_owned()],
            None => defaults.iter().map(|&name| name.to_owned()).collect(),
        };
        Self {
            question: names(question, QUESTION_FIELDS),
            answer: names(answer, ANSWER_FIELDS),
            id: id.unwrap_or(ID_FIELD).to_owned(),
            id_required: id.is_some(),
        }
    }
}

// Only the Parquet reader checks fields against a file-wide schema.
#[cfg(any(test, feature = "parquet"))]
impl FieldMap {
    /// The names tried for the first required field of which `has` knows none, for formats
    /// whose records all have the same fields (a Parquet file's columns): then the file, not
    /// each record, is wrong.
    pub(crate) fn missing(&self, has: impl Fn(&str) -> bool) -> Option<Vec<String>> {
        let id = std::slice::from_ref(&self.id);
        [&self.question[..], &self.answer[..]]
            .into_iter()
            .chain(self.id_required.then_some(id))
            .find(|names| !names.iter().any(|name| has(name)))
            .map(<[String]>::to_vec)
    }

    /// Whether a field of this name may be read: a question, answer, id or split field.
    pub(crate) fn reads(&self, name: &str) -> bool {
        name == self.id
            || name == SPLIT_FIELD
            || self
                .question
                .iter()
                .chain(&self.answer)
                .any(|field| field == name)
    }
}

/// The final answer of a GSM8K-style solution, which ends with `#### <number>`: the number's
/// text, or `None` when `text` does not end that way.
///
/// GSM8K's reference answers are worked solutions ("… so she has 48 + 24 = <<48+24=72>>72 clips.
/// #### 72"); the number after the last `####` is the answer, whatever numbers come before.
pub(crate) fn gsm8k_answer(text: &str) -> Option<&str> {
    let (_, last) = text.rsplit_once("####")?;
    let number = last.trim();
    plain_number(number).then_some(number)
}

/// Whether a reference answer is a number the `numeric` reward should grade: a GSM8K worked
/// solution, or a plain number (`22200`, `-3.5`, `22,200`). Exact match cannot grade these: it
/// scores `22,200`, `$252` and `72 minutes` wrong against `22200`, `252` and `72`.
pub(crate) fn numeric_reference(text: &str) -> bool {
    gsm8k_answer(text).is_some() || plain_number(text.trim())
}

/// An optional minus, digits (thousands separated by `,` in groups of exactly three, the only
/// grouping the `numeric` reward reads), and an optional `.` with digits after it.
fn plain_number(text: &str) -> bool {
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (unsigned, None),
    };
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    let whole_ok = match whole.split_once(',') {
        None => digits(whole),
        Some((first, groups)) => {
            (1..=3).contains(&first.len())
                && digits(first)
                && groups
                    .split(',')
                    .all(|group| group.len() == 3 && digits(group))
        }
    };
    let fraction_ok = fraction.is_none_or(|f| !f.is_empty() && digits(f));
    let has_digit = unsigned.bytes().any(|b| b.is_ascii_digit());
    whole_ok && fraction_ok && has_digit
}

/// One field's value, whatever the format.
#[derive(Debug)]
pub(crate) enum Cell<'a> {
    /// Text, or a number written as text.
    Text(Cow<'a, str>),
    /// JSON `null`.
    Null,
    /// Anything else: `a boolean`, `an array`, `an object`.
    Other(&'static str),
}

/// A record whose fields can be looked up by name.
pub(crate) trait Fields {
    fn field(&self, name: &str) -> Option<Cell<'_>>;
}

impl Fields for Map<String, Value> {
    fn field(&self, name: &str) -> Option<Cell<'_>> {
        Some(match self.get(name)? {
            Value::String(text) => Cell::Text(Cow::Borrowed(text)),
            // Answers such as 42 or 3.5 are often stored as numbers.
            Value::Number(number) => Cell::Text(Cow::Owned(number.to_string())),
            Value::Null => Cell::Null,
            other => Cell::Other(json_kind(other)),
        })
    }
}

/// A CSV row read against its header.
pub(crate) struct CsvRow<'a> {
    pub(crate) header: &'a csv::StringRecord,
    pub(crate) row: &'a csv::StringRecord,
}

impl Fields for CsvRow<'_> {
    fn field(&self, name: &str) -> Option<Cell<'_>> {
        let column = self.header.iter().position(|title| title == name)?;
        self.row
            .get(column)
            .map(|cell| Cell::Text(Cow::Borrowed(cell)))
    }
}

/// How a JSON value is named in messages.
pub(crate) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// What one good record holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Extracted {
    /// The record's own id, when it has one.
    pub(crate) id: Option<String>,
    pub(crate) question: String,
    pub(crate) answer: String,
    /// The raw `split` value, when the record has one.
    pub(crate) split: Option<String>,
}

/// Reads the fields of one record, or says which field is wrong.
pub(crate) fn extract(map: &FieldMap, record: &impl Fields) -> Result<Extracted, RecordError> {
    let required = |names: &[String]| {
        find(record, names)?.ok_or_else(|| RecordError::MissingField {
            tried: names.to_vec(),
        })
    };
    let question = required(&map.question)?;
    let answer = required(&map.answer)?;
    let id_names = std::slice::from_ref(&map.id);
    let id = if map.id_required {
        Some(required(id_names)?)
    } else {
        find(record, id_names)?
    };
    let split = find(record, &[SPLIT_FIELD.to_owned()])?;
    Ok(Extracted {
        id,
        question,
        answer,
        split,
    })
}

/// The trimmed text of the first of `names` present and not null.
fn find(record: &impl Fields, names: &[String]) -> Result<Option<String>, RecordError> {
    let mut null = None;
    for name in names {
        match record.field(name) {
            None => {}
            Some(Cell::Null) => {
                null.get_or_insert(name);
            }
            Some(Cell::Other(found)) => {
                return Err(RecordError::WrongType {
                    field: name.clone(),
                    found,
                });
            }
            Some(Cell::Text(text)) => {
                let text = text.trim();
                if text.is_empty() {
                    return Err(RecordError::EmptyField {
                        field: name.clone(),
                    });
                }
                return Ok(Some(text.to_owned()));
            }
        }
    }
    match null {
        Some(field) => Err(RecordError::NullField {
            field: field.clone(),
        }),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn extract_json(map: &FieldMap, value: Value) -> Result<Extracted, RecordError> {
        let Value::Object(object) = value else {
            panic!("not an object")
        };
        extract(map, &object)
    }

    fn defaults() -> FieldMap {
        FieldMap::new(None, None, None)
    }

    #[test]
    fn reads_question_and_answer() {
        let got = extract_json(&defaults(), json!({"question": " 2+2? ", "answer": "4"})).unwrap();
        assert_eq!(
            got,
            Extracted {
                id: None,
                question: "2+2?".into(),
                answer: "4".into(),
                split: None
            }
        );
    }

    #[test]
    fn falls_back_to_problem_and_solution_and_accepts_numbers() {
        let got = extract_json(
            &defaults(),
            json!({"problem": "p", "solution": 42, "id": 7, "split": "test"}),
        )
        .unwrap();
        assert_eq!(got.question, "p");
        assert_eq!(got.answer, "42");
        assert_eq!(got.id.as_deref(), Some("7"));
        assert_eq!(got.split.as_deref(), Some("test"));
        let got = extract_json(
            &defaults(),
            json!({"raw_question": "q", "groundtruth": 2.5}),
        );
        assert_eq!(got.unwrap().answer, "2.5");
    }

    #[test]
    fn earlier_default_names_win() {
        let got = extract_json(
            &defaults(),
            json!({"prompt": "second", "question": "first", "output": "b", "answer": "a"}),
        )
        .unwrap();
        assert_eq!((got.question.as_str(), got.answer.as_str()), ("first", "a"));
    }

    #[test]
    fn null_defers_to_later_names() {
        let got = extract_json(
            &defaults(),
            json!({"question": "q", "answer": null, "target": 1}),
        );
        assert_eq!(got.unwrap().answer, "1");
        let got = extract_json(&defaults(), json!({"question": "q", "answer": null}));
        assert_eq!(
            got.unwrap_err(),
            RecordError::NullField {
                field: "answer".into()
            }
        );
    }

    #[test]
    fn given_names_replace_the_defaults() {
        let map = FieldMap::new(Some("q"), Some("a"), Some("key"));
        let got = extract_json(&map, json!({"q": "x", "a": "y", "key": "k1"})).unwrap();
        assert_eq!(got.id.as_deref(), Some("k1"));
        let got = extract_json(&map, json!({"question": "x", "a": "y", "key": "k1"}));
        assert_eq!(got.unwrap_err().to_string(), r#"missing field "q""#);
        let got = extract_json(&map, json!({"q": "x", "a": "y"}));
        assert_eq!(got.unwrap_err().to_string(), r#"missing field "key""#);
    }

    #[test]
    fn names_the_bad_field() {
        let cases = [
            (
                json!({"answer": "1"}),
                "missing field \"question\" (tried: question, problem, prompt, input, query, \
                 raw_question)",
            ),
            (
                json!({"question": "  ", "answer": "1"}),
                r#"field "question" is empty"#,
            ),
            (
                json!({"question": "q", "answer": [1]}),
                r#"field "answer" is an array; expected text or a number"#,
            ),
            (
                json!({"question": "q", "answer": "1", "id": true}),
                r#"field "id" is a boolean; expected text or a number"#,
            ),
            (
                json!({"question": "q", "answer": "1", "split": {}}),
                r#"field "split" is an object; expected text or a number"#,
            ),
        ];
        for (record, message) in cases {
            let error = extract_json(&defaults(), record).unwrap_err();
            assert_eq!(error.to_string(), message);
        }
    }

    #[test]
    fn gsm8k_answers_are_the_number_after_the_last_marks() {
        let solution = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = \
                        <<48+24=72>>72 clips altogether in April and May.\n#### 72";
        let cases = [
            (solution, Some("72")),
            ("#### 1,250\n", Some("1,250")),
            ("It loses 3.5 degrees.\n####  -3.5", Some("-3.5")),
            ("#### 4 #### 5", Some("5")),
            ("#### five", None),
            ("#### 72 apples", None),
            ("####", None),
            ("72", None),
        ];
        for (text, expected) in cases {
            assert_eq!(gsm8k_answer(text), expected, "{text:?}");
        }
    }

    #[test]
    fn numeric_references_are_worked_solutions_or_plain_numbers() {
        let numeric = [
            "72",
            "22200",
            "22,200",
            "1,234,567.5",
            "-3.5",
            ".5",
            "0",
            " 42 \n",
            "#### 1,250",
        ];
        for text in numeric {
            assert!(numeric_reference(text), "{text:?}");
        }
        // What exact match grades better, and what the numeric reward could not read back
        // as one number (`12,34`, `1.2.3`).
        let not = [
            "Paris",
            "",
            "-",
            ".",
            "12,34",
            "1,2345",
            ",123",
            "1.2.3",
            "3.",
            "$252",
            "72 minutes",
            "50%",
            "3/4",
            "1e5",
            "four",
        ];
        for text in not {
            assert!(!numeric_reference(text), "{text:?}");
        }
    }

    #[test]
    fn a_missing_column_is_found_once_for_the_file() {
        let columns = ["problem", "solution", "split"];
        let has = |name: &str| columns.contains(&name);
        assert_eq!(defaults().missing(has), None);
        let given = FieldMap::new(Some("q"), None, None);
        assert_eq!(given.missing(has), Some(vec!["q".to_owned()]));
        let id = FieldMap::new(None, None, Some("key"));
        assert_eq!(id.missing(has), Some(vec!["key".to_owned()]));
        let no_answer = FieldMap::new(None, Some("a"), None);
        assert_eq!(no_answer.missing(has), Some(vec!["a".to_owned()]));
        assert!(defaults().reads("split") && defaults().reads("id") && defaults().reads("target"));
        assert!(!defaults().reads("metadata"));
    }

    #[test]
    fn reads_csv_rows_by_header() {
        let header = csv::StringRecord::from(vec!["id", "problem", "answer"]);
        let row = csv::StringRecord::from(vec!["a1", "1, 2 or 3?", "3"]);
        let got = extract(
            &defaults(),
            &CsvRow {
                header: &header,
                row: &row,
            },
        )
        .unwrap();
        assert_eq!(got.question, "1, 2 or 3?");
        assert_eq!(got.id.as_deref(), Some("a1"));
    }
}
