//! `--tools` and friends: the tools a command lets the model call. Flatten [`ToolArgs`] into a
//! command's arguments and build the toolbox with [`ToolArgs::toolbox`].

use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use gym::tools::{Toolbox, ToolsConfig, python::PythonConfig};

#[derive(Debug, Clone, Args)]
pub struct ToolArgs {
    /// Tools the model may call, comma-separated: calc (arithmetic), python (sandboxed Python 3),
    /// mcp:NAME (every tool of the MCP server NAME given with --mcp).
    #[arg(long, env = "GYM_TOOLS", value_delimiter = ',', value_name = "TOOL,…")]
    pub tools: Option<Vec<String>>,

    /// An MCP server: `NAME=COMMAND ARGS…` (a child process speaking MCP on stdio; arguments are
    /// split at spaces) or `NAME=http(s)://…` (streamable HTTP). Repeatable.
    #[arg(long = "mcp", value_name = "NAME=SERVER")]
    pub mcp: Vec<String>,

    /// Seconds one tool call may take before it is stopped (and the model told so).
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub tool_timeout: f64,

    /// Memory of one python tool call, in MiB: for all its processes together where a cgroup
    /// can be made; otherwise per process (address space), so a call may hold up to 64 × this
    /// (docs/tools.md).
    #[arg(long, default_value_t = 512, value_name = "MIB")]
    pub python_memory_mb: u64,

    /// Output the python tool keeps (stdout and stderr together); a program that prints more is
    /// stopped.
    #[arg(long, default_value_t = 16384, value_name = "BYTES")]
    pub python_output_bytes: usize,

    /// Model turns per answer that may call tools; the turn after the last must answer.
    #[arg(long, env = "GYM_MAX_TOOL_STEPS", default_value_t = gym::agent::DEFAULT_MAX_STEPS)]
    pub max_tool_steps: usize,

    /// Whether an answer's first turn must call a tool (`required`) or may answer at once
    /// (`auto`). Small models seldom call a tool unless made to.
    #[arg(long, value_enum, default_value_t = FirstTurn::Auto)]
    pub tool_choice: FirstTurn,
}

/// `--tool-choice`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum FirstTurn {
    Auto,
    Required,
}

impl ToolArgs {
    /// The agent of `--tools` (its toolbox, step limit and first turn), or `None` without it.
    pub async fn agent(&self) -> anyhow::Result<Option<gym::agent::Agent>> {
        let Some(toolbox) = self.toolbox().await? else {
            return Ok(None);
        };
        Ok(Some(gym::agent::Agent {
            toolbox,
            max_steps: self.max_tool_steps,
            first_turn: match self.tool_choice {
                FirstTurn::Auto => gym::backend::ToolChoice::Auto,
                FirstTurn::Required => gym::backend::ToolChoice::Required,
            },
        }))
    }

    /// The toolbox of `--tools`, or `None` when `--tools` is not given.
    pub async fn toolbox(&self) -> anyhow::Result<Option<Toolbox>> {
        match &self.tools {
            None => Ok(None),
            Some(names) => Ok(Some(self.build(names).await?)),
        }
    }

    /// The toolbox of `--tools`, or of `defaults` and every `--mcp` server when it is not given.
    pub async fn toolbox_or(&self, defaults: &[&str]) -> anyhow::Result<Toolbox> {
        if let Some(toolbox) = self.toolbox().await? {
            return Ok(toolbox);
        }
        let mut names: Vec<String> = defaults.iter().map(|s| s.to_string()).collect();
        names.extend(
            self.server_names()?
                .into_iter()
                .map(|name| format!("mcp:{name}")),
        );
        self.build(&names).await
    }

    fn config(&self) -> anyhow::Result<ToolsConfig> {
        anyhow::ensure!(
            self.tool_timeout.is_finite() && self.tool_timeout > 0.0,
            "--tool-timeout must be a positive number of seconds"
        );
        anyhow::ensure!(
            self.python_memory_mb >= 16,
            "--python-memory-mb must be at least 16"
        );
        anyhow::ensure!(
            self.python_output_bytes > 0,
            "--python-output-bytes must be positive"
        );
        #[cfg(not(feature = "mcp"))]
        self.server_names()?;
        Ok(ToolsConfig {
            timeout: Duration::from_secs_f64(self.tool_timeout),
            python: PythonConfig {
                memory_mb: self.python_memory_mb,
                output_bytes: self.python_output_bytes,
                ..PythonConfig::default()
            },
            #[cfg(feature = "mcp")]
            mcp: self.servers()?,
        })
    }

    #[cfg(feature = "mcp")]
    fn servers(&self) -> anyhow::Result<Vec<gym::tools::mcp::McpServer>> {
        let mut servers: Vec<gym::tools::mcp::McpServer> = Vec::new();
        for text in &self.mcp {
            let server: gym::tools::mcp::McpServer = text.parse().context("--mcp")?;
            anyhow::ensure!(
                servers.iter().all(|s| s.name != server.name),
                "--mcp: two servers are named `{}`",
                server.name
            );
            servers.push(server);
        }
        Ok(servers)
    }

    #[cfg(feature = "mcp")]
    fn server_names(&self) -> anyhow::Result<Vec<String>> {
        Ok(self.servers()?.into_iter().map(|s| s.name).collect())
    }

    #[cfg(not(feature = "mcp"))]
    fn server_names(&self) -> anyhow::Result<Vec<String>> {
        anyhow::ensure!(
            self.mcp.is_empty(),
            "--mcp needs Gym built with the `mcp` feature"
        );
        Ok(Vec::new())
    }

    async fn build(&self, names: &[String]) -> anyhow::Result<Toolbox> {
        let config = self.config()?;
        gym::tools::from_names(names, &config)
            .await
            .context("--tools")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        tools: ToolArgs,
    }

    #[test]
    fn tools_are_comma_separated() {
        let cli = Cli::parse_from(["gym", "--tools", "calc,python", "--tool-timeout", "2.5"]);
        assert_eq!(
            cli.tools.tools,
            Some(vec!["calc".to_string(), "python".to_string()])
        );
        assert_eq!(
            cli.tools.config().unwrap().timeout,
            Duration::from_millis(2500)
        );
        let none = Cli::parse_from(["gym"]);
        assert_eq!(none.tools.tools, None);
        let bad = Cli::parse_from(["gym", "--tool-timeout", "0"]);
        assert!(bad.tools.config().is_err());
    }

    #[tokio::test]
    async fn no_tools_means_no_toolbox() {
        let cli = Cli::parse_from(["gym"]);
        assert!(cli.tools.toolbox().await.unwrap().is_none());
        let calc = Cli::parse_from(["gym", "--tools", "calc"]);
        assert_eq!(
            calc.tools.toolbox().await.unwrap().unwrap().names(),
            ["calc"]
        );
        let unknown = Cli::parse_from(["gym", "--tools", "calc,sh"]);
        let error = format!("{:#}", unknown.tools.toolbox().await.unwrap_err());
        assert!(error.contains("unknown tool `sh`"), "{error}");
    }
}
