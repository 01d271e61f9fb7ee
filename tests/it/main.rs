//! Gym's integration tests: one binary, one module per area.

#[cfg(feature = "llama")]
mod agent_llama;
#[cfg(feature = "llama")]
mod bench_cli;
mod common;
mod config_trust;
#[cfg(all(feature = "llama", target_arch = "x86_64"))]
mod cpu_portability;
mod dashboard_stream;
#[cfg(feature = "llama")]
mod dashboard_tmux;
#[cfg(feature = "finetune")]
mod delta_cli;
mod durable_kill;
mod eval_cli;
mod fake_anthropic;
mod fake_openai;
#[cfg(feature = "qdrant")]
mod fake_qdrant;
#[cfg(all(feature = "llama", feature = "finetune"))]
mod fallback;
#[cfg(feature = "llama")]
mod final_eval;
#[cfg(feature = "finetune")]
mod finetune;
#[cfg(feature = "chain")]
mod gov_chain;
mod gov_cli;
mod gov_http;
#[cfg(feature = "llama")]
mod grpo_cli;
mod grpo_concurrent;
#[cfg(feature = "llama")]
mod grpo_plan;
mod grpo_resume;
mod grpo_traffic;
mod judge;
mod library_bad_input;
mod library_cli;
mod library_credit;
#[cfg(feature = "mcp")]
mod library_mcp;
mod library_props;
mod library_tamper;
#[cfg(feature = "llama")]
mod llama_backend;
#[cfg(feature = "llama")]
mod llama_repetition;
mod openai_backend;
mod openai_tools;
mod otlp;
mod pack_attacks;
mod pack_cli;
#[cfg(feature = "parquet")]
mod parquet_cli;
#[cfg(feature = "llama")]
mod serve_abandon;
mod serve_agent;
mod serve_api;
mod serve_follow;
mod serve_governed;
#[cfg(feature = "llama")]
mod serve_limits;
mod serve_messages;
mod serve_origin;
mod serve_parity;
#[cfg(feature = "llama")]
mod serve_prefixes;
#[cfg(feature = "qdrant")]
mod serve_qdrant;
#[cfg(feature = "llama")]
mod serve_socket;
#[cfg(all(feature = "llama", feature = "embed"))]
mod serve_static;
mod serve_stream;
mod serve_tools;
#[cfg(feature = "llama")]
mod serve_traffic;
mod serve_traffic_bounds;
mod setup_models;
mod tools;
mod web_browser;
mod web_http;
