//! An embedder for tests whose vectors a reader can work out by hand.

use super::{EmbedError, Embedder};

/// Counts of each letter of the lower-cased text, folded into `width` buckets: texts with the
/// same letters get the same vector, and two widths are two spaces.
pub(crate) struct Letters {
    pub width: usize,
}

impl Embedder for Letters {
    fn dimensions(&self) -> usize {
        self.width
    }

    fn space(&self) -> String {
        format!("letters-{}", self.width)
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|text| {
                let mut vector = vec![0.0; self.width];
                for byte in text.to_lowercase().bytes().filter(u8::is_ascii_lowercase) {
                    vector[usize::from(byte - b'a') % self.width] += 1.0;
                }
                vector
            })
            .collect())
    }
}
