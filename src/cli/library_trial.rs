//! `gym library trial LIB`: each lesson tried on the training problems it was learned from, as
//! `gym grpo --admit` tries a new lesson before it commits: the library the lesson was added
//! to (the parent of the version that last wrote it) without and with the lesson, fresh
//! answers paired by seed ([`gym::rollout::trial`]). It says which lessons the trial would
//! have let in; it changes nothing.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use gym::data::{Sample, Split};
use gym::library::{Evidence, ExperienceId, Library, LibraryRef, Op, State, Validation};
use gym::rollout::eval::{EvalSettings, Resume};
use gym::rollout::prompt::PromptExperience;
use gym::rollout::trial::{Lesson, fresh_sampling, try_lessons};

use super::args::backend::{BackendArgs, RetrievalArgs, SamplingArgs, runtime};
use super::args::dataset::{DatasetArgs, RewardArgs};
use super::args::tools::ToolArgs;
use super::library_credit::progress_line;

/// Most source problems a lesson is tried on (each costs two groups at most).
const MAX_SOURCES: usize = 64;

/// `gym library trial`.
#[derive(Debug, Args)]
pub struct TrialArgs {
    /// Library: NAME or NAME@VERSION (default: the latest version).
    library: String,

    /// Source problems each lesson is tried on: the first queries of the split (in its order)
    /// that its evidence names.
    #[arg(long, default_value_t = 1)]
    sources: usize,

    /// Answers per problem, with and without the lesson.
    #[arg(long, short = 'G', default_value_t = 4)]
    group_size: usize,

    /// The split holding the problems the lessons were learned from.
    #[arg(long, value_enum, default_value = "train")]
    split: Split,

    /// Print the plan (lessons, problems, groups) and stop.
    #[arg(long)]
    dry_run: bool,

    /// Groups in flight at once.
    #[arg(long, default_value_t = 4)]
    parallel: usize,

    #[command(flatten)]
    dataset: DatasetArgs,

    #[command(flatten)]
    reward: RewardArgs,

    #[command(flatten)]
    backend: BackendArgs,

    #[command(flatten)]
    sampling: SamplingArgs,

    #[command(flatten)]
    retrieval: RetrievalArgs,

    #[command(flatten)]
    tools: ToolArgs,
}

/// A lesson of the library and what it is tried against.
struct Planned<'a> {
    id: ExperienceId,
    text: String,
    /// The version that last wrote it, and its parent (the library it was added to).
    written_in: u64,
    parent: u64,
    lesson: Option<Lesson<'a>>,
}

impl TrialArgs {
    pub fn run(self, root: &Path) -> anyhow::Result<ExitCode> {
        anyhow::ensure!(
            (1..=MAX_SOURCES).contains(&self.sources),
            "--sources needs 1 to {MAX_SOURCES} problems"
        );
        anyhow::ensure!(self.group_size >= 1, "--group-size must be at least 1");
        let LibraryRef { name, version } = self.library.parse()?;
        let library = Library::open(root, &name)?;
        let version = version.unwrap_or_else(|| library.head_version());
        let state = library.checkout(version)?;
        let dataset = self.dataset.load(self.split, self.sampling.seed)?;
        let planned = plan(&library, &state, &dataset.samples, self.sources)?;
        let tried: Vec<&Lesson<'_>> = planned.iter().filter_map(|p| p.lesson.as_ref()).collect();
        let problems: usize = tried.iter().map(|l| l.problems.len()).sum();
        let mut controls: Vec<(&str, &str)> = tried
            .iter()
            .flat_map(|l| {
                l.problems
                    .iter()
                    .map(|p| (l.control.0.as_str(), p.id.as_str()))
            })
            .collect();
        controls.sort_unstable();
        controls.dedup();
        let groups = problems + controls.len();
        println!(
            "library `{name}` v{version}: {} active lesson{}, {} with a source problem in {} ({})",
            planned.len(),
            if planned.len() == 1 { "" } else { "s" },
            tried.len(),
            self.dataset.source_name()?,
            self.split,
        );
        println!(
            "plan: {problems} problem{} with the lesson, {} without, {} answers each = {} answers",
            if problems == 1 { "" } else { "s" },
            controls.len(),
            self.group_size,
            groups * self.group_size
        );
        if self.dry_run || tried.is_empty() {
            if tried.is_empty() {
                println!("nothing to try");
            }
            return Ok(ExitCode::SUCCESS);
        }

        let backend = self.backend.build()?;
        let verifier = self.reward.build(&dataset, &backend)?;
        let rt = runtime()?;
        let settings = EvalSettings {
            k: self.group_size,
            sampling: fresh_sampling(&self.sampling.sampling(), &format!("library {name}")),
            concurrency: self.parallel.max(1),
            instruction: dataset.instruction.clone(),
            agent: rt.block_on(self.tools.agent())?,
            retrieval: self
                .retrieval
                .build(tried.iter().map(|l| l.shown.len()).max())?,
        };
        let lessons: Vec<Lesson<'_>> = tried.into_iter().cloned().collect();
        let started = Instant::now();
        let progress = progress_line("trial");
        let result = rt.block_on(try_lessons(
            backend.as_ref(),
            verifier.as_ref(),
            &lessons,
            &settings,
            &Resume::default(),
            &progress,
        ))?;
        println!(
            "model {}, reward {}, {:.1} s",
            backend.model(),
            verifier.name(),
            started.elapsed().as_secs_f64()
        );
        print!("{}", render(&planned, &result.verdicts));
        Ok(ExitCode::SUCCESS)
    }
}

