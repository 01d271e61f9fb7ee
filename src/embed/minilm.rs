//! The default embedder: int8 MiniLM-L6 (sentence-transformers' all-MiniLM-L6-v2) run by ONNX
//! Runtime through fastembed, mean-pooled over the attention mask and L2-normalized.
//!
//! ONNX Runtime is a shared library loaded at run time (`ORT_DYLIB_PATH`), not linked at build
//! time, so a build needs no download. `make setup` fetches the model and the library into
//! `$GYM_MODELS_DIR` (default `models/`).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use fastembed::{
    InitOptionsUserDefined, Pooling, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel,
};

use super::{EmbedError, Embedder};

/// The model's directory under `$GYM_MODELS_DIR`.
pub const MINILM_DIR: &str = "minilm";
/// The ONNX graph inside the model's directory.
pub const MINILM_MODEL_FILE: &str = "model_int8.onnx";
/// The ONNX Runtime library under `$GYM_MODELS_DIR`, when `ORT_DYLIB_PATH` is not set.
pub const ONNXRUNTIME_FILE: &str = "onnxruntime/libonnxruntime.so.1.31.1";

/// Longest input in tokens; longer texts are truncated. MiniLM was trained on 256-token
/// inputs, and an experience is a sentence of at most a few dozen words.
const MAX_TOKENS: usize = 256;

/// The default model's directory fetched by `scripts/setup`: `$GYM_MODELS_DIR/minilm`.
pub fn default_minilm_dir() -> PathBuf {
    crate::backend::models_dir().join(MINILM_DIR)
}

/// The ONNX Runtime library to load: `$ORT_DYLIB_PATH` when set, else the one `scripts/setup`
/// fetches into `$GYM_MODELS_DIR`.
pub fn default_onnxruntime_path() -> PathBuf {
    match std::env::var_os("ORT_DYLIB_PATH") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => crate::backend::models_dir().join(ONNXRUNTIME_FILE),
    }
}

/// MiniLM-L6 sentence embeddings (384 dimensions) in this process.
///
/// ONNX Runtime sessions need exclusive access to run, so calls are serialized; one call embeds
/// its texts in batches, using every core.
pub struct MiniLmEmbedder {
    model: Mutex<TextEmbedding>,
    dimensions: usize,
    /// `minilm-` and the start of the ONNX file's SHA-256: another export or quantization of
    /// the model gives other vectors.
    space: String,
}

impl std::fmt::Debug for MiniLmEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniLmEmbedder")
            .field("dimensions", &self.dimensions)
            .finish_non_exhaustive()
    }
}

impl MiniLmEmbedder {
    /// Loads the model in `dir` (see [`default_minilm_dir`]) on the ONNX Runtime library from
    /// [`default_onnxruntime_path`].
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        Self::load_with_runtime(dir, &default_onnxruntime_path())
    }

    /// Loads the model in `dir` on the ONNX Runtime library at `onnxruntime`.
    ///
    /// A process loads ONNX Runtime once: after the first successful load, `onnxruntime` is
    /// only checked to exist.
    pub fn load_with_runtime(dir: &Path, onnxruntime: &Path) -> Result<Self, EmbedError> {
        let onnx_file = read(&dir.join(MINILM_MODEL_FILE))?;
        let space = format!("minilm-{}", &super::lookup::sha256_hex(&onnx_file)[..12]);
        let config_path = dir.join("config.json");
        let config_file = read(&config_path)?;
        let dimensions = hidden_size(&config_path, &config_file)?;
        let tokenizer_files = TokenizerFiles {
            tokenizer_file: read(&dir.join("tokenizer.json"))?,
            special_tokens_map_file: read(&dir.join("special_tokens_map.json"))?,
            tokenizer_config_file: read(&dir.join("tokenizer_config.json"))?,
            config_file,
        };
        let environment = onnxruntime_environment(onnxruntime)?;

        let model =
            UserDefinedEmbeddingModel::new(onnx_file, tokenizer_files).with_pooling(Pooling::Mean);
        let options = InitOptionsUserDefined::new()
            .with_max_length(MAX_TOKENS)
            .with_environment(environment);
        let model = TextEmbedding::try_new_from_user_defined(model, options).map_err(|error| {
            EmbedError::ModelLoad {
                dir: dir.to_owned(),
                message: error.to_string(),
            }
        })?;
        Ok(Self {
            model: Mutex::new(model),
            dimensions,
            space,
        })
    }
}

