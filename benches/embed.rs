//! New-question overhead of `gym serve`'s retrieval, MiniLM versus the static table
//! (`cargo bench --bench embed`), and how often the static table finds MiniLM's experiences.
//!
//! A library of 10,000 generated "When <condition>, <strategy>." experiences is indexed once
//! with each embedder (each in its own vector space, as `gym serve --query-embedder` does).
//! Then every held-out question of the builtin suites (`arith`, `compare`, `letters`, up to
//! 150 of each) is asked once of each retriever, with the query cache off, so that every
//! question is new: the time of embedding it, searching the top 8 and rendering them into the
//! prompt is what a new chat request adds before the model is called. Printed: p50 and p95
//! of that time per embedder, and recall@8 of the static table against MiniLM's top 8 (the
//! share of MiniLM's 8 that the static table's 8 also hold), with the share of questions whose
//! MiniLM top-1 is in the static top 8. Then the same recall@8 in smaller libraries (a fixed
//! sample of 100 and of 1,000 of the experiences, searched exactly), beside what 8
//! experiences drawn at random would score (8 / size).
//!
//! Needs the `embed` feature, the models from `make setup`, and a static table: the one in
//! `$GYM_MODELS_DIR/minilm-static` (`gym embed distill`) if there, else one distilled into a
//! temporary directory first (about a minute).

use std::sync::Arc;
use std::time::Instant;

use gym::data::{DatasetSpec, Split};
use gym::embed::Embedder;
use gym::embed::lookup::{StaticEmbedder, default_static_dir};
use gym::embed::minilm::{MiniLmEmbedder, default_minilm_dir, default_onnxruntime_path};
use gym::library::{Change, ExperienceId, Library, Provenance, Settings};
use gym::retrieve::{Catalog, IvfConfig, IvfIndex, Keep, Retriever};

const CONDITIONS: [&str; 40] = [
    "counting how often a letter occurs in a word",
    "a word has a doubled letter",
    "asked for the number of vowels in a word",
    "asked which of two decimals is larger",
    "two decimals have different numbers of digits",
    "comparing a decimal with a fraction",
    "sharing items equally among friends",
    "a price is discounted by a percentage",
    "a quantity grows by a percentage",
    "a recipe is scaled to more servings",
    "a train's speed and travel time are given",
    "lengths are given in different units",
    "money is spent over several weeks",
    "someone saves a fixed amount every week",
    "a problem gives a total and asks what is left",
    "a word problem has several steps",
    "the answer must be a whole number",
    "the question asks for a remainder",
    "the area of a rectangle is asked for",
    "the perimeter of a shape is asked for",
    "the ages of two people are compared",
    "a time span crosses midnight",
    "minutes must be converted to hours",
    "a fraction must be simplified",
    "a result comes out negative",
    "the question asks how many more one person has",
    "items are bought in packs of a fixed size",
    "an average of several numbers is asked for",
    "a ratio between two amounts is given",
    "two independent events must both happen",
    "a sequence of numbers follows a pattern",
    "the letters of a word must be reversed",
    "a word is written in capital letters",
    "the numbers in a problem are very large",
    "a discount and a sales tax both apply",
    "an interest rate is given per year",
    "a worker is paid by the hour",
    "a tank is filled and drained at the same time",
    "a distance on a map uses a scale",
    "a question asks for the smaller of two numbers",
];

