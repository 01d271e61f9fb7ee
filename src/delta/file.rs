//! Delta files (safetensors, written atomically), keyed by the base model's weight names
//! (`blk.0.attn_q.weight`, …):
//!
//! - dense: one f32 `[out, in]` tensor per weight;
//! - BitDelta: per weight `NAME.signs` (u8, packed), `NAME.scales` (f32, one per row) and
//!   `NAME.shape` (u32 `[rows, cols]`).
//!
//! A LoRA adapter directory is read as the dense delta `scale · B·A` of each adapted weight.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use super::DeltaError;
use super::bitdelta::{BitMatrix, Matrix};
use crate::finetune::lora::load_adapters;
use crate::finetune::{ModelConfig, Proj};

/// Weight name → delta.
pub type Dense = BTreeMap<String, Matrix>;
/// Weight name → 1-bit delta.
pub type Bits = BTreeMap<String, BitMatrix>;

fn bad(path: &Path, message: impl Into<String>) -> DeltaError {
    DeltaError::File {
        path: path.to_owned(),
        message: message.into(),
    }
}

fn tensor_err(path: &Path) -> impl Fn(candle_core::Error) -> DeltaError + '_ {
    move |e| bad(path, e.to_string())
}

fn write(path: &Path, tensors: &HashMap<String, Tensor>) -> Result<(), DeltaError> {
    let bytes = safetensors::serialize(tensors, None).map_err(|e| bad(path, e.to_string()))?;
    crate::durable::write(path, &bytes, crate::durable::Replace::Yes)
        .map_err(|e| bad(path, e.to_string()))
}

/// Writes dense deltas.
pub fn write_dense(path: &Path, dense: &Dense) -> Result<(), DeltaError> {
    let mut tensors = HashMap::new();
    for (name, m) in dense {
        let t = Tensor::from_slice(&m.data, (m.rows, m.cols), &Device::Cpu)
            .map_err(tensor_err(path))?;
        tensors.insert(name.clone(), t);
    }
    write(path, &tensors)
}

/// Writes 1-bit deltas.
pub fn write_bits(path: &Path, bits: &Bits) -> Result<(), DeltaError> {
    let mut tensors = HashMap::new();
    let cpu = &Device::Cpu;
    for (name, b) in bits {
        let err = tensor_err(path);
        tensors.insert(
            format!("{name}.signs"),
            Tensor::from_slice(&b.signs, b.signs.len(), cpu).map_err(&err)?,
        );
        tensors.insert(
            format!("{name}.scales"),
            Tensor::from_slice(&b.scales, b.scales.len(), cpu).map_err(&err)?,
        );
        tensors.insert(
            format!("{name}.shape"),
            Tensor::from_slice(&[b.rows as u32, b.cols as u32], 2, cpu).map_err(&err)?,
        );
    }
    write(path, &tensors)
}

/// What a delta file holds.
pub enum DeltaFile {
    Dense(Dense),
    Bits(Bits),
}

impl DeltaFile {
    /// The dense deltas (BitDelta reconstructed).
    pub fn into_dense(self) -> Dense {
        match self {
            DeltaFile::Dense(d) => d,
            DeltaFile::Bits(b) => b
                .into_iter()
                .map(|(k, v)| (k, super::bitdelta::decompress(&v)))
                .collect(),
        }
    }
}

