//! JSON schema → llama.cpp GBNF grammar, for the subset of JSON schema that structured outputs
//! use: objects with properties (required and optional), arrays with item bounds, strings with
//! length bounds, numbers, integers, booleans, null, `enum`, `const`, `anyOf`/`oneOf` and type
//! unions. Keywords that would change what is valid but are not supported are refused, so a
//! schema never silently constrains less than it says.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use serde_json::Value;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GrammarError {
    #[error("JSON schema at `{pointer}`: unsupported keyword `{keyword}`")]
    Unsupported { pointer: String, keyword: String },
    #[error("JSON schema at `{pointer}`: {message}")]
    Invalid { pointer: String, message: String },
    #[error(
        "JSON schema at `{pointer}`: more than {limit} {what}, the most a grammar is built for"
    )]
    TooLarge {
        pointer: String,
        what: &'static str,
        limit: usize,
    },
    #[error("llama.cpp rejected the grammar (check its syntax; the start rule must be `root`)")]
    Rejected,
}

/// Most schemas (the root, each property, `items`, `anyOf`/`oneOf` option) one grammar is built
/// from. The grammar grows linearly with them, and llama.cpp's sampler checks every open
/// alternative at each token, so a bound keeps both in reach; `gym serve` refuses client schemas
/// well below it (`serve::schema_limits`), this catches every other caller.
pub const MAX_GRAMMAR_SCHEMAS: usize = 20_000;
/// Deepest nesting of schemas a grammar is built for: the builder recurses once per level.
pub const MAX_GRAMMAR_DEPTH: usize = 64;
/// Characters of a property name kept in its rule's name. Rule names only need to be unique
/// (the property's index does that) and readable; a nested rule's name repeats its parent's, so
/// a long name copied whole into every descendant would make the grammar grow with depth times
/// key length per rule.
const RULE_KEY_CHARS: usize = 32;

/// Whitespace between JSON tokens is one blank at most, a space or a newline: every blank a
/// model writes is a decoded token, and a sampling model given `[ \t\n]{0,4}` spent up to a
/// third of a short answer's tokens on runs of them (`{    "decision":  "add" ,`). A newline
/// stays allowed because chat templates and tool calls put one before an object.
const PRIMITIVES: &str = r#"ws ::= [ \n]?
string ::= "\"" char* "\""
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
number ::= integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,4})?
integer ::= "-"? ("0" | [1-9] [0-9]{0,17})
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
"#;

const IGNORED: &[&str] = &[
    "$schema",
    "$id",
    "title",
    "description",
    "default",
    "examples",
    "additionalProperties",
    "$comment",
];

/// Converts a JSON schema to a GBNF grammar with start rule `root`.
pub fn json_schema_to_gbnf(schema: &Value) -> Result<String, GrammarError> {
    let mut builder = Builder::default();
    let root = builder.node(schema, "root", &At::ROOT)?;
    let mut out = format!("root ::= {root}\n");
    for (name, body) in &builder.rules {
        let _ = writeln!(out, "{name} ::= {body}");
    }
    out.push_str(PRIMITIVES);
    Ok(out)
}

/// A grammar for a tool-calling turn in the text protocol (see `text_tools`): free text without
/// `<` then optionally one `<tool_call>{"name": …, "arguments": …}</tool_call>` whose arguments
/// follow that tool's schema; with `call_required`, the call alone. A schema this module cannot express
/// falls back to "any JSON object" for that tool, so one exotic tool does not disable the rest;
/// the toolbox checks arguments anyway.
pub(crate) fn tool_call_gbnf(
    tools: &[(&str, &Value)],
    open: &str,
    close: &str,
    call_required: bool,
) -> String {
    let mut builder = Builder::default();
    let mut alternatives = Vec::new();
    for (index, (name, schema)) in tools.iter().enumerate() {
        let rule = format!("tool{index}-args");
        let schemas = builder.schemas;
        let arguments = match builder.node(schema, &rule, &At::ROOT) {
            Ok(body) => builder.define(rule, body),
            Err(_) => {
                // What the refused schema defined goes, and so does its share of the bounds.
                builder.rules.retain(|key, _| !key.starts_with(&rule));
                builder.schemas = schemas;
                "object".to_string()
            }
        };
        let name = literal(&json_text(&Value::String((*name).to_string())));
        let key = literal("\"arguments\"");
        alternatives.push(builder.define(
            format!("tool{index}"),
            format!("{name} ws \",\" ws {key} ws \":\" ws {arguments}"),
        ));
    }
    let call = format!(
        "{} ws \"{{\" ws {} ws \":\" ws ({}) ws \"}}\" ws {}",
        literal(open),
        literal("\"name\""),
        alternatives.join(" | "),
        literal(close)
    );
    // A required call comes first: a small model given room to think before it rambles until
    // `max_tokens` and never gets to the call.
    let mut out = if call_required {
        format!("root ::= call\ncall ::= {call}\n")
    } else {
        format!("root ::= thought call?\nthought ::= [^<]*\ncall ::= {call}\n")
    };
    for (name, body) in &builder.rules {
        let _ = writeln!(out, "{name} ::= {body}");
    }
    out.push_str(PRIMITIVES);
    out
}