const STRATEGIES: [&str; 50] = [
    "spell the word out one letter at a time and count the matches",
    "pad both numbers with zeros to the same length before comparing",
    "divide the total by the number of people",
    "multiply the price by one minus the rate",
    "multiply the amount by one plus the rate",
    "multiply every ingredient by the same factor",
    "multiply the speed by the time to get the distance",
    "convert every length to one unit before calculating",
    "add up the amount spent each week",
    "multiply the weekly amount by the number of weeks",
    "subtract everything used from the starting total",
    "solve the steps one at a time in order",
    "round only at the very end",
    "use the remainder of the division, not the quotient",
    "multiply the length by the width",
    "add the lengths of all the sides",
    "subtract the younger age from the older one",
    "count the hours up to midnight and after it separately",
    "divide the minutes by sixty",
    "divide the top and bottom by their greatest common divisor",
    "check the sign of the result before answering",
    "subtract the smaller amount from the larger one",
    "round the number of packs up to a whole pack",
    "add the numbers and divide by how many there are",
    "write both amounts as multiples of one share",
    "multiply the two probabilities",
    "find the difference between neighbouring terms",
    "write the letters from the last to the first",
    "compare the letters without regard to case",
    "work with the numbers in thousands to keep them readable",
    "apply the discount first and the tax to the reduced price",
    "compound the rate once for every year",
    "multiply the hourly rate by the hours worked",
    "subtract the drain rate from the fill rate",
    "multiply the map distance by the scale factor",
    "line up the decimal points and compare digit by digit",
    "write down each intermediate result",
    "check the answer by working backwards",
    "estimate the answer first to catch mistakes",
    "restate what the question asks before calculating",
    "draw a small table of the known values",
    "look for the key word that says which operation to use",
    "keep the units beside every number",
    "recount from the start if the count seems off",
    "ignore the numbers the question does not need",
    "turn percentages into decimals before multiplying",
    "count each repeated letter separately",
    "compare the whole-number parts before the decimals",
    "double-check the last digit of the answer",
    "give the answer as a plain number with no units",
];

const ENDINGS: [&str; 5] = [
    "",
    " before answering",
    ", then check the result",
    ", writing each step",
    ", then state the final number only",
];

fn experiences() -> Vec<String> {
    let mut texts = Vec::with_capacity(10_000);
    for condition in CONDITIONS {
        for strategy in STRATEGIES {
            for ending in ENDINGS {
                texts.push(format!("When {condition}, {strategy}{ending}."));
            }
        }
    }
    texts
}

fn questions() -> Vec<String> {
    ["arith", "compare", "letters"]
        .iter()
        .flat_map(|suite| {
            let mut spec = DatasetSpec::new(format!("builtin:{suite}"));
            spec.split = Split::Heldout;
            spec.limit = Some(150);
            gym::data::load(&spec)
                .expect("a builtin suite")
                .samples
                .into_iter()
                .map(|sample| sample.question)
        })
        .collect()
}

fn percentile(sorted: &[f64], share: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * share).round() as usize]
}

