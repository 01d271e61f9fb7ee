//! The x86 instruction sets Gym's llama.cpp was compiled for, checked against the CPU it runs on.
//!
//! llama.cpp is only fast when compiled for the vector instructions of the CPU, and it picks
//! its kernels when it is compiled, not when it runs: a binary compiled for an instruction set
//! the CPU lacks dies with `SIGILL` ("Illegal instruction") at the first model call, with no
//! word of why. `.cargo/config.toml` therefore compiles it for a fixed, portable set (the
//! x86-64-v3 level: SSE4.2, AVX, AVX2, FMA, F16C, BMI2; no AVX-512, no AMX) through ggml's
//! `GGML_*` build options, while Gym's own Rust code keeps the x86-64 baseline so that this
//! check itself runs on any x86-64 CPU. [`check`] runs first thing in `main`: it compares what
//! the build used with what the CPU reports and names what is missing and how to rebuild.
//!
//! What the build used is what llama.cpp's CMake build was configured with, which `build.rs`
//! reads from the `ggml-config.cmake` it installed (`GYM_LLAMA_CPP_OPTIONS`: CMake keeps the
//! options of its first configuration, so the variables of a later build may differ). A build
//! with `GGML_NATIVE` (`RUSTFLAGS=-C target-cpu=native`) used the build machine's sets, which
//! are Rust's target features then. Should `build.rs` find no configuration, the `GGML_*`
//! variables and target features this build saw stand in. AMX is off in the default set:
//! llama.cpp's AMX kernels fault on some CPUs that report AMX (docs/setup.md, "CPU instruction
//! sets").

use std::fmt;

/// One instruction set llama.cpp can be compiled for, as ggml's build option names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionSet {
    /// The name users know it by (`AVX2`).
    pub name: &'static str,
    /// ggml's CMake option that turns it on (`GGML_AVX2`).
    pub ggml_option: &'static str,
    /// Whether this build's llama.cpp was compiled to use it.
    pub built: bool,
    /// Whether the CPU (and the operating system, for the vector registers) supports it.
    pub present: bool,
}

/// Whether a CMake option value turns the option on, as CMake reads it.
fn cmake_on(value: Option<&str>) -> bool {
    value.is_some_and(|value| {
        matches!(
            value.trim().to_ascii_uppercase().as_str(),
            "ON" | "1" | "TRUE" | "YES" | "Y"
        )
    })
}

/// What llama.cpp's CMake build was configured with for `option`, from `build.rs`.
fn configured(option: &str) -> Option<bool> {
    option_env!("GYM_LLAMA_CPP_OPTIONS")?
        .split(',')
        .find_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            (name == option).then(|| cmake_on(Some(value)))
        })
}

/// Whether llama.cpp was compiled for the set that `option` turns on: its configuration (with
/// `GGML_NATIVE`, the target features); without one, the build's variable or target feature.
fn built(option: &str, from_env: Option<&str>, target_feature: bool) -> bool {
    if configured("GGML_NATIVE") == Some(true) {
        return target_feature;
    }
    configured(option).unwrap_or_else(|| cmake_on(from_env) || target_feature)
}

/// The instruction sets this build's llama.cpp may use, with the CPU's support for each.
/// Empty on other architectures (no x86 instruction set applies there).
pub fn instruction_sets() -> Vec<InstructionSet> {
    #[cfg(target_arch = "x86_64")]
    {
        x86::instruction_sets()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Vec::new()
    }
}

/// The instruction sets this build's llama.cpp was compiled for, names only (`AVX AVX2 …`).
pub fn built_for() -> Vec<&'static str> {
    instruction_sets()
        .into_iter()
        .filter(|set| set.built)
        .map(|set| set.name)
        .collect()
}

/// The CPU lacks instruction sets this build's llama.cpp was compiled for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedCpu {
    /// What the build uses and the CPU lacks.
    pub missing: Vec<InstructionSet>,
    /// Everything the build uses.
    pub built_for: Vec<&'static str>,
}

impl fmt::Display for UnsupportedCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.missing.iter().map(|set| set.name).collect();
        let off: Vec<String> = self
            .missing
            .iter()
            .map(|set| format!("{}=OFF", set.ggml_option))
            .collect();
        write!(
            f,
            "this CPU lacks {}, which this Gym binary's llama.cpp was compiled to use (built \
             for {}); it would stop with \"Illegal instruction\" at the first model call. \
             Rebuild Gym on this machine without {}: `{} make build` (or `make demo`), with no \
             `-C target-cpu` in RUSTFLAGS. See docs/setup.md, \"CPU instruction sets\"",
            names.join(", "),
            self.built_for.join(" "),
            if names.len() == 1 { "it" } else { "them" },
            off.join(" "),
        )
    }
}

impl std::error::Error for UnsupportedCpu {}

/// Checks that the CPU supports every instruction set this build's llama.cpp was compiled for.
pub fn check() -> Result<(), UnsupportedCpu> {
    missing_from(instruction_sets())
}

