//! Builds a [`Toolbox`] from tool names (`calc`, `python`, `mcp:NAME`), for the CLI's `--tools`
//! and for any other code that needs one.

use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "mcp")]
use super::mcp::{self, McpServer};
use super::{Tool, ToolError, Toolbox, calc::Calc, python::Python, python::PythonConfig};

/// The built-in tools, by name.
pub const BUILTIN: &[&str] = &["calc", "python"];

/// What a toolbox is built with.
#[derive(Debug, Clone)]
pub struct ToolsConfig {
    /// The toolbox's timeout for one call (also the python tool's wall-clock limit).
    pub timeout: Duration,
    /// Limits of the python tool (its `timeout` is replaced by the one above).
    pub python: PythonConfig,
    /// The MCP servers `mcp:NAME` may name.
    #[cfg(feature = "mcp")]
    pub mcp: Vec<McpServer>,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            python: PythonConfig::default(),
            #[cfg(feature = "mcp")]
            mcp: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(
        "unknown tool `{0}`; the tools are calc, python and mcp:NAME (a server given with --mcp NAME=…)"
    )]
    UnknownTool(String),
    #[error("`mcp:{name}` names no MCP server; the servers given with --mcp are: {known}")]
    UnknownServer { name: String, known: String },
    #[error("two tools are named `{name}` (from {first} and from {second}); leave one of them out")]
    Duplicate {
        name: String,
        first: String,
        second: String,
    },
    #[error("the python tool cannot be used on this machine: {0}")]
    Python(ToolError),
    #[cfg(feature = "mcp")]
    #[error(transparent)]
    Mcp(#[from] mcp::McpError),
    #[error("`mcp:{0}` needs Gym built with the `mcp` feature")]
    NoMcp(String),
}

/// The toolbox of `names`, in that order (`mcp:NAME` contributes all tools of that server).
/// Fails on an unknown name, an MCP server that cannot be reached or listed, a python sandbox
/// that cannot be set up, or two tools with one name.
pub async fn from_names<S: AsRef<str>>(
    names: &[S],
    config: &ToolsConfig,
) -> Result<Toolbox, BuildError> {
    let mut tools: Vec<(String, Arc<dyn Tool>)> = Vec::new();
    for name in names
        .iter()
        .map(|n| n.as_ref().trim())
        .filter(|n| !n.is_empty())
    {
        let found: Vec<Arc<dyn Tool>> = match name {
            "calc" => vec![Arc::new(Calc::default())],
            "python" => {
                let python = PythonConfig {
                    timeout: config.timeout,
                    ..config.python.clone()
                };
                vec![Arc::new(
                    Python::new(python).await.map_err(BuildError::Python)?,
                )]
            }
            _ => match name.strip_prefix("mcp:") {
                Some(server) => mcp_tools(server, config).await?,
                None => return Err(BuildError::UnknownTool(name.to_string())),
            },
        };
        for tool in found {
            let tool_name = tool.spec().name.clone();
            if let Some((first, _)) = tools.iter().find(|(_, t)| t.spec().name == tool_name) {
                return Err(BuildError::Duplicate {
                    name: tool_name,
                    first: first.clone(),
                    second: name.to_string(),
                });
            }
            tools.push((name.to_string(), tool));
        }
    }
    Ok(Toolbox::new(
        tools.into_iter().map(|(_, t)| t).collect(),
        config.timeout,
    ))
}

#[cfg(feature = "mcp")]
async fn mcp_tools(name: &str, config: &ToolsConfig) -> Result<Vec<Arc<dyn Tool>>, BuildError> {
    let Some(server) = config.mcp.iter().find(|s| s.name == name) else {
        let known: Vec<&str> = config.mcp.iter().map(|s| s.name.as_str()).collect();
        return Err(BuildError::UnknownServer {
            name: name.to_string(),
            known: if known.is_empty() {
                "none".into()
            } else {
                known.join(", ")
            },
        });
    };
    // Starting a server (an `npx` download, a Python import) can take longer than one call.
    let connect_timeout = config.timeout.max(Duration::from_secs(30));
    Ok(mcp::connect(server, connect_timeout).await?)
}

#[cfg(not(feature = "mcp"))]
async fn mcp_tools(name: &str, _config: &ToolsConfig) -> Result<Vec<Arc<dyn Tool>>, BuildError> {
    Err(BuildError::NoMcp(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_are_checked() {
        let config = ToolsConfig::default();
        let calc = from_names(&["calc"], &config).await.unwrap();
        assert_eq!(calc.names(), ["calc"]);
        assert!(from_names::<&str>(&[], &config).await.unwrap().is_empty());
        let unknown = from_names(&["calc", "shell"], &config).await.unwrap_err();
        assert!(
            unknown.to_string().starts_with("unknown tool `shell`"),
            "{unknown}"
        );
        let twice = from_names(&["calc", "calc"], &config).await.unwrap_err();
        assert_eq!(
            twice.to_string(),
            "two tools are named `calc` (from calc and from calc); leave one of them out"
        );
        let server = from_names(&["mcp:web"], &config)
            .await
            .unwrap_err()
            .to_string();
        #[cfg(feature = "mcp")]
        assert_eq!(
            server,
            "`mcp:web` names no MCP server; the servers given with --mcp are: none"
        );
        #[cfg(not(feature = "mcp"))]
        assert_eq!(server, "`mcp:web` needs Gym built with the `mcp` feature");
    }
}