/// Where a schema sits in the root schema. Its JSON pointer is spelled out only for an error:
/// spelling it for every schema would copy every ancestor's key into each descendant.
#[derive(Clone, Copy)]
struct At<'a> {
    parent: Option<&'a At<'a>>,
    step: Step<'a>,
    depth: usize,
}

#[derive(Clone, Copy)]
enum Step<'a> {
    Root,
    Property(&'a str),
    Items,
    Option(&'static str, usize),
}

impl<'a> At<'a> {
    const ROOT: At<'static> = At {
        parent: None,
        step: Step::Root,
        depth: 0,
    };

    fn child(&'a self, step: Step<'a>) -> At<'a> {
        At {
            parent: Some(self),
            step,
            depth: self.depth + 1,
        }
    }

    fn pointer(&self) -> String {
        let mut steps = Vec::new();
        let mut here = Some(self);
        while let Some(at) = here {
            steps.push(at.step);
            here = at.parent;
        }
        let mut out = String::new();
        for step in steps.iter().rev() {
            let _ = match step {
                Step::Root => Ok(()),
                Step::Property(key) => write!(out, "/properties/{key}"),
                Step::Items => write!(out, "/items"),
                Step::Option(keyword, index) => write!(out, "/{keyword}/{index}"),
            };
        }
        out
    }
}

#[derive(Default)]
struct Builder {
    rules: BTreeMap<String, String>,
    /// Schemas visited so far, for [`MAX_GRAMMAR_SCHEMAS`].
    schemas: usize,
}

