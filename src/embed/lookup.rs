//! The static embedder: a sentence vector is the normalized mean of its tokens' rows in a
//! lookup table (the model2vec method), so a new question costs a tokenization and a few
//! hundred additions instead of a transformer forward pass.
//!
//! A model directory holds model2vec's layout plus a manifest:
//!
//! | file | what |
//! |---|---|
//! | `model.safetensors` | tensor `embeddings`, `f32`, `[vocabulary, dimensions]`, each row already weighted |
//! | `tokenizer.json` | the Hugging Face tokenizer whose ids index the rows |
//! | `manifest.json` | the SHA-256 of both files (checked at load), and how the table was made |
//!
//! `gym embed distill` builds one from the MiniLM model ([`super::static_table`]). Its vectors live
//! in their own space, not MiniLM's: a library searched with static query vectors must have its
//! experiences embedded by the same table, which [`crate::retrieve::Retriever`] does when it is
//! given this embedder.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use tokenizers::Tokenizer;

use super::minilm::read;
use super::{EmbedError, Embedder};

/// The table's file in a model directory.
pub const TABLE_FILE: &str = "model.safetensors";
/// The tokenizer's file in a model directory.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// The manifest's file in a model directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The tensor holding the rows, as model2vec names it.
pub const TABLE_TENSOR: &str = "embeddings";
/// The directory `gym embed distill` writes under `$GYM_MODELS_DIR` by default.
pub const STATIC_DIR: &str = "minilm-static";

/// Tokens averaged per text; the rest of a longer text is not read. A question or an
/// experience is far shorter; the bound keeps a huge request's cost fixed.
pub const MAX_TOKENS: usize = 512;
/// Bytes of a text handed to the tokenizer: enough for [`MAX_TOKENS`] tokens of English (about
/// 4 bytes each), so that tokenizing a megabyte request never happens.
pub const MAX_TEXT_BYTES: usize = 8 * 1024;

/// What `manifest.json` records about a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// How the rows were made, in words.
    pub method: String,
    /// Rows in the table (the tokenizer's vocabulary).
    pub vocabulary: usize,
    /// Numbers per row.
    pub dimensions: usize,
    /// SHA-256 (hex) of `model.safetensors`.
    pub table_sha256: String,
    /// SHA-256 (hex) of `tokenizer.json`.
    pub tokenizer_sha256: String,
    /// SHA-256 (hex) of each source file the table was made from, by file name.
    pub sources: std::collections::BTreeMap<String, String>,
}

/// The default model directory: `$GYM_MODELS_DIR/minilm-static` (default `models/`).
pub fn default_static_dir() -> PathBuf {
    crate::backend::models_dir().join(STATIC_DIR)
}

/// SHA-256 of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Sentence vectors from a token lookup table.
pub struct StaticEmbedder {
    tokenizer: Tokenizer,
    /// Row-major `[vocabulary, dimensions]`.
    table: Vec<f32>,
    dimensions: usize,
    /// Ids that carry no meaning of the text (`[CLS]`, `[SEP]`, `[PAD]`, `[UNK]`, …): skipped.
    skipped: HashSet<u32>,
    manifest: Manifest,
}

impl std::fmt::Debug for StaticEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticEmbedder")
            .field("dimensions", &self.dimensions)
            .field("table_sha256", &self.manifest.table_sha256)
            .finish_non_exhaustive()
    }
}

