//! `gym pack`: a library version with its held-out results and a signed receipt in one file;
//! `gym pack verify` (and `--rerun`), `gym pack import`.

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum as _};
use gym::backend::Sampling;
use gym::data::{Dataset, Split};
use gym::library::{Digest, Library, LibraryRef};
use gym::pack::receipt::{DatasetRef, Evaluation, ModelRef};
use gym::pack::{Limits, Measured, Results, Verified};
use gym::reward::VerifierSpec;
use gym::rollout::eval::{Condition, ControlCondition, EvalReport, library_conditions};
use gym::rollout::prompt::PromptExperience;
use gym::rollout::stats::Estimate;

mod rerun;

use gym::rollout::retrieval::Retrieval;

use super::backend_args::{BackendArgs, BackendKind, RetrievalArgs};
use super::dataset_args::DatasetArgs;
use super::library_dir::LibraryDirArgs;

/// What `gym eval --report FILE` writes and `gym pack --eval FILE` reads.
pub const REPORT_FORMAT: &str = "gym-eval-report/1";

/// A held-out evaluation and how it was made, as one file.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportFile {
    pub format: String,
    pub evaluation: Evaluation,
    pub report: EvalReport,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct PackArgs {
    #[command(subcommand)]
    command: Option<PackCommand>,

    #[command(flatten)]
    create: CreateArgs,
}

#[derive(Debug, Subcommand)]
enum PackCommand {
    /// Check a pack from its bytes alone: its form and bounds, the signature, every file's
    /// SHA-256, the library's hash chain and Merkle roots, and the results; exit 1 naming the
    /// file that fails. With --rerun, measure the results again.
    Verify(VerifyArgs),
    /// Verify a pack and add its library, with every version it holds.
    Import(ImportArgs),
}

/// `gym pack LIB[@V] --out FILE --key-file KEY`.
#[derive(Debug, Args)]
struct CreateArgs {
    /// The library version to pack: NAME or NAME@VERSION (default: the head).
    #[arg(required = true)]
    library: Option<String>,

    /// Where to write the pack.
    #[arg(long, required = true)]
    out: Option<PathBuf>,

    /// The signer's private key (64 hex digits, as `gym gov` key files).
    #[arg(long, required = true)]
    key_file: Option<PathBuf>,

    /// Take the results from this file (written by `gym eval --library NAME@V --report FILE`)
    /// instead of the run that made the version.
    #[arg(long, conflicts_with = "no_results")]
    eval: Option<PathBuf>,

    /// Pack the library without held-out results.
    #[arg(long)]
    no_results: bool,

    #[command(flatten)]
    library_dir: LibraryDirArgs,

    /// Directory holding run journals (where the run that made the version left eval.json).
    #[arg(long, env = "GYM_RUNS_DIR", default_value = "runs")]
    runs_dir: PathBuf,
}

#[derive(Debug, Args)]
struct VerifyArgs {
    /// The pack.
    file: PathBuf,

    /// Also require that this address signed the receipt.
    #[arg(long)]
    signer: Option<alloy::primitives::Address>,

    /// Re-run the held-out evaluation on the same model and data and say whether each figure
    /// falls within the packed interval.
    #[arg(long)]
    rerun: bool,

    /// With --rerun: the dataset file, when it is not where the pack says.
    #[arg(long, requires = "rerun")]
    data: Option<String>,

    #[command(flatten)]
    backend: BackendArgs,
}

#[derive(Debug, Args)]
struct ImportArgs {
    /// The pack.
    file: PathBuf,

    /// Import under this name instead of the packed one.
    #[arg(long = "as", value_name = "NAME")]
    name: Option<String>,

    /// Also require that this address signed the receipt.
    #[arg(long)]
    signer: Option<alloy::primitives::Address>,

    #[command(flatten)]
    library_dir: LibraryDirArgs,
}

impl PackArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self.command {
            Some(PackCommand::Verify(args)) => args.run(),
            Some(PackCommand::Import(args)) => args.run(),
            None => self.create.run(),
        }
    }
}

