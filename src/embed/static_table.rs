//! Builds the token table a [`StaticEmbedder`](super::lookup::StaticEmbedder) looks vectors up
//! in (`gym embed distill`), from the MiniLM model Gym already ships, by model2vec's
//! distillation: every vocabulary token is run through MiniLM alone (`[CLS] token [SEP]`,
//! mean-pooled, what MiniLM's sentence vector of that one token is), the rows are centred on
//! their mean (the direction every MiniLM output shares says nothing about a text), and each
//! row is weighted by `a / (a + p)` where `p` is the token's probability under a Zipf law over
//! its vocabulary rank (SIF weighting, `a` = 1e-4): frequent tokens weigh less.
//!
//! No hub is reachable to fetch a ready-made model2vec model, and no package ships one; the
//! distillation needs only the files `make setup` already fetched. It runs ONNX Runtime with
//! deterministic kernels on a fixed number of threads, so the same model files give the same
//! table, whose SHA-256 the manifest records.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use ort::session::Session;
use ort::value::Tensor;
use tokenizers::Tokenizer;

use super::EmbedError;
use super::lookup::{
    MANIFEST_FILE, Manifest, StaticEmbedder, TABLE_FILE, TABLE_TENSOR, TOKENIZER_FILE, sha256_hex,
};
use super::minilm::{MINILM_MODEL_FILE, onnxruntime_environment, read};

/// SIF's `a`: the probability at which a token's weight is one half.
const SIF_COEFFICIENT: f64 = 1e-4;
/// Tokens run through MiniLM per call.
const BATCH: usize = 512;
/// ONNX Runtime threads: fixed, so that the reductions run in the same order on every machine.
const THREADS: usize = 2;

/// What [`build`] wrote.
#[derive(Debug, Clone)]
pub struct BuiltTable {
    pub dir: PathBuf,
    pub manifest: Manifest,
    pub seconds: f64,
}

