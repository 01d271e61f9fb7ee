//! A run's stored settings (`args.json`): resuming with them, and what other commands read
//! back from them (`gym finetune --run`, `gym pack`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use gym::rollout::eval::ControlCondition;

use super::GrpoArgs;
use crate::cli::backend_args::{BackendArgs, BackendKind};
use crate::cli::dataset_args::{DatasetArgs, RewardArgs};
use crate::cli::library_dir::DEFAULT_LIBRARY_DIR;
use crate::cli::run_settings::{self, Settings as RunSettings, Source, Stored};

/// Flags a resumed run may change; everything else is fixed by the run's first start.
pub(super) const RESUMABLE_FLAGS: &[&str] = &[
    "budget-tokens",
    "budget-usd",
    "events-jsonl",
    "otlp-endpoint",
    "otlp-content",
    "no-tui",
    "parallel",
    "stage-parallel",
    "eval-limit",
    "eval-k",
    "no-eval",
    "api-key-env",
    "threads",
];

pub(super) const ARGS_FILE: &str = "args.json";

/// The settings stored for `run_id` in `runs_dir`: its `args.json`, or for a run made before
/// the settings were kept, its stored command line as this version reads it.
pub(super) fn stored_settings(runs_dir: &Path, run_id: &str) -> anyhow::Result<RunSettings> {
    use clap::{CommandFactory as _, FromArgMatches as _};
    let path = runs_dir.join(run_id).join(ARGS_FILE);
    let stored = run_settings::read(&path, || {
        format!(
            "no run `{run_id}` in {} (cannot read {})",
            runs_dir.display(),
            path.display()
        )
    })?;
    let argv = match stored {
        Stored::Settings(mut settings) => {
            shown_whole_before_retrieval(&mut settings);
            return Ok(settings);
        }
        Stored::Argv(argv) => argv,
    };
    let command = crate::cli::Cli::command();
    let matches = command
        .clone()
        .try_get_matches_from(
            ["gym".to_string(), "grpo".to_string()]
                .into_iter()
                .chain(argv),
        )
        .with_context(|| format!("the saved flags in {}", path.display()))?;
    crate::cli::Cli::from_arg_matches(&matches)
        .with_context(|| format!("the saved flags in {}", path.display()))?;
    let (Some(grpo), Some(sub)) = (
        command.find_subcommand("grpo"),
        matches.subcommand_matches("grpo"),
    ) else {
        anyhow::bail!("{} does not hold `gym grpo` flags", path.display());
    };
    let mut settings = run_settings::resolve(grpo, sub, None);
    // A stored command line is older than --retrieve: its default is today's, not the run's.
    settings.remove("retrieve");
    shown_whole_before_retrieval(&mut settings);
    Ok(settings)
}

/// Runs recorded before `--retrieve` showed every experience to every query: they go on (and
/// are packed) as they were measured, whatever the default or `$GYM_TOP_K` is now.
fn shown_whole_before_retrieval(settings: &mut RunSettings) {
    settings
        .entry("retrieve".into())
        .or_insert_with(|| run_settings::Setting {
            value: run_settings::Value::One("0".into()),
            source: run_settings::Source::Default,
        });
}

/// The `gym grpo` flags of `settings`, parsed.
pub(super) fn parse_settings(settings: &RunSettings, path: &Path) -> anyhow::Result<GrpoArgs> {
    use clap::Parser as _;
    let argv = ["gym".to_string(), "grpo".to_string()]
        .into_iter()
        .chain(run_settings::to_flags(settings));
    let cli = crate::cli::Cli::try_parse_from(argv)
        .with_context(|| format!("the saved settings in {}", path.display()))?;
    let crate::cli::Command::Grpo(mut args) = cli.command else {
        anyhow::bail!("{} does not hold `gym grpo` settings", path.display());
    };
    args.settings = settings.clone();
    Ok(*args)
}

/// Continues `run_id` with its stored settings; `given` (this command's own settings) may
/// change only [`RESUMABLE_FLAGS`], and the run's dataset and library must be the ones its
/// journal recorded (checked by the runner).
pub(super) fn resume(
    run_id: &str,
    runs_dir: &Path,
    given: &RunSettings,
) -> anyhow::Result<ExitCode> {
    let dir = runs_dir.join(run_id);
    let stored = stored_settings(runs_dir, run_id)?;
    let settings = run_settings::merge(run_id, &stored, given, RESUMABLE_FLAGS)?;
    if let Some(config) = given.get("config").filter(|s| s.source == Source::Flag) {
        eprintln!(
            "note: --config {} is not read when resuming: the run's stored settings stand",
            config.value
        );
    }
    let args = parse_settings(&settings, &dir.join(ARGS_FILE))?;
    eprintln!("resuming run {run_id} from {}", dir.display());
    args.execute(run_id.to_string(), dir, true)
}

