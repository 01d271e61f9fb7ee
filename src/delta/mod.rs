//! Weight deltas between a fine-tuned model and its base: 1-bit compression ([`bitdelta`]),
//! robust combination of many contributors' deltas ([`soup`]) and differential privacy for the
//! combination ([`privacy`]). The cores work on plain f32 slices and are always built; reading
//! and writing delta files ([`file`]) and fitting BitDelta's scales to the fine-tuned model
//! ([`scale_fit`]) need the `finetune` feature.

pub mod bitdelta;
#[cfg(feature = "finetune")]
pub mod file;
pub mod privacy;
#[cfg(feature = "finetune")]
pub mod scale_fit;
pub mod soup;

/// Why a delta operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DeltaError {
    #[error("shape mismatch: {0}")]
    Shape(String),
    #[error("delta soup: {0}")]
    Soup(String),
    #[error("differential privacy: {0}")]
    Privacy(String),
    #[error("model: {0}")]
    Model(String),
    #[error("delta file {}: {message}", path.display())]
    File {
        path: std::path::PathBuf,
        message: String,
    },
}