impl Embedder for MiniLmEmbedder {
    fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn space(&self) -> String {
        self.space.clone()
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        // A panic elsewhere while holding the lock leaves the session itself intact.
        let mut model = self.model.lock().unwrap_or_else(PoisonError::into_inner);
        model
            .embed(texts, None)
            .map_err(|error| EmbedError::Inference(error.to_string()))
    }
}

pub(super) fn read(path: &Path) -> Result<Vec<u8>, EmbedError> {
    std::fs::read(path).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => EmbedError::MissingFile {
            path: path.to_owned(),
        },
        _ => EmbedError::BadFile {
            path: path.to_owned(),
            message: error.to_string(),
        },
    })
}

/// The embedding size, from the model's `config.json` (`hidden_size`).
fn hidden_size(path: &Path, config: &[u8]) -> Result<usize, EmbedError> {
    let bad = |message: String| EmbedError::BadFile {
        path: path.to_owned(),
        message,
    };
    let config: serde_json::Value =
        serde_json::from_slice(config).map_err(|error| bad(error.to_string()))?;
    config["hidden_size"]
        .as_u64()
        .filter(|&size| size > 0)
        .map(|size| size as usize)
        .ok_or_else(|| bad("no positive integer `hidden_size`".into()))
}

/// Loads the ONNX Runtime library ourselves (left to `ort`, a missing library is a panic at
/// the first session) and builds the one ONNX Runtime environment a process may have, shared
/// by every session Gym opens: MiniLM's, and the distiller's in [`super::distill`].
pub(super) fn onnxruntime_environment(
    path: &Path,
) -> Result<ort::environment::Environment, EmbedError> {
    static ENVIRONMENT: Mutex<Option<ort::environment::Environment>> = Mutex::new(None);
    // Absolute, so that `ort` does not look for a relative path next to the executable.
    let absolute = std::fs::canonicalize(path).map_err(|_| EmbedError::OnnxRuntimeMissing {
        path: path.to_owned(),
    })?;
    if !absolute.is_file() {
        return Err(EmbedError::OnnxRuntimeMissing {
            path: path.to_owned(),
        });
    }
    let mut environment = ENVIRONMENT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(environment) = environment.as_ref() {
        return Ok(environment.clone());
    }
    let load_error = |message: String| EmbedError::OnnxRuntimeLoad {
        path: path.to_owned(),
        message,
    };
    let built = ort::init_from(&absolute)
        .map_err(|error| load_error(error.to_string()))?
        .build()
        .map_err(|error| load_error(error.to_string()))?;
    *environment = Some(built.clone());
    Ok(built)
}

/// The real model for the tests of this module and its parent, loaded once per test binary.
#[cfg(test)]
pub(crate) mod test_support {
    use std::path::PathBuf;
    use std::sync::OnceLock;

    use super::{MINILM_DIR, MiniLmEmbedder, ONNXRUNTIME_FILE};