/// What a run was started with, as other subcommands need it (`gym finetune --run`).
#[cfg_attr(not(feature = "finetune"), allow(dead_code))]
pub(crate) struct RunOrigin {
    pub dataset: DatasetArgs,
    pub reward: RewardArgs,
    pub sampling: gym::backend::Sampling,
    pub library: String,
    pub library_dir: PathBuf,
}

/// Reads the settings a run was started with from its `args.json`.
#[cfg_attr(not(feature = "finetune"), allow(dead_code))]
pub(crate) fn run_origin(runs_dir: &Path, run_id: &str) -> anyhow::Result<RunOrigin> {
    let settings = stored_settings(runs_dir, run_id)?;
    let args = parse_settings(&settings, &runs_dir.join(run_id).join(ARGS_FILE))?;
    Ok(RunOrigin {
        sampling: args.sampling.sampling(),
        dataset: args.dataset,
        reward: args.reward,
        library: args.library,
        library_dir: args.library_dir.library_dir,
    })
}

/// What a run's final held-out evaluation was made with (`gym pack`): its dataset flags with
/// the evaluation's limit, reward, sampling, backend, k, control and parallelism.
pub(crate) struct RunEvaluation {
    pub dataset: DatasetArgs,
    pub reward: RewardArgs,
    pub sampling: gym::backend::Sampling,
    pub backend: BackendArgs,
    pub k: usize,
    pub control: ControlCondition,
    pub concurrency: usize,
    /// Experiences shown per query (`--retrieve`; 0: all).
    pub retrieve: usize,
}

/// Reads how run `run_id` evaluated its library from its `args.json`.
pub(crate) fn run_evaluation(runs_dir: &Path, run_id: &str) -> anyhow::Result<RunEvaluation> {
    let settings = stored_settings(runs_dir, run_id)?;
    let args = parse_settings(&settings, &runs_dir.join(run_id).join(ARGS_FILE))?;
    let mut dataset = args.dataset;
    dataset.limit = Some(args.eval_limit);
    Ok(RunEvaluation {
        dataset,
        reward: args.reward,
        sampling: args.sampling.sampling(),
        backend: args.backend,
        k: args.eval_k,
        control: args.eval_control,
        concurrency: args.parallel,
        retrieve: args.retrieval.retrieve,
    })
}

impl GrpoArgs {
    /// The `gym eval` command that evaluates `version` of the run's library as the final
    /// evaluation would have (same held-out queries, k, model).
    pub(super) fn eval_command(&self, version: u64) -> anyhow::Result<String> {
        let mut command = format!(
            "gym eval --library {}@{version} --dataset {} --limit {} -k {}",
            self.library,
            self.dataset.source_name()?,
            self.eval_limit,
            self.eval_k
        );
        if *self.library_dir != *Path::new(DEFAULT_LIBRARY_DIR) {
            command += &format!(" --library-dir {}", self.library_dir.display());
        }
        if self.backend.backend != BackendKind::Llama {
            command += &format!(" --backend {:?}", self.backend.backend).to_lowercase();
        }
        if let Some(model) = &self.backend.model {
            command += &format!(" --model {model}");
        }
        if let Some(url) = &self.backend.base_url {
            command += &format!(" --base-url {url}");
        }
        Ok(command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored_retrieve(args: &str) -> String {
        let runs = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(runs.path().join("r")).unwrap();
        std::fs::write(runs.path().join("r").join(ARGS_FILE), args).unwrap();
        let settings = stored_settings(runs.path(), "r").unwrap();
        let args = parse_settings(&settings, Path::new("args.json")).unwrap();
        args.retrieval.retrieve.to_string()
    }

    #[test]
    fn a_run_recorded_before_retrieval_goes_on_showing_every_experience() {
        let one = |value: &str| format!(r#"{{"value": "{value}", "source": {{"from": "flag"}}}}"#);
        let settings = |extra: &str| {
            format!(
                r#"{{"format": 2, "settings": {{"dataset": {}{extra}}}}}"#,
                one("builtin:letters")
            )
        };
        assert_eq!(stored_retrieve(&settings("")), "0");
        assert_eq!(stored_retrieve(r#"["--dataset", "builtin:letters"]"#), "0");
        assert_eq!(
            stored_retrieve(&settings(&format!(r#", "retrieve": {}"#, one("5")))),
            "5"
        );
    }
}
