//! Finding and reading the JSON in a model's reply, repairing what small models get wrong.
//!
//! Small models wrap JSON in code fences and prose, leave trailing commas, quote with `'` or
//! smart quotes, leave keys unquoted, write Python's `True`/`None`, forget commas between items,
//! run out of tokens mid-object, or emit several objects in a row instead of an array. The reader
//! here is a forgiving recursive-descent parser straight into [`serde_json::Value`] that repairs
//! all of these. One thing it never repairs: a string cut off by the end of the output is
//! dropped (and reported in [`Extracted::cut_off`]), because a half-written experience can say
//! the opposite of what was meant.

use serde_json::{Map, Number, Value};

use super::error::ParseError;

/// Deepest nesting read; no stage's answer needs more than four levels.
pub const MAX_DEPTH: usize = 32;

/// Most places a JSON value is looked for, so a reply full of stray brackets stays cheap.
const MAX_STARTS: usize = 64;

/// The JSON found in a reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Extracted {
    /// The value; several top-level objects in a row come back as one array.
    pub value: Value,
    /// Strings the end of the output cut off, dropped from `value`.
    pub cut_off: Vec<String>,
    /// Whether the output ended inside the value (containers were closed by the reader).
    pub truncated: bool,
}

/// The JSON value in `text`; see [`extract_json`].
pub fn parse_json(text: &str) -> Result<Value, ParseError> {
    extract_json(text).map(|extracted| extracted.value)
}

