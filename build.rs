//! Records the instruction-set options llama.cpp was really configured with, for the CPU check
//! that `gym` runs at start-up (src/backend/llama/cpu.rs).
//!
//! llama-cpp-sys-2 configures llama.cpp's CMake build once per build folder and then only
//! rebuilds it: a `GGML_*` option changed afterwards reaches its build script but not CMake. So
//! the variables the build saw may not be what was compiled; the `ggml-config.cmake` that the
//! CMake build installs is (llama-cpp-sys-2 passes its folder on as `DEP_LLAMA_GGML_CMAKE_DIR`).
//! Its `GGML_*` options become `GYM_LLAMA_CPP_OPTIONS` (`GGML_AVX2=ON,GGML_AVX512=OFF,…`), and
//! an option asked for but not configured is a build warning saying how to fix it.

use std::path::PathBuf;

/// The options of ggml's CPU backend that choose instruction sets.
const OPTIONS: [&str; 16] = [
    "GGML_NATIVE",
    "GGML_SSE42",
    "GGML_AVX",
    "GGML_AVX2",
    "GGML_FMA",
    "GGML_F16C",
    "GGML_BMI2",
    "GGML_AVX_VNNI",
    "GGML_AVX512",
    "GGML_AVX512_VBMI",
    "GGML_AVX512_VNNI",
    "GGML_AVX512_BF16",
    "GGML_AMX_TILE",
    "GGML_AMX_INT8",
    "GGML_AMX_BF16",
    "GGML_CPU_ALL_VARIANTS",
];

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_LLAMA_GGML_CMAKE_DIR");
    let Some(dir) = std::env::var_os("DEP_LLAMA_GGML_CMAKE_DIR") else {
        return; // built without the `llama` feature
    };
    let config = PathBuf::from(dir).join("ggml").join("ggml-config.cmake");
    println!("cargo:rerun-if-changed={}", config.display());
    let text = match std::fs::read_to_string(&config) {
        Ok(text) => text,
        Err(error) => {
            println!(
                "cargo:warning=cannot read {}: {error}; the CPU check at start-up falls back to \
                 the GGML_* variables of this build",
                config.display()
            );
            return;
        }
    };
    // A target CPU or target features in RUSTFLAGS make llama-cpp-sys-2 set the options itself.
    let rustflags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let options_from_rustflags =
        rustflags.contains("target-cpu") || rustflags.contains("target-feature");
    let mut configured = Vec::new();
    for option in OPTIONS {
        println!("cargo:rerun-if-env-changed={option}");
        // ggml-config.cmake holds one `set(GGML_AVX2 "ON")` line per option.
        let prefix = format!("set({option} \"");
        let Some(value) = text
            .lines()
            .find_map(|line| line.trim().strip_prefix(&prefix)?.strip_suffix("\")"))
        else {
            continue;
        };
        let value = value.to_ascii_uppercase();
        if let Ok(asked) = std::env::var(option)
            && !options_from_rustflags
            && !matches!(option, "GGML_NATIVE" | "GGML_CPU_ALL_VARIANTS")
            && asked.trim().to_ascii_uppercase() != value
        {
            println!(
                "cargo:warning=llama.cpp was configured with {option}={value} but this build asks \
                 for {option}={asked}: CMake does not reconfigure an existing build, so run \
                 `cargo clean -p llama-cpp-sys-2` (or build with `make`, which does it) and build \
                 again; until then gym checks the CPU for what was really compiled"
            );
        }
        configured.push(format!("{option}={value}"));
    }
    println!(
        "cargo:rustc-env=GYM_LLAMA_CPP_OPTIONS={}",
        configured.join(",")
    );
}