impl CreateArgs {
    fn run(self) -> anyhow::Result<ExitCode> {
        let (Some(reference), Some(out), Some(key_file)) = (self.library, self.out, self.key_file)
        else {
            anyhow::bail!("gym pack needs LIBRARY, --out and --key-file");
        };
        let LibraryRef { name, version } = reference.parse()?;
        let library = Library::open(&self.library_dir, &name)?;
        let version = version.unwrap_or_else(|| library.head_version());
        let state = library.checkout(version)?;
        let signer = gym::gov::read_key_file(&key_file)?;
        let measured = if self.no_results {
            None
        } else if let Some(path) = &self.eval {
            Some(read_report_file(path)?)
        } else {
            Some(from_run(&library, version, &state, &self.runs_dir)?)
        };
        let bytes = gym::pack::make(
            &self.library_dir,
            &name,
            version,
            measured.as_ref(),
            &signer,
        )?;
        // What others will check, checked before the file exists (bounds included).
        gym::pack::verify(&bytes, &Limits::default(), Some(signer.address()))
            .context("the pack made does not verify; nothing was written")?;
        gym::pack::write_pack(&out, &bytes)?;
        println!(
            "packed {name}@{version} ({} experiences, root {}) into {}: {} bytes, signed by {}",
            state.active_count(),
            state.root(),
            out.display(),
            bytes.len(),
            signer.address()
        );
        match &measured {
            Some(m) => print!(
                "{}",
                render_results(&Results::from_report(&m.report, m.evaluation.decoding.seed))
            ),
            None => println!("no held-out results (--no-results)"),
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// Writes `gym eval --report FILE` crash-safely.
pub fn write_report_file(
    path: &Path,
    evaluation: Evaluation,
    report: EvalReport,
) -> anyhow::Result<()> {
    let file = ReportFile {
        format: REPORT_FORMAT.to_owned(),
        evaluation,
        report,
    };
    gym::pack::write_pack(path, &gym::pack::receipt::file_bytes(&file))?;
    eprintln!("report: {}", path.display());
    Ok(())
}

fn read_report_file(path: &Path) -> anyhow::Result<Measured> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let file: ReportFile = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a `gym eval --report` file", path.display()))?;
    anyhow::ensure!(
        file.format == REPORT_FORMAT,
        "{}: format `{}` is not {REPORT_FORMAT}",
        path.display(),
        file.format
    );
    Ok(Measured {
        evaluation: file.evaluation,
        report: file.report,
    })
}

/// The held-out results of the run that made `name@version`, from its `eval.json` and the
/// settings in its `args.json`.
fn from_run(
    library: &Library,
    version: u64,
    state: &gym::library::State,
    runs_dir: &Path,
) -> anyhow::Result<Measured> {
    let name = library.name();
    let hint = format!(
        "give results with --eval FILE (from `gym eval --library {name}@{version} --report FILE`) or pack without them with --no-results"
    );
    let Some(run) = gym::pack::producing_run(library, version) else {
        anyhow::bail!(
            "no run made {name}@{version} (its history has no run step), so there are no held-out results to pack: {hint}"
        );
    };
    let dir = runs_dir.join(&run.id);
    let eval_path = dir.join("eval.json");
    let bytes = std::fs::read(&eval_path).map_err(|error| {
        anyhow::anyhow!(
            "run `{}` made {name}@{version} but its held-out results cannot be read ({}: {error}; was it run with --no-eval, stopped, or is --runs-dir elsewhere?): {hint}",
            run.id,
            eval_path.display()
        )
    })?;
    let report: EvalReport = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a held-out report", eval_path.display()))?;
    let label = gym::pack::library_label(name, version);
    let evaluated = report
        .conditions
        .last()
        .map(|c| c.label.clone())
        .unwrap_or_default();
    anyhow::ensure!(
        evaluated == label,
        "run `{}` evaluated `{}`, not {name}@{version}: pack that version, or {hint}",
        run.id,
        evaluated.trim_start_matches("with ")
    );
    let origin = super::grpo::run_evaluation(runs_dir, &run.id)?;
    let (dataset, split) = (
        origin.dataset.load(Split::Heldout, origin.sampling.seed)?,
        "heldout",
    );
    let conditions = library_conditions(
        label,
        PromptExperience::active(state),
        origin.control,
        origin.sampling.seed,
    );
    let retrieval = RetrievalArgs {
        retrieve: origin.retrieve,
    }
    .build(Some(state.active_count()))?;
    let evaluation = describe(&Described {
        backend: &origin.backend,
        dataset_args: &origin.dataset,
        split,
        dataset: &dataset,
        sampling: origin.sampling.clone(),
        reward: origin.reward.reward.as_ref(),
        k: origin.k,
        control: origin.control,
        concurrency: origin.concurrency,
        conditions: &conditions,
        retrieval: retrieval.as_deref(),
    })?;
    anyhow::ensure!(
        report.k == evaluation.k
            && report.conditions.first().map(|c| c.queries) == Some(dataset.samples.len()),
        "run `{}`'s eval.json does not match its args.json (k or number of queries differ)",
        run.id
    );
    Ok(Measured { evaluation, report })
}

/// What an evaluation was made with.
pub struct Described<'a> {
    pub backend: &'a BackendArgs,
    pub dataset_args: &'a DatasetArgs,
    pub split: &'a str,
    pub dataset: &'a Dataset,
    pub sampling: Sampling,
    pub reward: Option<&'a VerifierSpec>,
    pub k: usize,
    pub control: ControlCondition,
    pub concurrency: usize,
    pub conditions: &'a [Condition],
    /// Which experiences each query was shown (`None`: all).
    pub retrieval: Option<&'a Retrieval>,
}

/// The receipt's account of an evaluation: the model (its file hashed), decoding, data and
/// prompts.
pub fn describe(d: &Described<'_>) -> anyhow::Result<Evaluation> {
    Ok(Evaluation {
        model: model_ref(d.backend)?,
        decoding: d.sampling.clone(),
        dataset: DatasetRef {
            source: d.dataset_args.source_name()?,
            split: d.split.to_owned(),
            limit: d.dataset_args.limit,
            question_field: d.dataset_args.question_field.clone(),
            answer_field: d.dataset_args.answer_field.clone(),
            id_field: d.dataset_args.id_field.clone(),
            queries: d.dataset.samples.len(),
            sha256: gym::pack::queries_sha256(&d.dataset.samples),
        },
        reward: d.reward.map(ToString::to_string),
        k: d.k,
        control: d.control,
        concurrency: d.concurrency,
        retrieve: d.retrieval.map(Retrieval::k),
        prompts_sha256: gym::pack::prompts_sha256(
            &d.dataset.samples,
            d.dataset.instruction.as_deref(),
            d.conditions,
            d.retrieval,
        )?,
    })
}

fn backend_name(kind: BackendKind) -> String {
    kind.to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_owned())
}

