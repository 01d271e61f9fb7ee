//! Gym's integration tests: one binary, one module per area.

mod common;
mod library_bad_input;
mod library_cli;
mod library_props;
mod library_tamper;
