//! Tools served by Model Context Protocol servers (client), and Gym's own tools served over MCP
//! (server), both through `rmcp`.
//!
//! A server's tools keep the names the server gives them (models see natural names such as
//! `search`, not `server__search`); a name that two servers, or a server and a built-in tool,
//! share is refused when the toolbox is built, so there is never a silent shadowing.
//!
//! Results: the text parts of a `tools/call` result are joined with newlines; a text resource
//! contributes its text; images, audio, binary resources and resource links are replaced by a
//! one-line note (the model reads text only); with no content, the structured content is shown as
//! JSON. A result with `isError: true` becomes a failed call whose message is that text.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ResourceContents, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;

use super::{Tool, ToolError, Toolbox};
use crate::backend::{ToolCall, ToolSpec};

/// Where an MCP server is.
#[derive(Debug, Clone, PartialEq)]
pub enum McpEndpoint {
    /// A command started as a child process speaking MCP on its stdin and stdout.
    Stdio { program: String, args: Vec<String> },
    /// A streamable-HTTP endpoint, e.g. `http://127.0.0.1:8000/mcp`.
    Http { url: String },
}

/// A named MCP server (`--mcp NAME=…`).
#[derive(Debug, Clone, PartialEq)]
pub struct McpServer {
    pub name: String,
    pub endpoint: McpEndpoint,
}

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("`{0}` is not NAME=COMMAND ARGS… nor NAME=http(s)://…")]
    Parse(String),
    #[error("MCP server `{server}`: {message}")]
    Server { server: String, message: String },
}

impl std::str::FromStr for McpServer {
    type Err = McpError;

    /// `NAME=COMMAND ARGS…` (split at whitespace; no shell quoting) or `NAME=http(s)://URL`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let parse = || McpError::Parse(text.to_string());
        let (name, target) = text.split_once('=').ok_or_else(parse)?;
        let (name, target) = (name.trim(), target.trim());
        if name.is_empty()
            || name.contains(|c: char| c.is_whitespace() || c == ',')
            || target.is_empty()
        {
            return Err(parse());
        }
        let endpoint = if target.starts_with("http://") || target.starts_with("https://") {
            McpEndpoint::Http {
                url: target.to_string(),
            }
        } else {
            let mut words = target.split_whitespace().map(str::to_string);
            let program = words.next().ok_or_else(parse)?;
            McpEndpoint::Stdio {
                program,
                args: words.collect(),
            }
        };
        Ok(Self {
            name: name.to_string(),
            endpoint,
        })
    }
}

type Client = RunningService<RoleClient, ()>;

/// Connects to `server` and returns each of its tools as a [`Tool`]. The connection lives as long
/// as any of the tools (a stdio server is stopped when the last one is dropped).
pub async fn connect(
    server: &McpServer,
    timeout: Duration,
) -> Result<Vec<Arc<dyn Tool>>, McpError> {
    let failed = |message: String| McpError::Server {
        server: server.name.clone(),
        message,
    };
    let session = async {
        let client: Client = match &server.endpoint {
            McpEndpoint::Stdio { program, args } => {
                let mut command = tokio::process::Command::new(program);
                command.args(args);
                let transport = rmcp::transport::TokioChildProcess::new(command)
                    .map_err(|e| failed(format!("cannot start `{program}`: {e}")))?;
                ().serve(transport)
                    .await
                    .map_err(|e| failed(format!("initialization failed: {e}")))?
            }
            McpEndpoint::Http { url } => {
                // reqwest is built without a TLS provider of its own (as for the OpenAI backend);
                // an error only means one is already installed.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let transport =
                    rmcp::transport::StreamableHttpClientTransport::from_uri(url.as_str());
                ().serve(transport)
                    .await
                    .map_err(|e| failed(format!("cannot connect to {url}: {e}")))?
            }
        };
        let tools = client
            .list_all_tools()
            .await
            .map_err(|e| failed(format!("tools/list failed: {e}")))?;
        Ok::<_, McpError>((client, tools))
    };
    let (client, tools) = tokio::time::timeout(timeout, session)
        .await
        .map_err(|_| failed(format!("no answer within {:.0} s", timeout.as_secs_f64())))??;
    let client = Arc::new(client);
    Ok(tools
        .into_iter()
        .map(|tool| {
            let spec = ToolSpec {
                name: tool.name.to_string(),
                description: tool.description.as_deref().unwrap_or_default().to_string(),
                parameters: Value::Object((*tool.input_schema).clone()),
            };
            Arc::new(McpTool {
                spec,
                server: server.name.clone(),
                client: client.clone(),
            }) as Arc<dyn Tool>
        })
        .collect())
}

/// One tool of a connected MCP server.
struct McpTool {
    spec: ToolSpec,
    server: String,
    client: Arc<Client>,
}

impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: Value) -> BoxFuture<'_, Result<String, ToolError>> {
        Box::pin(async move {
            let failed = |message: String| ToolError::Failed {
                tool: self.spec.name.clone(),
                message,
            };
            let Value::Object(arguments) = arguments else {
                return Err(failed("arguments must be a JSON object".into()));
            };
            let request =
                CallToolRequestParams::new(self.spec.name.clone()).with_arguments(arguments);
            let result = self
                .client
                .call_tool(request)
                .await
                .map_err(|e| failed(format!("MCP server `{}`: {e}", self.server)))?;
            let text = result_text(&result);
            if result.is_error == Some(true) {
                Err(failed(text))
            } else {
                Ok(text)
            }
        })
    }
}

/// A tool as Gym's MCP servers list it (`gym tools mcp-serve` and the library server): a
/// parameters schema that is not a JSON object is listed as `{}`.
pub fn listed_tool(
    name: impl Into<Cow<'static, str>>,
    description: String,
    parameters: Value,
) -> rmcp::model::Tool {
    let schema = match parameters {
        Value::Object(map) => map,
        _ => Default::default(),
    };
    rmcp::model::Tool::new(name, Cow::Owned(description), Arc::new(schema))
}

/// The text of a `tools/call` result, as the module documentation describes.
pub fn result_text(result: &CallToolResult) -> String {
    let parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => format!("[image ({}) omitted]", image.mime_type),
            ContentBlock::Audio(audio) => format!("[audio ({}) omitted]", audio.mime_type),
            ContentBlock::Resource(embedded) => match &embedded.resource {
                ResourceContents::TextResourceContents { text, .. } => text.clone(),
                ResourceContents::BlobResourceContents { uri, .. } => {
                    format!("[binary resource {uri} omitted]")
                }
                _ => "[resource omitted]".into(),
            },
            ContentBlock::ResourceLink(link) => format!("[resource link {}]", link.uri),
            _ => "[content omitted]".into(),
        })
        .collect();
    match (&result.structured_content, parts.is_empty()) {
        (Some(structured), true) => structured.to_string(),
        _ => parts.join("\n"),
    }
}

/// Serves a toolbox over MCP: `tools/list` gives its specs, `tools/call` runs
/// [`Toolbox::call`], whose failed observations come back with `isError: true`.
#[derive(Clone)]
pub struct ToolboxServer {
    toolbox: Toolbox,
}

impl ToolboxServer {
    pub fn new(toolbox: Toolbox) -> Self {
        Self { toolbox }
    }

    /// Serves on this process's stdin and stdout until the client disconnects.
    pub async fn serve_stdio(self) -> Result<(), McpError> {
        let failed = |message: String| McpError::Server {
            server: "gym".into(),
            message,
        };
        let running = self
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| failed(format!("initialization failed: {e}")))?;
        running.waiting().await.map_err(|e| failed(e.to_string()))?;
        Ok(())
    }
}

impl ServerHandler for ToolboxServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("gym", env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .toolbox
            .specs()
            .into_iter()
            .map(|spec| listed_tool(spec.name, spec.description, spec.parameters))
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.map(Value::Object).unwrap_or(Value::Null);
        let call = ToolCall {
            id: "mcp".into(),
            name: request.name.to_string(),
            arguments: if arguments.is_null() {
                String::new()
            } else {
                arguments.to_string()
            },
        };
        let observation = self.toolbox.call(&call).await;
        let content = vec![ContentBlock::text(observation.content)];
        Ok(if observation.ok {
            CallToolResult::success(content)
        } else {
            CallToolResult::error(content)
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_arguments_parse() {
        let stdio: McpServer = "gym=gym tools mcp-serve --tools calc".parse().unwrap();
        assert_eq!(stdio.name, "gym");
        assert_eq!(
            stdio.endpoint,
            McpEndpoint::Stdio {
                program: "gym".into(),
                args: vec![
                    "tools".into(),
                    "mcp-serve".into(),
                    "--tools".into(),
                    "calc".into()
                ]
            }
        );
        let http: McpServer = "web = https://example.org/mcp".parse().unwrap();
        assert_eq!(
            http.endpoint,
            McpEndpoint::Http {
                url: "https://example.org/mcp".into()
            }
        );
        for bad in ["gym", "=cmd", "gym=", "a b=cmd", "gym=   "] {
            assert!(bad.parse::<McpServer>().is_err(), "{bad}");
        }
    }

    #[test]
    fn results_become_text() {
        let mut result = CallToolResult::success(vec![
            ContentBlock::text("first"),
            ContentBlock::image("AAAA", "image/png"),
            ContentBlock::text("second"),
        ]);
        assert_eq!(
            result_text(&result),
            "first\n[image (image/png) omitted]\nsecond"
        );
        result.content.clear();
        result.structured_content = Some(serde_json::json!({"sum": 3}));
        assert_eq!(result_text(&result), r#"{"sum":3}"#);
    }
}
