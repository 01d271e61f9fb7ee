//! `gym delta`: BitDelta files round-trip through the CLI, DeltaSoup resists poisoned
//! contributors, and bad input is refused naming the file.

use std::path::Path;

use gym::delta::bitdelta::{self, Matrix};
use gym::delta::file::{self, DeltaFile, Dense};
use gym::delta::soup::distance2;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

use crate::common::{Scratch, redacted};

const NAMES: [&str; 2] = ["blk.0.attn_q.weight", "blk.0.attn_k.weight"];

fn dense(values: &[f32]) -> Dense {
    let half = values.len() / 2;
    NAMES
        .iter()
        .zip([&values[..half], &values[half..]])
        .map(|(name, v)| {
            (
                name.to_string(),
                Matrix::new(8, half / 8, v.to_vec()).unwrap(),
            )
        })
        .collect()
}

fn read_flat(path: &Path) -> Vec<f32> {
    file::flatten(&file::read(path).unwrap().into_dense()).0
}

#[test]
fn compress_then_apply_is_exactly_sign_times_row_scale() {
    let scratch = Scratch::new();
    let mut rng = StdRng::seed_from_u64(5);
    let values: Vec<f32> = (0..1024).map(|_| rng.random_range(-1.0..1.0)).collect();
    let input = scratch.dir.path().join("delta.safetensors");
    file::write_dense(&input, &dense(&values)).unwrap();
    let out = scratch.ok(&[
        "delta",
        "compress",
        "--input",
        "delta.safetensors",
        "--out",
        "bits.safetensors",
    ]);
    assert!(out.contains("compression vs f32 delta"), "{out}");
    redacted(&scratch, &[], &[], || {
        insta::assert_snapshot!("compress", out)
    });
    scratch.ok(&[
        "delta",
        "apply",
        "--input",
        "bits.safetensors",
        "--out",
        "back.safetensors",
    ]);
    let DeltaFile::Bits(bits) = file::read(&scratch.dir.path().join("bits.safetensors")).unwrap()
    else {
        panic!("a BitDelta file expected")
    };
    let packed: usize = bits.values().map(|b| b.signs.len()).sum();
    assert_eq!(packed * 32, values.len() * 4);
    let back = file::read(&scratch.dir.path().join("back.safetensors"))
        .unwrap()
        .into_dense();
    for (name, m) in dense(&values) {
        assert_eq!(back[&name], bitdelta::decompress(&bitdelta::compress(&m)));
    }
}

#[test]
fn median_and_krum_soups_resist_thirty_percent_poisoned_contributors() {
    let scratch = Scratch::new();
    let mut rng = StdRng::seed_from_u64(9);
    let truth: Vec<f32> = (0..512).map(|_| rng.random_range(-0.01..0.01)).collect();
    let mut honest_sum = vec![0.0f32; truth.len()];
    let mut args = vec!["delta".to_string(), "soup".into()];
    for i in 0..10 {
        let values: Vec<f32> = if i < 7 {
            let v: Vec<f32> = truth
                .iter()
                .map(|t| t + rng.random_range(-0.002..0.002))
                .collect();
            for (s, x) in honest_sum.iter_mut().zip(&v) {
                *s += x / 7.0;
            }
            v
        } else {
            (0..truth.len())
                .map(|_| rng.random_range(-1.0..1.0))
                .collect()
        };
        let name = format!("c{i}.safetensors");
        file::write_dense(&scratch.dir.path().join(&name), &dense(&values)).unwrap();
        args.extend(["--input".to_string(), name]);
    }
    // Files list their weights in name order.
    let honest_sum = file::flatten(&dense(&honest_sum)).0;
    let norm = distance2(&honest_sum, &vec![0.0; truth.len()]).sqrt();
    // Trimming must cover the poisoned fraction at each end (here 30%).
    let distance = |rule: &str| {
        let mut argv = args.clone();
        argv.extend(
            ["--rule", rule, "--trim", "0.3", "--out", "soup.safetensors"].map(String::from),
        );
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let out = scratch.ok(&argv);
        assert!(out.contains("reward share"), "{out}");
        distance2(
            &read_flat(&scratch.dir.path().join("soup.safetensors")),
            &honest_sum,
        )
        .sqrt()
            / norm
    };
    let mean = distance("mean");
    for rule in ["median", "trimmed", "krum", "multi-krum"] {
        let d = distance(rule);
        eprintln!("{rule}: {d:.3} (mean: {mean:.3})");
        assert!(d < 0.4 && d < mean / 10.0, "{rule}: {d} vs mean {mean}");
    }
}