impl StaticEmbedder {
    /// Loads the model in `dir` (see [`default_static_dir`]), checking both files against the
    /// manifest's hashes, so that a table that was changed or half written is refused.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let manifest_path = dir.join(MANIFEST_FILE);
        let manifest: Manifest =
            serde_json::from_slice(&read(&manifest_path)?).map_err(|error| {
                EmbedError::BadFile {
                    path: manifest_path.clone(),
                    message: error.to_string(),
                }
            })?;
        let table_path = dir.join(TABLE_FILE);
        let table_bytes = read(&table_path)?;
        check_hash(&table_path, &table_bytes, &manifest.table_sha256)?;
        let tokenizer_path = dir.join(TOKENIZER_FILE);
        let tokenizer_bytes = read(&tokenizer_path)?;
        check_hash(
            &tokenizer_path,
            &tokenizer_bytes,
            &manifest.tokenizer_sha256,
        )?;
        Self::from_parts(
            &tokenizer_path,
            &tokenizer_bytes,
            &table_path,
            &table_bytes,
            manifest,
        )
    }

    /// An embedder over a table and tokenizer already read (the paths only name them in errors).
    pub(super) fn from_parts(
        tokenizer_path: &Path,
        tokenizer_bytes: &[u8],
        table_path: &Path,
        table_bytes: &[u8],
        manifest: Manifest,
    ) -> Result<Self, EmbedError> {
        let bad = |path: &Path, message: String| EmbedError::BadFile {
            path: path.to_owned(),
            message,
        };
        let mut tokenizer = Tokenizer::from_bytes(tokenizer_bytes)
            .map_err(|error| bad(tokenizer_path, error.to_string()))?;
        // MiniLM's tokenizer pads and truncates to 128 for batches; a mean wants neither.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|error| bad(tokenizer_path, error.to_string()))?;
        let skipped: HashSet<u32> = tokenizer
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, token)| token.special)
            .map(|(id, _)| id)
            .collect();

        let tensors = safetensors::SafeTensors::deserialize(table_bytes)
            .map_err(|error| bad(table_path, error.to_string()))?;
        let view = tensors
            .tensor(TABLE_TENSOR)
            .map_err(|error| bad(table_path, error.to_string()))?;
        if view.dtype() != safetensors::Dtype::F32 {
            return Err(bad(
                table_path,
                format!("tensor `{TABLE_TENSOR}` is {:?}, not F32", view.dtype()),
            ));
        }
        let &[rows, dimensions] = view.shape() else {
            return Err(bad(
                table_path,
                format!(
                    "tensor `{TABLE_TENSOR}` has shape {:?}, not [vocabulary, dimensions]",
                    view.shape()
                ),
            ));
        };
        let vocabulary = tokenizer.get_vocab_size(true);
        if rows != vocabulary || dimensions == 0 {
            return Err(bad(
                table_path,
                format!(
                    "{rows} rows of {dimensions} numbers for a tokenizer of {vocabulary} tokens"
                ),
            ));
        }
        let table: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|bytes| f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
            .collect();
        if let Some(position) = table.iter().position(|x| !x.is_finite()) {
            return Err(bad(
                table_path,
                format!(
                    "row {} holds a number that is not finite",
                    position / dimensions
                ),
            ));
        }
        Ok(Self {
            tokenizer,
            table,
            dimensions,
            skipped,
            manifest,
        })
    }

    /// The manifest the table was loaded with.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn embed_one(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let encoding = self
            .tokenizer
            .encode_fast(bounded(text, MAX_TEXT_BYTES), false)
            .map_err(|error| EmbedError::Inference(format!("tokenizing: {error}")))?;
        let mut sum = vec![0.0f32; self.dimensions];
        let ids = encoding
            .get_ids()
            .iter()
            .filter(|id| !self.skipped.contains(id))
            .take(MAX_TOKENS);
        for &id in ids {
            let start = id as usize * self.dimensions;
            // The tokenizer's ids are below its vocabulary size, which load checked is the
            // number of rows; `get` keeps a wrong id from panicking all the same.
            if let Some(row) = self.table.get(start..start + self.dimensions) {
                for (total, x) in sum.iter_mut().zip(row) {
                    *total += x;
                }
            }
        }
        // The mean's scale vanishes in the normalization; a text with no known token stays 0.
        let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            sum.iter_mut().for_each(|x| *x /= norm);
        }
        Ok(sum)
    }
}

impl Embedder for StaticEmbedder {
    fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// `static-` and the start of the table's SHA-256 (checked at load).
    fn space(&self) -> String {
        let hash = &self.manifest.table_sha256;
        format!("static-{}", &hash[..hash.len().min(12)])
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        texts.iter().map(|text| self.embed_one(text)).collect()
    }
}

