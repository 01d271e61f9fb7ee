//! Gym's integration tests: one binary, one module per area.

mod common;
mod library_bad_input;
mod library_cli;
mod library_props;
mod library_tamper;
mod fake_openai;
mod openai_backend;
mod llama_backend;
mod eval_cli;
