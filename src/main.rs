//! The `gym` command.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match cli::Cli::parse_with_config() {
        Ok(cli) => cli,
        Err(error) => {
            eprintln!("error: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    match cli.run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