fn main() {
    let minilm = match MiniLmEmbedder::load(&default_minilm_dir()) {
        Ok(embedder) => embedder,
        Err(error) => {
            eprintln!("skipped: {error}");
            return;
        }
    };
    let scratch = tempfile::tempdir().unwrap();
    let static_dir = match std::env::var_os("GYM_STATIC_MODEL") {
        Some(dir) => dir.into(),
        None if default_static_dir().join("manifest.json").exists() => default_static_dir(),
        None => {
            let out = scratch.path().join("minilm-static");
            let distilled = gym::embed::static_table::build(
                &default_minilm_dir(),
                &default_onnxruntime_path(),
                &out,
            )
            .expect("distil the static table");
            println!(
                "distilled the static table in {:.1} s (sha256 {})",
                distilled.seconds, distilled.manifest.table_sha256
            );
            out
        }
    };
    let table = StaticEmbedder::load(&static_dir).expect("load the static table");
    println!(
        "static table: {} ({} x {}, sha256 {})",
        static_dir.display(),
        table.manifest().vocabulary,
        table.dimensions(),
        table.manifest().table_sha256
    );

    let texts = experiences();
    let mut library = Library::init(
        &scratch.path().join("experiences"),
        "big",
        Settings::default(),
    )
    .unwrap();
    let changes: Vec<Change> = texts.iter().cloned().map(Change::add).collect();
    library.commit(&changes, Provenance::Init).unwrap();
    let catalog = Catalog::new(
        scratch.path().join("experiences"),
        std::time::Duration::from_secs(600),
    );
    let snapshot = catalog.get("big", None).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // What `gym serve` builds: the in-process index (exact below 20k), here with no query
    // cache, so that every question is embedded.
    let retriever = |embedder: Arc<dyn Embedder>| {
        Retriever::with_query_cache(embedder, Arc::new(IvfIndex::new(IvfConfig::default())), 0)
    };
    let minilm: Arc<dyn Embedder> = Arc::new(minilm);
    let table: Arc<dyn Embedder> = Arc::new(table);
    let retrievers = [
        ("minilm", retriever(minilm.clone())),
        ("static", retriever(table.clone())),
    ];
    for (name, retriever) in &retrievers {
        let started = Instant::now();
        runtime
            .block_on(retriever.index(&snapshot, Keep::Index))
            .unwrap();
        println!(
            "{name}: embedded {} experiences in {:.1} s",
            texts.len(),
            started.elapsed().as_secs_f64()
        );
    }

    let questions = questions();
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut top: [Vec<Vec<ExperienceId>>; 2] = [Vec::new(), Vec::new()];
    // A few questions first, so that thread pools and caches are warm.
    for question in questions.iter().take(5) {
        for (_, retriever) in &retrievers {
            runtime
                .block_on(retriever.retrieve(&snapshot, question, 8, Keep::Index))
                .unwrap();
        }
    }
    for question in &questions {
        for (slot, (_, retriever)) in retrievers.iter().enumerate() {
            let started = Instant::now();
            let hits = runtime
                .block_on(retriever.retrieve(&snapshot, question, 8, Keep::Index))
                .unwrap();
            let shown: Vec<gym::rollout::prompt::PromptExperience> = hits
                .iter()
                .filter_map(|hit| snapshot.state.get_active(hit.id))
                .map(gym::rollout::prompt::PromptExperience::from)
                .collect();
            let prompt = gym::rollout::prompt::render_experiences(&shown);
            times[slot].push(started.elapsed().as_secs_f64() * 1000.0);
            assert!(!prompt.is_empty());
            top[slot].push(hits.iter().map(|hit| hit.id).collect());
        }
    }

    println!(
        "{} experiences, {} new questions (builtin arith, compare, letters; held-out)",
        texts.len(),
        questions.len()
    );
    for (slot, (name, _)) in retrievers.iter().enumerate() {
        let sorted = &mut times[slot];
        sorted.sort_by(f64::total_cmp);
        println!(
            "{name}: retrieve + inject p50 {:.3} ms, p95 {:.3} ms",
            percentile(sorted, 0.50),
            percentile(sorted, 0.95)
        );
    }
    let (mut found, mut top1) = (0usize, 0usize);
    for (reference, candidate) in top[0].iter().zip(&top[1]) {
        found += reference.iter().filter(|id| candidate.contains(id)).count();
        top1 += usize::from(reference.first().is_some_and(|id| candidate.contains(id)));
    }
    println!(
        "recall@8 of static against minilm: {:.3}; minilm's top 1 in static's top 8: {:.3}",
        found as f64 / (8 * questions.len()) as f64,
        top1 as f64 / questions.len() as f64
    );

    // Smaller libraries: a fixed sample of the experiences, searched exactly with each
    // embedder's vectors, against what 8 of them picked at random would find (8 / size).
    let sample: Vec<String> = (0..SAMPLE)
        .map(|i| texts[(i * SAMPLE_STRIDE) % texts.len()].clone())
        .collect();
    let vectors = |embedder: &Arc<dyn Embedder>, texts: &[String]| {
        embedder.embed(texts).expect("embed the sample")
    };
    let (minilm_sample, static_sample) = (vectors(&minilm, &sample), vectors(&table, &sample));
    let (minilm_questions, static_questions) =
        (vectors(&minilm, &questions), vectors(&table, &questions));
    for size in [100, SAMPLE] {
        let mut found = 0;
        for (m, s) in minilm_questions.iter().zip(&static_questions) {
            let reference = top8(m, &minilm_sample[..size]);
            let candidate = top8(s, &static_sample[..size]);
            found += reference.iter().filter(|i| candidate.contains(i)).count();
        }
        println!(
            "{size} experiences: recall@8 of static against minilm {:.3} (8 at random: {:.3})",
            found as f64 / (8 * questions.len()) as f64,
            8.0 / size as f64
        );
    }
}

/// Experiences in the smaller libraries of the recall table, and the stride that picks them
/// from the 10,000 (coprime with it, so that every condition and strategy comes up).
const SAMPLE: usize = 1_000;
const SAMPLE_STRIDE: usize = 7_919;

/// Indices of the 8 vectors nearest `query` by cosine (the vectors are normalized).
fn top8(query: &[f32], vectors: &[Vec<f32>]) -> Vec<usize> {
    let mut scored: Vec<(f32, usize)> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| (v.iter().zip(query).map(|(a, b)| a * b).sum(), i))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().take(8).map(|(_, i)| i).collect()
}