/// The model a backend would load: a file's name and SHA-256, or a served model's name.
fn model_ref(backend: &BackendArgs) -> anyhow::Result<ModelRef> {
    let kind = backend_name(backend.backend);
    if matches!(
        backend.backend,
        BackendKind::Openai | BackendKind::Anthropic
    ) {
        return Ok(ModelRef {
            backend: kind,
            name: backend.model.clone().unwrap_or_default(),
            sha256: None,
            bytes: None,
        });
    }
    let path = backend
        .model
        .as_ref()
        .map_or_else(gym::backend::default_model_path, PathBuf::from);
    let (sha256, bytes) = hash_file(&path)?;
    Ok(ModelRef {
        backend: kind,
        name: path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        sha256: Some(sha256),
        bytes: Some(bytes),
    })
}

fn hash_file(path: &Path) -> anyhow::Result<(Digest, u64)> {
    use sha2::Digest as _;
    let mut file = std::fs::File::open(path)
        .with_context(|| format!("cannot read the model {}", path.display()))?;
    let mut hash = sha2::Sha256::new();
    let mut buffer = vec![0; 1 << 20];
    let mut total = 0;
    loop {
        let n = file
            .read(&mut buffer)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            break;
        }
        hash.update(&buffer[..n]);
        total += n as u64;
    }
    Ok((Digest(hash.finalize().into()), total))
}

fn read_and_verify(
    file: &Path,
    signer: Option<alloy::primitives::Address>,
) -> anyhow::Result<(Verified, u64, f64)> {
    let limits = Limits::default();
    let size = std::fs::metadata(file)
        .with_context(|| format!("cannot read {}", file.display()))?
        .len();
    anyhow::ensure!(
        size <= limits.max_archive_bytes(),
        "{}: refused: {size} bytes is over the {} bytes a pack may have",
        file.display(),
        limits.max_archive_bytes()
    );
    let started = Instant::now();
    // Read with the bound, not the size the file claims: `/dev/zero` and a file still growing
    // claim less than they hold.
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .and_then(|opened| {
            use std::io::Read as _;
            opened
                .take(limits.max_archive_bytes() + 1)
                .read_to_end(&mut bytes)
        })
        .with_context(|| format!("cannot read {}", file.display()))?;
    anyhow::ensure!(
        bytes.len() as u64 <= limits.max_archive_bytes(),
        "{}: refused: more than the {} bytes a pack may have",
        file.display(),
        limits.max_archive_bytes()
    );
    let verified = gym::pack::verify(&bytes, &limits, signer)
        .with_context(|| format!("{} does not verify", file.display()))?;
    Ok((verified, size, started.elapsed().as_secs_f64()))
}

impl VerifyArgs {
    fn run(self) -> anyhow::Result<ExitCode> {
        let (verified, size, seconds) = read_and_verify(&self.file, self.signer)?;
        print!("{}", render_verified(&self.file, &verified, size, seconds));
        if !self.rerun {
            return Ok(ExitCode::SUCCESS);
        }
        rerun::rerun(&verified, &self.backend, self.data.as_deref())
    }
}

