//! Tools an agent may call during a rollout or a served request: one small seam, [`Tool`], and
//! a [`Toolbox`] that finds a tool by name, parses and checks the model's arguments, enforces a
//! timeout, and turns every failure into an [`Observation`] the model can read, so a bad call
//! never ends a trajectory.

pub mod calc;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod python;
mod python_sandbox;
mod select;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::backend::{ToolCall, ToolSpec};

pub use select::{BUILTIN, BuildError, ToolsConfig, from_names};

/// Why a tool call failed. The message is shown to the model, so it says what to fix.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ToolError {
    #[error("unknown tool `{name}`; the tools are: {known}")]
    Unknown { name: String, known: String },
    #[error("arguments of `{tool}` are not valid: {message}")]
    InvalidArguments { tool: String, message: String },
    #[error("`{tool}` failed: {message}")]
    Failed { tool: String, message: String },
    #[error("`{tool}` did not finish within {seconds:.1} s")]
    TimedOut { tool: String, seconds: f64 },
}

/// A function an agent can call.
pub trait Tool: Send + Sync {
    /// Name, description and JSON schema of the arguments, as the model sees them.
    fn spec(&self) -> &ToolSpec;

    /// Runs the tool on arguments that parsed as a JSON object. The result is text for the model.
    /// Implementations that start processes must stop them when the future is dropped (the
    /// [`Toolbox`] drops it at its timeout).
    fn call(&self, arguments: Value) -> BoxFuture<'_, Result<String, ToolError>>;
}

/// What a tool call gave back, as recorded in a trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// The call ran and returned; `false` means `content` is the error shown to the model.
    pub ok: bool,
    pub content: String,
    pub millis: u64,
}

/// Results longer than this are cut (with a note) so one call cannot flood the prompt.
pub const MAX_OBSERVATION_CHARS: usize = 2000;

/// The tools of a run or request, by name.
#[derive(Clone)]
pub struct Toolbox {
    tools: Vec<Arc<dyn Tool>>,
    timeout: Duration,
}

impl Toolbox {
    pub fn new(tools: Vec<Arc<dyn Tool>>, timeout: Duration) -> Self {
        Self { tools, timeout }
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The tools as a backend request lists them.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|t| t.spec().clone()).collect()
    }

    pub fn names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.spec().name.clone()).collect()
    }

    /// The tools named in `names`, in that order; an unknown name is an error that lists the
    /// known ones.
    pub fn only(&self, names: &[&str]) -> Result<Toolbox, String> {
        let mut tools = Vec::with_capacity(names.len());
        for name in names {
            let tool = self
                .tools
                .iter()
                .find(|t| t.spec().name == *name)
                .ok_or_else(|| {
                    format!(
                        "no tool `{name}`; the tools are: {}",
                        self.names().join(", ")
                    )
                })?;
            if !tools.iter().any(|t: &Arc<dyn Tool>| t.spec().name == *name) {
                tools.push(Arc::clone(tool));
            }
        }
        Ok(Toolbox::new(tools, self.timeout))
    }

    /// Runs `call`. Never fails: an unknown tool, arguments that are not a JSON object, a tool
    /// error or a timeout become an observation with `ok: false` that says what went wrong.
    pub async fn call(&self, call: &ToolCall) -> Observation {
        let started = Instant::now();
        let result = self.run(call).await;
        let millis = started.elapsed().as_millis() as u64;
        match result {
            Ok(content) => Observation {
                ok: true,
                content: clip(content),
                millis,
            },
            Err(error) => Observation {
                ok: false,
                content: clip(format!("error: {error}")),
                millis,
            },
        }
    }

    async fn run(&self, call: &ToolCall) -> Result<String, ToolError> {
        let Some(tool) = self.tools.iter().find(|t| t.spec().name == call.name) else {
            return Err(ToolError::Unknown {
                name: call.name.clone(),
                known: self.names().join(", "),
            });
        };
        let arguments = parse_arguments(&call.name, &call.arguments)?;
        match tokio::time::timeout(self.timeout, tool.call(arguments)).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::TimedOut {
                tool: call.name.clone(),
                seconds: self.timeout.as_secs_f64(),
            }),
        }
    }
}

impl std::fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolbox")
            .field("tools", &self.names())
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The model's argument text as a JSON object (an empty text is `{}`).
fn parse_arguments(tool: &str, text: &str) -> Result<Value, ToolError> {
    let invalid = |message: String| ToolError::InvalidArguments {
        tool: tool.to_string(),
        message,
    };
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(other) => Err(invalid(format!(
            "expected a JSON object, got {}",
            crate::data::json_kind(&other)
        ))),
        Err(error) => Err(invalid(format!("not JSON ({error})"))),
    }
}

fn clip(mut text: String) -> String {
    if text.chars().count() > MAX_OBSERVATION_CHARS {
        let cut = text
            .char_indices()
            .nth(MAX_OBSERVATION_CHARS)
            .map_or(text.len(), |(i, _)| i);
        let dropped = text.len() - cut;
        text.truncate(cut);
        text.push_str(&format!("\n[… {dropped} more bytes cut]"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Echo(ToolSpec, Duration);

    impl Tool for Echo {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        fn call(&self, arguments: Value) -> BoxFuture<'_, Result<String, ToolError>> {
            Box::pin(async move {
                tokio::time::sleep(self.1).await;
                Ok(arguments.to_string())
            })
        }
    }

    fn toolbox(delay: Duration) -> Toolbox {
        let spec = ToolSpec {
            name: "echo".into(),
            description: "Echoes its arguments.".into(),
            parameters: json!({"type": "object"}),
        };
        Toolbox::new(
            vec![Arc::new(Echo(spec, delay))],
            Duration::from_millis(200),
        )
    }

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[tokio::test]
    async fn failures_become_observations_the_model_can_read() {
        let tools = toolbox(Duration::ZERO);
        let ok = tools.call(&call("echo", r#"{"a": 1}"#)).await;
        assert!(ok.ok);
        assert_eq!(ok.content, r#"{"a":1}"#);
        let unknown = tools.call(&call("calc", "{}")).await;
        assert!(!unknown.ok);
        assert_eq!(
            unknown.content,
            "error: unknown tool `calc`; the tools are: echo"
        );
        let not_object = tools.call(&call("echo", "[1]")).await;
        assert!(
            not_object
                .content
                .contains("expected a JSON object, got an array")
        );
        let not_json = tools.call(&call("echo", "{a: 1")).await;
        assert!(
            not_json.content.contains("not JSON"),
            "{}",
            not_json.content
        );
        assert!(tools.call(&call("echo", "  ")).await.ok);
    }

    #[tokio::test]
    async fn a_slow_tool_times_out() {
        let tools = toolbox(Duration::from_secs(5));
        let slow = tools.call(&call("echo", "{}")).await;
        assert!(!slow.ok);
        assert_eq!(slow.content, "error: `echo` did not finish within 0.2 s");
        assert!(slow.millis < 2000);
    }

    #[test]
    fn long_results_are_cut() {
        let text = clip("é".repeat(MAX_OBSERVATION_CHARS + 10));
        assert!(text.starts_with(&"é".repeat(MAX_OBSERVATION_CHARS)));
        assert!(text.ends_with("[… 20 more bytes cut]"));
    }
}