/// The longest prefix of `text` of at most `limit` bytes that ends on a character boundary.
fn bounded(text: &str, limit: usize) -> &str {
    &text[..text.floor_char_boundary(limit)]
}

fn check_hash(path: &Path, bytes: &[u8], expected: &str) -> Result<(), EmbedError> {
    let got = sha256_hex(bytes);
    if got == expected {
        Ok(())
    } else {
        Err(EmbedError::BadFile {
            path: path.to_owned(),
            message: format!(
                "SHA-256 {got} is not the manifest's {expected} (rebuild it with `gym embed distill`)"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::embed::minilm::MINILM_DIR;
    use crate::embed::minilm::test_support::models_dir;

    const DIMENSIONS: usize = 8;

    fn tokenizer_bytes() -> Vec<u8> {
        std::fs::read(models_dir().join(MINILM_DIR).join(TOKENIZER_FILE))
            .expect("MiniLM's tokenizer.json (run `make setup`)")
    }

    /// Row `id`: numbers made from the id alone, different for every token.
    fn row(id: usize) -> Vec<f32> {
        (0..DIMENSIONS)
            .map(|d| ((id * 31 + d * 7) % 97) as f32 / 97.0 - 0.5)
            .collect()
    }

    /// A model directory holding MiniLM's tokenizer and a made-up table over its vocabulary.
    fn write_model(dir: &Path) {
        let tokenizer = tokenizer_bytes();
        let vocabulary = Tokenizer::from_bytes(&tokenizer)
            .unwrap()
            .get_vocab_size(true);
        let bytes: Vec<u8> = (0..vocabulary)
            .flat_map(row)
            .flat_map(f32::to_le_bytes)
            .collect();
        let view = safetensors::tensor::TensorView::new(
            safetensors::Dtype::F32,
            vec![vocabulary, DIMENSIONS],
            &bytes,
        )
        .unwrap();
        let table = safetensors::serialize([(TABLE_TENSOR, view)], None).unwrap();
        let manifest = Manifest {
            method: "test rows".into(),
            vocabulary,
            dimensions: DIMENSIONS,
            table_sha256: sha256_hex(&table),
            tokenizer_sha256: sha256_hex(&tokenizer),
            sources: BTreeMap::new(),
        };
        std::fs::write(dir.join(TABLE_FILE), table).unwrap();
        std::fs::write(dir.join(TOKENIZER_FILE), tokenizer).unwrap();
        std::fs::write(
            dir.join(MANIFEST_FILE),
            serde_json::to_vec(&manifest).unwrap(),
        )
        .unwrap();
    }

    fn model() -> (tempfile::TempDir, StaticEmbedder) {
        let dir = tempfile::tempdir().unwrap();
        write_model(dir.path());
        let embedder = StaticEmbedder::load(dir.path()).expect("load");
        (dir, embedder)
    }

    fn embed(embedder: &StaticEmbedder, text: &str) -> Vec<f32> {
        embedder.embed(&[text.to_owned()]).unwrap().remove(0)
    }

    fn normalized_mean(ids: &[u32]) -> Vec<f32> {
        let mut sum = [0.0f32; DIMENSIONS];
        for &id in ids {
            for (total, x) in sum.iter_mut().zip(row(id as usize)) {
                *total += x;
            }
        }
        let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
        sum.iter().map(|x| x / norm).collect()
    }

    fn assert_close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn a_vector_is_the_normalized_mean_of_its_word_pieces() {
        let (_dir, embedder) = model();
        assert_eq!(embedder.dimensions(), DIMENSIONS);
        let ids: Vec<u32> = ["when", "sharing", "items", ",", "divide", "."]
            .iter()
            .map(|token| embedder.tokenizer.token_to_id(token).expect(token))
            .collect();
        let text = "When sharing items, DIVIDE.";
        let vector = embed(&embedder, text);
        assert_close(&vector, &normalized_mean(&ids));
        // The same text, alone or in a batch, any number of times: the same numbers.
        let batch = embedder
            .embed(&[
                String::from("other words"),
                text.to_owned(),
                text.to_owned(),
            ])
            .unwrap();
        assert_eq!(batch[1], vector);
        assert_eq!(batch[2], vector);
        assert_ne!(batch[0], vector);
    }

    #[test]
    fn empty_text_is_a_zero_vector() {
        let (_dir, embedder) = model();
        for text in ["", "   \n\t"] {
            assert_eq!(embed(&embedder, text), vec![0.0; DIMENSIONS], "{text:?}");
        }
        assert!(embedder.embed(&[]).unwrap().is_empty());
    }

    #[test]
    fn unknown_tokens_count_for_nothing() {
        let (_dir, embedder) = model();
        // WordPiece reads no word longer than 100 characters: it is `[UNK]`.
        let unknown = "q".repeat(101);
        let unknown = unknown.as_str();
        let ids = embedder.tokenizer.encode_fast(unknown, false).unwrap();
        assert_eq!(
            ids.get_ids(),
            [embedder.tokenizer.token_to_id("[UNK]").unwrap()],
            "the test needs a text MiniLM's vocabulary lacks"
        );
        assert_eq!(embed(&embedder, unknown), vec![0.0; DIMENSIONS]);
        assert_eq!(
            embed(&embedder, &format!("divide {unknown} evenly")),
            embed(&embedder, "divide evenly")
        );
        // Special tokens written in the text are not read as words either.
        assert_eq!(
            embed(&embedder, "[CLS] divide evenly [SEP]"),
            embed(&embedder, "divide evenly")
        );
    }

    #[test]
    fn a_long_text_is_read_up_to_its_bound() {
        let (_dir, embedder) = model();
        // 600 words that are one token each, then a different word past the bound.
        let long = format!("{}banana", "apple ".repeat(600));
        assert_close(&embed(&embedder, &long), &embed(&embedder, "apple"));
        // A megabyte of text costs what its first few kilobytes do.
        let huge = "divide ".repeat(150_000);
        let started = std::time::Instant::now();
        assert_close(&embed(&embedder, &huge), &embed(&embedder, "divide"));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        // A bound inside a multi-byte character is moved back to its start.
        let accents = "é".repeat(MAX_TEXT_BYTES);
        assert!(bounded(&accents, MAX_TEXT_BYTES + 1).len() == MAX_TEXT_BYTES);
    }

    #[test]
    fn a_changed_table_is_refused_by_its_hash() {
        let dir = tempfile::tempdir().unwrap();
        write_model(dir.path());
        let table = dir.path().join(TABLE_FILE);
        let mut bytes = std::fs::read(&table).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&table, bytes).unwrap();
        let error = StaticEmbedder::load(dir.path()).expect_err("tampered table");
        let message = error.to_string();
        assert!(message.contains(&table.display().to_string()), "{message}");
        assert!(message.contains("gym embed distill"), "{message}");
    }

    #[test]
    fn a_missing_manifest_or_a_table_of_the_wrong_size_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let error = StaticEmbedder::load(dir.path()).expect_err("nothing there");
        assert!(matches!(error, EmbedError::MissingFile { .. }), "{error:?}");
        assert!(error.to_string().contains(MANIFEST_FILE), "{error}");

        let tokenizer = tokenizer_bytes();
        let bytes = vec![0u8; 10 * DIMENSIONS * 4];
        let view = safetensors::tensor::TensorView::new(
            safetensors::Dtype::F32,
            vec![10, DIMENSIONS],
            &bytes,
        )
        .unwrap();
        let table = safetensors::serialize([(TABLE_TENSOR, view)], None).unwrap();
        let manifest = Manifest {
            method: String::new(),
            vocabulary: 10,
            dimensions: DIMENSIONS,
            table_sha256: sha256_hex(&table),
            tokenizer_sha256: sha256_hex(&tokenizer),
            sources: BTreeMap::new(),
        };
        let error = StaticEmbedder::from_parts(
            Path::new(TOKENIZER_FILE),
            &tokenizer,
            Path::new(TABLE_FILE),
            &table,
            manifest,
        )
        .expect_err("10 rows for 30522 tokens");
        assert!(
            error
                .to_string()
                .contains("10 rows of 8 numbers for a tokenizer of 30522 tokens"),
            "{error}"
        );
    }
}
