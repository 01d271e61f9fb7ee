//! OpenAI's tool-calling fields as `gym serve` reads them, for clients that run their own
//! tools: `tools`, `tool_choice` and the `tool_calls` of assistant messages in a request (the
//! `tool_calls` of a reply, whole or as stream fragments, and the tool-name rule are in the
//! shared [`crate::backend::openai::wire`]). Gym passes them through to the upstream unchanged; what it checks is what the upstream would refuse anyway, so the client
//! gets an error naming the field and index instead of an opaque upstream failure.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::error::ApiError;
use super::schema_limits;
use crate::backend::openai::wire::{MAX_TOOL_NAME, valid_tool_name};
use crate::backend::{ToolCall, ToolChoice, ToolSpec};

/// Most tools one request may list, as OpenAI allows.
pub const MAX_TOOLS: usize = 128;

/// Where a wire format keeps a tool's fields: OpenAI's `{"type": "function", "function":
/// {"name", "description", "parameters"}}` or Anthropic's flat `{"name", "description",
/// "input_schema"}`. Both are read by [`read_tools`], so their bounds and errors are one.
pub struct ToolLayout {
    /// Refuses a tool whose `type` the format does not serve (the message names it).
    pub kind: fn(&Value, usize) -> Result<(), String>,
    /// The member holding the tool's fields (`function`), or `None` when they are top-level.
    pub inner: Option<&'static str>,
    /// The member holding the parameters' JSON schema.
    pub schema: &'static str,
    /// The schema of a tool that has none, or `None` when the format requires one.
    pub missing_schema: Option<fn() -> Value>,
}

/// OpenAI's layout: function tools, a missing schema read as no parameters (as OpenAI does).
const OPENAI_TOOLS: ToolLayout = ToolLayout {
    kind: |tool, index| match tool["type"].as_str() {
        Some("function") => Ok(()),
        other => Err(format!(
            "tools[{index}].type is {}; Gym takes `function` tools",
            other.map_or("missing".into(), |t| format!("`{t}`"))
        )),
    },
    inner: Some("function"),
    schema: "parameters",
    missing_schema: Some(|| json!({"type": "object", "properties": {}})),
};

/// The request's `tools`: function tools only.
pub fn tools(list: Vec<Value>) -> Result<Vec<ToolSpec>, ApiError> {
    read_tools(list, &OPENAI_TOOLS)
}

/// A request's `tools` in `layout`: at most [`MAX_TOOLS`], names valid and distinct,
/// descriptions strings, schemas objects within [`schema_limits`]; errors name the field as
/// the format spells it (`tools[2].function.name`, `tools[2].input_schema`).
pub fn read_tools(list: Vec<Value>, layout: &ToolLayout) -> Result<Vec<ToolSpec>, ApiError> {
    let bad = |message: String| ApiError::bad("tools", message);
    if list.len() > MAX_TOOLS {
        return Err(bad(format!(
            "`tools` lists {} tools; at most {MAX_TOOLS} are allowed",
            list.len()
        )));
    }
    let prefix = layout
        .inner
        .map_or(String::new(), |inner| format!("{inner}."));
    let schema_field = format!("{prefix}{}", layout.schema);
    let mut names = HashSet::new();
    let mut specs = Vec::with_capacity(list.len());
    for (index, tool) in list.into_iter().enumerate() {
        (layout.kind)(&tool, index).map_err(bad)?;
        let fields = match layout.inner {
            Some(inner) if !tool[inner].is_object() => {
                return Err(bad(format!("tools[{index}].{inner} is missing")));
            }
            Some(inner) => &tool[inner],
            None => &tool,
        };
        let name = match fields["name"].as_str() {
            None => return Err(bad(format!("tools[{index}].{prefix}name is missing"))),
            Some(name) if !valid_tool_name(name) => {
                return Err(bad(format!(
                    "tools[{index}].{prefix}name `{name}` must be 1 to {MAX_TOOL_NAME} letters, digits, `_` or `-`"
                )));
            }
            Some(name) => name.to_owned(),
        };
        if !names.insert(name.clone()) {
            return Err(bad(format!(
                "tools[{index}].{prefix}name `{name}` is listed twice"
            )));
        }
        let description = match &fields["description"] {
            Value::Null => String::new(),
            Value::String(text) => text.clone(),
            _ => {
                return Err(bad(format!(
                    "tools[{index}].{prefix}description must be a string"
                )));
            }
        };
        let parameters = match (&fields[layout.schema], layout.missing_schema) {
            (Value::Object(schema), _) => Value::Object(schema.clone()),
            (Value::Null, Some(missing)) => missing(),
            (Value::Null, None) => {
                return Err(bad(format!("tools[{index}].{schema_field} is missing")));
            }
            _ => {
                return Err(bad(format!(
                    "tools[{index}].{schema_field} must be a JSON schema object"
                )));
            }
        };
        specs.push(ToolSpec {
            name,
            description,
            parameters,
        });
    }
    schema_limits::check_tools(specs.iter().map(|spec| &spec.parameters).enumerate()).map_err(
        |error| {
            bad(error
                .to_string()
                .replace(".function.parameters", &format!(".{schema_field}")))
        },
    )?;
    Ok(specs)
}