#[test]
fn mismatched_contributors_and_unbounded_privacy_are_refused() {
    let scratch = Scratch::new();
    let a = scratch.dir.path().join("a.safetensors");
    let b = scratch.dir.path().join("b.safetensors");
    file::write_dense(&a, &dense(&[0.5; 64])).unwrap();
    file::write_dense(&b, &dense(&[0.5; 128])).unwrap();
    let error = scratch.fails(&[
        "delta",
        "soup",
        "--input",
        "a.safetensors",
        "--input",
        "b.safetensors",
        "--out",
        "s.safetensors",
    ]);
    assert!(error.contains("b.safetensors"), "{error}");
    let mismatched = error;
    let error = scratch.fails(&[
        "delta",
        "soup",
        "--input",
        "a.safetensors",
        "--input",
        "a.safetensors",
        "--rule",
        "median",
        "--dp-epsilon",
        "0.5",
        "--dp-delta",
        "1e-5",
        "--out",
        "s.safetensors",
    ]);
    assert!(error.contains("sensitivity"), "{error}");
    assert!(!scratch.dir.path().join("s.safetensors").exists());
    redacted(&scratch, &[], &[], || {
        insta::assert_snapshot!("soup_mismatched_contributors", mismatched);
        insta::assert_snapshot!("soup_unbounded_privacy", error);
    });
}