/// A string of a receipt as it may be printed: control characters (a newline that fakes a
/// "signed by" line, an escape sequence that moves the cursor) and bidirectional overrides are
/// written as `\u{…}`. The receipt is the signer's text, and a signature says who wrote it,
/// not that it is harmless to a terminal.
fn shown(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') {
                format!("\\u{{{:x}}}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// What `gym pack verify` prints about a pack that verified.
fn render_verified(file: &Path, v: &Verified, size: u64, seconds: f64) -> String {
    let r = &v.receipt;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: verified ({} files, {size} bytes, {seconds:.2} s): every hash, the Merkle root of every version and the signature",
        file.display(),
        v.entries
    );
    let _ = writeln!(
        out,
        "library   {}@{} ({} experiences, versions 0-{}), root {}",
        shown(&r.library.name),
        r.library.version,
        r.library.experiences,
        r.library.version,
        r.library.root
    );
    let _ = writeln!(out, "signed    by {}", v.signer);
    if let Some(run) = &r.run {
        let _ = writeln!(
            out,
            "run       {} (distiller {}, stage prompts {})",
            shown(&run.id),
            shown(&run.distill_model),
            shown(&run.stage_prompts_sha256.to_string())
        );
    }
    if let (Some(e), Some(results)) = (&r.evaluation, &r.results) {
        let _ = writeln!(
            out,
            "model     {} {}{}",
            shown(&e.model.backend.to_string()),
            shown(&e.model.name),
            e.model
                .sha256
                .map(|s| format!(", sha256 {s}"))
                .unwrap_or_default()
        );
        let _ = writeln!(
            out,
            "data      {} ({}, {} queries), sha256 {}",
            shown(&e.dataset.source),
            shown(&e.dataset.split.to_string()),
            e.dataset.queries,
            e.dataset.sha256
        );
        let d = &e.decoding;
        let _ = writeln!(
            out,
            "decoding  temperature {}, top-p {}, top-k {}, max tokens {}, seed {}",
            d.temperature, d.top_p, d.top_k, d.max_tokens, d.seed
        );
        let _ = writeln!(
            out,
            "prompts   sha256 {}",
            shown(&e.prompts_sha256.to_string())
        );
        out.push_str(&render_results(results));
    } else {
        let _ = writeln!(out, "no held-out results in this pack");
    }
    out
}

fn interval(e: &Estimate, signed: bool) -> String {
    if signed {
        format!("{:+.3} [{:+.3}, {:+.3}]", e.value, e.low, e.high)
    } else {
        format!("{:.3} [{:.3}, {:.3}]", e.value, e.low, e.high)
    }
}

/// The figures of a receipt, one per line.
fn render_results(results: &Results) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "results   Mean@{k} and Pass@{k} on {} held-out queries (95% intervals):",
        results.queries,
        k = results.k
    );
    for (label, mean, pass, signed) in figures(results) {
        let _ = writeln!(
            out,
            "  {:<22} {:<26} {}",
            shown(&label),
            interval(&mean, signed),
            interval(&pass, signed)
        );
    }
    out
}

/// (label, Mean@k, Pass@k, is a difference) for each figure of `results`.
fn figures(results: &Results) -> Vec<(String, Estimate, Estimate, bool)> {
    let mut rows: Vec<_> = results
        .conditions
        .iter()
        .map(|c| (c.label.clone(), c.mean_at_k, c.pass_at_k, false))
        .collect();
    if let Some(d) = &results.library_minus_without {
        rows.push((
            "library − without".to_owned(),
            d.mean_at_k,
            d.pass_at_k,
            true,
        ));
    }
    if let Some(d) = &results.library_minus_placebo {
        rows.push((
            "library − placebo".to_owned(),
            d.mean_at_k,
            d.pass_at_k,
            true,
        ));
    }
    rows
}

impl ImportArgs {
    fn run(self) -> anyhow::Result<ExitCode> {
        let (verified, _, _) = read_and_verify(&self.file, self.signer)?;
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| verified.receipt.library.name.clone());
        if gym::library::library_dir(&self.library_dir, &name)?.exists() {
            anyhow::bail!(
                "a library `{name}` exists in {}; import under another name with --as NAME",
                self.library_dir.display()
            );
        }
        let library = gym::pack::import(&verified, &self.library_dir, &name)?;
        println!(
            "imported {}@{} as `{name}`: versions 0-{}, {} experiences, root {}, signed by {}",
            verified.receipt.library.name,
            verified.receipt.library.version,
            library.head_version(),
            library.head().active_count(),
            library.head().root(),
            verified.signer
        );
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn receipt_strings_cannot_write_lines_or_move_the_cursor() {
        assert_eq!(shown("run-20261127-1"), "run-20261127-1");
        assert_eq!(shown("é ü 漢"), "é ü 漢");
        assert_eq!(
            shown("x\nsigned    by 0xEVIL\u{1b}[1A\u{202e}"),
            "x\\u{a}signed    by 0xEVIL\\u{1b}[1A\\u{202e}"
        );
    }
}
