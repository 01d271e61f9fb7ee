//! The built binary runs on CPUs other than the one that built it (src/backend/llama/cpu.rs).
//!
//! QEMU's user-mode emulator runs the real `gym` binary on an emulated CPU model with exactly
//! the instructions that model has: an instruction outside them is `SIGILL`, as on real
//! hardware. So "runs a model on a Haswell" proves the executed path needs nothing newer than
//! the x86-64-v3 set (no AVX-512, no AMX), and "an older CPU gets a message" proves the start-up
//! check runs before anything compiled for the set. The disassembly of llama.cpp's CPU
//! kernels proves what no run can: that no AMX or AVX-512 kernel is there at all.
//! `make setup` installs `qemu-user`; without it these tests fail in CI and skip elsewhere.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{Scratch, model_path};

/// `qemu-x86_64` if installed; `None` (skip) outside CI, a failure in CI.
fn qemu() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("qemu-x86_64"))
            .find(|path| path.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "qemu-x86_64 is missing (make setup installs the qemu-user package)"
        );
        eprintln!("skipped: qemu-x86_64 is not installed (make setup installs qemu-user)");
    }
    found
}

/// `gym ARGS` under QEMU emulating `cpu`.
fn gym_on(qemu: &Path, cpu: &str, scratch: &Scratch, args: &[&str]) -> Output {
    let gym = env!("CARGO_BIN_EXE_gym");
    let mut command = Command::new(qemu);
    command.args(["-cpu", cpu, gym]).args(args);
    let model = scratch.model_command(&[]);
    for (key, value) in model.get_envs() {
        match value {
            Some(value) => command.env(key, value),
            None => command.env_remove(key),
        };
    }
    command
        .current_dir(scratch.dir.path())
        .output()
        .expect("run gym under qemu-x86_64")
}

fn describe(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn an_older_cpu_gets_a_message_naming_what_it_lacks_not_illegal_instruction() {
    let Some(qemu) = qemu() else { return };
    let scratch = Scratch::new();
    // Nehalem (2008): SSE4.2, but no AVX, AVX2, FMA, F16C or BMI2.
    let output = gym_on(&qemu, "Nehalem", &scratch, &["library", "list"]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("error: this CPU lacks AVX, AVX2, FMA, F16C, BMI2, which this Gym binary's llama.cpp was compiled to use"),
        "{}",
        describe(&output)
    );
    assert!(
        stderr.contains(
            "GGML_AVX=OFF GGML_AVX2=OFF GGML_FMA=OFF GGML_F16C=OFF GGML_BMI2=OFF make build"
        ),
        "{}",
        describe(&output)
    );
}

#[test]
fn a_cpu_with_only_the_declared_set_runs_a_model() {
    let Some(qemu) = qemu() else { return };
    let scratch = Scratch::new();
    let model = model_path();
    // Haswell (2013): the x86-64-v3 set exactly; no AVX-512, no AMX. (Emulated, the model
    // loads and answers in about 17 s.)
    let output = gym_on(
        &qemu,
        "Haswell",
        &scratch,
        &[
            "eval",
            "--dataset",
            "builtin:letters",
            "--limit",
            "1",
            "--max-tokens",
            "2",
            "--threads",
            "2",
            "--model",
            model.to_str().expect("a UTF-8 model path"),
        ],
    );
    assert!(output.status.success(), "{}", describe(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("Mean@4"), "{}", describe(&output));
    assert!(stdout.contains("tokens    "), "{}", describe(&output));
}

/// llama.cpp's CPU backend library of this build: `build/llama-cpp-sys-2-*/out/lib*/` beside the
/// binary, the newest if cargo kept several.
fn ggml_cpu_library() -> PathBuf {
    let build = Path::new(env!("CARGO_BIN_EXE_gym"))
        .parent()
        .expect("the binary's folder")
        .join("build");
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&build)
        .expect("the build folder beside the binary")
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with("llama-cpp-sys-2-")
        })
        .flat_map(|entry| {
            ["lib", "lib64"].map(|lib| entry.path().join("out").join(lib).join("libggml-cpu.a"))
        })
        .filter_map(|path| Some((path.metadata().ok()?.modified().ok()?, path)))
        .collect();
    found.sort();
    found
        .pop()
        .unwrap_or_else(|| panic!("no libggml-cpu.a under {}", build.display()))
        .1
}

#[test]
fn llama_cpp_holds_no_amx_or_avx512_kernel_unless_built_for_them() {
    let library = ggml_cpu_library();
    let output = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(&library)
        .output()
        .expect("run objdump (binutils)");
    assert!(output.status.success(), "{}", describe(&output));
    let disassembly = String::from_utf8_lossy(&output.stdout);
    let instructions = disassembly
        .lines()
        .filter(|line| line.contains(":\t"))
        .count();
    assert!(
        instructions > 10_000,
        "{instructions} instructions in {}",
        library.display()
    );
    let built = gym::backend::llama::cpu::built_for();
    let registers = |name: &str| {
        disassembly
            .lines()
            .filter(|line| line.contains(name))
            .take(3)
            .collect::<Vec<_>>()
    };
    // AMX tile registers (%tmm0-7) and AVX-512 registers (%zmm0-31).
    for (sets, register) in [("AMX", "%tmm"), ("AVX-512", "%zmm")] {
        if !built.iter().any(|set| set.starts_with(sets)) {
            assert_eq!(
                registers(register),
                Vec::<&str>::new(),
                "{}",
                library.display()
            );
        }
    }
    // The declared set is really used: AVX2 integer instructions on %ymm registers.
    if built.contains(&"AVX2") {
        assert!(!registers("vpmaddubsw").is_empty(), "{}", library.display());
    }
}
