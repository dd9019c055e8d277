//! Why a scene file was refused: every error names the file, and where it can, the line, the
//! column and the field, and says what would fix it.

use std::fmt;
use std::ops::Range;

/// A place in a scene file, for a person to find: lines and columns count from 1, columns in
/// characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file's name as the caller gave it.
    pub file: String,
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1, in characters.
    pub column: usize,
}

impl Location {
    /// The line and column of byte `offset` in `text` (clamped to the text, and to a character
    /// boundary, so any offset is safe).
    pub fn at(file: &str, text: &str, offset: usize) -> Self {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |n| n + 1);
        let column = before[line_start..].chars().count() + 1;
        Self { file: file.to_owned(), line, column }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// Why a scene was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SceneError {
    /// The file could not be read.
    #[error("{file}: cannot read the scene: {source}")]
    Read {
        /// The file.
        file: String,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The file is larger than [`FILE_BYTES_MAX`](crate::limits::FILE_BYTES_MAX).
    #[error(
        "{file}: the scene is {bytes} bytes, over the limit of {max}; fix: split it or trim it"
    )]
    TooLarge {
        /// The file.
        file: String,
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The text is not TOML, or not shaped like a scene: a syntax error, an unknown field, a
    /// value of the wrong type, a missing field.
    #[error("{at}: {message}{}; fix: {fix}", field_suffix(.field))]
    Syntax {
        /// Where.
        at: Location,
        /// The field, when it can be told.
        field: Option<String>,
        /// What the TOML reader said.
        message: String,
        /// What would fix it.
        fix: String,
    },
    /// A field's value is out of its range or contradicts another field.
    #[error("{at}: {field}: {problem}; fix: {fix}")]
    Invalid {
        /// Where.
        at: Location,
        /// The field, as a path from the top of the file (`bodies[2].mass_kg`).
        field: String,
        /// What is wrong with it.
        problem: String,
        /// What would fix it.
        fix: String,
    },
}

fn field_suffix(field: &Option<String>) -> String {
    field.as_ref().map(|f| format!(" (field `{f}`)")).unwrap_or_default()
}

impl SceneError {
    /// The field the error is about, when it names one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Syntax { field, .. } => field.as_deref(),
            Self::Invalid { field, .. } => Some(field),
            Self::Read { .. } | Self::TooLarge { .. } => None,
        }
    }

    /// Where in the file the error is, when it is about a place in it.
    pub fn location(&self) -> Option<&Location> {
        match self {
            Self::Syntax { at, .. } | Self::Invalid { at, .. } => Some(at),
            Self::Read { .. } | Self::TooLarge { .. } => None,
        }
    }
}

/// The file being read, to turn byte spans into [`Location`]s.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source<'a> {
    pub file: &'a str,
    pub text: &'a str,
}

impl Source<'_> {
    pub fn invalid(
        &self,
        span: &Range<usize>,
        field: impl Into<String>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> SceneError {
        SceneError::Invalid {
            at: Location::at(self.file, self.text, span.start),
            field: field.into(),
            problem: problem.into(),
            fix: fix.into(),
        }
    }

    /// A TOML or shape error, with the key of the line it points at as its field.
    pub fn syntax(&self, error: &toml::de::Error) -> SceneError {
        let offset = error.span().map_or(0, |s| s.start);
        let message = error.message().trim().replace('\n', "; ");
        let field = unknown_field(&message).or_else(|| key_at(self.text, offset));
        let fix = if let Some(max) = message.strip_prefix(crate::format::LIST_OVER) {
            format!("keep at most {max}")
        } else if message.contains("unknown field") {
            "remove or correct the field; docs/scene.md lists every field".to_owned()
        } else if message.contains("missing field") {
            "add the field; docs/scene.md gives its type and range".to_owned()
        } else {
            "write the value as docs/scene.md says (its type is in the message)".to_owned()
        };
        SceneError::Syntax { at: Location::at(self.file, self.text, offset), field, message, fix }
    }
}

/// The field a serde "unknown field `x`" message names.
fn unknown_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_owned())
}

/// The key of the `key = value` line that holds byte `offset`, if the line is one.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let start = text[..offset].rfind('\n').map_or(0, |n| n + 1);
    let line = text[start..].lines().next()?;
    // A table header names the table: `[[bodies]]`, `[room]`.
    let header = line
        .trim()
        .trim_start_matches('[')
        .split(']')
        .next()
        .filter(|_| line.trim_start().starts_with('['));
    let (key, _) = match header {
        Some(name) => (name, ""),
        None => line.split_once('=')?,
    };
    let key = key.trim();
    let bare = !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
    bare.then(|| key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_count_lines_and_characters_from_one() {
        // Goal: file:line:col points where an editor would; method: offsets in a two-line
        // text with a multi-byte character, and offsets past the end or inside a character.
        let text = "ab\nçd = 1\n";
        assert_eq!(Location::at("f", text, 0).to_string(), "f:1:1");
        assert_eq!(Location::at("f", text, 3).to_string(), "f:2:1");
        assert_eq!(Location::at("f", text, 5).to_string(), "f:2:2");
        assert_eq!(Location::at("f", text, 4).to_string(), "f:2:1");
        assert_eq!(Location::at("f", text, 999).line, 3);
    }

    #[test]
    fn the_key_of_a_line_names_the_field() {
        // Goal: a type error's field is the key on its line; method: offsets on key lines and
        // on a table header.
        let text = "[room]\ntick_rate = \"x\"\n";
        assert_eq!(key_at(text, 19).as_deref(), Some("tick_rate"));
        assert_eq!(key_at(text, 2).as_deref(), Some("room"));
        assert_eq!(key_at("[[bodies]]\n", 0).as_deref(), Some("bodies"));
        assert_eq!(key_at("# a comment\n", 0), None);
        assert_eq!(unknown_field("unknown field `masss`, expected one of"), Some("masss".into()));
    }
}