/// The request's `tool_choice`, checked against its tools.
pub fn tool_choice(choice: Option<Value>, tools: &[ToolSpec]) -> Result<ToolChoice, ApiError> {
    let bad = |message: String| ApiError::bad("tool_choice", message);
    let choice = match choice {
        None | Some(Value::Null) => return Ok(ToolChoice::Auto),
        Some(Value::String(word)) => match word.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => {
                return Err(bad(format!(
                    "`tool_choice` is `{other}`; it must be auto, none, required or a function"
                )));
            }
        },
        Some(object) => match object["function"]["name"].as_str() {
            Some(name) if object["type"] == "function" => ToolChoice::Function(name.to_owned()),
            _ => {
                return Err(bad(
                    "`tool_choice` must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\": …}}".into(),
                ));
            }
        },
    };
    match &choice {
        ToolChoice::Required if tools.is_empty() => Err(bad(
            "`tool_choice` is `required` but the request lists no `tools`".into(),
        )),
        ToolChoice::Function(name) if !tools.iter().any(|t| &t.name == name) => Err(bad(format!(
            "`tool_choice` names the function `{name}`, which is not in `tools`"
        ))),
        _ => Ok(choice),
    }
}

/// The `tool_calls` of the assistant message `messages[index]`.
pub fn message_calls(calls: Vec<Value>, index: usize) -> Result<Vec<ToolCall>, ApiError> {
    let bad = |message: String| ApiError::bad("messages", message);
    calls
        .into_iter()
        .enumerate()
        .map(|(call, value)| {
            let at = format!("messages[{index}].tool_calls[{call}]");
            match value["type"].as_str() {
                None | Some("function") => {}
                Some(other) => {
                    return Err(bad(format!(
                        "{at}.type is `{other}`; Gym takes `function` calls"
                    )));
                }
            }
            let id = value["id"]
                .as_str()
                .filter(|id| !id.is_empty())
                .ok_or_else(|| bad(format!("{at}.id is missing")))?;
            let name = value["function"]["name"]
                .as_str()
                .filter(|name| !name.is_empty())
                .ok_or_else(|| bad(format!("{at}.function.name is missing")))?;
            let arguments = match &value["function"]["arguments"] {
                Value::String(text) => text.clone(),
                Value::Null => return Err(bad(format!("{at}.function.arguments is missing"))),
                _ => {
                    return Err(bad(format!(
                        "{at}.function.arguments must be a string of JSON"
                    )));
                }
            };
            Ok(ToolCall {
                id: id.to_owned(),
                name: name.to_owned(),
                arguments,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(error: ApiError) -> String {
        error.to_string()
    }

    #[test]
    fn tools_are_function_tools_with_valid_unique_names() {
        let specs = tools(vec![
            json!({"type": "function", "function": {"name": "calc"}}),
        ])
        .unwrap();
        assert_eq!(
            specs[0].parameters,
            json!({"type": "object", "properties": {}})
        );
        for (bad, expected) in [
            (
                json!({"type": "code_interpreter"}),
                "tools[0].type is `code_interpreter`",
            ),
            (json!({"type": "function"}), "tools[0].function is missing"),
            (
                json!({"type": "function", "function": {}}),
                "tools[0].function.name is missing",
            ),
            (
                json!({"type": "function", "function": {"name": "a b"}}),
                "tools[0].function.name `a b`",
            ),
            (
                json!({"type": "function", "function": {"name": "f", "parameters": []}}),
                "tools[0].function.parameters",
            ),
        ] {
            let error = message(tools(vec![bad]).unwrap_err());
            assert!(error.contains(expected), "{error}");
        }
        let twice = json!({"type": "function", "function": {"name": "f"}});
        let error = message(tools(vec![twice.clone(), twice]).unwrap_err());
        assert!(
            error.contains("tools[1].function.name `f` is listed twice"),
            "{error}"
        );
    }

    #[test]
    fn a_tool_schema_over_a_bound_is_refused_naming_the_tool() {
        let properties: serde_json::Map<String, Value> =
            (0..100_000).map(|i| (format!("p{i}"), json!({}))).collect();
        let error = message(
            tools(vec![
                json!({"type": "function", "function": {"name": "ok"}}),
                json!({"type": "function", "function": {"name": "big", "parameters": {"properties": properties}}}),
            ])
            .unwrap_err(),
        );
        assert!(
            error.starts_with(
                "tools[1].function.parameters: 100000 nested schemas (properties, items, anyOf options, …), over the limit of 2000"
            ),
            "{error}"
        );
    }

    #[test]
    fn tool_choice_must_name_a_listed_tool() {
        let listed = tools(vec![
            json!({"type": "function", "function": {"name": "calc"}}),
        ])
        .unwrap();
        let named = json!({"type": "function", "function": {"name": "calc"}});
        assert_eq!(
            tool_choice(Some(named), &listed).unwrap(),
            ToolChoice::Function("calc".into())
        );
        assert_eq!(tool_choice(None, &[]).unwrap(), ToolChoice::Auto);
        assert_eq!(
            tool_choice(Some(json!("none")), &[]).unwrap(),
            ToolChoice::None
        );
        let other = json!({"type": "function", "function": {"name": "python"}});
        let error = message(tool_choice(Some(other), &listed).unwrap_err());
        assert!(
            error.contains("`python`, which is not in `tools`"),
            "{error}"
        );
        let error = message(tool_choice(Some(json!("required")), &[]).unwrap_err());
        assert!(error.contains("lists no `tools`"), "{error}");
        assert!(tool_choice(Some(json!("sometimes")), &listed).is_err());
    }

    #[test]
    fn message_calls_need_an_id_a_name_and_string_arguments() {
        let good =
            json!({"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}});
        assert_eq!(message_calls(vec![good.clone()], 2).unwrap()[0].id, "c");
        for (bad, expected) in [
            (
                json!({"function": {"name": "f", "arguments": "{}"}}),
                "messages[2].tool_calls[1].id is missing",
            ),
            (
                json!({"id": "d", "function": {"arguments": "{}"}}),
                "messages[2].tool_calls[1].function.name is missing",
            ),
            (
                json!({"id": "d", "function": {"name": "f", "arguments": {}}}),
                "must be a string",
            ),
        ] {
            let error = message(message_calls(vec![good.clone(), bad], 2).unwrap_err());
            assert!(error.contains(expected), "{error}");
        }
    }
}