/// Finds and reads the JSON in `text`: the contents of a code fence first, then the whole text.
///
/// Of several values in the text, objects win over arrays (prose often holds `[1]`-like
/// brackets), several objects become one array, and of arrays alone the longest wins.
pub fn extract_json(text: &str) -> Result<Extracted, ParseError> {
    if text.trim().is_empty() {
        return Err(ParseError::Empty);
    }
    let mut first_error = None;
    let whole = (0, text);
    for (offset, region) in fenced(text).into_iter().chain([whole]) {
        match scan(region, offset) {
            Ok(extracted) => return Ok(extracted),
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    Err(first_error.unwrap_or(ParseError::NoJson))
}

/// The contents of the first code fence (to its closing fence or the end), with its offset.
fn fenced(text: &str) -> Option<(usize, &str)> {
    let open = text.find("```")?;
    let after = open + 3;
    // The rest of the fence line is a language tag (`json`), never content.
    let start = text[after..]
        .find('\n')
        .map_or(text.len(), |n| after + n + 1);
    let end = text[start..].find("```").map_or(text.len(), |n| start + n);
    Some((start, &text[start..end]))
}

/// One value found at the top level of a region.
struct Found {
    value: Value,
    span: usize,
    cut_off: Vec<String>,
    truncated: bool,
}

fn scan(region: &str, offset: usize) -> Result<Extracted, ParseError> {
    let chars: Vec<(usize, char)> = region
        .char_indices()
        .map(|(at, c)| (at + offset, c))
        .collect();
    let mut found: Vec<Found> = Vec::new();
    let mut first_error = None;
    let mut from = 0;
    for _ in 0..MAX_STARTS {
        let Some(start) = (from..chars.len()).find(|&i| matches!(chars[i].1, '{' | '[')) else {
            break;
        };
        let mut parser = Parser {
            chars: &chars,
            pos: start,
            cut_off: Vec::new(),
        };
        match parser.value(0) {
            Ok(Node::Done(value)) => {
                found.push(Found {
                    value,
                    span: parser.pos - start,
                    cut_off: parser.cut_off,
                    truncated: false,
                });
                from = parser.pos;
            }
            Ok(Node::Open(value)) => {
                found.push(Found {
                    value,
                    span: parser.pos - start,
                    cut_off: parser.cut_off,
                    truncated: true,
                });
                break;
            }
            Ok(Node::Lost) => break,
            Err(error) => {
                first_error.get_or_insert(error);
                from = start + 1;
            }
        }
    }
    choose(found).ok_or_else(|| first_error.unwrap_or(ParseError::NoJson))
}

fn choose(found: Vec<Found>) -> Option<Extracted> {
    let objects = found.iter().filter(|f| f.value.is_object()).count();
    let mut chosen: Vec<Found> = if objects > 0 {
        found.into_iter().filter(|f| f.value.is_object()).collect()
    } else {
        found
            .into_iter()
            .max_by_key(|f| f.span)
            .into_iter()
            .collect()
    };
    if chosen.len() == 1 {
        let one = chosen.remove(0);
        return Some(Extracted {
            value: one.value,
            cut_off: one.cut_off,
            truncated: one.truncated,
        });
    }
    (!chosen.is_empty()).then(|| Extracted {
        truncated: chosen.iter().any(|f| f.truncated),
        cut_off: chosen.iter().flat_map(|f| f.cut_off.clone()).collect(),
        value: Value::Array(chosen.into_iter().map(|f| f.value).collect()),
    })
}

/// What reading one value gave.
enum Node {
    /// A complete value.
    Done(Value),
    /// A container the end of the output closed; what it held so far.
    Open(Value),
    /// A scalar the end of the output cut off.
    Lost,
}

struct Parser<'a> {
    chars: &'a [(usize, char)],
    pos: usize,
    cut_off: Vec<String>,
}

fn is_quote(c: char) -> bool {
    matches!(c, '"' | '\'' | '“' | '”' | '‘' | '’')
}

fn is_word_start(c: char) -> bool {
    c.is_alphabetic() || c == '_' || c == '$'
}

fn is_number_start(c: char) -> bool {
    c.is_ascii_digit() || matches!(c, '-' | '+' | '.')
}

/// Whether `close` ends a string opened with `open`.
fn closes(open: char, close: char) -> bool {
    match open {
        '"' => close == '"',
        '\'' => close == '\'',
        '“' | '”' => matches!(close, '”' | '“' | '"'),
        _ => matches!(close, '’' | '‘' | '\''),
    }
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).map(|&(_, c)| c)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += 1;
        Some(c)
    }

    fn syntax(&self, expected: &'static str) -> ParseError {
        let (at, found) = self.chars[self.pos];
        ParseError::Syntax {
            at,
            found,
            expected,
        }
    }

    /// Skips whitespace and `//` or `/* */` comments.
    fn skip_blank(&mut self) {
        loop {
            match self.peek() {
                Some(c) if c.is_whitespace() => self.pos += 1,
                Some('/') => match self.chars.get(self.pos + 1).map(|&(_, c)| c) {
                    Some('/') => {
                        while self.peek().is_some_and(|c| c != '\n') {
                            self.pos += 1;
                        }
                    }
                    Some('*') => {
                        self.pos += 2;
                        while self.peek().is_some()
                            && !(self.peek() == Some('*')
                                && self.chars.get(self.pos + 1).map(|&(_, c)| c) == Some('/'))
                        {
                            self.pos += 1;
                        }
                        self.pos = (self.pos + 2).min(self.chars.len());
                    }
                    _ => return,
                },
                _ => return,
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node, ParseError> {
        if depth > MAX_DEPTH {
            return Err(ParseError::TooDeep { limit: MAX_DEPTH });
        }
        self.skip_blank();
        match self.peek() {
            None => Ok(Node::Lost),
            Some('{') => self.object(depth),
            Some('[') => self.array(depth),
            Some(c) if is_quote(c) => Ok(match self.string() {
                Ok(text) => Node::Done(Value::String(text)),
                Err(cut) => {
                    self.cut_off.push(cut);
                    Node::Lost
                }
            }),
            Some(c) if is_number_start(c) => Ok(self.number()),
            Some(c) if is_word_start(c) => Ok(self.word()),
            Some(_) => Err(self.syntax("a value")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Node, ParseError> {
        self.pos += 1;
        let mut map = Map::new();
        loop {
            self.skip_blank();
            match self.peek() {
                None => return Ok(Node::Open(Value::Object(map))),
                Some('}') => {
                    self.pos += 1;
                    return Ok(Node::Done(Value::Object(map)));
                }
                // A mismatched closer ends the object; the array around it takes the `]`.
                Some(']') => return Ok(Node::Done(Value::Object(map))),
                // Leading, doubled and trailing commas.
                Some(',' | ';') => {
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            let Some(key) = self.key()? else {
                return Ok(Node::Open(Value::Object(map)));
            };
            self.skip_blank();
            match self.peek() {
                None => return Ok(Node::Open(Value::Object(map))),
                Some(':' | '=') => self.pos += 1,
                Some(_) => return Err(self.syntax("`:` after a key")),
            }
            match self.value(depth + 1)? {
                Node::Done(value) => {
                    map.insert(key, value);
                }
                Node::Open(value) => {
                    map.insert(key, value);
                    return Ok(Node::Open(Value::Object(map)));
                }
                Node::Lost => return Ok(Node::Open(Value::Object(map))),
            }
            self.skip_blank();
            match self.peek() {
                None => return Ok(Node::Open(Value::Object(map))),
                Some(',' | ';') => self.pos += 1,
                Some('}' | ']') => {}
                // A forgotten comma before the next key.
                Some(c) if is_quote(c) || is_word_start(c) => {}
                Some(_) => return Err(self.syntax("`,` or `}`")),
            }
        }
    }

    /// A key, or `None` when the output ends inside it.
    fn key(&mut self) -> Result<Option<String>, ParseError> {
        match self.peek() {
            Some(c) if is_quote(c) => Ok(self.string().ok()),
            Some(c) if is_word_start(c) || c.is_ascii_digit() => {
                let start = self.pos;
                while self
                    .peek()
                    .is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | '$' | '-'))
                {
                    self.pos += 1;
                }
                if self.peek().is_none() {
                    return Ok(None);
                }
                Ok(Some(
                    self.chars[start..self.pos]
                        .iter()
                        .map(|&(_, c)| c)
                        .collect(),
                ))
            }
            None => Ok(None),
            Some(_) => Err(self.syntax("a key")),
        }
    }

    fn array(&mut self, depth: usize) -> Result<Node, ParseError> {
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            self.skip_blank();
            match self.peek() {
                None => return Ok(Node::Open(Value::Array(items))),
                Some(']') => {
                    self.pos += 1;
                    return Ok(Node::Done(Value::Array(items)));
                }
                Some('}') => return Ok(Node::Done(Value::Array(items))),
                Some(',' | ';') => {
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            match self.value(depth + 1)? {
                Node::Done(value) => items.push(value),
                Node::Open(value) => {
                    items.push(value);
                    return Ok(Node::Open(Value::Array(items)));
                }
                Node::Lost => return Ok(Node::Open(Value::Array(items))),
            }
            self.skip_blank();
            match self.peek() {
                None => return Ok(Node::Open(Value::Array(items))),
                Some(',' | ';') => self.pos += 1,
                Some(']' | '}') => {}
                Some(c) if is_quote(c) || is_word_start(c) || is_number_start(c) => {}
                Some('{' | '[') => {}
                Some(_) => return Err(self.syntax("`,` or `]`")),
            }
        }
    }

    /// A quoted string, or what there was of it when the output ends inside it.
    ///
    /// A closing quote counts only where a string can end (before `,` `:` `}` `]`, a line
    /// break or the end), so `'it's'` and `"say "hi" twice"` keep their inner quotes.
    fn string(&mut self) -> Result<String, String> {
        let open = self.bump().expect("called on a quote");
        let mut text = String::new();
        loop {
            let Some(c) = self.bump() else {
                return Err(text);
            };
            match c {
                '\\' => match self.bump() {
                    None => return Err(text),
                    Some('n') => text.push('\n'),
                    Some('t') => text.push('\t'),
                    Some('r') => text.push('\r'),
                    Some('b') => text.push('\u{8}'),
                    Some('f') => text.push('\u{c}'),
                    Some('u') => text.push(self.unicode_escape()),
                    Some(other) => text.push(other),
                },
                c if closes(open, c) && self.at_string_end() => return Ok(text),
                c => text.push(c),
            }
        }
    }

    fn at_string_end(&self) -> bool {
        for &(_, c) in &self.chars[self.pos..] {
            match c {
                '\n' | ',' | ':' | '}' | ']' => return true,
                c if c.is_whitespace() => {}
                _ => return false,
            }
        }
        true
    }

    /// The character of a `\uXXXX` escape (the `\u` already read), pairing surrogates.
    fn unicode_escape(&mut self) -> char {
        let hex4 = |parser: &mut Self| -> Option<u32> {
            let digits: String = parser
                .chars
                .get(parser.pos..parser.pos + 4)?
                .iter()
                .map(|&(_, c)| c)
                .collect();
            let code = u32::from_str_radix(&digits, 16).ok()?;
            parser.pos += 4;
            Some(code)
        };
        let Some(high) = hex4(self) else {
            return 'u';
        };
        if (0xD800..0xDC00).contains(&high)
            && self.peek() == Some('\\')
            && self.chars.get(self.pos + 1).map(|&(_, c)| c) == Some('u')
        {
            self.pos += 2;
            if let Some(low) = hex4(self).filter(|low| (0xDC00..0xE000).contains(low)) {
                let code = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
                return char::from_u32(code).unwrap_or('\u{FFFD}');
            }
        }
        char::from_u32(high).unwrap_or('\u{FFFD}')
    }

    /// A number; text that only starts like one (`3rd`, `1.2.3`) is read as a bare word.
    fn number(&mut self) -> Node {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E'))
        {
            self.pos += 1;
        }
        let token: String = self.chars[start..self.pos]
            .iter()
            .map(|&(_, c)| c)
            .collect();
        let followed_by_word = self.peek().is_some_and(char::is_alphanumeric);
        if !followed_by_word && let Some(number) = to_number(&token) {
            return Node::Done(Value::Number(number));
        }
        self.pos = start;
        self.word()
    }

    /// A bare word: `true`, `false`, `null` (also Python's spellings), or unquoted text up to
    /// the next `,` `}` `]` or line break. Unquoted text the output ends inside is dropped.
    fn word(&mut self) -> Node {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| !matches!(c, ',' | '}' | ']' | '\n'))
        {
            self.pos += 1;
        }
        let text: String = self.chars[start..self.pos]
            .iter()
            .map(|&(_, c)| c)
            .collect();
        let text = text.trim();
        match text {
            "true" | "True" | "TRUE" => Node::Done(Value::Bool(true)),
            "false" | "False" | "FALSE" => Node::Done(Value::Bool(false)),
            "null" | "None" | "NULL" | "nil" | "undefined" => Node::Done(Value::Null),
            _ if self.peek().is_none() => {
                self.cut_off.push(text.to_owned());
                Node::Lost
            }
            _ => Node::Done(Value::String(text.to_owned())),
        }
    }
}

fn to_number(token: &str) -> Option<Number> {
    let token = token.strip_prefix('+').unwrap_or(token);
    if let Ok(integer) = token.parse::<i64>() {
        return Some(Number::from(integer));
    }
    let padded;
    let token = match token.strip_prefix('.').or_else(|| token.strip_prefix("-.")) {
        Some(rest) if token.starts_with('-') => {
            padded = format!("-0.{rest}");
            &padded
        }
        Some(rest) => {
            padded = format!("0.{rest}");
            &padded
        }
        None => token,
    };
    Number::from_f64(token.parse::<f64>().ok()?)
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;