/// Each active lesson of `state` with the library it was added to and its source problems in
/// `samples` (at most `sources`).
fn plan<'a>(
    library: &Library,
    state: &State,
    samples: &'a [Sample],
    sources: usize,
) -> anyhow::Result<Vec<Planned<'a>>> {
    let mut planned = Vec::new();
    for experience in state.active() {
        let (written_in, evidence) = writing_op(library, experience.id, experience.updated_in)?;
        let parent = library.version(written_in)?.parent.unwrap_or(0);
        // In the dataset's order: the evidence lists its queries in the order their groups'
        // extract calls finished, which differs between runs.
        let problems: Vec<&Sample> = samples
            .iter()
            .filter(|s| evidence.query_ids.contains(&s.id))
            .take(sources)
            .collect();
        let lesson = if problems.is_empty() {
            None
        } else {
            let before = library.checkout(parent)?;
            let without = PromptExperience::active(&before);
            let mut shown = without.clone();
            let mine = PromptExperience::from(experience);
            match shown.iter_mut().find(|p| p.id == mine.id) {
                Some(old) => *old = mine,
                None => shown.push(mine),
            }
            Some(Lesson {
                label: format!("{}@v{written_in}", experience.id),
                shown,
                control: (format!("v{parent}"), without),
                problems,
            })
        };
        planned.push(Planned {
            id: experience.id,
            text: experience.text.clone(),
            written_in,
            parent,
            lesson,
        });
    }
    Ok(planned)
}

/// The version at or before `latest` that wrote the current text of experience `id` (its add,
/// or the last update that changed its text: a confirmation keeps the text and is skipped),
/// with that op's evidence.
fn writing_op(library: &Library, id: ExperienceId, latest: u64) -> anyhow::Result<(u64, Evidence)> {
    for number in (1..=latest).rev() {
        let version = library.version(number)?;
        for op in version.ops.iter().filter(|op| op.id() == id) {
            match op {
                Op::Add { evidence, .. } => return Ok((number, evidence.clone())),
                Op::Update { text, evidence, .. } => {
                    let before = library.checkout(version.parent.unwrap_or(0))?;
                    if before.get(id).is_none_or(|e| &e.text != text) {
                        return Ok((number, evidence.clone()));
                    }
                }
                Op::Delete { .. } => {}
            }
        }
    }
    anyhow::bail!("no version up to v{latest} wrote {id}")
}

/// The table: each lesson with the library it was added to, its problems, the mean reward
/// without and with it, Δ with its interval, and whether `--admit` lets it in.
fn render(planned: &[Planned<'_>], verdicts: &[Validation]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<6}  {:<9}  {:<24}  {:>13}  {:<28}  verdict",
        "id", "written", "problems", "without→with", "Δ mean reward [95% CI]"
    );
    let mut verdicts = verdicts.iter();
    let (mut admitted, mut left_out) = (0, 0);
    for p in planned {
        let Some(lesson) = &p.lesson else {
            let _ = writeln!(
                out,
                "{:<6}  {:<9}  {:<24}  {:>13}  {:<28}  not tried  {}",
                p.id.to_string(),
                written(p),
                "(none in this split)",
                "-",
                "-",
                p.text
            );
            continue;
        };
        let v = verdicts.next().expect("a verdict per tried lesson");
        let ids: Vec<&str> = lesson.problems.iter().map(|s| s.id.as_str()).collect();
        if v.accepted {
            admitted += 1;
        } else {
            left_out += 1;
        }
        let _ = writeln!(
            out,
            "{:<6}  {:<9}  {:<24}  {:>13}  {:<28}  {:<9}  {}",
            p.id.to_string(),
            written(p),
            ids.join(","),
            format!("{:.3}→{:.3}", v.current_mean, v.candidate_mean),
            format!(
                "{:+.3} [{:+.3}, {:+.3}]",
                v.delta, v.delta_low, v.delta_high
            ),
            if v.accepted { "admit" } else { "leave out" },
            p.text
        );
    }
    let _ = writeln!(
        out,
        "`gym grpo --admit` would admit {admitted} and leave out {left_out} of the {} lessons \
         tried, each against the library it was written into",
        admitted + left_out
    );
    out
}

/// `v3→v4`: the version a lesson was written into and the version that wrote it.
fn written(p: &Planned<'_>) -> String {
    format!("v{}→v{}", p.parent, p.written_in)
}