    /// `$GYM_MODELS_DIR`, else `models/` in the checkout (where `make setup` puts it in CI).
    pub(crate) fn models_dir() -> PathBuf {
        std::env::var_os("GYM_MODELS_DIR").map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models"),
            PathBuf::from,
        )
    }

    /// `$ORT_DYLIB_PATH`, else the library `make setup` fetches into the checkout.
    pub(crate) fn onnxruntime_path() -> PathBuf {
        match std::env::var_os("ORT_DYLIB_PATH") {
            Some(path) if !path.is_empty() => PathBuf::from(path),
            _ => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("models")
                .join(ONNXRUNTIME_FILE),
        }
    }

    pub(crate) fn embedder() -> &'static MiniLmEmbedder {
        static EMBEDDER: OnceLock<MiniLmEmbedder> = OnceLock::new();
        EMBEDDER.get_or_init(|| {
            MiniLmEmbedder::load_with_runtime(&models_dir().join(MINILM_DIR), &onnxruntime_path())
                .unwrap_or_else(|error| panic!("load the MiniLM model (run `make setup`): {error}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::test_support::{embedder, models_dir, onnxruntime_path};
    use super::*;
    use crate::embed::cosine;

    fn strings(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|text| text.to_string()).collect()
    }

    #[test]
    fn vectors_have_384_unit_length_dimensions() {
        let embedder = embedder();
        assert_eq!(embedder.dimensions(), 384);
        let vectors = embedder
            .embed(&strings(&[
                "When sharing items equally, divide the total by the number of people.",
                "x",
                "",
            ]))
            .expect("embed");
        assert_eq!(vectors.len(), 3);
        for vector in &vectors {
            assert_eq!(vector.len(), 384);
            let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
        }
        assert!(embedder.embed(&[]).expect("embed nothing").is_empty());
    }

    #[test]
    fn a_text_embeds_the_same_alone_and_in_a_batch() {
        let text = "When a price is discounted by a percentage, multiply by one minus the rate.";
        let alone = embedder().embed(&strings(&[text])).expect("embed");
        let batch = embedder()
            .embed(&strings(&[
                "A much longer sentence that forces the batch to be padded well beyond the other one.",
                text,
            ]))
            .expect("embed");
        assert!(cosine(&alone[0], &batch[1]) > 0.9999);
    }

    #[test]
    fn a_paraphrase_is_closer_than_an_unrelated_rule() {
        let vectors = embedder()
            .embed(&strings(&[
                "When sharing items equally, divide the total by the number of people.",
                "When splitting things evenly among a group, divide the total by the group size.",
                "When a train's speed and travel time are given, multiply them for the distance.",
            ]))
            .expect("embed");
        let paraphrase = cosine(&vectors[0], &vectors[1]);
        let unrelated = cosine(&vectors[0], &vectors[2]);
        assert!(
            paraphrase > unrelated + 0.2,
            "paraphrase {paraphrase}, unrelated {unrelated}"
        );
    }

    #[test]
    fn a_missing_model_dir_is_named_with_a_hint() {
        let dir = models_dir().join("no-such-model");
        let error = MiniLmEmbedder::load_with_runtime(&dir, &onnxruntime_path())
            .expect_err("no model there");
        assert!(matches!(error, EmbedError::MissingFile { .. }), "{error:?}");
        let message = error.to_string();
        assert!(
            message.contains(&dir.join(MINILM_MODEL_FILE).display().to_string()),
            "{message}"
        );
        assert!(message.contains("make setup"), "{message}");
    }

    #[test]
    fn a_missing_onnxruntime_is_an_error_naming_ort_dylib_path() {
        let runtime = models_dir().join("no-such-libonnxruntime.so");
        let error = MiniLmEmbedder::load_with_runtime(&models_dir().join(MINILM_DIR), &runtime)
            .expect_err("no runtime there");
        assert!(
            matches!(error, EmbedError::OnnxRuntimeMissing { .. }),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(message.contains("ORT_DYLIB_PATH"), "{message}");
        assert!(
            message.contains(&runtime.display().to_string()),
            "{message}"
        );
    }

    #[test]
    fn a_bad_config_is_named() {
        let path = Path::new("config.json");
        let error = hidden_size(path, br#"{"hidden_size": "wide"}"#).expect_err("no size");
        assert!(error.to_string().contains("config.json"), "{error}");
        assert_eq!(
            hidden_size(path, br#"{"hidden_size": 384}"#).ok(),
            Some(384)
        );
    }

    /// Not a benchmark: prints the time to embed 100 experience-sized sentences in one call
    /// (`cargo test … -- --nocapture`), to keep the cost of deduplication in view.
    #[test]
    fn embeds_a_hundred_sentences() {
        let embedder = embedder();
        embedder.embed(&strings(&["warm up"])).expect("embed");
        let texts: Vec<String> = (0..100)
            .map(|i| {
                format!(
                    "When a problem mentions {i} items shared among {} people, divide before rounding.",
                    i % 7 + 2
                )
            })
            .collect();
        let start = Instant::now();
        let vectors = embedder.embed(&texts).expect("embed");
        println!(
            "embedded {} sentences in {:.1} ms",
            vectors.len(),
            start.elapsed().as_secs_f64() * 1000.0
        );
        assert_eq!(vectors.len(), 100);
    }
}
