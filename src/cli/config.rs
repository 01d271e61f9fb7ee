//! `gym.toml`: the flags of `gym grpo` as a file. Its keys are the long flag names
//! (`group-size = 4`, `dataset = "builtin:arith"`, `no-eval = true`); they are put before the
//! command-line flags, so a flag given on the command line wins.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// Where `gym grpo` looks for its config when no `--config` / `GYM_CONFIG` is given.
pub const DEFAULT_CONFIG: &str = "gym.toml";

/// `argv` with the config file's flags spliced in after `gym grpo`.
pub fn with_config_file(argv: Vec<String>) -> anyhow::Result<Vec<String>> {
    if argv.get(1).map(String::as_str) != Some("grpo")
        || argv
            .iter()
            .any(|a| a == "--resume" || a.starts_with("--resume="))
    {
        return Ok(argv);
    }
    let explicit = flag_value(&argv, "--config")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("GYM_CONFIG").map(PathBuf::from));
    let path = match explicit {
        Some(path) => path,
        None if Path::new(DEFAULT_CONFIG).exists() => PathBuf::from(DEFAULT_CONFIG),
        None => return Ok(argv),
    };
    let flags = flags_from_file(&path)?;
    let mut out: Vec<String> = argv[..2].to_vec();
    out.extend(flags);
    out.extend(argv[2..].iter().cloned());
    Ok(out)
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
/// matter).
pub fn flags_from_file(path: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config {}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .with_context(|| format!("config {}", path.display()))?;
    for key in ["config", "resume"] {
        anyhow::ensure!(
            !table.contains_key(key),
            "config {}: `{key}` cannot be set in a config file",
            path.display()
        );
    }
    flags_of(table, &format!("config {}", path.display()))
}

/// The flags a TOML table stands for: each key is a long flag, `true` a bare flag, `false`
/// none; `origin` names the table in errors.
pub fn flags_of(table: toml::Table, origin: &str) -> anyhow::Result<Vec<String>> {
    let mut flags = Vec::new();
    for (key, value) in table {
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
        let out = with_config_file(argv).unwrap();
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
        let error = flags_from_file(&path).unwrap_err().to_string();
        assert!(
            error.contains("group-size") && error.contains("array"),
            "{error}"
        );
        std::fs::write(&path, "group-size = \n").unwrap();
        assert!(
            flags_from_file(&path)
                .unwrap_err()
                .to_string()
                .contains("gym.toml")
        );
    }
}
