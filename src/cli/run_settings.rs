//! The settings of a `gym grpo` run as its `args.json` keeps them: every flag's resolved value
//! and where it came from (the command line, an environment variable, a config file, the
//! default), so that `--resume` rebuilds the very same run wherever it is started, with or
//! without the `gym.toml` or the environment of the first start.
//!
//! Runs made before this format kept the raw command line (a JSON list of arguments); those are
//! still read, as that command line.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use anyhow::Context as _;
use clap::ArgMatches;
use clap::parser::ValueSource;
use serde::{Deserialize, Serialize};

/// The current `args.json` format.
const FORMAT: u32 = 2;

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum Source {
    /// The command line.
    Flag,
    /// An environment variable.
    Env { variable: String },
    /// A config file (`gym.toml`).
    Config { file: String },
    /// The flag's default.
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag => f.write_str("the command line"),
            Source::Env { variable } => write!(f, "${variable}"),
            Source::Config { file } => write!(f, "config {file}"),
            Source::Default => f.write_str("the default"),
        }
    }
}

/// A setting's value: a switch, one value, or a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    Switch(bool),
    One(String),
    Many(Vec<String>),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Switch(on) => write!(f, "{on}"),
            Value::One(value) => write!(f, "`{value}`"),
            Value::Many(values) => write!(f, "`{}`", values.join(",")),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    pub value: Value,
    pub source: Source,
}

/// Every set flag of a `gym grpo` command by its long name (without `--`); a flag with no value
/// (an unset option) is absent.
pub type RunSettings = BTreeMap<String, Setting>;

/// What `args.json` holds.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum ArgsFile {
    /// Runs made before the settings were kept: the raw command line after `gym grpo`.
    Argv(Vec<String>),
    Settings {
        format: u32,
        settings: RunSettings,
    },
}

/// The settings `matches` (the `gym grpo` part of a parse) stand for. `config` is the config
/// file whose flags were spliced into the command line, and `flags` the parse of the command
/// line without them: a value given on the command line that `flags` lacks came from the file.
pub fn resolve(
    command: &clap::Command,
    matches: &ArgMatches,
    config: Option<(&Path, &ArgMatches)>,
) -> RunSettings {
    let mut settings = RunSettings::new();
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else {
            continue;
        };
        let id = arg.get_id().as_str();
        let Some(source) = matches.value_source(id) else {
            continue;
        };
        let value = if arg.get_action().takes_values() {
            let Some(raw) = matches.get_raw(id) else {
                continue;
            };
            let mut values: Vec<String> = raw.map(|v| v.to_string_lossy().into_owned()).collect();
            let many = matches!(arg.get_action(), clap::ArgAction::Append)
                || arg.get_value_delimiter().is_some();
            match (many, values.len()) {
                (_, 0) => continue,
                (false, 1) => Value::One(values.remove(0)),
                _ => Value::Many(values),
            }
        } else {
            match matches.try_get_one::<bool>(id) {
                Ok(Some(on)) => Value::Switch(*on),
                // Help, version: not settings.
                _ => continue,
            }
        };
        let source = match source {
            ValueSource::DefaultValue => Source::Default,
            ValueSource::EnvVariable => Source::Env {
                variable: arg
                    .get_env()
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            },
            _ => match config {
                Some((file, flags)) if flags.value_source(id) != Some(ValueSource::CommandLine) => {
                    Source::Config {
                        file: file.display().to_string(),
                    }
                }
                _ => Source::Flag,
            },
        };
        settings.insert(long.to_string(), Setting { value, source });
    }
    settings
}

/// The command-line flags that rebuild `settings`.
pub fn to_flags(settings: &RunSettings) -> Vec<String> {
    let mut flags = Vec::new();
    for (name, setting) in settings {
        match &setting.value {
            Value::Switch(true) => flags.push(format!("--{name}")),
            Value::Switch(false) => {}
            Value::One(value) => flags.push(format!("--{name}={value}")),
            Value::Many(values) => flags.extend(values.iter().map(|v| format!("--{name}={v}"))),
        }
    }
    flags
}

/// Writes `settings` as `path` (an `args.json`).
pub fn write(path: &Path, settings: &RunSettings) -> anyhow::Result<()> {
    let file = ArgsFile::Settings {
        format: FORMAT,
        settings: settings.clone(),
    };
    gym::durable::write(
        path,
        &serde_json::to_vec_pretty(&file)?,
        gym::durable::Replace::Yes,
    )
    .with_context(|| format!("cannot write {}", path.display()))
}

/// What an `args.json` holds: the settings, or (a run from before they were kept) the raw
/// command line after `gym grpo`.
pub enum Stored {
    Settings(RunSettings),
    Argv(Vec<String>),
}

