//! Import and export: youtu-agent's experience dict, Gym's JSON, and Markdown for people.

use std::collections::BTreeSet;
use std::fmt::{self, Write as _};
use std::path::Path;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::digest::Digest;
use super::error::{LibraryError, strip_position};
use super::id::ExperienceId;
use super::op::{Change, Limits, check_confidence, check_domain};
use super::record::{Evidence, Experience, Provenance};
use super::state::State;
use super::store::Library;

/// Format tag of Gym's JSON export.
pub const JSON_FORMAT: &str = "gym-experiences/1";

/// Export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// Markdown for people: experiences grouped by domain.
    Md,
    /// Gym's JSON: every field of every active experience, with the version's root.
    Json,
    /// youtu-agent's experience dict, `{"G0": "text", …}`, in id order.
    Youtu,
}

/// Gym's JSON export of one version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonExport {
    /// Always [`JSON_FORMAT`].
    pub format: String,
    /// Library name.
    pub library: String,
    /// Version exported.
    pub version: u64,
    /// Its Merkle root.
    pub root: Digest,
    /// Its active experiences in id order.
    pub experiences: Vec<Experience>,
}

/// Renders the active experiences of `state` (version `version` of `library`) in `format`.
pub fn export(
    library: &Library,
    version: u64,
    state: &State,
    format: ExportFormat,
) -> Result<String, LibraryError> {
    let root = library.version(version)?.root;
    Ok(match format {
        ExportFormat::Json => {
            let export = JsonExport {
                format: JSON_FORMAT.to_owned(),
                library: library.name().to_owned(),
                version,
                root,
                experiences: state.active().cloned().collect(),
            };
            let mut text = serde_json::to_string_pretty(&export).expect("exports serialize");
            text.push('\n');
            text
        }
        ExportFormat::Youtu => {
            // serde_json's map would sort G10 before G2; write the object by hand in id order.
            let mut text = String::from("{");
            for (index, experience) in state.active().enumerate() {
                let separator = if index == 0 { "\n" } else { ",\n" };
                let value = serde_json::to_string(&experience.text).expect("strings serialize");
                write!(text, "{separator}  \"G{index}\": {value}").expect("writing to a String");
            }
            text.push_str(if state.active_count() == 0 {
                "}\n"
            } else {
                "\n}\n"
            });
            text
        }
        ExportFormat::Md => markdown(library.name(), version, root, state),
    })
}

fn markdown(name: &str, version: u64, root: Digest, state: &State) -> String {
    let mut text = format!(
        "# Experience library `{name}`, version {version}\n\n{} active experiences. Merkle root `{root}`.\n",
        state.active_count()
    );
    let domains: BTreeSet<&str> = state
        .active()
        .map(|experience| experience.domain.as_str())
        .collect();
    for domain in domains {
        write!(text, "\n## {domain}\n\n").expect("writing to a String");
        for experience in state
            .active()
            .filter(|experience| experience.domain == domain)
        {
            writeln!(
                text,
                "- **{}** {} _(confidence {:.2}, version {})_",
                experience.id, experience.text, experience.confidence, experience.updated_in
            )
            .expect("writing to a String");
        }
    }
    text
}

/// What an import did.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportSummary {
    /// The format the file was read as.
    pub format: &'static str,
    /// The version the import made, if it added anything.
    pub version: Option<u64>,
    /// Experiences added.
    pub added: usize,
    /// Entries skipped because the same text is already active (entry key, existing id) or
    /// appears earlier in the file (entry key, `None`).
    pub duplicates: Vec<(String, Option<ExperienceId>)>,
}

/// Imports a youtu-agent dict or a Gym JSON export into `library` as one new version.
///
/// Every entry is checked first; any bad entry is an error naming the file and the entry, and
/// nothing is imported. Entries whose text is already in the library are skipped and listed.
pub fn import(
    library: &mut Library,
    path: &Path,
    domain: Option<&str>,
) -> Result<ImportSummary, LibraryError> {
    let bytes = std::fs::read(path).map_err(LibraryError::io("read", path))?;
    let error = |location: String, message: String| LibraryError::Import {
        path: path.to_owned(),
        location,
        message,
    };
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        error(
            format!("byte {}", e.valid_up_to()),
            "not UTF-8 text".to_owned(),
        )
    })?;
    let entries: OrderedObject = serde_json::from_str(text).map_err(|e| {
        error(
            format!("line {} column {}", e.line(), e.column()),
            format!("{} (expected a JSON object: youtu-agent's {{\"G0\": \"text\"}} or a Gym JSON export)", strip_position(&e.to_string())),
        )
    })?;
    let limits = Limits {
        max_words: library.settings().max_words,
    };
    let default_domain = domain
        .map(check_domain)
        .transpose()
        .map_err(|e| error("--domain".to_owned(), e.to_string()))?;
    let is_gym = entries
        .0
        .iter()
        .any(|(key, value)| key == "format" && value.as_str() == Some(JSON_FORMAT));
    let (format, candidates) = if is_gym {
        let export: JsonExport = serde_json::from_str(text).map_err(|e| {
            error(
                format!("line {} column {}", e.line(), e.column()),
                strip_position(&e.to_string()),
            )
        })?;
        (
            "gym-json",
            gym_candidates(export, limits, default_domain.as_deref(), &error)?,
        )
    } else {
        (
            "youtu",
            youtu_candidates(entries, limits, default_domain.as_deref(), &error)?,
        )
    };
    if candidates.is_empty() {
        return Err(error(
            "the top level".to_owned(),
            "there are no experiences in the file".to_owned(),
        ));
    }
    let (changes, duplicates) = new_adds(library.head(), candidates);
    let added = changes.len();
    let version = if changes.is_empty() {
        None
    } else {
        let provenance = Provenance::Import {
            file: path.display().to_string(),
            format: format.to_owned(),
        };
        Some(library.commit(&changes, provenance)?.version)
    };
    Ok(ImportSummary {
        format,
        version,
        added,
        duplicates,
    })
}