impl Builder {
    /// Returns a GBNF expression for `schema`, defining helper rules as needed.
    fn node(&mut self, schema: &Value, name: &str, at: &At<'_>) -> Result<String, GrammarError> {
        let invalid = |message: String| GrammarError::Invalid {
            pointer: at.pointer(),
            message,
        };
        self.schemas += 1;
        if self.schemas > MAX_GRAMMAR_SCHEMAS {
            return Err(GrammarError::TooLarge {
                pointer: at.pointer(),
                what: "schemas",
                limit: MAX_GRAMMAR_SCHEMAS,
            });
        }
        if at.depth > MAX_GRAMMAR_DEPTH {
            return Err(GrammarError::TooLarge {
                pointer: at.pointer(),
                what: "levels of nested schemas",
                limit: MAX_GRAMMAR_DEPTH,
            });
        }
        let object = match schema {
            Value::Bool(true) => return Ok("value".into()),
            Value::Object(map) => map,
            other => return Err(invalid(format!("expected an object, found {other}"))),
        };
        for key in object.keys() {
            let known = IGNORED.contains(&key.as_str())
                || matches!(
                    key.as_str(),
                    "type"
                        | "properties"
                        | "required"
                        | "items"
                        | "minItems"
                        | "maxItems"
                        | "enum"
                        | "const"
                        | "minLength"
                        | "maxLength"
                        | "anyOf"
                        | "oneOf"
                );
            if !known {
                return Err(GrammarError::Unsupported {
                    pointer: at.pointer(),
                    keyword: key.clone(),
                });
            }
        }
        if let Some(value) = object.get("const") {
            return Ok(literal(&json_text(value)));
        }
        if let Some(values) = object.get("enum") {
            let values = values
                .as_array()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| invalid("`enum` must be a non-empty array".into()))?;
            let alts: Vec<String> = values.iter().map(|v| literal(&json_text(v))).collect();
            return Ok(format!("({})", alts.join(" | ")));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(options) = object.get(key) {
                let options = options
                    .as_array()
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| invalid(format!("`{key}` must be a non-empty array")))?;
                let mut alts = Vec::new();
                for (i, option) in options.iter().enumerate() {
                    let rule = format!("{name}-{i}");
                    let body = self.node(option, &rule, &at.child(Step::Option(key, i)))?;
                    alts.push(self.define(rule, body));
                }
                return Ok(format!("({})", alts.join(" | ")));
            }
        }
        match object.get("type") {
            None if object.contains_key("properties") => self.typed("object", object, name, at),
            None => Ok("value".into()),
            Some(Value::String(ty)) => self.typed(ty, object, name, at),
            Some(Value::Array(types)) => {
                let types: Vec<&str> = types
                    .iter()
                    .map(|ty| {
                        ty.as_str()
                            .ok_or_else(|| invalid("`type` entries must be strings".into()))
                    })
                    .collect::<Result<_, _>>()?;
                // Each entry builds the schema's properties or items again, so a repeated one
                // (which JSON schema forbids) would multiply the work by the repetitions.
                let mut seen = HashSet::new();
                if let Some(twice) = types.iter().find(|ty| !seen.insert(**ty)) {
                    return Err(invalid(format!("`type` lists `{twice}` twice")));
                }
                let mut alts = Vec::new();
                for ty in types {
                    let rule = format!("{name}-{ty}");
                    let body = self.typed(ty, object, &rule, at)?;
                    alts.push(self.define(rule, body));
                }
                Ok(format!("({})", alts.join(" | ")))
            }
            Some(other) => Err(invalid(format!(
                "`type` must be a string or an array, found {other}"
            ))),
        }
    }

    fn typed(
        &mut self,
        ty: &str,
        object: &serde_json::Map<String, Value>,
        name: &str,
        at: &At<'_>,
    ) -> Result<String, GrammarError> {
        match ty {
            "string" => {
                let (min, max) = (
                    count(object, "minLength", at)?,
                    count(object, "maxLength", at)?,
                );
                if min.is_none() && max.is_none() {
                    return Ok("string".into());
                }
                Ok(format!(
                    "\"\\\"\" char{} \"\\\"\"",
                    repeat(min.unwrap_or(0), max)
                ))
            }
            "number" => Ok("number".into()),
            "integer" => Ok("integer".into()),
            "boolean" => Ok("boolean".into()),
            "null" => Ok("null".into()),
            "array" => self.array(object, name, at),
            "object" => self.object(object, name, at),
            other => Err(GrammarError::Invalid {
                pointer: at.pointer(),
                message: format!("unknown type `{other}`"),
            }),
        }
    }

    /// An array of `items` (any value without), `minItems` to `maxItems` of them.
    fn array(
        &mut self,
        object: &serde_json::Map<String, Value>,
        name: &str,
        at: &At<'_>,
    ) -> Result<String, GrammarError> {
        let invalid = |message: String| GrammarError::Invalid {
            pointer: at.pointer(),
            message,
        };
        let item = match object.get("items") {
            Some(items) => {
                let rule = format!("{name}-item");
                let body = self.node(items, &rule, &at.child(Step::Items))?;
                self.define(rule, body)
            }
            None => "value".into(),
        };
        let (min, max) = (
            count(object, "minItems", at)?.unwrap_or(0),
            count(object, "maxItems", at)?,
        );
        if max.is_some_and(|max| max < min) {
            return Err(invalid("`maxItems` is less than `minItems`".into()));
        }
        if max == Some(0) {
            return Ok("\"[\" ws \"]\"".into());
        }
        let rest = repeat(min.saturating_sub(1), max.map(|m| m - 1));
        let body = format!("{item} ws (\",\" ws {item} ws){rest}");
        if min == 0 {
            Ok(format!("\"[\" ws ({body})? \"]\""))
        } else {
            Ok(format!("\"[\" ws {body} \"]\""))
        }
    }

    /// An object of its `properties`, the `required` ones first in their order.
    fn object(
        &mut self,
        object: &serde_json::Map<String, Value>,
        name: &str,
        at: &At<'_>,
    ) -> Result<String, GrammarError> {
        let invalid = |message: String| GrammarError::Invalid {
            pointer: at.pointer(),
            message,
        };
        let empty = serde_json::Map::new();
        let properties = match object.get("properties") {
            Some(Value::Object(p)) => p,
            Some(_) => return Err(invalid("`properties` must be an object".into())),
            None => &empty,
        };
        if properties.is_empty() {
            return Ok("object".into());
        }
        let required: Vec<&str> = match object.get("required") {
            Some(Value::Array(r)) => r
                .iter()
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| invalid("`required` entries must be strings".into()))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(invalid("`required` must be an array".into())),
            None => Vec::new(),
        };
        if let Some(missing) = required.iter().find(|r| !properties.contains_key(**r)) {
            return Err(invalid(format!(
                "`required` names `{missing}`, which is not a property"
            )));
        }
        // Required properties come in the order `required` lists them (a JSON object's
        // keys have no order, and the order matters to a model writing them: a
        // condition before its strategy); optional ones follow in `properties` order.
        // A key's place is looked up, not searched for, so sorting stays n log n.
        let mut place: HashMap<&str, usize> = HashMap::with_capacity(required.len());
        for (index, key) in required.iter().enumerate() {
            place.entry(*key).or_insert(index);
        }
        let mut ordered: Vec<(usize, (&String, &Value))> = properties.iter().enumerate().collect();
        ordered.sort_by_key(|(_, (key, _))| place.get(key.as_str()).copied().unwrap_or(usize::MAX));
        let mut pairs = Vec::new();
        for (i, (key, sub)) in ordered {
            let rule = format!("{name}-{}", rule_name(key, i));
            let body = self.node(sub, &rule, &at.child(Step::Property(key)))?;
            let value = self.define(rule, body);
            let pair = format!(
                "{} ws \":\" ws {value} ws",
                literal(&json_text(&Value::String(key.clone())))
            );
            pairs.push((place.contains_key(key.as_str()), pair));
        }
        let (mandatory, optional): (Vec<_>, Vec<_>) = pairs.into_iter().partition(|(r, _)| *r);
        let optional: Vec<String> = optional.into_iter().map(|(_, p)| p).collect();
        let mut body = String::from("\"{\" ws ");
        if mandatory.is_empty() {
            self.optional_chain(name, &optional);
            let _ = write!(body, "({name}-from0)?");
        } else {
            let joined: Vec<&str> = mandatory.iter().map(|(_, p)| p.as_str()).collect();
            body.push_str(&joined.join(" \",\" ws "));
            for p in &optional {
                let _ = write!(body, " (\",\" ws {p})?");
            }
        }
        body.push_str(" \"}\"");
        Ok(body)
    }

    /// Defines `{name}-from0`, an object's properties when all are `optional`: any of them
    /// may come first, and the ones after it keep their order.
    fn optional_chain(&mut self, name: &str, optional: &[String]) {
        // Any optional property may come first; the ones after it keep their order.
        // `-from{k}` is "one or more of properties k.., in order" and `-after{k}`
        // "each of properties k.. or not, in order, each after a comma". Each rule
        // names the next rather than spelling out the rest, so the grammar grows
        // linearly with the properties (spelled out for every possible first
        // property it grew with their square: about 20 GB for 30,000).
        let last = optional.len() - 1;
        for (k, pair) in optional.iter().enumerate() {
            if k == last {
                self.define(format!("{name}-from{k}"), pair.clone());
                if k > 0 {
                    self.define(format!("{name}-after{k}"), format!("(\",\" ws {pair})?"));
                }
            } else {
                let next = k + 1;
                self.define(
                    format!("{name}-from{k}"),
                    format!("{pair} {name}-after{next} | {name}-from{next}"),
                );
                if k > 0 {
                    self.define(
                        format!("{name}-after{k}"),
                        format!("(\",\" ws {pair})? {name}-after{next}"),
                    );
                }
            }
        }
    }

    fn define(&mut self, rule: String, body: String) -> String {
        self.rules.insert(rule.clone(), body);
        rule
    }
}

/// The non-negative integer `key` of `object`, if it has one.
fn count(
    object: &serde_json::Map<String, Value>,
    key: &str,
    at: &At<'_>,
) -> Result<Option<u64>, GrammarError> {
    object
        .get(key)
        .map(|v| {
            v.as_u64().ok_or_else(|| GrammarError::Invalid {
                pointer: at.pointer(),
                message: format!("`{key}` must be a non-negative integer"),
            })
        })
        .transpose()
}

fn repeat(min: u64, max: Option<u64>) -> String {
    match (min, max) {
        (0, None) => "*".into(),
        (1, None) => "+".into(),
        (min, None) => format!("{{{min},}}"),
        (min, Some(max)) => format!("{{{min},{max}}}"),
    }
}

fn rule_name(key: &str, index: usize) -> String {
    let clean: String = key
        .chars()
        .take(RULE_KEY_CHARS)
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    format!("p{index}-{}", clean.trim_matches('-'))
}

fn json_text(value: &Value) -> String {
    serde_json::to_string(value).expect("JSON values always serialize")
}

/// A GBNF string literal matching `text` exactly.
fn literal(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
#[path = "grammar_tests.rs"]
mod tests;
