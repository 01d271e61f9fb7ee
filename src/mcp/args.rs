//! Reading a tool call's arguments: each getter names the argument it refuses and why, so a
//! model calling the tool can correct itself from the message alone.

use serde_json::{Map, Value};

/// A tool argument the server refuses.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("argument `{name}`: {message}")]
pub struct ArgumentError {
    /// The argument, e.g. `k` or `changes[2]`.
    pub name: String,
    /// What is wrong with it.
    pub message: String,
}

impl ArgumentError {
    pub fn new(name: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            message: message.into(),
        }
    }
}

/// The arguments of one call, checked against the names a tool accepts.
pub struct Arguments {
    map: Map<String, Value>,
}

impl Arguments {
    /// Takes the call's arguments (absent means none) and refuses any name not in `accepted`,
    /// so a misspelled argument is reported instead of silently ignored.
    pub fn new(map: Option<Map<String, Value>>, accepted: &[&str]) -> Result<Self, ArgumentError> {
        let map = map.unwrap_or_default();
        if let Some(unknown) = map.keys().find(|key| !accepted.contains(&key.as_str())) {
            let shown: String = unknown.chars().take(64).collect();
            return Err(ArgumentError::new(
                shown,
                format!(
                    "not an argument of this tool (it takes {})",
                    accepted.join(", ")
                ),
            ));
        }
        Ok(Self { map })
    }

    /// The value of `name`, treating an explicit `null` as absent.
    fn value(&self, name: &str) -> Option<&Value> {
        self.map.get(name).filter(|value| !value.is_null())
    }

    /// An optional string of at most `max_chars` characters.
    pub fn string(&self, name: &str, max_chars: usize) -> Result<Option<String>, ArgumentError> {
        let Some(value) = self.value(name) else {
            return Ok(None);
        };
        let text = value
            .as_str()
            .ok_or_else(|| ArgumentError::new(name, format!("must be a string, not {value}")))?;
        let chars = text.chars().count();
        if chars > max_chars {
            return Err(ArgumentError::new(
                name,
                format!("{chars} characters; at most {max_chars} are accepted"),
            ));
        }
        Ok(Some(text.to_owned()))
    }

    /// A string that must be given and not be blank.
    pub fn required_string(&self, name: &str, max_chars: usize) -> Result<String, ArgumentError> {
        match self.string(name, max_chars)? {
            Some(text) if !text.trim().is_empty() => Ok(text),
            Some(_) => Err(ArgumentError::new(name, "must not be empty")),
            None => Err(ArgumentError::new(name, "is required")),
        }
    }

    /// An optional whole number in `range`.
    pub fn integer(
        &self,
        name: &str,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<Option<u64>, ArgumentError> {
        let Some(value) = self.value(name) else {
            return Ok(None);
        };
        let out_of_range = || {
            ArgumentError::new(
                name,
                format!(
                    "must be a whole number from {} to {}, not {value}",
                    range.start(),
                    range.end()
                ),
            )
        };
        // Clients written in JavaScript send 5.0 for 5; accept whole floats, refuse the rest.
        let number = match value {
            Value::Number(number) => number
                .as_u64()
                .or_else(|| {
                    number
                        .as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
                        .map(|f| f as u64)
                })
                .ok_or_else(out_of_range)?,
            _ => return Err(out_of_range()),
        };
        if range.contains(&number) {
            Ok(Some(number))
        } else {
            Err(out_of_range())
        }
    }

    /// A whole number that must be given.
    pub fn required_integer(
        &self,
        name: &str,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<u64, ArgumentError> {
        self.integer(name, range)?
            .ok_or_else(|| ArgumentError::new(name, "is required"))
    }

    /// A list that must be given, with from 1 to `max_items` items.
    pub fn required_list(&self, name: &str, max_items: usize) -> Result<&[Value], ArgumentError> {
        let value = self
            .value(name)
            .ok_or_else(|| ArgumentError::new(name, "is required"))?;
        let items = value
            .as_array()
            .ok_or_else(|| ArgumentError::new(name, "must be a list"))?;
        if items.is_empty() || items.len() > max_items {
            return Err(ArgumentError::new(
                name,
                format!("has {} items; give from 1 to {max_items}", items.len()),
            ));
        }
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn arguments(value: Value, accepted: &[&str]) -> Result<Arguments, ArgumentError> {
        let Value::Object(map) = value else {
            panic!("an object")
        };
        Arguments::new(Some(map), accepted)
    }

    #[test]
    fn unknown_names_are_refused_by_name() {
        let error = arguments(json!({"qeury": "x"}), &["query", "k"])
            .err()
            .unwrap();
        assert_eq!(error.name, "qeury");
        assert_eq!(
            error.to_string(),
            "argument `qeury`: not an argument of this tool (it takes query, k)"
        );
    }

    #[test]
    fn strings_are_checked_for_type_length_and_presence() {
        let args = arguments(
            json!({"a": "hello", "b": 7, "c": "   ", "d": null}),
            &["a", "b", "c", "d", "e"],
        )
        .unwrap();
        assert_eq!(args.string("a", 5).unwrap().as_deref(), Some("hello"));
        assert_eq!(
            args.string("a", 4).unwrap_err().to_string(),
            "argument `a`: 5 characters; at most 4 are accepted"
        );
        assert_eq!(
            args.string("b", 9).unwrap_err().to_string(),
            "argument `b`: must be a string, not 7"
        );
        assert_eq!(
            args.required_string("c", 9).unwrap_err().message,
            "must not be empty"
        );
        assert_eq!(args.string("d", 9).unwrap(), None);
        assert_eq!(
            args.required_string("e", 9).unwrap_err().message,
            "is required"
        );
    }

    #[test]
    fn integers_must_be_whole_and_in_range() {
        let args = arguments(
            json!({"k": 5, "f": 5.0, "half": 2.5, "neg": -1, "big": 51, "s": "5"}),
            &["k", "f", "half", "neg", "big", "s"],
        )
        .unwrap();
        assert_eq!(args.integer("k", 1..=50).unwrap(), Some(5));
        assert_eq!(args.integer("f", 1..=50).unwrap(), Some(5));
        for bad in ["half", "neg", "big", "s"] {
            let error = args.integer(bad, 1..=50).unwrap_err();
            assert_eq!(error.name, bad);
            assert!(
                error
                    .message
                    .starts_with("must be a whole number from 1 to 50"),
                "{error}"
            );
        }
    }

    #[test]
    fn lists_are_bounded() {
        let args = arguments(
            json!({"empty": [], "two": [1, 2], "no": {}}),
            &["empty", "two", "no"],
        )
        .unwrap();
        assert_eq!(args.required_list("two", 2).unwrap().len(), 2);
        assert_eq!(
            args.required_list("two", 1).unwrap_err().message,
            "has 2 items; give from 1 to 1"
        );
        assert!(args.required_list("empty", 5).is_err());
        assert_eq!(
            args.required_list("no", 5).unwrap_err().message,
            "must be a list"
        );
    }
}
