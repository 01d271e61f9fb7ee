//! `gym.toml`: the flags of `gym grpo` as a file. Its keys are the long flag names
//! (`group-size = 4`, `dataset = "builtin:arith"`, `no-eval = true`); they are put before the
//! command-line flags, so a flag given on the command line wins.
//!
//! A config file is often not the user's own (it comes with a cloned repository, and is picked
//! up from the working directory), so every file read is announced on stderr, and a setting
//! that would run a program (a `command:` reward, an MCP server command) or send an API key
//! from the environment somewhere (a server URL, the name of the key's variable) is refused
//! unless the command line says `--trust-config`. The same settings as flags or environment variables need
//! no such consent: the user typed them.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use gym::reward::VerifierSpec;

/// Where `gym grpo` looks for its config when no `--config` / `GYM_CONFIG` is given.
pub const DEFAULT_CONFIG: &str = "gym.toml";

/// The flag that lets a config file set what runs commands.
pub const TRUST_FLAG: &str = "--trust-config";

/// `argv` with the config file's flags spliced in after `gym grpo`, and that file (`None`
/// when none was read). A resume reads none: the run's stored settings stand instead.
pub fn with_config_file(argv: Vec<String>) -> anyhow::Result<(Vec<String>, Option<PathBuf>)> {
    if argv.get(1).map(String::as_str) != Some("grpo")
        || argv
            .iter()
            .any(|a| a == "--resume" || a.starts_with("--resume="))
    {
        return Ok((argv, None));
    }
    let explicit = flag_value(&argv, "--config")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("GYM_CONFIG").map(PathBuf::from));
    let path = match explicit {
        Some(path) => path,
        None if Path::new(DEFAULT_CONFIG).exists() => Path::new(".").join(DEFAULT_CONFIG),
        None => return Ok((argv, None)),
    };
    // Only the command line can grant trust: the file's own flags are not looked at here.
    let trusted = argv[2..].iter().any(|a| a == TRUST_FLAG);
    eprintln!("using settings from {}", path.display());
    let flags = flags_from_file(&path, trusted)?;
    let mut out: Vec<String> = argv[..2].to_vec();
    out.extend(flags);
    out.extend(argv[2..].iter().cloned());
    Ok((out, Some(path)))
}

fn flag_value(argv: &[String], flag: &str) -> Option<String> {
    argv.iter().enumerate().find_map(|(i, arg)| {
        if arg == flag {
            argv.get(i + 1).cloned()
        } else {
            arg.strip_prefix(&format!("{flag}=")).map(str::to_string)
        }
    })
}

/// The flags a config file stands for, sorted by key (each key is one flag, so order does not
/// matter). Settings that run a program are refused unless `trusted`.
pub fn flags_from_file(path: &Path, trusted: bool) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config {}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .with_context(|| format!("config {}", path.display()))?;
    for key in ["config", "resume", "trust-config"] {
        anyhow::ensure!(
            !table.contains_key(key),
            "config {}: `{key}` cannot be set in a config file",
            path.display()
        );
    }
    let origin = format!("config {}", path.display());
    // Keys are checked first so that a key carrying its own `=VALUE` cannot hide a command.
    let flags = flags_of(table.clone(), &origin)?;
    if !trusted {
        for (key, value) in &table {
            let Some(text) = value.as_str() else {
                continue;
            };
            if let Some(why) = needs_trust(key, text) {
                // `value` is shown as TOML writes it: quoted, with control characters escaped.
                anyhow::bail!(
                    "{origin}: `{key} = {value}` {why}; a config file may set that only when the \
                     command line says {TRUST_FLAG} (or give --{key} on the command line instead)"
                );
            }
        }
    }
    Ok(flags)
}

/// Why `--KEY=VALUE` from a file needs the user's consent, or `None` when it does not: it would
/// start a program, or send an API key from the environment (the backends send the variable
/// `--api-key-env` names, `OPENAI_API_KEY` by default) to a server the file chose.
fn needs_trust(key: &str, value: &str) -> Option<&'static str> {
    match key {
        "reward" => matches!(value.parse(), Ok(VerifierSpec::Command { .. })).then_some(
            "would run a program (a `command:` reward runs a shell command on every answer)",
        ),
        "mcp" => mcp_is_a_command(value).then_some(
            "would run a program (an MCP server given as a command is started as a child process)",
        ),
        "base-url" | "distill-base-url" => Some(
            "would send the API key in your environment (the variable --api-key-env names, \
             OPENAI_API_KEY by default) to a server the file chooses",
        ),
        "api-key-env" | "distill-api-key-env" => Some(
            "would choose which environment variable is sent to the model server as its API key",
        ),
        _ => None,
    }
}

