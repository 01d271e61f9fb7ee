//! Bounds on the JSON schemas a client sends: `response_format.json_schema.schema` and each
//! tool's `function.parameters`. Anyone who can reach the server sends them, and llama.cpp
//! upstreams turn them into a grammar on the model thread, so a request whose schemas are out of
//! bounds is refused with a 400 while it is read, before anything reaches a model. Each bound
//! is far above what applications send (structured outputs and tool parameters have tens of
//! properties, a few levels deep) and at or above OpenAI's own limits where it publishes one,
//! but for the count of schemas: OpenAI takes 5,000 properties, Gym 2,000, because with llama.cpp
//! each property that may come next costs sampling time at every token.

use std::fmt::Write as _;

use serde_json::Value;

/// Deepest nesting of schemas (a property's schema, an array's `items`, an `anyOf` option each
/// go one level down) under the root. OpenAI allows 10 levels; the grammar builder recurses once
/// per level.
pub const MAX_SCHEMA_DEPTH: usize = 32;
/// Most schemas nested in one root schema (every property, `items`, `anyOf`/`oneOf`/`allOf`
/// option, `$defs` entry, …). The grammar grows with them, and llama.cpp's sampler checks every
/// property that may come next at each token, so this bounds both.
pub const MAX_SCHEMA_NODES: usize = 2_000;
/// Most schemas nested in all of a request's tools together: 128 tools (the most OpenAI allows)
/// of about 80 each. The tools share one grammar.
pub const MAX_TOOLS_SCHEMA_NODES: usize = 10_000;
/// Most values in one `enum`; OpenAI allows 1,000 in a whole schema. Each value is an
/// alternative the sampler checks at each token.
pub const MAX_ENUM_VALUES: usize = 1_000;

/// A schema over one of the bounds; the message names where (in the request's own terms), what
/// was found and the bound.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SchemaLimitError {
    #[error("{at}: schemas nested {found} levels deep, over the limit of {limit}")]
    Depth {
        at: String,
        found: usize,
        limit: usize,
    },
    #[error(
        "{at}: {found} nested schemas (properties, items, anyOf options, …), over the limit of {limit}"
    )]
    Nodes {
        at: String,
        found: usize,
        limit: usize,
    },
    #[error("{at}: {found} values, over the limit of {limit}")]
    EnumValues {
        at: String,
        found: usize,
        limit: usize,
    },
}

/// Checks one root schema found at `root` (`response_format.json_schema.schema`,
/// `tools[3].function.parameters`) against the bounds; returns how many schemas it nests.
pub fn check(schema: &Value, root: &str) -> Result<usize, SchemaLimitError> {
    let mut walk = Walk {
        root,
        path: Vec::new(),
        nodes: 0,
        deepest: None,
        enum_over: None,
    };
    walk.schema(schema);
    if let Some((found, at)) = walk.deepest {
        return Err(SchemaLimitError::Depth {
            at,
            found,
            limit: MAX_SCHEMA_DEPTH,
        });
    }
    if walk.nodes > MAX_SCHEMA_NODES {
        return Err(SchemaLimitError::Nodes {
            at: root.to_owned(),
            found: walk.nodes,
            limit: MAX_SCHEMA_NODES,
        });
    }
    if let Some((found, at)) = walk.enum_over {
        return Err(SchemaLimitError::EnumValues {
            at,
            found,
            limit: MAX_ENUM_VALUES,
        });
    }
    Ok(walk.nodes)
}

/// Checks every tool's parameter schema (`(index, schema)`), one by one and together.
pub fn check_tools<'a>(
    schemas: impl IntoIterator<Item = (usize, &'a Value)>,
) -> Result<(), SchemaLimitError> {
    let mut total = 0;
    for (index, schema) in schemas {
        total += check(schema, &format!("tools[{index}].function.parameters"))?;
    }
    if total > MAX_TOOLS_SCHEMA_NODES {
        return Err(SchemaLimitError::Nodes {
            at: "tools[*].function.parameters together".into(),
            found: total,
            limit: MAX_TOOLS_SCHEMA_NODES,
        });
    }
    Ok(())
}

