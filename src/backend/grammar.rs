//! JSON schema → llama.cpp GBNF grammar, for the subset of JSON schema that structured outputs
//! use: objects with properties (required and optional), arrays with item bounds, strings with
//! length bounds, numbers, integers, booleans, null, `enum`, `const`, `anyOf`/`oneOf` and type
//! unions. Keywords that would change what is valid but are not supported are refused, so a
//! schema never silently constrains less than it says.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GrammarError {
    #[error("JSON schema at `{pointer}`: unsupported keyword `{keyword}`")]
    Unsupported { pointer: String, keyword: String },
    #[error("JSON schema at `{pointer}`: {message}")]
    Invalid { pointer: String, message: String },
    #[error("llama.cpp rejected the grammar (check its syntax; the start rule must be `root`)")]
    Rejected,
}

/// Whitespace is bounded so a constrained model cannot loop forever on blanks.
const PRIMITIVES: &str = r#"ws ::= [ \t\n]{0,4}
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
    let mut builder = Builder {
        rules: BTreeMap::new(),
    };
    let root = builder.node(schema, "root", "")?;
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
    let mut builder = Builder {
        rules: BTreeMap::new(),
    };
    let mut alternatives = Vec::new();
    for (index, (name, schema)) in tools.iter().enumerate() {
        let rule = format!("tool{index}-args");
        let arguments = match builder.node(schema, &rule, "") {
            Ok(body) => builder.define(rule, body),
            Err(_) => {
                builder.rules.retain(|key, _| !key.starts_with(&rule));
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

struct Builder {
    rules: BTreeMap<String, String>,
}

impl Builder {
    /// Returns a GBNF expression for `schema`, defining helper rules as needed.
    fn node(&mut self, schema: &Value, name: &str, pointer: &str) -> Result<String, GrammarError> {
        let invalid = |message: String| GrammarError::Invalid {
            pointer: pointer.to_string(),
            message,
        };
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
                    pointer: pointer.to_string(),
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
                    let body = self.node(option, &rule, &format!("{pointer}/{key}/{i}"))?;
                    alts.push(self.define(rule, body));
                }
                return Ok(format!("({})", alts.join(" | ")));
            }
        }
        match object.get("type") {
            None if object.contains_key("properties") => {
                self.typed("object", object, name, pointer)
            }
            None => Ok("value".into()),
            Some(Value::String(ty)) => self.typed(ty, object, name, pointer),
            Some(Value::Array(types)) => {
                let mut alts = Vec::new();
                for ty in types {
                    let ty = ty
                        .as_str()
                        .ok_or_else(|| invalid("`type` entries must be strings".into()))?;
                    let rule = format!("{name}-{ty}");
                    let body = self.typed(ty, object, &rule, pointer)?;
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
        pointer: &str,
    ) -> Result<String, GrammarError> {
        let invalid = |message: String| GrammarError::Invalid {
            pointer: pointer.to_string(),
            message,
        };
        let count = |key: &str| -> Result<Option<u64>, GrammarError> {
            object
                .get(key)
                .map(|v| {
                    v.as_u64()
                        .ok_or_else(|| invalid(format!("`{key}` must be a non-negative integer")))
                })
                .transpose()
        };
        match ty {
            "string" => {
                let (min, max) = (count("minLength")?, count("maxLength")?);
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
            "array" => {
                let item = match object.get("items") {
                    Some(items) => {
                        let rule = format!("{name}-item");
                        let body = self.node(items, &rule, &format!("{pointer}/items"))?;
                        self.define(rule, body)
                    }
                    None => "value".into(),
                };
                let (min, max) = (count("minItems")?.unwrap_or(0), count("maxItems")?);
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
            "object" => {
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
                let mut ordered: Vec<(usize, (&String, &Value))> =
                    properties.iter().enumerate().collect();
                ordered.sort_by_key(|(_, (key, _))| {
                    required
                        .iter()
                        .position(|r| r == key)
                        .unwrap_or(required.len())
                });
                let mut pairs = Vec::new();
                for (i, (key, sub)) in ordered {
                    let rule = format!("{name}-{}", rule_name(key, i));
                    let body = self.node(sub, &rule, &format!("{pointer}/properties/{key}"))?;
                    let value = self.define(rule, body);
                    let pair = format!(
                        "{} ws \":\" ws {value} ws",
                        literal(&json_text(&Value::String(key.clone())))
                    );
                    pairs.push((required.contains(&key.as_str()), pair));
                }
                let (mandatory, optional): (Vec<_>, Vec<_>) =
                    pairs.into_iter().partition(|(r, _)| *r);
                let optional: Vec<String> = optional.into_iter().map(|(_, p)| p).collect();
                let mut body = String::from("\"{\" ws ");
                if mandatory.is_empty() {
                    // Any optional property may come first; the ones after it keep their order.
                    let alts: Vec<String> = (0..optional.len())
                        .map(|first| {
                            let tail: String = optional[first + 1..]
                                .iter()
                                .map(|p| format!(" (\",\" ws {p})?"))
                                .collect();
                            format!("{}{tail}", optional[first])
                        })
                        .collect();
                    let _ = write!(body, "({})?", alts.join(" | "));
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
            other => Err(invalid(format!("unknown type `{other}`"))),
        }
    }

    fn define(&mut self, rule: String, body: String) -> String {
        self.rules.insert(rule.clone(), body);
        rule
    }
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
mod tests {
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
}
