//! `propose_change`: its listing (the argument schema, which depends on whether proposals go
//! to a governance vote) and the reading of its `changes`, each bounded.

use serde_json::{Map, Value, json};

use super::args::ArgumentError;
use super::library_tools::{
    MAX_CHANGE_BYTES, MAX_CHANGES, MAX_RATIONALE_CHARS, MAX_TITLE_CHARS, PROPOSE_CHANGE, ToolSpec,
    Writing,
};
use crate::library::Change;

/// Each item of `changes` as a [`Change`], refused by its index.
pub(super) fn parse_changes(items: &[Value]) -> Result<Vec<Change>, ArgumentError> {
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let name = format!("changes[{index}]");
            let bytes = item.to_string().len();
            if bytes > MAX_CHANGE_BYTES {
                return Err(ArgumentError::new(
                    name,
                    format!("{bytes} bytes of JSON; at most {MAX_CHANGE_BYTES} are accepted"),
                ));
            }
            serde_json::from_value(item.clone())
                .map_err(|error| ArgumentError::new(name, error.to_string()))
        })
        .collect()
}

/// `propose_change`'s listing; `object` adds the `library` argument.
pub(super) fn propose_spec(
    writing: &Writing,
    object: impl Fn(Map<String, Value>, Vec<&str>) -> Value,
) -> ToolSpec {
    let change = json!({
        "type": "object",
        "description": "{\"op\": \"add\", \"text\": …, \"domain\"?, \"confidence\"?}, \
            {\"op\": \"update\", \"id\": \"E0007\", \"text\"?, \"domain\"?, \"confidence\"?} \
            or {\"op\": \"delete\", \"id\": \"E0007\", \"reason\"?}.",
        "properties": {
            "op": {"type": "string", "enum": ["add", "update", "delete"]},
            "id": {"type": "string", "pattern": "^[Ee][0-9]{4,}$"},
            "text": {"type": "string", "description": "One sentence: \"When <condition>, <strategy>.\""},
            "domain": {"type": "string", "maxLength": 64},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "reason": {"type": "string"},
        },
        "required": ["op"],
    });
    let mut properties = Map::new();
    properties.insert(
        "changes".into(),
        json!({"type": "array", "minItems": 1, "maxItems": MAX_CHANGES, "items": change,
            "description": "Applied together as one new version, or not at all."}),
    );
    let description = if writing.gov_dir.is_some() {
        properties.insert(
            "title".into(),
            json!({"type": "string", "maxLength": MAX_TITLE_CHARS,
                "description": "One-line title of the proposal (default: a count of the changes)."}),
        );
        properties.insert(
            "rationale".into(),
            json!({"type": "string", "maxLength": MAX_RATIONALE_CHARS,
                "description": "Why the change is good, for the voters."}),
        );
        "Propose changes to a library for a governance vote: they are committed as a new \
         working version and a proposal to make that version governed is recorded in the \
         ledger; voters accept or reject it."
    } else {
        "Change a library: add, update or delete experiences, committed together as one new \
         version (recorded as a manual edit)."
    };
    ToolSpec {
        name: PROPOSE_CHANGE,
        description: description.into(),
        schema: object(properties, vec!["changes"]),
        read_only: false,
    }
}
