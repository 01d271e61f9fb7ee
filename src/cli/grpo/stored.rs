//! A run's stored settings (`args.json`): resuming with them, and what other commands read
//! back from them (`gym finetune --run`, `gym pack`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use gym::data::Split;
use gym::run::{EvaluationPlan, ModelChoice, RunStart};

use super::GrpoArgs;
use crate::cli::args::backend::BackendKind;
use crate::cli::args::dirs::DEFAULT_LIBRARY_DIR;
use crate::cli::run_settings::{self, RunSettings, Source, Stored};

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

pub(super) use gym::run::folder::ARGS_FILE;

/// `gym grpo`'s flags alone, parsed as the whole command line parses them: a run's stored
/// settings are its flags, and nothing else of the command line.
#[derive(clap::Parser)]
#[command(name = GRPO, args_override_self = true)]
struct GrpoFlags {
    #[command(flatten)]
    args: GrpoArgs,
}

/// The command's name in the errors of [`GrpoFlags`].
const GRPO: &str = "gym grpo";

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
    let command = GrpoFlags::command();
    let matches = command
        .clone()
        .try_get_matches_from(std::iter::once(GRPO.to_string()).chain(argv))
        .with_context(|| format!("the saved flags in {}", path.display()))?;
    GrpoFlags::from_arg_matches(&matches)
        .with_context(|| format!("the saved flags in {}", path.display()))?;
    let mut settings = run_settings::resolve(&command, &matches, None);
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
    let argv = std::iter::once(GRPO.to_string()).chain(run_settings::to_flags(settings));
    let GrpoFlags { mut args } = GrpoFlags::try_parse_from(argv)
        .with_context(|| format!("the saved settings in {}", path.display()))?;
    args.settings = settings.clone();
    Ok(args)
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

/// What run `run_id` was started with: its `start.json`, or for a run started before Gym kept
/// that record, its stored settings as this version reads them.
pub(crate) fn run_start(runs_dir: &Path, run_id: &str) -> anyhow::Result<RunStart> {
    let dir = runs_dir.join(run_id);
    if let Some(start) = RunStart::read(&dir)? {
        return Ok(start);
    }
    let settings = stored_settings(runs_dir, run_id)?;
    parse_settings(&settings, &dir.join(ARGS_FILE))?.start_record()
}

impl GrpoArgs {
    /// The typed record of what this run is started with (`start.json`).
    pub(super) fn start_record(&self) -> anyhow::Result<RunStart> {
        use clap::ValueEnum as _;
        Ok(RunStart {
            format: gym::run::start::FORMAT.to_owned(),
            dataset: self.dataset.spec(Split::Train, self.sampling.seed)?,
            reward: self.reward.reward.as_ref().map(ToString::to_string),
            verifier_timeout_s: self.reward.verifier_timeout,
            sampling: self.sampling.sampling(),
            model: ModelChoice {
                backend: self
                    .backend
                    .backend
                    .to_possible_value()
                    .map_or_else(String::new, |v| v.get_name().to_owned()),
                model: self.backend.model.clone(),
                base_url: self.backend.base_url.clone(),
            },
            library: self.library.clone(),
            library_dir: self.library_dir.to_path_buf(),
            evaluation: EvaluationPlan {
                limit: self.eval_limit,
                k: self.eval_k,
                control: self.eval_control,
                concurrency: self.parallel,
                retrieve: self.retrieval.retrieve,
            },
        })
    }

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
