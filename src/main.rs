//! The `gym` command.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    // Before anything else: llama.cpp compiled for an instruction set this CPU lacks would die
    // with SIGILL and no word of why (gym::backend::llama::cpu).
    #[cfg(feature = "llama")]
    if let Err(error) = gym::backend::llama::cpu::check() {
        eprintln!("error: {error}");
        return ExitCode::FAILURE;
    }
    let cli = match cli::Cli::parse_with_config() {
        Ok(cli) => cli,
        Err(error) => {
            eprintln!("error: {}", report(&error));
            return ExitCode::FAILURE;
        }
    };
    match cli.run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", report(&error));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, `outer: cause: cause`, as anyhow's `{:#}` writes them, but without a
/// cause whose text the message already holds: many errors below name their cause in their own
/// message (`change 1 (add): the text is empty; nothing was changed`) and also return it as
/// their `source`, which would print it twice.
fn report(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::report;

    #[derive(Debug, thiserror::Error)]
    #[error("change 1 (add): {source}; nothing was changed")]
    struct Named {
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let error = anyhow::Error::new(Named {
            source: std::io::Error::other("the text is empty"),
        });
        assert_eq!(
            report(&error),
            "change 1 (add): the text is empty; nothing was changed"
        );
    }

    #[test]
    fn other_causes_are_chained_as_anyhow_does() {
        let error = anyhow::Error::new(std::io::Error::other("disk full"))
            .context("cannot write v3")
            .context("commit failed");
        assert_eq!(report(&error), format!("{error:#}"));
        assert_eq!(report(&error), "commit failed: cannot write v3: disk full");
    }
}
