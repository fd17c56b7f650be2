//! Flat JSON objects, written and read by hand: strings, integers, booleans
//! and `null` as values, no nesting. That is all the soak's history needs.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A value of a flat object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// `null`.
    Null,
}

/// Writes one flat object, field by field, in the order given.
#[derive(Debug, Default)]
pub struct ObjectWriter {
    out: String,
}

impl ObjectWriter {
    /// An empty object.
    #[must_use]
    pub fn new() -> Self {
        ObjectWriter {
            out: String::from("{"),
        }
    }

    fn key(&mut self, key: &str) {
        if self.out.len() > 1 {
            self.out.push(',');
        }
        escape_into(&mut self.out, key);
        self.out.push(':');
    }

    /// Adds a string field.
    #[must_use]
    pub fn str(mut self, key: &str, value: &str) -> Self {
        self.key(key);
        escape_into(&mut self.out, value);
        self
    }

    /// Adds an integer field.
    #[must_use]
    pub fn int(mut self, key: &str, value: i64) -> Self {
        self.key(key);
        let _ = write!(self.out, "{value}");
        self
    }

    /// Adds a boolean field.
    #[must_use]
    pub fn bool(mut self, key: &str, value: bool) -> Self {
        self.key(key);
        self.out.push_str(if value { "true" } else { "false" });
        self
    }

    /// Adds an integer field, or `null`.
    #[must_use]
    pub fn opt_int(mut self, key: &str, value: Option<i64>) -> Self {
        self.key(key);
        match value {
            Some(v) => {
                let _ = write!(self.out, "{v}");
            }
            None => self.out.push_str("null"),
        }
        self
    }

    /// The object, closed.
    #[must_use]
    pub fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

fn escape_into(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Why a line is not a flat JSON object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The byte offset where reading stopped.
    pub at: usize,
    /// What was expected there.
    pub expected: &'static str,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "expected {} at byte {}", self.expected, self.at)
    }
}

impl std::error::Error for ParseError {}

/// Parses one flat JSON object.
///
/// # Errors
///
/// [`ParseError`] when `line` is not a flat object of strings, integers,
/// booleans and `null`.
pub fn parse_object(line: &str) -> Result<BTreeMap<String, Value>, ParseError> {
    let mut p = Parser {
        s: line.as_bytes(),
        text: line,
        i: 0,
    };
    let mut map = BTreeMap::new();
    p.ws();
    p.eat(b'{', "'{'")?;
    p.ws();
    if p.peek() == Some(b'}') {
        p.i += 1;
    } else {
        loop {
            p.ws();
            let key = p.string()?;
            p.ws();
            p.eat(b':', "':'")?;
            p.ws();
            let value = p.value()?;
            let _ = map.insert(key, value);
            p.ws();
            match p.peek() {
                Some(b',') => p.i += 1,
                Some(b'}') => {
                    p.i += 1;
                    break;
                }
                _ => return Err(p.err("',' or '}'")),
            }
        }
    }
    p.ws();
    if p.i != p.s.len() {
        return Err(p.err("the end of the line"));
    }
    Ok(map)
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
}

impl Parser<'_> {
    fn err(&self, expected: &'static str) -> ParseError {
        ParseError {
            at: self.i,
            expected,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8, expected: &'static str) -> Result<(), ParseError> {
        if self.peek() == Some(b) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.err(expected))
        }
    }

    fn literal(&mut self, word: &str) -> bool {
        if self.s.get(self.i..self.i + word.len()) == Some(word.as_bytes()) {
            self.i += word.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Result<Value, ParseError> {
        match self.peek() {
            Some(b'"') => self.string().map(Value::Str),
            Some(b'-' | b'0'..=b'9') => self.int().map(Value::Int),
            _ if self.literal("true") => Ok(Value::Bool(true)),
            _ if self.literal("false") => Ok(Value::Bool(false)),
            _ if self.literal("null") => Ok(Value::Null),
            _ => Err(self.err("a string, an integer, a boolean or null")),
        }
    }

    fn int(&mut self) -> Result<i64, ParseError> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        self.text
            .get(start..self.i)
            .and_then(|t| t.parse().ok())
            .ok_or(ParseError {
                at: start,
                expected: "an integer",
            })
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.eat(b'"', "a string")?;
        let mut out = String::new();
        loop {
            let start = self.i;
            while !matches!(self.peek(), Some(b'"' | b'\\') | None) {
                self.i += 1;
            }
            out.push_str(self.text.get(start..self.i).ok_or(self.err("UTF-8"))?);
            match self.peek() {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let c = match self.peek() {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'u') => {
                            let hex = self
                                .text
                                .get(self.i + 1..self.i + 5)
                                .and_then(|h| u32::from_str_radix(h, 16).ok())
                                .and_then(char::from_u32)
                                .ok_or(self.err("four hex digits of a BMP scalar"))?;
                            self.i += 4;
                            hex
                        }
                        _ => return Err(self.err("an escape")),
                    };
                    self.i += 1;
                    out.push(c);
                }
                _ => return Err(self.err("the end of the string")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let line = ObjectWriter::new()
            .str("ev", "claim")
            .str("name", "soak:\"q\"\\ \n\t\u{1}é")
            .int("term", -42)
            .bool("rerun", true)
            .opt_int("slot", None)
            .opt_int("at", Some(7))
            .finish();
        assert!(!line.contains('\n'));
        let map = parse_object(&line).unwrap();
        assert_eq!(map["ev"], Value::Str("claim".into()));
        assert_eq!(map["name"], Value::Str("soak:\"q\"\\ \n\t\u{1}é".into()));
        assert_eq!(map["term"], Value::Int(-42));
        assert_eq!(map["rerun"], Value::Bool(true));
        assert_eq!(map["slot"], Value::Null);
        assert_eq!(map["at"], Value::Int(7));
    }

    #[test]
    fn whitespace_and_empty_objects() {
        assert!(parse_object(" { } ").unwrap().is_empty());
        let map = parse_object("{ \"a\" : 1 , \"b\":\"\\u0041\" }").unwrap();
        assert_eq!(map["b"], Value::Str("A".into()));
    }

    #[test]
    fn refuses_what_is_not_a_flat_object() {
        for bad in [
            "",
            "[]",
            "{\"a\":1",
            "{\"a\":{}}",
            "{\"a\":1}x",
            "{a:1}",
            "{\"a\":tru}",
            "{\"a\":\"x}",
            "{\"a\":-}",
        ] {
            assert!(parse_object(bad).is_err(), "{bad}");
        }
    }
}
