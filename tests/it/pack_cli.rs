//! `gym pack` end to end through the real binary: pack → verify → one changed byte refused
//! naming the file → import with history; results taken from the run that made the version;
//! `--rerun` on the local model; and packs made by an attacker (links, `../` and absolute
//! paths, too many or too large entries) refused before anything is written.

use crate::common::{Scratch, redacted};
use crate::fake_openai::FakeOpenAi;

/// A fixed signer, so snapshots show one address.
const KEY: &str = "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318";

fn key_file(scratch: &Scratch) -> String {
    let path = scratch.dir.path().join("signer.key");
    std::fs::write(&path, format!("{KEY}\n")).unwrap();
    path.display().to_string()
}

fn with_filters(scratch: &Scratch, test: impl FnOnce()) {
    redacted(
        scratch,
        &[],
        &[
            (r"[0-9a-f]{64}", "[SHA256]"),
            (r"\d+ bytes, \d+\.\d\d s", "[SIZE] bytes, [TIME] s"),
            (r": \d+ bytes, signed", ": [SIZE] bytes, signed"),
        ],
        test,
    );
}

/// Library `arith` at version 3, edited by hand.
fn manual_library(scratch: &Scratch) {
    scratch.ok(&["library", "init", "arith"]);
    for text in [
        "When a problem says each, multiply before adding.",
        "When asked for a remainder, use integer division.",
    ] {
        scratch.ok(&["library", "add", "arith", "--text", text]);
    }
    scratch.ok(&[
        "library",
        "update",
        "arith",
        "E0001",
        "--text",
        "When a problem says each, multiply first.",
    ]);
}

/// The pack with one byte changed: the first byte of `needle`'s first occurrence.
fn tampered(pack: &[u8], needle: &str) -> Vec<u8> {
    let at = pack
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
        .unwrap_or_else(|| panic!("`{needle}` is in the pack"));
    let mut bytes = pack.to_vec();
    bytes[at] ^= 0x01;
    bytes
}