/// Whether `--mcp VALUE` names a command rather than an HTTP endpoint. Fails closed: anything
/// that does not parse as an HTTP server counts as a command.
fn mcp_is_a_command(value: &str) -> bool {
    #[cfg(feature = "mcp")]
    {
        use gym::tools::mcp::{McpEndpoint, McpServer};
        !matches!(
            value.parse::<McpServer>(),
            Ok(McpServer {
                endpoint: McpEndpoint::Http { .. },
                ..
            })
        )
    }
    #[cfg(not(feature = "mcp"))]
    {
        let _ = value;
        true
    }
}

/// The flags a TOML table stands for: each key is a long flag, `true` a bare flag, `false`
/// none; `origin` names the table in errors.
pub fn flags_of(table: toml::Table, origin: &str) -> anyhow::Result<Vec<String>> {
    let mut flags = Vec::new();
    for (key, value) in table {
        // A quoted TOML key may hold anything; `"reward=command:…" = true` would otherwise
        // become the flag `--reward=command:…`.
        anyhow::ensure!(
            key.starts_with(|c: char| c.is_ascii_lowercase())
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{origin}: `{}` is not a flag name (lowercase letters, digits and `-`)",
            key.escape_debug()
        );
        let flag = format!("--{key}");
        match value {
            toml::Value::Boolean(true) => flags.push(flag),
            toml::Value::Boolean(false) => {}
            toml::Value::String(s) => flags.push(format!("{flag}={s}")),
            toml::Value::Integer(i) => flags.push(format!("{flag}={i}")),
            toml::Value::Float(f) => flags.push(format!("{flag}={f}")),
            other => anyhow::bail!(
                "{origin}: `{key}` must be a string, number or boolean, not {}",
                other.type_str()
            ),
        }
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_file_becomes_flags_that_the_command_line_overrides() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gym.toml");
        std::fs::write(
            &path,
            "group-size = 4\ndataset = \"builtin:compare\"\nno-eval = true\ntemperature = 0.5\n",
        )
        .unwrap();
        let argv: Vec<String> = [
            "gym",
            "grpo",
            "--config",
            path.to_str().unwrap(),
            "--group-size",
            "3",
        ]
        .map(String::from)
        .to_vec();
        let (out, file) = with_config_file(argv).unwrap();
        assert_eq!(file.as_deref(), Some(path.as_path()));
        assert_eq!(
            &out[2..6],
            [
                "--dataset=builtin:compare",
                "--group-size=4",
                "--no-eval",
                "--temperature=0.5"
            ]
        );
        assert_eq!(
            out.last().unwrap(),
            "3",
            "the command line comes last and wins"
        );

        std::fs::write(&path, "group-size = [1, 2]\n").unwrap();
        let error = flags_from_file(&path, false).unwrap_err().to_string();
        assert!(
            error.contains("group-size") && error.contains("array"),
            "{error}"
        );
        std::fs::write(&path, "group-size = \n").unwrap();
        assert!(
            flags_from_file(&path, false)
                .unwrap_err()
                .to_string()
                .contains("gym.toml")
        );
    }

    #[test]
    fn settings_that_run_programs_or_send_api_keys_need_trust() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gym.toml");
        for (text, key) in [
            ("reward = \"command:touch x\"\n", "reward"),
            ("reward = \" command : touch x\"\n", "reward"),
            ("mcp = \"srv=python3 server.py\"\n", "mcp"),
            ("mcp = \"not an mcp server\"\n", "mcp"),
            ("base-url = \"http://attacker.example/v1\"\n", "base-url"),
            (
                "distill-base-url = \"http://attacker.example/v1\"\n",
                "distill-base-url",
            ),
            ("api-key-env = \"AWS_SECRET_ACCESS_KEY\"\n", "api-key-env"),
            (
                "distill-api-key-env = \"GITHUB_TOKEN\"\n",
                "distill-api-key-env",
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let error = format!("{:#}", flags_from_file(&path, false).unwrap_err());
            assert!(
                error.contains(&path.display().to_string())
                    && error.contains(&format!("`{key} = "))
                    && error.contains(TRUST_FLAG),
                "{text}: {error}"
            );
            assert!(flags_from_file(&path, true).is_ok(), "{text}");
        }
        for harmless in [
            "reward = \"numeric\"\n",
            "reward = \"regex:command:\"\n",
            "mcp = \"docs=https://example.com/mcp\"\n",
            "tools = \"calc,python\"\n",
        ] {
            std::fs::write(&path, harmless).unwrap();
            assert!(flags_from_file(&path, false).is_ok(), "{harmless}");
        }
    }

    #[test]
    fn a_key_cannot_carry_its_own_value() {
        let table: toml::Table = "\"reward=command:touch x\" = true\n".parse().unwrap();
        let error = flags_of(table, "config gym.toml").unwrap_err().to_string();
        assert!(error.contains("is not a flag name"), "{error}");
        let table: toml::Table = "\"Group-Size\" = 3\n".parse().unwrap();
        assert!(flags_of(table, "config gym.toml").is_err());
    }
}