/// An entry of an import file, checked: where it is in the file, its text, domain,
/// confidence and evidence.
type Candidate = (String, String, String, f64, Evidence);

/// How an import names a bad entry: where it is, and what is wrong with it.
type ImportError<'a> = dyn Fn(String, String) -> LibraryError + 'a;

/// The entries of a Gym JSON export, each in `default_domain` if given, else its own.
fn gym_candidates(
    export: JsonExport,
    limits: Limits,
    default_domain: Option<&str>,
    error: &ImportError<'_>,
) -> Result<Vec<Candidate>, LibraryError> {
    export
        .experiences
        .into_iter()
        .enumerate()
        .map(|(index, experience)| {
            let location = format!("experiences[{index}] ({})", experience.id);
            let text = limits
                .check_text(&experience.text)
                .map_err(|e| error(format!("{location}.text"), e.to_string()))?;
            let domain = match default_domain {
                Some(domain) => domain.to_owned(),
                None => check_domain(&experience.domain)
                    .map_err(|e| error(format!("{location}.domain"), e.to_string()))?,
            };
            let confidence = check_confidence(experience.confidence)
                .map_err(|e| error(format!("{location}.confidence"), e.to_string()))?;
            Ok((location, text, domain, confidence, experience.evidence))
        })
        .collect()
}

/// The entries of a youtu-agent dict (`{"G0": "text"}`), each in `default_domain` if given.
fn youtu_candidates(
    entries: OrderedObject,
    limits: Limits,
    default_domain: Option<&str>,
    error: &ImportError<'_>,
) -> Result<Vec<Candidate>, LibraryError> {
    entries
        .0
        .into_iter()
        .map(|(key, value)| {
            let location = format!("key \"{key}\"");
            let Some(text) = value.as_str() else {
                return Err(error(
                    location,
                    format!(
                        "the value is {}, expected the experience text as a string",
                        kind_of(&value)
                    ),
                ));
            };
            let text = limits
                .check_text(text)
                .map_err(|e| error(location.clone(), e.to_string()))?;
            let domain = default_domain
                .unwrap_or(super::record::DEFAULT_DOMAIN)
                .to_owned();
            Ok((
                location,
                text,
                domain,
                super::record::DEFAULT_CONFIDENCE,
                Evidence::default(),
            ))
        })
        .collect()
}

/// The adds of the `candidates` whose text is not active in `state` nor earlier in the file,
/// and the entries skipped as duplicates (with the id of the active one).
fn new_adds(
    state: &State,
    candidates: Vec<Candidate>,
) -> (Vec<Change>, Vec<(String, Option<ExperienceId>)>) {
    let mut seen = std::collections::BTreeMap::new();
    for experience in state.active() {
        seen.insert(experience.text.clone(), Some(experience.id));
    }
    let mut changes = Vec::new();
    let mut duplicates = Vec::new();
    for (location, text, domain, confidence, evidence) in candidates {
        if let Some(existing) = seen.get(&text) {
            duplicates.push((location, *existing));
            continue;
        }
        seen.insert(text.clone(), None);
        changes.push(Change::Add {
            text,
            domain: Some(domain),
            confidence: Some(confidence),
            evidence,
        });
    }
    (changes, duplicates)
}

fn kind_of(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// A JSON object with its keys in file order (serde_json's own map sorts them).
struct OrderedObject(Vec<(String, serde_json::Value)>);

impl<'de> Deserialize<'de> for OrderedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor;
        impl<'de> Visitor<'de> for ObjectVisitor {
            type Value = OrderedObject;
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                let mut keys = BTreeSet::new();
                while let Some((key, value)) = map.next_entry::<String, serde_json::Value>()? {
                    if !keys.insert(key.clone()) {
                        return Err(serde::de::Error::custom(format!(
                            "the key \"{key}\" appears twice"
                        )));
                    }
                    entries.push((key, value));
                }
                Ok(OrderedObject(entries))
            }
        }
        deserializer.deserialize_map(ObjectVisitor)
    }
}
