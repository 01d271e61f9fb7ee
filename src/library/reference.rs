//! [`LibraryRef`]: the one way a library (and optionally one of its versions) is named on a
//! command line, in a request header and in a served model name.

use std::fmt;
use std::str::FromStr;

use super::store::check_name;

/// A library, at its head or at one version: `NAME` or `NAME@VERSION`.
///
/// `NAME@VERSION` is the spelling [`Display`](fmt::Display) writes and every place takes:
/// `gym eval --library arith@3`, the `x-gym-library: arith@3` header of `gym serve`, and the
/// library part of a served model name, `smol@arith@3`.
///
/// [`FromStr`] also accepts the older spelling `NAME:VERSION`, which served model names used
/// (`smol@arith:3`), so clients written for it keep working. Either separator is unambiguous:
/// a library name holds only letters, digits, `-`, `_` and `.`.
///
/// The name is checked as [`Library::open`](super::Library::open) checks it, so a bad name is
/// refused where it is read, with the input in the error.
///
/// ```
/// use gym::library::LibraryRef;
///
/// let at: LibraryRef = "arith@3".parse().unwrap();
/// assert_eq!((at.name.as_str(), at.version), ("arith", Some(3)));
/// assert_eq!("arith:3".parse::<LibraryRef>().unwrap(), at);
/// assert_eq!(at.to_string(), "arith@3");
/// assert_eq!("arith".parse::<LibraryRef>().unwrap().version, None);
/// assert!("arith@x".parse::<LibraryRef>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LibraryRef {
    /// The library's name (its directory under the library directory).
    pub name: String,
    /// The version; `None` means the library's head (its newest version).
    pub version: Option<u64>,
}

impl LibraryRef {
    /// The head of library `name` (not checked: use [`FromStr`] for input).
    pub fn head(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: None,
        }
    }
}

impl fmt::Display for LibraryRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.version {
            Some(version) => write!(f, "{}@{version}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// Why a string is not a [`LibraryRef`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not a library reference (NAME or NAME@VERSION): {reason}")]
pub struct ParseLibraryRefError {
    /// What was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl FromStr for LibraryRef {
    type Err = ParseLibraryRefError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let error = |reason: String| ParseLibraryRefError {
            input: input.to_owned(),
            reason,
        };
        let (name, version) = match input.split_once(['@', ':']) {
            None => (input, None),
            Some((name, version)) => {
                // Digits only: `+3` or ` 3` would give one version two spellings.
                if version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(error(format!("the version `{version}` is not a number")));
                }
                let number = version
                    .parse()
                    .map_err(|_| error(format!("the version `{version}` is too large")))?;
                (name, Some(number))
            }
        };
        if name.is_empty() {
            return Err(error("it names no library".into()));
        }
        check_name(name).map_err(|e| error(e.to_string()))?;
        Ok(Self {
            name: name.to_owned(),
            version,
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn parse(text: &str) -> Result<LibraryRef, ParseLibraryRefError> {
        text.parse()
    }

    #[test]
    fn every_spelling_in_use_reads_the_same() {
        let at_3 = LibraryRef {
            name: "letters".into(),
            version: Some(3),
        };
        assert_eq!(parse("letters@3").unwrap(), at_3);
        assert_eq!(parse("letters:3").unwrap(), at_3, "the old model-name form");
        assert_eq!(parse("letters").unwrap(), LibraryRef::head("letters"));
        assert_eq!(parse("a-b_c.d@0").unwrap().version, Some(0));
    }

    #[test]
    fn bad_references_are_refused_naming_the_input() {
        for (bad, says) in [
            ("letters@x", "the version `x` is not a number"),
            ("letters@", "the version `` is not a number"),
            ("letters@+3", "the version `+3` is not a number"),
            ("letters@1@2", "the version `1@2` is not a number"),
            ("letters:1@2", "the version `1@2` is not a number"),
            ("letters@99999999999999999999", "is too large"),
            ("@3", "it names no library"),
            ("", "it names no library"),
            ("../etc@1", "starts with `.` or `-`"),
            ("a/b@1", "use only letters, digits"),
            ("-rf", "starts with `.` or `-`"),
        ] {
            let error = parse(bad).expect_err(bad).to_string();
            assert!(error.contains(&format!("`{bad}`")), "{error}");
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    proptest! {
        #[test]
        fn display_then_parse_is_the_identity(
            name in "[A-Za-z0-9_][A-Za-z0-9._-]{0,40}",
            version in proptest::option::of(any::<u64>()),
        ) {
            let reference = LibraryRef { name, version };
            let text = reference.to_string();
            prop_assert_eq!(parse(&text).unwrap(), reference);
        }

        #[test]
        fn parsing_never_panics_and_what_it_reads_displays_back(text in "\\PC{0,30}") {
            if let Ok(reference) = parse(&text) {
                // The canonical form reads back the same, whichever separator came in.
                prop_assert_eq!(parse(&reference.to_string()).unwrap(), reference);
            }
        }
    }
}
