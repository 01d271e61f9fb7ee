//! Benchmarks of the experience library store (`cargo bench --bench library`).
//!
//! - `commit`: one version of 10 changes (6 adds, 3 updates, 1 delete) through
//!   [`Library::commit`], version file fsynced, on libraries of 1k, 10k and 100k active
//!   experiences. Target: ≤ 100 ms at 100k. Each sample adds a version; the library grows a
//!   little, which does not change the picture.
//! - `history::verify`: [`verify`] of a library with 1,000 versions and ~1,000 active
//!   experiences (reads every file, replays every op, recomputes every root). Target: ≤ 2 s.
//! - `history::open`: [`Library::open`] of that library.
//! - `history::checkout`: [`Library::checkout`] of versions 1, 500 and 999 of it.
//! - `prove` / `verify_proof`: [`Library::prove`] at the head and [`InclusionProof::verify`] at
//!   1k, 10k and 100k active experiences.
//!
//! Fixtures are built once, lazily, outside the measured part, in temporary directories under
//! Cargo's target directory (a real disk, so fsync costs what it costs), removed at the end.

use std::path::Path;
use std::sync::{LazyLock, Mutex};

use divan::Bencher;
use gym::library::{Change, ExperienceId, InclusionProof, Library, Provenance, Settings, verify};
use tempfile::TempDir;

fn main() {
    // Statics are never dropped, so the fixtures' directories are removed here instead.
    let _ = std::fs::remove_dir_all(BASE);
    divan::main();
    let _ = std::fs::remove_dir_all(BASE);
}

/// Where fixtures live: under Cargo's target directory, a real disk (not a tmpfs).
const BASE: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/gym-bench");

const NAME: &str = "bench";

/// A library on disk, kept alive (and locked: `commit` needs `&mut`) for the whole run.
struct Fixture {
    dir: TempDir,
    library: Mutex<Library>,
}

/// An empty library in a new temporary directory.
fn empty_library() -> (TempDir, Library) {
    std::fs::create_dir_all(BASE).expect("create the fixtures' directory");
    let dir = tempfile::Builder::new()
        .prefix("library-")
        .tempdir_in(BASE)
        .expect("create a temporary directory");
    let library = Library::init(dir.path(), NAME, Settings::default()).expect("init");
    (dir, library)
}

impl Fixture {
    fn root(&self) -> &Path {
        self.dir.path()
    }
}

fn id(number: u32) -> ExperienceId {
    ExperienceId::new(number).expect("ids start at 1")
}

/// A distinct text of well under 32 words.
fn text(tag: &str, n: u32) -> String {
    format!("When a {tag} task mentions item {n}, check its units and restate the goal first.")
}

/// A library with `size` active experiences (ids 1..=size), added in batches of 10,000.
fn flat(size: u32) -> Fixture {
    let (dir, mut library) = empty_library();
    for start in (1..=size).step_by(10_000) {
        let batch: Vec<Change> = (start..=size.min(start + 9_999))
            .map(|n| Change::add(text("seed", n)))
            .collect();
        library.commit(&batch, Provenance::Init).expect("seed");
    }
    assert_eq!(library.head().active_count(), size as usize);
    Fixture {
        dir,
        library: Mutex::new(library),
    }
}

static FLAT_1K: LazyLock<Fixture> = LazyLock::new(|| flat(1_000));
static FLAT_10K: LazyLock<Fixture> = LazyLock::new(|| flat(10_000));
static FLAT_100K: LazyLock<Fixture> = LazyLock::new(|| flat(100_000));

fn flat_fixture(size: u32) -> &'static Fixture {
    match size {
        1_000 => &FLAT_1K,
        10_000 => &FLAT_10K,
        100_000 => &FLAT_100K,
        _ => unreachable!("no fixture of {size}"),
    }
}

/// 1,000 versions, ~1,000 active: version 1 adds 1,000; each later version `v` deletes the
/// oldest active id (`v - 1`), updates two others and adds one.
static HISTORY: LazyLock<Fixture> = LazyLock::new(|| {
    let (dir, mut library) = empty_library();
    let seed: Vec<Change> = (1..=1_000).map(|n| Change::add(text("seed", n))).collect();
    library.commit(&seed, Provenance::Init).expect("seed");
    for v in 2..=1_000u32 {
        // Before version v the active ids are v-1 ..= v+998.
        let changes = [
            Change::delete(id(v - 1)),
            Change::update_text(id(v), text("first", v)),
            Change::update_text(id(v + 1 + (v * 37) % 997), text("second", v)),
            Change::add(text("new", v)),
        ];
        library.commit(&changes, Provenance::Init).expect("history");
    }
    assert_eq!(library.head_version(), 1_000);
    assert_eq!(library.head().active_count(), 1_000);
    let report = verify(dir.path(), NAME).expect("verify");
    assert!(report.is_ok(), "{:?}", report.problems);
    Fixture {
        dir,
        library: Mutex::new(library),
    }
});

const SIZES: [u32; 3] = [1_000, 10_000, 100_000];

/// 6 adds, 3 updates of seed experiences, and a delete of the newest experience.
#[divan::bench(args = SIZES, sample_count = 20, sample_size = 1)]
fn commit(bencher: Bencher, size: u32) {
    let fixture = flat_fixture(size);
    let mut library = fixture.library.lock().expect("not poisoned");
    let provenance = Provenance::manual_by_current_user();
    let mut round = 0u32;
    bencher.bench_local(|| {
        round += 1;
        // Seed ids 1..size are never deleted (only the newest id is), so they stay active.
        let updated = |k: u32| id(1 + (round * 3 + k) % (size - 1));
        let newest = id(library.head().next_id().number() - 1);
        let mut changes: Vec<Change> = (0..6)
            .map(|k| Change::add(text("bench", round * 6 + k)))
            .collect();
        changes.extend((0..3).map(|k| Change::update_text(updated(k), text("update", round))));
        changes.push(Change::delete(newest));
        library
            .commit(&changes, provenance.clone())
            .expect("commit");
    });
}

#[divan::bench(args = SIZES, sample_count = 20, sample_size = 1)]
fn prove(bencher: Bencher, size: u32) {
    let library = flat_fixture(size).library.lock().expect("not poisoned");
    let target = id(size / 2);
    bencher.bench_local(|| library.prove(target, None).expect("prove"));
}

#[divan::bench(args = SIZES)]
fn verify_proof(bencher: Bencher, size: u32) {
    let proof: InclusionProof = {
        let library = flat_fixture(size).library.lock().expect("not poisoned");
        library.prove(id(size / 2), None).expect("prove")
    };
    bencher.bench_local(|| proof.verify().expect("a valid proof"));
}

mod history {
    use super::*;

    #[divan::bench(sample_count = 10, sample_size = 1)]
    fn verify(bencher: Bencher) {
        let root = HISTORY.root();
        bencher.bench_local(|| {
            let report = super::verify(root, NAME).expect("verify");
            assert!(report.is_ok() && report.roots_checked == 1_001);
            report
        });
    }

    #[divan::bench(sample_count = 10, sample_size = 1)]
    fn open(bencher: Bencher) {
        let root = HISTORY.root();
        bencher.bench_local(|| Library::open(root, NAME).expect("open"));
    }

    #[divan::bench(args = [1, 500, 999], sample_count = 20, sample_size = 1)]
    fn checkout(bencher: Bencher, version: u64) {
        let library = HISTORY.library.lock().expect("not poisoned");
        bencher.bench_local(|| library.checkout(version).expect("checkout"));
    }
}