/// One step from a schema to a schema nested in it.
#[derive(Clone, Copy)]
enum Step<'a> {
    /// `properties`, `$defs`, …: a keyword whose value maps names to schemas.
    Named(&'static str, &'a str),
    /// `items`, `not`, …: a keyword whose value is one schema.
    Keyword(&'static str),
    /// `anyOf`, `prefixItems`, …: a keyword whose value lists schemas.
    Listed(&'static str, usize),
}

/// Keywords whose value maps names to schemas.
const NAMED: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];
/// Keywords whose value is a schema (`items` may also list schemas, in older drafts).
const SINGLE: &[&str] = &[
    "items",
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];
/// Keywords whose value lists schemas.
const LISTED: &[&str] = &["anyOf", "oneOf", "allOf", "prefixItems", "items"];

/// One pass over a schema. The path of the schema being visited is kept as steps and spelled
/// out only for an error, so the walk costs the same for long property names as for short ones.
struct Walk<'a> {
    root: &'a str,
    path: Vec<Step<'a>>,
    nodes: usize,
    /// The first schema nested deeper than the bound: its depth and where.
    deepest: Option<(usize, String)>,
    /// The first `enum` over the bound: its size and where.
    enum_over: Option<(usize, String)>,
}

impl<'a> Walk<'a> {
    fn schema(&mut self, schema: &'a Value) {
        let Value::Object(map) = schema else {
            // `true`/`false` schemas nest nothing; anything else is for the grammar (or the
            // upstream) to refuse.
            return;
        };
        if self.path.len() > MAX_SCHEMA_DEPTH {
            // Nothing below is walked: the request is refused anyway, and this keeps the walk's
            // own recursion bounded whatever it is given.
            if self.deepest.is_none() {
                self.deepest = Some((self.path.len(), self.spell(None)));
            }
            return;
        }
        if let Some(Value::Array(values)) = map.get("enum")
            && values.len() > MAX_ENUM_VALUES
            && self.enum_over.is_none()
        {
            self.enum_over = Some((values.len(), self.spell(Some(".enum"))));
        }
        for &keyword in NAMED {
            if let Some(Value::Object(named)) = map.get(keyword) {
                for (name, sub) in named {
                    self.nested(Step::Named(keyword, name), sub);
                }
            }
        }
        for &keyword in SINGLE {
            if let Some(sub @ (Value::Object(_) | Value::Bool(_))) = map.get(keyword) {
                self.nested(Step::Keyword(keyword), sub);
            }
        }
        for &keyword in LISTED {
            if let Some(Value::Array(list)) = map.get(keyword) {
                for (index, sub) in list.iter().enumerate() {
                    self.nested(Step::Listed(keyword, index), sub);
                }
            }
        }
    }

    fn nested(&mut self, step: Step<'a>, sub: &'a Value) {
        self.nodes += 1;
        self.path.push(step);
        self.schema(sub);
        self.path.pop();
    }

    /// The current path in the request's terms: `tools[0].function.parameters.properties.a`.
    fn spell(&self, suffix: Option<&str>) -> String {
        let mut out = self.root.to_owned();
        for step in &self.path {
            let _ = match step {
                Step::Named(keyword, name) => {
                    write!(out, ".{keyword}{}", member(name))
                }
                Step::Keyword(keyword) => write!(out, ".{keyword}"),
                Step::Listed(keyword, index) => write!(out, ".{keyword}[{index}]"),
            };
        }
        out.push_str(suffix.unwrap_or_default());
        out
    }
}

