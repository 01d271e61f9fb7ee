//! The `--upstreams` file of `gym serve`: one `[[upstream]]` table per model server, its name,
//! the models it serves, its concurrency limit, and backend flags as keys.

use anyhow::Context as _;
use gym::serve::upstream::Upstream;

use crate::cli::args::backend::BackendArgs;

/// The backend flags of one upstream, parsed from its table's keys.
#[derive(Debug, clap::Parser)]
#[command(no_binary_name = true)]
struct UpstreamFlags {
    #[command(flatten)]
    backend: BackendArgs,
}

/// The upstreams of a `--upstreams` file; llama upstreams queue at most `max_queue` requests
/// and keep prompt prefixes between rounds when `keep_prefixes` says so.
pub(super) fn upstreams_from_file(
    path: &std::path::Path,
    max_queue: usize,
    keep_prefixes: bool,
) -> anyhow::Result<Vec<Upstream>> {
    use clap::Parser as _;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read upstreams {}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .with_context(|| format!("upstreams {}", path.display()))?;
    let entries = table
        .get("upstream")
        .and_then(toml::Value::as_array)
        .with_context(|| format!("{}: no [[upstream]] tables", path.display()))?;
    let mut upstreams = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let at = format!("{}: upstream {}", path.display(), index + 1);
        let mut entry = entry
            .as_table()
            .with_context(|| format!("{at}: not a table"))?
            .clone();
        let name = match entry.remove("name") {
            Some(toml::Value::String(name)) => name,
            Some(_) => anyhow::bail!("{at}: `name` must be a string"),
            None => anyhow::bail!("{at}: `name` is missing"),
        };
        let serves = match entry.remove("serves") {
            None => Vec::new(),
            Some(toml::Value::Array(list)) => list
                .iter()
                .map(|model| model.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .with_context(|| format!("{at}: `serves` takes strings"))?,
            Some(_) => anyhow::bail!("{at}: `serves` must be a list of model names"),
        };
        let max_concurrency = match entry.remove("max-concurrency") {
            None => 8,
            Some(toml::Value::Integer(n)) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX),
            Some(_) => anyhow::bail!("{at}: `max-concurrency` must be a whole number >= 1"),
        };
        // Every other key is a backend flag.
        let flags = crate::cli::config::flags_of(entry, &at)?;
        let mut parsed = UpstreamFlags::try_parse_from(&flags)
            .map_err(|e| anyhow::anyhow!("{at} (`{name}`): {}", e.to_string().trim()))?;
        parsed.backend.max_queue = Some(max_queue);
        parsed.backend.keep_prefixes = keep_prefixes;
        let backend = parsed
            .backend
            .build()
            .with_context(|| format!("{at} (`{name}`)"))?;
        upstreams.push(Upstream::new(name, backend, serves, max_concurrency));
    }
    Ok(upstreams)
}