/// Reads a dense or BitDelta file (recognised by its tensor names), checking every size.
pub fn read(path: &Path) -> Result<DeltaFile, DeltaError> {
    let tensors = candle_core::safetensors::load(path, &Device::Cpu).map_err(tensor_err(path))?;
    if tensors.is_empty() {
        return Err(bad(path, "holds no tensors"));
    }
    let err = tensor_err(path);
    if tensors.keys().any(|k| k.ends_with(".signs")) {
        let mut bits = Bits::new();
        for name in tensors.keys().filter_map(|k| k.strip_suffix(".signs")) {
            let get = |part: &str| {
                tensors
                    .get(&format!("{name}.{part}"))
                    .ok_or_else(|| bad(path, format!("`{name}` has no `.{part}`")))
            };
            let shape = get("shape")?.to_dtype(DType::U32).map_err(&err)?;
            let shape = shape.to_vec1::<u32>().map_err(&err)?;
            let [rows, cols] = shape[..] else {
                return Err(bad(path, format!("`{name}.shape` must hold [rows, cols]")));
            };
            let b = BitMatrix {
                rows: rows as usize,
                cols: cols as usize,
                signs: get("signs")?.to_vec1::<u8>().map_err(&err)?,
                scales: get("scales")?.to_vec1::<f32>().map_err(&err)?,
            };
            b.check().map_err(|e| bad(path, format!("`{name}`: {e}")))?;
            bits.insert(name.to_string(), b);
        }
        if tensors.len() != 3 * bits.len() {
            return Err(bad(path, "mixes BitDelta and other tensors"));
        }
        return Ok(DeltaFile::Bits(bits));
    }
    let mut dense = Dense::new();
    for (name, t) in tensors {
        let (rows, cols) = t.dims2().map_err(|e| bad(path, format!("`{name}`: {e}")))?;
        let data = t
            .to_dtype(DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(&err)?;
        dense.insert(
            name,
            Matrix::new(rows, cols, data).map_err(|e| bad(path, e.to_string()))?,
        );
    }
    Ok(DeltaFile::Dense(dense))
}

/// The dense delta `scale · B·A` of every weight a LoRA adapter file adapts.
pub fn from_adapter(path: &Path, model: &ModelConfig) -> Result<Dense, DeltaError> {
    let adapters =
        load_adapters(path, model, &Device::Cpu).map_err(|e| bad(path, e.to_string()))?;
    let err = tensor_err(path);
    let mut dense = Dense::new();
    for ((layer, proj), (a, b)) in &adapters.pairs {
        let delta = (b.matmul(a).map_err(&err)? * adapters.scale).map_err(&err)?;
        let (rows, cols) = delta.dims2().map_err(&err)?;
        let data = delta
            .flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(&err)?;
        dense.insert(
            proj.weight_name(*layer),
            Matrix::new(rows, cols, data).map_err(|e| bad(path, e.to_string()))?,
        );
    }
    Ok(dense)
}

/// `(layer, projection)` of an attention weight name, for merging into the candle model.
pub fn parse_weight_name(name: &str) -> Option<(usize, Proj)> {
    let rest = name.strip_prefix("blk.")?;
    let (layer, part) = rest.split_once('.')?;
    let layer = layer.parse().ok()?;
    Proj::ALL
        .into_iter()
        .find(|p| p.weight_name(layer) == name)
        .filter(|_| !part.is_empty())
        .map(|p| (layer, p))
}

/// Flattens deltas in name order into one vector (for the soup), with the layout to undo it.
pub fn flatten(dense: &Dense) -> (Vec<f32>, Vec<(String, usize, usize)>) {
    let mut values = Vec::new();
    let mut layout = Vec::new();
    for (name, m) in dense {
        values.extend_from_slice(&m.data);
        layout.push((name.clone(), m.rows, m.cols));
    }
    (values, layout)
}

/// Undoes [`flatten`].
pub fn unflatten(values: &[f32], layout: &[(String, usize, usize)]) -> Dense {
    let mut at = 0;
    layout
        .iter()
        .map(|(name, rows, cols)| {
            let n = rows * cols;
            let m = Matrix {
                rows: *rows,
                cols: *cols,
                data: values[at..at + n].to_vec(),
            };
            at += n;
            (name.clone(), m)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::bitdelta::{compress, decompress};

    #[test]
    fn bitdelta_and_dense_files_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let m = Matrix::new(3, 10, (0..30).map(|i| (i as f32 - 14.5) / 7.0).collect()).unwrap();
        let dense: Dense = [("blk.0.attn_q.weight".to_string(), m.clone())].into();
        let path = dir.path().join("d.safetensors");
        write_dense(&path, &dense).unwrap();
        let DeltaFile::Dense(back) = read(&path).unwrap() else {
            panic!("dense expected")
        };
        assert_eq!(back, dense);
        let bits: Bits = [("blk.0.attn_q.weight".to_string(), compress(&m))].into();
        let path = dir.path().join("b.safetensors");
        write_bits(&path, &bits).unwrap();
        let back = read(&path).unwrap().into_dense();
        assert_eq!(
            back["blk.0.attn_q.weight"],
            decompress(&bits["blk.0.attn_q.weight"])
        );
        let (flat, layout) = flatten(&dense);
        assert_eq!(unflatten(&flat, &layout), dense);
        assert_eq!(
            parse_weight_name("blk.12.attn_output.weight"),
            Some((12, Proj::O))
        );
        assert_eq!(parse_weight_name("blk.1.ffn_up.weight"), None);
    }
}
