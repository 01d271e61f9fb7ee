//! The tools: the python sandbox (network, time, output, memory; what it shows and the other
//! limits in [`sandbox`]), `gym tools` on the command line, and MCP servers over stdio
//! (`gym tools mcp-serve`) and streamable HTTP.

mod sandbox;

use std::sync::Arc;
use std::time::{Duration, Instant};

use gym::tools::python::{Python, PythonConfig};
use gym::tools::{Tool, ToolError, Toolbox};
use serde_json::json;

use crate::common::{Scratch, redacted};

async fn python(timeout: Duration, memory_mb: u64, output_bytes: usize) -> Python {
    Python::new(PythonConfig {
        timeout,
        memory_mb,
        output_bytes,
        ..PythonConfig::default()
    })
    .await
    .expect("the sandbox can be set up on this machine")
}

async fn run(tool: &Python, code: &str) -> Result<String, ToolError> {
    tool.call(json!({ "code": code })).await
}

/// Processes whose command line contains `token` (put there by [`tagged`] code).
fn processes_with(token: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(token)
        {
            found.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

/// Python code that runs `code` with `token` as its argument. The tool passes the code on stdin,
/// so it is on no command line; the argument marks every process the code starts, for
/// [`processes_with`] to find.
fn tagged(token: &str, code: &str) -> String {
    format!(
        "import os, sys\nos.execv(sys.executable, [sys.executable, '-I', '-c', {code:?}, {token:?}])\n"
    )
}

fn token(label: &str) -> String {
    format!(
        "gym-test-{label}-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    )
}

#[tokio::test]
async fn python_cannot_reach_the_network() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let tool = python(Duration::from_secs(10), 256, 16384).await;
    let code = format!(
        r#"
import socket
for host, port in [("127.0.0.1", {port}), ("1.1.1.1", 53)]:
    try:
        socket.create_connection((host, port), timeout=2)
        print("CONNECTED", host)
    except OSError as e:
        print("no connection", host, e.errno)
try:
    print("RESOLVED", socket.getaddrinfo("example.com", 80))
except OSError as e:
    print("no name resolution")
"#
    );
    let output = run(&tool, &code).await.unwrap();
    assert!(
        !output.contains("CONNECTED") && !output.contains("RESOLVED"),
        "{output}"
    );
    assert_eq!(output.matches("no connection").count(), 2, "{output}");
    assert!(output.contains("no name resolution"), "{output}");
    assert!(matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock));
}

#[tokio::test]
async fn python_is_killed_at_its_timeout_with_every_process_it_started() {
    let tool = python(Duration::from_millis(1500), 256, 16384).await;
    let token = token("timeout");
    // The child leaves the process group; the PID namespace still takes it down.
    let code = tagged(
        &token,
        "import os\nif os.fork() == 0:\n    os.setsid()\nwhile True: pass\n",
    );
    let started = Instant::now();
    let result = run(&tool, &code).await;
    let elapsed = started.elapsed();
    assert_eq!(
        result,
        Err(ToolError::TimedOut {
            tool: "python".into(),
            seconds: 1.5
        })
    );
    assert!(
        elapsed >= Duration::from_millis(1400) && elapsed < Duration::from_secs(4),
        "{elapsed:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(processes_with(&token), Vec::<String>::new());
}

#[tokio::test]
async fn a_call_the_toolbox_gives_up_on_is_killed_too() {
    let tool = python(Duration::from_secs(60), 256, 16384).await;
    let toolbox = Toolbox::new(vec![Arc::new(tool)], Duration::from_secs(1));
    let token = token("toolbox");
    let call = gym::backend::ToolCall {
        id: "c1".into(),
        name: "python".into(),
        arguments: json!({ "code": tagged(&token, "while True: pass") }).to_string(),
    };
    let observation = toolbox.call(&call).await;
    assert!(!observation.ok);
    assert_eq!(
        observation.content,
        "error: `python` did not finish within 1.0 s"
    );
    assert!(observation.millis < 3000, "{}", observation.millis);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(processes_with(&token), Vec::<String>::new());
}

#[tokio::test]
async fn python_output_is_cut_at_the_limit() {
    let tool = python(Duration::from_secs(10), 256, 1000).await;
    let output = run(&tool, "print('x' * 10_000_000)").await.unwrap();
    assert_eq!(
        output,
        format!(
            "{}\n[output cut at 1000 bytes; the program was stopped]",
            "x".repeat(1000)
        )
    );
    let started = Instant::now();
    let endless = run(&tool, "while True: print('y' * 100)").await.unwrap();
    assert!(endless.ends_with("[output cut at 1000 bytes; the program was stopped]"));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn python_cannot_allocate_past_its_memory_limit() {
    let tool = python(Duration::from_secs(10), 200, 16384).await;
    let small = run(&tool, "x = bytearray(50 * 1024 * 1024); print(len(x))").await;
    assert_eq!(small, Ok("52428800\n".into()));
    let Err(ToolError::Failed { message, .. }) =
        run(&tool, "x = bytearray(400 * 1024 * 1024)").await
    else {
        panic!("allocating 400 MiB under a 200 MiB limit succeeded");
    };
    assert!(
        message.contains("MemoryError") && message.ends_with("[exit status 1]"),
        "{message}"
    );
}

#[tokio::test]
async fn python_errors_come_back_with_the_traceback() {
    let tool = python(Duration::from_secs(10), 256, 16384).await;
    assert_eq!(
        run(&tool, "print(sum(range(101)))").await,
        Ok("5050\n".into())
    );
    let Err(ToolError::Failed { message, .. }) = run(&tool, "1/0").await else {
        panic!("a ZeroDivisionError succeeded");
    };
    assert!(
        message.contains("ZeroDivisionError") && message.ends_with("[exit status 1]"),
        "{message}"
    );
    assert!(matches!(
        tool.call(json!({"source": "1"})).await,
        Err(ToolError::InvalidArguments { .. })
    ));
}

#[test]
fn gym_tools_lists_and_calls() {
    let scratch = Scratch::new();
    let mut seen = Vec::new();
    for args in [
        &["tools", "list", "--tools", "calc"][..],
        &["tools", "call", "calc", r#"{"expression": "2^62 + 1"}"#],
        &["tools", "call", "calc", r#"{"expression": "(1 + 2))"}"#],
        &["tools", "list", "--tools", "calc,shell"],
    ] {
        let (code, stdout, stderr) = scratch.gym(args);
        seen.push(format!(
            "$ gym {}\nexit {code}\n--- stdout\n{stdout}--- stderr\n{stderr}",
            args.join(" ")
        ));
    }
    redacted(&scratch, &[], &[(r"\(\d+ ms\)", "([N] ms)")], || {
        insta::assert_snapshot!("gym_tools_list_and_call", seen.join("\n"));
    });
}

#[cfg(feature = "mcp")]
mod mcp {
    use super::*;
    use gym::tools::mcp::{McpEndpoint, McpServer, connect};
    use gym::tools::{ToolsConfig, from_names};
    use rmcp::handler::server::ServerHandler;
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig,
    };
    use rmcp::service::RequestContext;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    use rmcp::{ErrorData, RoleServer};

    fn gym_server() -> McpServer {
        McpServer {
            name: "gym".into(),
            endpoint: McpEndpoint::Stdio {
                program: env!("CARGO_BIN_EXE_gym").into(),
                args: ["tools", "mcp-serve", "--tools", "calc,python"]
                    .map(String::from)
                    .to_vec(),
            },
        }
    }

    #[tokio::test]
    async fn gym_serves_its_tools_over_stdio() {
        let tools = connect(&gym_server(), Duration::from_secs(30))
            .await
            .unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.spec().name.as_str()).collect();
        assert_eq!(names, ["calc", "python"]);
        assert_eq!(
            tools[0].spec().parameters["required"],
            json!(["expression"])
        );
        assert_eq!(
            tools[0].call(json!({"expression": "2^62 + 1"})).await,
            Ok("4611686018427387905".into())
        );
        let Err(ToolError::Failed { message, .. }) =
            tools[0].call(json!({"expression": "1/0"})).await
        else {
            panic!("1/0 succeeded over MCP");
        };
        assert_eq!(
            message,
            "error: `calc` failed: division by zero at column 2"
        );
        assert_eq!(
            tools[1].call(json!({"code": "print(6 * 7)"})).await,
            Ok("42\n".into())
        );
    }

    #[tokio::test]
    async fn mcp_tools_join_a_toolbox_by_server_name() {
        let config = ToolsConfig {
            mcp: vec![gym_server()],
            ..ToolsConfig::default()
        };
        let toolbox = from_names(&["mcp:gym"], &config).await.unwrap();
        assert_eq!(toolbox.names(), ["calc", "python"]);
        let clash = from_names(&["calc", "mcp:gym"], &config).await.unwrap_err();
        assert_eq!(
            clash.to_string(),
            "two tools are named `calc` (from calc and from mcp:gym); leave one of them out"
        );
        let nowhere = McpServer {
            name: "nowhere".into(),
            endpoint: McpEndpoint::Http {
                url: "http://127.0.0.1:9/mcp".into(),
            },
        };
        let error = connect(&nowhere, Duration::from_secs(10))
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.starts_with("MCP server `nowhere`: cannot connect"),
            "{error}"
        );
        let missing: McpServer = "missing=/nonexistent/mcp-server".parse().unwrap();
        let error = connect(&missing, Duration::from_secs(10))
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.starts_with("MCP server `missing`: cannot start"),
            "{error}"
        );
    }

    /// A tiny MCP server: `add` sums two numbers.
    #[derive(Clone)]
    struct Adder;

    impl ServerHandler for Adder {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn list_tools(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            let schema = json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}});
            let serde_json::Value::Object(schema) = schema else {
                unreachable!()
            };
            Ok(ListToolsResult::with_all_items(vec![
                rmcp::model::Tool::new("add", "Adds a and b.", Arc::new(schema)),
            ]))
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            let arguments = request.arguments.unwrap_or_default();
            let number = |key: &str| arguments.get(key).and_then(|v| v.as_f64());
            Ok(match (number("a"), number("b")) {
                (Some(a), Some(b)) => {
                    CallToolResult::success(vec![ContentBlock::text((a + b).to_string())])
                }
                _ => CallToolResult::error(vec![ContentBlock::text("a and b must be numbers")]),
            }
            .into())
        }
    }

    #[tokio::test]
    async fn a_streamable_http_server_is_discovered_and_called() {
        let service = StreamableHttpService::new(
            || Ok(Adder),
            LocalSessionManager::default().into(),
            StreamableHttpServerConfig::default(),
        );
        let app = axum::Router::new().nest_service("/mcp", service);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let server: McpServer = format!("adder={url}").parse().unwrap();
        let tools = connect(&server, Duration::from_secs(10)).await.unwrap();
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].spec().name, "add");
        assert_eq!(tools[0].spec().description, "Adds a and b.");
        assert_eq!(
            tools[0].call(json!({"a": 2, "b": 3.5})).await,
            Ok("5.5".into())
        );
        assert_eq!(
            tools[0].call(json!({"a": "two"})).await,
            Err(ToolError::Failed {
                tool: "add".into(),
                message: "a and b must be numbers".into()
            })
        );
    }
}