/// Reads an `args.json`; `missing` describes a file that cannot be read.
pub fn read(path: &Path, missing: impl FnOnce() -> String) -> anyhow::Result<Stored> {
    let bytes = std::fs::read(path).with_context(missing)?;
    let file: ArgsFile = serde_json::from_slice(&bytes).with_context(|| {
        format!(
            "{} holds neither a run's settings nor a JSON list of arguments",
            path.display()
        )
    })?;
    Ok(match file {
        ArgsFile::Argv(argv) => Stored::Argv(argv),
        ArgsFile::Settings { format, settings } => {
            anyhow::ensure!(
                format <= FORMAT,
                "{} is of a newer format ({format}) than this gym reads ({FORMAT})",
                path.display()
            );
            Stored::Settings(settings)
        }
    })
}

/// Flags of a resume that only say where the run is, or how this command is read: never
/// compared with the stored ones.
const NOT_COMPARED: &[&str] = &["resume", "runs-dir", "config", "trust-config"];

/// The settings a resume runs with: `stored`, changed by what `given` (the resume's own command
/// line and environment) sets of `resumable`. Any other setting `given` gives a value the run
/// was not started with is refused, naming the setting and both values.
pub fn merge(
    run_id: &str,
    stored: &RunSettings,
    given: &RunSettings,
    resumable: &[&str],
) -> anyhow::Result<RunSettings> {
    let mut merged = stored.clone();
    for name in NOT_COMPARED {
        merged.remove(*name);
    }
    if let Some(runs_dir) = given.get("runs-dir") {
        merged.insert("runs-dir".into(), runs_dir.clone());
    }
    for (name, setting) in given {
        if setting.source == Source::Default || NOT_COMPARED.contains(&name.as_str()) {
            continue;
        }
        let before = stored.get(name);
        if before.map(|s| &s.value) == Some(&setting.value) {
            continue;
        }
        if resumable.contains(&name.as_str()) {
            merged.insert(name.clone(), setting.clone());
            continue;
        }
        let was = match before {
            Some(before) => format!("{} (from {})", before.value, before.source),
            None => "it unset".into(),
        };
        let undo = match &setting.source {
            Source::Env { variable } => format!("unset {variable}"),
            _ => format!("drop --{name}"),
        };
        anyhow::bail!(
            "--{name} cannot change when resuming: run `{run_id}` was started with {was}, this \
             resume gives {} (from {}); {undo} to continue the run as it was started (a resume \
             may change only {})",
            setting.value,
            setting.source,
            resumable
                .iter()
                .map(|f| format!("--{f}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(value: &str, source: Source) -> Setting {
        Setting {
            value: Value::One(value.into()),
            source,
        }
    }

    #[test]
    fn a_resume_keeps_the_stored_settings_and_changes_only_resumable_ones() {
        let mut stored = RunSettings::new();
        stored.insert(
            "library".into(),
            setting(
                "mine",
                Source::Config {
                    file: "./gym.toml".into(),
                },
            ),
        );
        stored.insert("budget-tokens".into(), setting("10", Source::Flag));
        let mut given = RunSettings::new();
        given.insert("library".into(), setting("default", Source::Default));
        given.insert("budget-tokens".into(), setting("99", Source::Flag));
        given.insert("resume".into(), setting("r", Source::Flag));
        let merged = merge("r", &stored, &given, &["budget-tokens"]).unwrap();
        assert_eq!(to_flags(&merged), ["--budget-tokens=99", "--library=mine"]);

        given.insert(
            "library".into(),
            setting(
                "other",
                Source::Env {
                    variable: "GYM_LIBRARY".into(),
                },
            ),
        );
        let error = merge("r", &stored, &given, &["budget-tokens"])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--library cannot change")
                && error.contains("`mine` (from config ./gym.toml)")
                && error.contains("`other` (from $GYM_LIBRARY)")
                && error.contains("unset GYM_LIBRARY"),
            "{error}"
        );
        // The same value is no change.
        given.insert("library".into(), setting("mine", Source::Flag));
        assert!(merge("r", &stored, &given, &["budget-tokens"]).is_ok());
    }

    #[test]
    fn both_formats_of_args_json_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("args.json");
        std::fs::write(&path, r#"["--dataset", "builtin:compare"]"#).unwrap();
        assert!(matches!(
            read(&path, String::new).unwrap(),
            Stored::Argv(argv) if argv == ["--dataset", "builtin:compare"]
        ));
        let mut settings = RunSettings::new();
        settings.insert(
            "no-eval".into(),
            Setting {
                value: Value::Switch(true),
                source: Source::Flag,
            },
        );
        settings.insert(
            "tools".into(),
            Setting {
                value: Value::Many(vec!["calc".into(), "python".into()]),
                source: Source::Default,
            },
        );
        write(&path, &settings).unwrap();
        let Stored::Settings(back) = read(&path, String::new).unwrap() else {
            panic!("not settings");
        };
        assert_eq!(back, settings);
        assert_eq!(
            to_flags(&back),
            ["--no-eval", "--tools=calc", "--tools=python"]
        );
    }
}