/// `--eval-heldout`: every contributor is scored on held-out queries with its delta merged into
/// the real default model; a contributor whose delta breaks the model scores no better than the
/// base model, honest ones score as it does, shares follow the scores, and the soup (the
/// median) scores as the honest ones do.
#[test]
fn held_out_scores_decide_the_reward_shares() {
    let scratch = Scratch::new();
    let mut rng = StdRng::seed_from_u64(11);
    // The attention outputs of the first two layers of SmolLM2-135M (576 × 576).
    let names = ["blk.0.attn_output.weight", "blk.1.attn_output.weight"];
    let write = |file: &str, spread: f32, rng: &mut StdRng| {
        let dense: file::Dense = names
            .iter()
            .map(|name| {
                let data = (0..576 * 576)
                    .map(|_| rng.random_range(-spread..spread))
                    .collect();
                (name.to_string(), Matrix::new(576, 576, data).unwrap())
            })
            .collect();
        file::write_dense(&scratch.dir.path().join(file), &dense).unwrap();
    };
    // Honest contributors change the weights too little to change a greedy answer; the
    // poisoned one adds noise far larger than the weights themselves.
    write("honest0.safetensors", 1e-6, &mut rng);
    write("honest1.safetensors", 1e-6, &mut rng);
    write("poisoned.safetensors", 1.0, &mut rng);
    let started = std::time::Instant::now();
    let output = scratch
        .model_command(&[
            "delta",
            "soup",
            "--input",
            "honest0.safetensors",
            "--input",
            "honest1.safetensors",
            "--input",
            "poisoned.safetensors",
            "--rule",
            "median",
            "--out",
            "soup.safetensors",
            "--eval-heldout",
            "3",
            "--dataset",
            "builtin:letters",
            "--eval-max-tokens",
            "48",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!(
        "soup --eval-heldout: {:.1} s\n{stderr}\n{stdout}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("held-out Mean@1 on 3 queries"), "{stdout}");
    // contributor, selected, held-out, vs base, agreement, distance, share, input
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|cells| cells.len() == 8 && cells[7].ends_with(".safetensors"))
        .collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    let number = |row: &[&str], i: usize| row[i].parse::<f64>().unwrap();
    let (honest0, honest1, poisoned) = (&rows[0], &rows[1], &rows[2]);
    // The base score, as "held-out" minus "vs base" of an honest row.
    let base = number(honest0, 2) - number(honest0, 3);
    assert_eq!(number(honest0, 2), base, "{stdout}");
    assert_eq!(number(honest1, 2), base, "{stdout}");
    assert!(number(poisoned, 2) <= base, "{stdout}");
    // Shares follow the held-out scores of the selected contributors (all zero when none
    // scores: the base model may solve none of so few queries).
    let total: f64 = rows.iter().map(|r| number(r, 2)).sum();
    for row in &rows {
        let expected = if total > 0.0 {
            number(row, 2) / total
        } else {
            0.0
        };
        assert!((number(row, 6) - expected).abs() < 1e-3, "{stdout}");
    }
    assert!(
        stdout.contains(&format!("soup {base:.3}")),
        "the median soup scores as the honest contributors: {stdout}"
    );
}

/// The attack on a released DP soup: regenerate its noise and subtract it. Without `--seed` the
/// noise comes from OS entropy, so the same flags never give the same noise twice and the
/// output records no seed; an explicit seed reproduces the noise exactly, and gym warns so.
#[test]
fn dp_noise_comes_from_os_entropy_unless_a_seed_is_given() {
    let scratch = Scratch::new();
    let mut rng = StdRng::seed_from_u64(13);
    let mut args = vec!["delta".to_string(), "soup".into()];
    for i in 0..3 {
        let values: Vec<f32> = (0..256).map(|_| rng.random_range(-0.01..0.01)).collect();
        let name = format!("c{i}.safetensors");
        file::write_dense(&scratch.dir.path().join(&name), &dense(&values)).unwrap();
        args.extend(["--input".to_string(), name]);
    }
    args.extend(
        [
            "--rule",
            "mean",
            "--dp-epsilon",
            "0.5",
            "--dp-delta",
            "1e-5",
        ]
        .map(String::from),
    );
    let soup = |out: &str, extra: &[&str]| {
        let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
        argv.extend(["--out", out]);
        argv.extend(extra);
        let (code, stdout, stderr) = scratch.gym(&argv);
        assert_eq!(code, 0, "{stdout}\n{stderr}");
        (read_flat(&scratch.dir.path().join(out)), stdout, stderr)
    };

    let (first, stdout, stderr) = soup("os1.safetensors", &[]);
    let (second, _, _) = soup("os2.safetensors", &[]);
    assert_ne!(first, second, "OS-entropy noise differs between runs");
    assert!(stdout.contains("noise from OS entropy"), "{stdout}");
    assert!(!stdout.contains("seed"), "no seed is recorded: {stdout}");
    assert!(!stderr.contains("warning"), "{stderr}");

    let (seeded, stdout, stderr) = soup("s1.safetensors", &["--seed", "7"]);
    let (again, _, _) = soup("s2.safetensors", &["--seed", "7"]);
    assert_eq!(seeded, again, "a given seed reproduces the noise");
    assert!(
        stdout.contains("noise from seed 7 (reproducible)"),
        "{stdout}"
    );
    assert!(
        stderr
            .contains("--seed 7 makes the privacy noise reproducible by anyone who knows the seed")
            && stderr.contains("no privacy against them"),
        "{stderr}"
    );
    redacted(&scratch, &[], &[], || {
        insta::assert_snapshot!(
            "soup_dp_seeded",
            format!("--- stdout\n{stdout}--- stderr\n{stderr}")
        );
    });
}