#[test]
fn a_pack_verifies_refuses_any_changed_byte_naming_the_file_and_imports_with_its_history() {
    let scratch = Scratch::new();
    manual_library(&scratch);
    let key = key_file(&scratch);
    with_filters(&scratch, || {
        // A hand-made version has no run, so no results unless given or waived.
        let refused = scratch.fails(&["pack", "arith", "--out", "arith.pack", "--key-file", &key]);
        insta::assert_snapshot!("pack_without_results_refused", refused);
        let made = scratch.ok(&[
            "pack",
            "arith@3",
            "--out",
            "arith.pack",
            "--key-file",
            &key,
            "--no-results",
        ]);
        insta::assert_snapshot!("pack_made", made);
        let signer = gym::gov::read_key_file(std::path::Path::new(&key))
            .unwrap()
            .address()
            .to_string();
        let verified = scratch.ok(&["pack", "verify", "arith.pack", "--signer", &signer]);
        insta::assert_snapshot!("pack_verified", verified);
    });
    let path = scratch.dir.path().join("arith.pack");
    let pack = std::fs::read(&path).unwrap();

    // One changed byte in each file's content, in the receipt, in a header: each refused,
    // naming the file.
    for (needle, named) in [
        ("multiply first", "`library/versions/000003.json`"),
        ("integer division", "`library/versions/000002.json`"),
        ("\"max_words\"", "`library/library.json`"),
        ("\"created_at\"", "`receipt.json`: not a valid receipt.json"),
        ("gym-pack/1", "receipt.json or signature.json was changed"),
        ("\"signature\"", "`signature.json`"),
        (
            "library/versions/000001.json\0",
            "entry 5 (after `library/versions/000000.json`",
        ),
    ] {
        std::fs::write(scratch.dir.path().join("bad.pack"), tampered(&pack, needle)).unwrap();
        let error = scratch.fails(&["pack", "verify", "bad.pack"]);
        assert!(
            error.contains(named) && error.contains("bad.pack does not verify"),
            "a change at {needle:?} names {named}: {error}"
        );
        let error = scratch.fails(&["pack", "import", "bad.pack", "--as", "bad"]);
        assert!(error.contains(named), "{error}");
        assert!(!scratch.libraries().join("bad").exists());
    }
    // Another signer than the one asked for.
    let error = scratch.fails(&[
        "pack",
        "verify",
        "arith.pack",
        "--signer",
        "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    ]);
    assert!(error.contains("not by 0x70997970"), "{error}");

    // Import: not over an existing library; under another name, with every version.
    let error = scratch.fails(&["pack", "import", "arith.pack"]);
    assert!(error.contains("--as NAME"), "{error}");
    let imported = scratch.ok(&["pack", "import", "arith.pack", "--as", "arith2"]);
    assert!(imported.contains("versions 0-3"), "{imported}");
    scratch.ok(&["library", "verify", "arith2"]);
    for number in 0..=3 {
        let file = format!("versions/{number:06}.json");
        assert_eq!(
            std::fs::read(scratch.libraries().join("arith").join(&file)).unwrap(),
            std::fs::read(scratch.libraries().join("arith2").join(&file)).unwrap(),
            "{file} is imported byte for byte"
        );
    }
    let log = scratch.ok(&["library", "log", "arith2"]);
    assert!(
        log.contains("manual by tester") && log.lines().count() >= 5,
        "{log}"
    );
    // Versions made after the import build on the imported history.
    scratch.ok(&[
        "library",
        "add",
        "arith2",
        "--text",
        "When done, check the units.",
    ]);
    scratch.ok(&["library", "verify", "arith2"]);
}

/// Training and held-out queries, all answered 7.
fn write_split_sevens(scratch: &Scratch) {
    let lines: String = (0..8)
        .map(|i| {
            let split = if i < 4 { "train" } else { "heldout" };
            format!(
                "{{\"id\": \"q{i}\", \"question\": \"What is {i} + {}?\", \"answer\": \"7\", \"split\": \"{split}\"}}\n",
                7 - i
            )
        })
        .collect();
    std::fs::write(scratch.dir.path().join("sevens.jsonl"), lines).unwrap();
}

#[test]
fn a_pack_takes_its_results_from_the_run_that_made_the_version() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(FakeOpenAi::policy(true));
    let scratch = Scratch::new();
    write_split_sevens(&scratch);
    let args = server.sevens_grpo(
        "sevens",
        "learn",
        &[
            "--validate",
            "0",
            "--eval-limit",
            "4",
            "--eval-k",
            "2",
            "--no-tui",
        ],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = scratch.model_command(&args).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let key = key_file(&scratch);

    let made = scratch.ok(&["pack", "sevens", "--out", "sevens.pack", "--key-file", &key]);
    assert!(made.contains("packed sevens@1"), "{made}");
    let verified = scratch.ok(&["pack", "verify", "sevens.pack"]);
    for expected in [
        "run       learn",
        "model     openai policy",
        "data      sevens.jsonl (heldout, 4 queries)",
        "Mean@2 and Pass@2 on 4 held-out queries",
        "without library",
        "placebo",
        "with sevens@1",
        "library − placebo",
    ] {
        assert!(verified.contains(expected), "{expected}:\n{verified}");
    }
    // The figures are the run's own.
    let eval: serde_json::Value = serde_json::from_slice(
        &std::fs::read(scratch.dir.path().join("runs/learn/eval.json")).unwrap(),
    )
    .unwrap();
    let with = eval["conditions"][2]["mean_at_k"]["value"]
        .as_f64()
        .unwrap();
    assert!(
        verified.contains(&format!("{with:.3} [")),
        "{with}:\n{verified}"
    );

    // Better figures, re-sealed and signed again by whoever changed them: refused, because
    // they are not what the answers in the pack give.
    let forged = forge_figures(&std::fs::read(scratch.dir.path().join("sevens.pack")).unwrap());
    std::fs::write(scratch.dir.path().join("forged.pack"), forged).unwrap();
    let error = scratch.fails(&["pack", "verify", "forged.pack"]);
    assert!(
        error.contains("`results/eval.json`: the Mean@k or Pass@k of `with sevens@1` is not what its answers give"),
        "{error}"
    );

    // A later version the run did not evaluate is refused, with the ways out.
    scratch.ok(&[
        "library",
        "add",
        "sevens",
        "--text",
        "When adding, count on.",
    ]);
    let error = scratch.fails(&["pack", "sevens", "--out", "later.pack", "--key-file", &key]);
    assert!(
        error.contains("evaluated `sevens@1`, not sevens@2") && error.contains("--no-results"),
        "{error}"
    );
    let imported = scratch.ok(&["pack", "import", "sevens.pack", "--as", "copy"]);
    assert!(imported.contains("versions 0-1"), "{imported}");
    let log = scratch.ok(&["library", "log", "copy"]);
    assert!(
        log.contains("learn"),
        "the run's provenance comes along: {log}"
    );
}

#[test]
#[cfg(feature = "llama")]
fn rerun_measures_the_packed_results_again_on_the_local_model() {
    let scratch = Scratch::new();
    scratch.ok(&["library", "init", "letters"]);
    scratch.ok(&[
        "library",
        "add",
        "letters",
        "--text",
        "When comparing two numbers, compare their digits from the left.",
    ]);
    let key = key_file(&scratch);
    let model = crate::common::model_path().display().to_string();
    let eval = [
        "eval",
        "--dataset",
        // The 135M model gets some of these right (Mean@2 0.125 to 0.375 here), so the
        // figures and their intervals are not all zero.
        "builtin:compare",
        "--limit",
        "4",
        "-k",
        "2",
        "--max-tokens",
        "48",
        // One group at a time: every answer a function of its seed alone.
        "--reproducible",
        "--library",
        "letters@1",
        "--report",
        "letters.eval.json",
        "--model",
        &model,
    ];
    let output = scratch.model_command(&eval).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    scratch.ok(&[
        "pack",
        "letters@1",
        "--eval",
        "letters.eval.json",
        "--out",
        "letters.pack",
        "--key-file",
        &key,
    ]);
    // A report whose figures are not its answers' is not packed.
    let mut report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(scratch.dir.path().join("letters.eval.json")).unwrap(),
    )
    .unwrap();
    let value = &mut report["report"]["conditions"][2]["mean_at_k"]["value"];
    *value = serde_json::json!(value.as_f64().unwrap() + 0.5);
    std::fs::write(
        scratch.dir.path().join("better.eval.json"),
        serde_json::to_vec(&report).unwrap(),
    )
    .unwrap();
    let error = scratch.fails(&[
        "pack",
        "letters@1",
        "--eval",
        "better.eval.json",
        "--out",
        "better.pack",
        "--key-file",
        &key,
    ]);
    assert!(
        error.contains("nothing was written") && error.contains("is not what its answers give"),
        "{error}"
    );
    assert!(!scratch.dir.path().join("better.pack").exists());
    let output = scratch
        .model_command(&["pack", "verify", "letters.pack", "--rerun"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(
        stdout.contains("all 10 figures reproduce within their packed 95% intervals"),
        "{stdout}"
    );
    // Another model is refused before anything runs.
    let other = scratch.dir.path().join("other.gguf");
    std::fs::write(&other, b"not the model").unwrap();
    let output = scratch
        .model_command(&[
            "pack",
            "verify",
            "letters.pack",
            "--rerun",
            "--model",
            &other.display().to_string(),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("is not the packed one"), "{stderr}");

    // A pack cannot choose what the verifier reads or pays for: a model "name" that is a path
    // is refused before anything is read, an API model must be named by the verifier.
    let pack = std::fs::read(scratch.dir.path().join("letters.pack")).unwrap();
    for (name, args, why) in [
        ("/dev/zero", vec![], "is not a file in the models folder"),
        (
            "../../etc/passwd",
            vec![],
            "is not a file in the models folder",
        ),
        (
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            vec!["--backend", "openai"],
            "pass --backend llama",
        ),
    ] {
        std::fs::write(
            scratch.dir.path().join("named.pack"),
            forge_model_name(&pack, name),
        )
        .unwrap();
        let mut command = vec!["pack", "verify", "named.pack", "--rerun"];
        command.extend(args);
        let output = scratch.model_command(&command).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success());
        assert!(stderr.contains(why), "{name}: {stderr}");
    }
}

/// The pack with its receipt naming `name` as the evaluated model, signed again with a fresh
/// key.
fn forge_model_name(pack: &[u8], name: &str) -> Vec<u8> {
    use gym::pack::receipt::{self, Receipt};
    use gym::pack::{Limits, archive};
    let mut entries = archive::read(pack, &Limits::default()).unwrap();
    let mut forged: Receipt = serde_json::from_slice(&entries[0].bytes).unwrap();
    forged.evaluation.as_mut().unwrap().model.name = name.to_owned();
    let bytes = receipt::file_bytes(&forged);
    let signature = receipt::sign(&forged, &bytes, &gym::gov::new_key().0).unwrap();
    entries[0].bytes = bytes;
    entries[1].bytes = receipt::file_bytes(&signature);
    archive::write(&entries).unwrap()
}

/// The pack with the library's Mean@k raised by 0.5 in `results/eval.json` and the receipt,
/// every hash re-sealed and the receipt signed again with a fresh key.
fn forge_figures(pack: &[u8]) -> Vec<u8> {
    use gym::pack::receipt::{self, Receipt};
    use gym::pack::{Entry, Limits, Results, archive};
    let mut entries = archive::read(pack, &Limits::default()).unwrap();
    let eval_at = entries
        .iter()
        .position(|e| e.path == "results/eval.json")
        .unwrap();
    let mut report: gym::rollout::eval::EvalReport =
        serde_json::from_slice(&entries[eval_at].bytes).unwrap();
    report.conditions.last_mut().unwrap().mean_at_k.value += 0.5;
    entries[eval_at].bytes = receipt::file_bytes(&report);
    let mut forged: Receipt = serde_json::from_slice(&entries[0].bytes).unwrap();
    let listed = forged
        .files
        .iter_mut()
        .find(|f| f.path == "results/eval.json")
        .unwrap();
    listed.sha256 = gym::library::Digest::of(&entries[eval_at].bytes);
    listed.bytes = entries[eval_at].bytes.len() as u64;
    let seed = forged.results.as_ref().unwrap().seed;
    forged.results = Some(Results::from_report(&report, seed));
    let bytes = receipt::file_bytes(&forged);
    let (key, _) = gym::gov::new_key();
    let signature = receipt::sign(&forged, &bytes, &key).unwrap();
    entries[0] = Entry {
        path: "receipt.json".to_owned(),
        bytes,
    };
    entries[1].bytes = receipt::file_bytes(&signature);
    archive::write(&entries).unwrap()
}

/// The files of `arith@3` (edited by hand) packed without results, as read back.
fn packed_by_hand(scratch: &Scratch) -> Vec<gym::pack::Entry> {
    manual_library(scratch);
    let key = key_file(scratch);
    scratch.ok(&[
        "pack",
        "arith@3",
        "--out",
        "arith.pack",
        "--key-file",
        &key,
        "--no-results",
    ]);
    let pack = std::fs::read(scratch.dir.path().join("arith.pack")).unwrap();
    gym::pack::archive::read(&pack, &gym::pack::Limits::default()).unwrap()
}

#[test]
fn a_signature_in_another_spelling_is_refused() {
    use alloy::primitives::U256;
    use gym::pack::archive;
    let scratch = Scratch::new();
    let entries = packed_by_hand(&scratch);
    let at = entries
        .iter()
        .position(|e| e.path == "signature.json")
        .unwrap();
    let signed: serde_json::Value = serde_json::from_slice(&entries[at].bytes).unwrap();
    let bytes = hex::decode(&signed["signature"].as_str().unwrap()[2..]).unwrap();
    // The same signer recovers from both: the ECDSA twin (n - s, the other v) and v as 0/1.
    let half = U256::from_str_radix(
        "7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0",
        16,
    )
    .unwrap();
    let n: U256 = (half << 1) + U256::from(1);
    let s: U256 = U256::from_be_slice(&bytes[32..64]);
    let mut twin = bytes.clone();
    twin[32..64].copy_from_slice(&(n - s).to_be_bytes::<32>());
    twin[64] = 55 - bytes[64];
    let mut zero_one = bytes.clone();
    zero_one[64] -= 27;
    for (spelling, why) in [(twin, "upper half"), (zero_one, "27 or 28")] {
        // The same file with only the signature's digits changed.
        let original = signed["signature"].as_str().unwrap();
        let text = String::from_utf8(entries[at].bytes.clone()).unwrap();
        let mut changed = entries.clone();
        changed[at].bytes = text
            .replace(original, &format!("0x{}", hex::encode(&spelling)))
            .into_bytes();
        std::fs::write(
            scratch.dir.path().join("twin.pack"),
            archive::write(&changed).unwrap(),
        )
        .unwrap();
        let error = scratch.fails(&["pack", "verify", "twin.pack"]);
        assert!(
            error.contains("canonical") && error.contains(why),
            "{error}"
        );
    }
}

#[test]
fn a_self_signed_receipt_naming_u64_max_versions_is_refused_without_a_panic() {
    use gym::pack::archive;
    use gym::pack::receipt::{self, Receipt};
    let scratch = Scratch::new();
    let mut entries = packed_by_hand(&scratch);
    let mut forged: Receipt = serde_json::from_slice(&entries[0].bytes).unwrap();
    forged.library.version = u64::MAX;
    let bytes = receipt::file_bytes(&forged);
    let signature = receipt::sign(&forged, &bytes, &gym::gov::new_key().0).unwrap();
    entries[0].bytes = bytes;
    entries[1].bytes = receipt::file_bytes(&signature);
    std::fs::write(
        scratch.dir.path().join("max.pack"),
        archive::write(&entries).unwrap(),
    )
    .unwrap();
    let error = scratch.fails(&["pack", "verify", "max.pack"]);
    assert!(
        error.contains("too few for versions 0 to 18446744073709551615"),
        "{error}"
    );
    assert!(!error.contains("panicked"), "{error}");
}

/// The maintainers' keys that sign the packs under `examples/packs/` (its README names them).
const MAINTAINERS_2026_11_30: &str = "0x78A0B373F293b5fe49e4dAe3D6b7F92158514247";
/// The letters pack's signer. Its private key is lost: the pack verifies, nothing new is signed.
const MAINTAINERS_LOST: &str = "0x3ad9A59d5EFC194a49e0ea58e0bA088A2C9B28a8";

#[test]
fn the_shipped_packs_verify_under_the_maintainers_keys_and_import() {
    // (file, signer, version and size, library − placebo Mean@4, a phrase of one of its lessons)
    let shipped = [
        (
            "letters-1.5b.pack",
            MAINTAINERS_LOST,
            "letters@6 (5 experiences",
            "library − placebo      +0.165 [+0.078, +0.252]",
            "write the word down and count the letter",
        ),
        (
            "phrases-1.5b.pack",
            MAINTAINERS_2026_11_30,
            "phrases@4 (4 experiences",
            "library − placebo      +0.115 [+0.018, +0.212]",
            "identify the phrase and then look for the letter",
        ),
    ];
    let scratch = Scratch::new();
    for (file, signer, version, gain, lesson) in shipped {
        let pack = format!("{}/examples/packs/{file}", env!("CARGO_MANIFEST_DIR"));
        let out = scratch.ok(&["pack", "verify", &pack, "--signer", signer]);
        assert!(out.contains("verified"), "{file}: {out}");
        assert!(out.contains(version), "{file}: {out}");
        assert!(out.contains(gain), "{file}: {out}");
        let error = scratch.fails(&[
            "pack",
            "verify",
            &pack,
            "--signer",
            "0x0000000000000000000000000000000000000001",
        ]);
        assert!(
            error.contains(&signer[..6]),
            "names who signed {file}: {error}"
        );
        let name = file.trim_end_matches(".pack").replace('.', "-");
        scratch.ok(&["pack", "import", &pack, "--as", &name]);
        let shown = scratch.ok(&["library", "show", &name]);
        assert!(shown.contains(lesson), "{file}: {shown}");
    }
}