/// `.name` for a plain name, else `["name"]` (JSON-quoted, cut after 64 characters so one
/// absurd name cannot fill the error).
fn member(name: &str) -> String {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '$');
    if plain {
        return format!(".{name}");
    }
    let mut cut: String = name.chars().take(64).collect();
    if cut.len() < name.len() {
        cut.push('…');
    }
    format!("[{}]", Value::String(cut))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn properties(count: usize) -> Value {
        let properties: serde_json::Map<String, Value> = (0..count)
            .map(|i| (format!("p{i}"), json!({"type": "integer"})))
            .collect();
        json!({"type": "object", "properties": properties})
    }

    #[test]
    fn an_ordinary_schema_passes_and_counts_its_nested_schemas() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
                "when": {"anyOf": [{"type": "string"}, {"type": "null"}]}
            },
            "required": ["name"],
            "additionalProperties": false
        });
        // name, tags, tags.items, when, its two options, additionalProperties.
        assert_eq!(check(&schema, "x"), Ok(7));
        assert_eq!(
            check(&properties(MAX_SCHEMA_NODES), "x"),
            Ok(MAX_SCHEMA_NODES)
        );
    }

    #[test]
    fn too_many_properties_are_named_with_the_count_and_place() {
        let error = check(&properties(100_000), "response_format.json_schema.schema").unwrap_err();
        assert_eq!(
            error.to_string(),
            "response_format.json_schema.schema: 100000 nested schemas (properties, items, \
             anyOf options, …), over the limit of 2000"
        );
        // Nested schemas anywhere count: in `$defs`, in options, in array items.
        let spread = json!({
            "$defs": {"a": properties(700)},
            "anyOf": [properties(700)],
            "items": properties(700),
        });
        assert!(matches!(
            check(&spread, "x"),
            Err(SchemaLimitError::Nodes { found: 2_103, .. })
        ));
    }

    #[test]
    fn deep_nesting_is_named_at_the_first_place_over_the_limit() {
        let mut deep = json!({"type": "integer"});
        for _ in 0..100 {
            deep = json!({"type": "object", "properties": {"a": deep}});
        }
        let error = check(&deep, "tools[2].function.parameters").unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "tools[2].function.parameters{}: schemas nested 33 levels deep, over the limit of 32",
                ".properties.a".repeat(33)
            )
        );
        let mut items = json!({});
        for _ in 0..MAX_SCHEMA_DEPTH {
            items = json!({"items": [items]});
        }
        assert!(check(&items, "x").is_ok());
        let error = check(&json!({"items": [items]}), "x").unwrap_err();
        assert!(
            error.to_string().starts_with("x.items[0].items[0]."),
            "{error}"
        );
    }

    #[test]
    fn a_huge_enum_is_named_by_its_path() {
        let values: Vec<u32> = (0..5_000).collect();
        let schema = json!({"properties": {"odd key": {"enum": values}}});
        assert_eq!(
            check(&schema, "response_format.json_schema.schema")
                .unwrap_err()
                .to_string(),
            "response_format.json_schema.schema.properties[\"odd key\"].enum: 5000 values, \
             over the limit of 1000"
        );
    }

    #[test]
    fn tools_are_bounded_one_by_one_and_together() {
        let fine = properties(100);
        let big = properties(MAX_SCHEMA_NODES + 1);
        let error = check_tools([(0, &fine), (1, &big)]).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("tools[1].function.parameters: 2001 nested schemas"),
            "{error}"
        );
        let most = properties(MAX_SCHEMA_NODES);
        assert!(check_tools((0..5).map(|i| (i, &most))).is_ok());
        let error = check_tools((0..6).map(|i| (i, &most))).unwrap_err();
        assert_eq!(
            error,
            SchemaLimitError::Nodes {
                at: "tools[*].function.parameters together".into(),
                found: 12_000,
                limit: MAX_TOOLS_SCHEMA_NODES,
            }
        );
    }

    #[test]
    fn long_names_are_cut_in_messages() {
        let name = "x".repeat(100_000);
        let mut inner = serde_json::Map::new();
        inner.insert(name, json!({"enum": vec![0; 2_000]}));
        let schema = json!({"properties": inner});
        let message = check(&schema, "r").unwrap_err().to_string();
        assert!(message.len() < 200, "{message}");
        assert!(message.contains("xxx…\"].enum: 2000 values"), "{message}");
    }
}
