//! The flag groups several commands share, each a `clap::Args` struct flattened into the
//! commands that take it; a command's own flags stay in its file.
//!
//! | file | flags |
//! |---|---|
//! | `backend.rs` | the model backend (`--backend`, `--model`, `--base-url`, …), sampling, `--retrieve` |
//! | `dataset.rs` | the dataset (`--dataset`, field mapping, `--from-traffic`, `--from-traces`) and the reward |
//! | `dirs.rs` | the folders: `--library-dir`, `--runs-dir`, `--gov-dir`, and the chain's `--rpc-url` |
//! | `otlp.rs` | OpenTelemetry spans out (`--otlp-endpoint`, `--otlp-content`) |
//! | `tools.rs` | the tools the model may call (`--tools`, `--mcp`, the sandbox's limits) |

pub mod backend;
pub mod dataset;
pub mod dirs;
pub mod otlp;
pub mod tools;
