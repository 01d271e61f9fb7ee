//! `gym tools`: list the tools, call one, or serve them to other agents over MCP.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use gym::backend::ToolCall;

use super::args::backend::runtime;
use super::args::tools::ToolArgs;

#[derive(Debug, Args)]
pub struct ToolsArgs {
    #[command(subcommand)]
    command: ToolsCommand,
}

#[derive(Debug, Subcommand)]
enum ToolsCommand {
    /// Print each tool's name, description and JSON schema of arguments (without --tools: calc,
    /// python and the tools of every --mcp server).
    List {
        #[command(flatten)]
        tools: ToolArgs,
    },
    /// Run one call and print what the model would observe; exits with 1 when the call failed.
    Call {
        /// The tool's name.
        name: String,
        /// The arguments, a JSON object, e.g. '{"expression": "2^10"}'.
        arguments: String,
        #[command(flatten)]
        tools: ToolArgs,
    },
    /// Serve the tools (without --tools: calc and python) over MCP on stdin and stdout.
    #[cfg(feature = "mcp")]
    McpServe {
        #[command(flatten)]
        tools: ToolArgs,
    },
}

impl ToolsArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let runtime = runtime()?;
        match self.command {
            ToolsCommand::List { tools } => {
                let toolbox = runtime.block_on(tools.toolbox_or(gym::tools::BUILTIN))?;
                for spec in toolbox.specs() {
                    println!("{}\n  {}", spec.name, spec.description);
                    let schema = serde_json::to_string_pretty(&spec.parameters)?;
                    println!("  arguments: {}\n", schema.replace('\n', "\n  "));
                }
                Ok(ExitCode::SUCCESS)
            }
            ToolsCommand::Call {
                name,
                arguments,
                tools,
            } => {
                let toolbox = runtime.block_on(tools.toolbox_or(gym::tools::BUILTIN))?;
                let call = ToolCall {
                    id: "cli".into(),
                    name,
                    arguments,
                };
                let observation = runtime.block_on(toolbox.call(&call));
                println!("{}", observation.content);
                eprintln!("({} ms)", observation.millis);
                Ok(if observation.ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                })
            }
            #[cfg(feature = "mcp")]
            ToolsCommand::McpServe { tools } => runtime.block_on(async {
                let toolbox = tools.toolbox_or(gym::tools::BUILTIN).await?;
                let served = gym::tools::mcp::ToolboxServer::new(toolbox)
                    .serve_stdio()
                    .await;
                anyhow::Context::context(served, "serving tools over MCP")?;
                Ok(ExitCode::SUCCESS)
            }),
        }
    }
}