/// Builds the table from the MiniLM model in `minilm_dir` (run on the ONNX Runtime library at
/// `onnxruntime`) into a static model in `out`, replacing any there. The manifest is written last, so an
/// interrupted run leaves a directory [`StaticEmbedder::load`] refuses.
pub fn build(minilm_dir: &Path, onnxruntime: &Path, out: &Path) -> Result<BuiltTable, EmbedError> {
    let started = Instant::now();
    let tokenizer_path = minilm_dir.join(TOKENIZER_FILE);
    let tokenizer_bytes = read(&tokenizer_path)?;
    let onnx_path = minilm_dir.join(MINILM_MODEL_FILE);
    let onnx_bytes = read(&onnx_path)?;
    let bad_tokenizer = |message: String| EmbedError::BadFile {
        path: tokenizer_path.clone(),
        message,
    };
    let tokenizer = Tokenizer::from_bytes(&tokenizer_bytes)
        .map_err(|error| bad_tokenizer(error.to_string()))?;
    let special = |name: &str| {
        tokenizer
            .token_to_id(name)
            .ok_or_else(|| bad_tokenizer(format!("no `{name}` token")))
    };
    let (cls, sep) = (special("[CLS]")?, special("[SEP]")?);
    let vocabulary = tokenizer.get_vocab_size(true);

    let environment = onnxruntime_environment(onnxruntime)?;
    let load_error = |message: String| EmbedError::ModelLoad {
        dir: minilm_dir.to_owned(),
        message,
    };
    let mut session = Session::builder(&environment)
        .map_err(|error| load_error(error.to_string()))?
        .with_intra_threads(THREADS)
        .map_err(|error| load_error(error.to_string()))?
        .with_deterministic_compute(true)
        .map_err(|error| load_error(error.to_string()))?
        .commit_from_memory(&onnx_bytes)
        .map_err(|error| load_error(error.to_string()))?;
    let wants_token_types = session
        .inputs()
        .iter()
        .any(|input| input.name() == "token_type_ids");

    let mut rows: Vec<f32> = Vec::new();
    let mut dimensions = 0;
    let ids: Vec<i64> = (0..vocabulary as i64).collect();
    for batch in ids.chunks(BATCH) {
        let (batch_rows, width) = token_vectors(&mut session, batch, cls, sep, wants_token_types)?;
        dimensions = width;
        rows.extend(batch_rows);
    }
    if dimensions == 0 {
        return Err(EmbedError::BadOutput {
            expected: format!("vectors for {vocabulary} tokens"),
            got: "none".into(),
        });
    }
    center_and_weight(&mut rows, dimensions);

    let bytes: Vec<u8> = rows.iter().flat_map(|x| x.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        vec![vocabulary, dimensions],
        &bytes,
    )
    .and_then(|view| safetensors::serialize([(TABLE_TENSOR, view)], None))
    .map_err(|error| EmbedError::Inference(format!("writing the table: {error}")))?;
    let manifest = Manifest {
        method: format!(
            "model2vec distillation of {MINILM_MODEL_FILE}: mean-pooled [CLS] token [SEP] \
             per vocabulary token, centred, SIF-weighted by Zipf rank (a = {SIF_COEFFICIENT})"
        ),
        vocabulary,
        dimensions,
        table_sha256: sha256_hex(&view),
        tokenizer_sha256: sha256_hex(&tokenizer_bytes),
        sources: BTreeMap::from([
            (MINILM_MODEL_FILE.to_owned(), sha256_hex(&onnx_bytes)),
            (TOKENIZER_FILE.to_owned(), sha256_hex(&tokenizer_bytes)),
        ]),
    };
    // The table must load before it is published.
    StaticEmbedder::from_parts(
        &tokenizer_path,
        &tokenizer_bytes,
        &out.join(TABLE_FILE),
        &view,
        manifest.clone(),
    )?;
    let manifest_json = serde_json::to_vec_pretty(&manifest)
        .map_err(|error| EmbedError::Inference(error.to_string()))?;
    std::fs::create_dir_all(out).map_err(|error| write_error(out, error))?;
    // Without a manifest nothing loads: it goes first out, and last in.
    remove_if_there(&out.join(MANIFEST_FILE))?;
    write_atomically(&out.join(TABLE_FILE), &view)?;
    write_atomically(&out.join(TOKENIZER_FILE), &tokenizer_bytes)?;
    write_atomically(&out.join(MANIFEST_FILE), &manifest_json)?;
    Ok(BuiltTable {
        dir: out.to_owned(),
        manifest,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// MiniLM's mean-pooled output for each token alone between `[CLS]` and `[SEP]`.
fn token_vectors(
    session: &mut Session,
    batch: &[i64],
    cls: u32,
    sep: u32,
    wants_token_types: bool,
) -> Result<(Vec<f32>, usize), EmbedError> {
    let inference = |error: ort::Error| EmbedError::Inference(error.to_string());
    let input_ids: Vec<i64> = batch
        .iter()
        .flat_map(|&id| [i64::from(cls), id, i64::from(sep)])
        .collect();
    let shape = [batch.len(), 3];
    let mut inputs = ort::inputs![
        "input_ids" => Tensor::from_array((shape, input_ids)).map_err(inference)?,
        "attention_mask" => Tensor::from_array((shape, vec![1i64; batch.len() * 3])).map_err(inference)?,
    ];
    if wants_token_types {
        inputs.push((
            "token_type_ids".into(),
            Tensor::from_array((shape, vec![0i64; batch.len() * 3]))
                .map_err(inference)?
                .into(),
        ));
    }
    let outputs = session.run(inputs).map_err(inference)?;
    let (shape, hidden) = outputs[0].try_extract_tensor::<f32>().map_err(inference)?;
    let &[count, positions, width] = &shape[..] else {
        return Err(EmbedError::BadOutput {
            expected: "a [batch, 3, hidden] tensor".into(),
            got: format!("shape {shape:?}"),
        });
    };
    let (count, positions, width) = (count as usize, positions as usize, width as usize);
    if count != batch.len() || positions != 3 {
        return Err(EmbedError::BadOutput {
            expected: format!("[{}, 3, hidden]", batch.len()),
            got: format!("shape {shape:?}"),
        });
    }
    let rows = hidden
        .chunks_exact(positions * width)
        .flat_map(|token| {
            (0..width).map(move |d| {
                (0..positions).map(|p| token[p * width + d]).sum::<f32>() / positions as f32
            })
        })
        .collect();
    Ok((rows, width))
}

/// Subtracts the mean row, then scales row `i` by its SIF weight under a Zipf law on rank `i`.
fn center_and_weight(rows: &mut [f32], dimensions: usize) {
    let count = rows.len() / dimensions;
    let mut mean = vec![0.0f64; dimensions];
    for row in rows.chunks_exact(dimensions) {
        for (total, x) in mean.iter_mut().zip(row) {
            *total += f64::from(*x);
        }
    }
    mean.iter_mut().for_each(|total| *total /= count as f64);
    // Zipf: p(rank) ∝ 1 / (rank + 2), ranks from 0, as model2vec does.
    let harmonic: f64 = (0..count).map(|rank| 1.0 / (rank as f64 + 2.0)).sum();
    for (rank, row) in rows.chunks_exact_mut(dimensions).enumerate() {
        let probability = 1.0 / (rank as f64 + 2.0) / harmonic;
        let weight = SIF_COEFFICIENT / (SIF_COEFFICIENT + probability);
        for (x, centre) in row.iter_mut().zip(&mean) {
            *x = ((f64::from(*x) - centre) * weight) as f32;
        }
    }
}

fn write_error(path: &Path, error: std::io::Error) -> EmbedError {
    EmbedError::BadFile {
        path: path.to_owned(),
        message: format!("cannot be written: {error}"),
    }
}

fn remove_if_there(path: &Path) -> Result<(), EmbedError> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(write_error(path, error)),
        _ => Ok(()),
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), EmbedError> {
    let temporary = path.with_extension("partial");
    std::fs::write(&temporary, bytes).map_err(|error| write_error(&temporary, error))?;
    std::fs::rename(&temporary, path).map_err(|error| write_error(path, error))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::Embedder;
    use crate::embed::cosine;
    use crate::embed::minilm::MINILM_DIR;
    use crate::embed::minilm::test_support::{embedder, models_dir, onnxruntime_path};

    fn session() -> (Session, Tokenizer) {
        let dir = models_dir().join(MINILM_DIR);
        let tokenizer = Tokenizer::from_file(dir.join(TOKENIZER_FILE)).expect("tokenizer");
        // MiniLM's own session first, so that the shared environment is the one it built.
        embedder();
        let environment = onnxruntime_environment(&onnxruntime_path()).expect("environment");
        let session = Session::builder(&environment)
            .expect("builder")
            .with_intra_threads(THREADS)
            .expect("threads")
            .with_deterministic_compute(true)
            .expect("deterministic")
            .commit_from_file(dir.join(MINILM_MODEL_FILE))
            .expect("session");
        (session, tokenizer)
    }

    #[test]
    fn a_tokens_row_is_minilms_vector_of_that_token_alone() {
        let (mut session, tokenizer) = session();
        let (cls, sep) = (
            tokenizer.token_to_id("[CLS]").unwrap(),
            tokenizer.token_to_id("[SEP]").unwrap(),
        );
        let words = ["apple", "divide", "train"];
        let ids: Vec<i64> = words
            .iter()
            .map(|word| i64::from(tokenizer.token_to_id(word).unwrap()))
            .collect();
        let (rows, width) = token_vectors(&mut session, &ids, cls, sep, true).unwrap();
        assert_eq!(width, 384);
        let sentences = embedder().embed(&words.map(String::from)).expect("embed");
        for (row, sentence) in rows.chunks_exact(width).zip(&sentences) {
            assert!(cosine(row, sentence) > 0.999, "{}", cosine(row, sentence));
        }
        // Run again, alone and in another batch: the same bits.
        let (again, _) = token_vectors(&mut session, &ids[1..], cls, sep, true).unwrap();
        assert_eq!(&rows[width..], &again[..]);
    }

    #[test]
    fn rows_are_centred_and_frequent_ranks_weigh_less() {
        let dimensions = 2;
        // Three identical rows: nothing is left once their mean is removed.
        let mut same = vec![1.0, 2.0, 1.0, 2.0, 1.0, 2.0];
        center_and_weight(&mut same, dimensions);
        assert!(same.iter().all(|x| x.abs() < 1e-6), "{same:?}");
        // Rows that differ only in sign by rank: the lower rank (more frequent) is shorter.
        let mut rows: Vec<f32> = (0..1000)
            .flat_map(|rank| {
                if rank % 2 == 0 {
                    [1.0, 0.0]
                } else {
                    [-1.0, 0.0]
                }
            })
            .collect();
        center_and_weight(&mut rows, dimensions);
        let length = |rank: usize| rows[rank * dimensions].abs();
        assert!(
            length(0) < length(10) && length(10) < length(998),
            "{} {} {}",
            length(0),
            length(10),
            length(998)
        );
        assert!(length(998) <= 1.0);
    }
}
