//! `gym library similar LIB`: how distinct a version's lessons are, as the MiniLM cosine of
//! every pair of active experiences, most similar first.
//!
//! The same embedder and the same numbers `gym grpo` uses to find near-duplicates, so a user can
//! see why two lessons were (or were not) merged and check a library against a distinctness bar
//! ("no two lessons at cosine ≥ 0.85").

use std::path::Path;
use std::process::ExitCode;

use clap::Args;
use gym::library::{Library, LibraryRef};

/// `gym library similar`.
#[derive(Debug, Args)]
pub struct SimilarArgs {
    /// Library: NAME or NAME@VERSION (default: the latest version).
    library: String,

    /// Pairs at or above this cosine count as near-duplicates (marked and counted).
    #[arg(long, default_value_t = 0.85)]
    above: f32,

    /// How many of the closest pairs to list (every near-duplicate pair is listed anyway).
    #[arg(long, default_value_t = 5)]
    top: usize,

    /// Print JSON: every pair with its ids and cosine, most similar first.
    #[arg(long)]
    json: bool,
}

impl SimilarArgs {
    pub fn run(self, root: &Path) -> anyhow::Result<ExitCode> {
        anyhow::ensure!(
            (-1.0..=1.0).contains(&self.above),
            "--above must be a cosine in -1..=1, not {}",
            self.above
        );
        let LibraryRef { name, version } = self.library.parse()?;
        let library = Library::open(root, &name)?;
        let version = version.unwrap_or_else(|| library.head_version());
        let state = library.checkout(version)?;
        let experiences: Vec<_> = state.active().collect();
        let texts: Vec<String> = experiences.iter().map(|e| e.text.clone()).collect();
        let Some(embedder) = super::args::backend::load_embedder()? else {
            anyhow::bail!(
                "`gym library similar` needs the MiniLM embedder: build with the `embed` feature"
            );
        };
        let pairs = gym::embed::closest_pairs(embedder.as_ref(), &texts)?;
        let near = pairs.iter().filter(|p| p.similarity >= self.above).count();
        if self.json {
            let pairs: Vec<serde_json::Value> = pairs
                .iter()
                .map(|pair| {
                    serde_json::json!({
                        "first": experiences[pair.first].id.to_string(),
                        "second": experiences[pair.second].id.to_string(),
                        "cosine": (f64::from(pair.similarity) * 1000.0).round() / 1000.0,
                    })
                })
                .collect();
            let report = serde_json::json!({
                "library": name,
                "version": version,
                "experiences": experiences.len(),
                "above": self.above,
                "near_duplicates": near,
                "pairs": pairs,
            });
            println!("{}", serde_json::to_string_pretty(&report)?);
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "library `{name}` v{version}: {} active experience{}, {} pair{}",
            experiences.len(),
            if experiences.len() == 1 { "" } else { "s" },
            pairs.len(),
            if pairs.len() == 1 { "" } else { "s" },
        );
        for pair in pairs.iter().take(self.top.max(near)) {
            let mark = if pair.similarity >= self.above {
                " near-duplicate"
            } else {
                ""
            };
            println!("{:.3}{mark}", pair.similarity);
            for index in [pair.first, pair.second] {
                let experience = experiences[index];
                println!(
                    "  {} [{}] {}",
                    experience.id, experience.domain, experience.text
                );
            }
        }
        if !pairs.is_empty() {
            match near {
                0 => println!(
                    "distinct: no two experiences at cosine >= {:.2} (closest {:.3})",
                    self.above, pairs[0].similarity
                ),
                n => println!(
                    "{n} pair{} at cosine >= {:.2}",
                    if n == 1 { "" } else { "s" },
                    self.above
                ),
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}