fn missing_from(sets: Vec<InstructionSet>) -> Result<(), UnsupportedCpu> {
    let built_for = sets
        .iter()
        .filter(|set| set.built)
        .map(|set| set.name)
        .collect();
    let missing: Vec<InstructionSet> = sets
        .into_iter()
        .filter(|set| set.built && !set.present)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(UnsupportedCpu { missing, built_for })
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{InstructionSet, built};
    use std::arch::is_x86_feature_detected as has;

    /// AMX has no stable `is_x86_feature_detected!` name: CPUID leaf 7, EDX bits 22 (AMX-BF16),
    /// 24 (AMX-TILE) and 25 (AMX-INT8).
    fn amx_present(bit: u32) -> bool {
        let leaf0 = std::arch::x86_64::__cpuid(0);
        leaf0.eax >= 7 && std::arch::x86_64::__cpuid_count(7, 0).edx & (1 << bit) != 0
    }

    /// One row of the table below: the option's name written once, its variable and target
    /// feature (both need the name as a literal) derived from it.
    macro_rules! set {
        ($name:literal, $option:tt, $target_feature:tt, $present:expr) => {
            InstructionSet {
                name: $name,
                ggml_option: $option,
                built: built(
                    $option,
                    option_env!($option),
                    cfg!(target_feature = $target_feature),
                ),
                present: $present,
            }
        };
    }

    /// Every x86 option of ggml's CPU backend (ggml/src/ggml-cpu/CMakeLists.txt), in order
    /// of its levels, with the variable and the Rust target feature that stand in for it.
    pub(super) fn instruction_sets() -> Vec<InstructionSet> {
        // GGML_AVX512 compiles with -mavx512f -mavx512cd -mavx512vl -mavx512dq -mavx512bw.
        let avx512 = has!("avx512f")
            && has!("avx512cd")
            && has!("avx512vl")
            && has!("avx512dq")
            && has!("avx512bw");
        vec![
            set!("SSE4.2", "GGML_SSE42", "sse4.2", has!("sse4.2")),
            set!("AVX", "GGML_AVX", "avx", has!("avx")),
            set!("AVX2", "GGML_AVX2", "avx2", has!("avx2")),
            set!("FMA", "GGML_FMA", "fma", has!("fma")),
            set!("F16C", "GGML_F16C", "f16c", has!("f16c")),
            set!("BMI2", "GGML_BMI2", "bmi2", has!("bmi2")),
            set!("AVX-VNNI", "GGML_AVX_VNNI", "avxvnni", has!("avxvnni")),
            set!("AVX-512", "GGML_AVX512", "avx512f", avx512),
            set!(
                "AVX-512 VBMI",
                "GGML_AVX512_VBMI",
                "avx512vbmi",
                has!("avx512vbmi")
            ),
            set!(
                "AVX-512 VNNI",
                "GGML_AVX512_VNNI",
                "avx512vnni",
                has!("avx512vnni")
            ),
            set!(
                "AVX-512 BF16",
                "GGML_AVX512_BF16",
                "avx512bf16",
                has!("avx512bf16")
            ),
            // Rust has no stable target feature for AMX ("amx-tile" is never enabled, so only
            // the option can turn these on).
            set!("AMX-TILE", "GGML_AMX_TILE", "amx-tile", amx_present(24)),
            set!("AMX-INT8", "GGML_AMX_INT8", "amx-int8", amx_present(25)),
            set!("AMX-BF16", "GGML_AMX_BF16", "amx-bf16", amx_present(22)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &'static str, built: bool, present: bool) -> InstructionSet {
        InstructionSet {
            name,
            ggml_option: match name {
                "AVX2" => "GGML_AVX2",
                "FMA" => "GGML_FMA",
                _ => "GGML_AVX",
            },
            built,
            present,
        }
    }

    #[test]
    fn cmake_values_read_as_cmake_reads_them() {
        for on in ["ON", "on", "1", "TRUE", "yes", " Y "] {
            assert!(cmake_on(Some(on)), "{on}");
        }
        for off in ["OFF", "0", "FALSE", "no", "", "maybe"] {
            assert!(!cmake_on(Some(off)), "{off}");
        }
        assert!(!cmake_on(None));
    }

    #[test]
    fn a_missing_set_is_named_with_the_option_that_rebuilds_without_it() {
        let error = missing_from(vec![
            set("AVX", true, true),
            set("AVX2", true, false),
            set("FMA", true, false),
        ])
        .unwrap_err();
        let names: Vec<&str> = error.missing.iter().map(|set| set.name).collect();
        assert_eq!(names, ["AVX2", "FMA"]);
        let message = error.to_string();
        assert!(
            message.starts_with("this CPU lacks AVX2, FMA, which"),
            "{message}"
        );
        assert!(message.contains("(built for AVX AVX2 FMA)"), "{message}");
        assert!(
            message.contains("`GGML_AVX2=OFF GGML_FMA=OFF make build`"),
            "{message}"
        );
    }

    #[test]
    fn sets_not_built_for_are_not_required() {
        assert_eq!(
            missing_from(vec![set("AVX", true, true), set("AVX2", false, false)]),
            Ok(())
        );
    }

    /// The tests run on the machine that built them, so every set the build uses is there.
    #[test]
    fn the_machine_that_builds_gym_can_run_it() {
        assert_eq!(check(), Ok(()));
    }
}
