//! Procedure docs: markdown documents that hold a proven procedure minus its dataset, kept by name
//! in the doc index so an agent can find and re-run them on new data. This module holds what is
//! pure about them: the name rule, `NAME[@VERSION]` references, the limits of a doc's text and of
//! a search, and a doc's title (its first heading).

use std::fmt;

use pulldown_cmark::{Event, HeadingLevel, Parser, Tag, TagEnd};

mod tsquery;
pub use tsquery::fts5_to_tsquery;

/// The most a doc's text may hold, in bytes of UTF-8.
pub const MAX_DOC_BYTES: usize = 1 << 20;
/// The longest doc name.
pub const MAX_NAME_LEN: usize = 128;
/// The longest search query, in bytes.
pub const MAX_QUERY_BYTES: usize = 1024;
/// The most results a search returns; the default is [`DEFAULT_SEARCH_LIMIT`].
pub const MAX_SEARCH_LIMIT: usize = 100;
pub const DEFAULT_SEARCH_LIMIT: usize = 10;
/// A title is cut to this many characters.
const MAX_TITLE_CHARS: usize = 200;
/// A name the API's paths use (`GET /docs/search`), so no doc may have it.
pub const RESERVED_NAMES: [&str; 1] = ["search"];

/// Why a doc's name, version, text or search is refused. Each message starts with the field it
/// is about and says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocError {
    #[error(
        "name `{given}` is not a valid doc name: {why}; use 1 to {MAX_NAME_LEN} characters from A-Z a-z 0-9 . _ -, starting with a letter or a digit (e.g. `pca-clustering`)"
    )]
    InvalidName { given: String, why: &'static str },
    #[error(
        "version `{given}` is not a doc version: versions are whole numbers from 1 (the first save); `cairn doc show NAME` lists a doc's versions"
    )]
    InvalidVersion { given: String },
    #[error("text is empty: a procedure doc is markdown that says how to run the procedure; write it and save again")]
    EmptyText,
    #[error(
        "text is {bytes} bytes, over the limit of {MAX_DOC_BYTES} bytes (1 MiB) a procedure doc may hold; keep the procedure and leave data and outputs out (link to them instead), or split it into several docs"
    )]
    TooLarge { bytes: usize },
    #[error(
        "text holds the control character U+{code:04X} on line {line}; a procedure doc is markdown text (tabs and line breaks are fine): remove it, or check that the file is not binary"
    )]
    ControlCharacter { code: u32, line: usize },
    #[error("query is empty: give words to search for, e.g. `pca clustering`")]
    EmptyQuery,
    #[error("query is {bytes} bytes, over the limit of {MAX_QUERY_BYTES} bytes; search with fewer words")]
    QueryTooLong { bytes: usize },
    #[error("limit {given} is out of range: ask for 1 to {MAX_SEARCH_LIMIT} results (default {DEFAULT_SEARCH_LIMIT})")]
    InvalidLimit { given: usize },
}

impl DocError {
    /// The request field the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            DocError::InvalidName { .. } => "name",
            DocError::InvalidVersion { .. } => "version",
            DocError::EmptyText | DocError::TooLarge { .. } | DocError::ControlCharacter { .. } => "text",
            DocError::EmptyQuery | DocError::QueryTooLong { .. } => "query",
            DocError::InvalidLimit { .. } => "limit",
        }
    }
}

/// A doc's name: `[A-Za-z0-9][A-Za-z0-9._-]{0,127}` (a run id's characters, starting with a
/// letter or digit so it is never taken for an option or a hidden file), and not a reserved name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DocName(String);

impl DocName {
    pub fn parse(s: &str) -> Result<DocName, DocError> {
        let bad = |why| Err(DocError::InvalidName { given: s.to_string(), why });
        if s.is_empty() {
            return bad("it is empty");
        }
        if s.len() > MAX_NAME_LEN {
            return bad("it is too long");
        }
        if !s.as_bytes()[0].is_ascii_alphanumeric() {
            return bad("it must start with a letter or a digit");
        }
        if !s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
            return bad("it holds a character other than A-Z a-z 0-9 . _ -");
        }
        if RESERVED_NAMES.contains(&s) {
            return bad("it is reserved (the API searches at /docs/search)");
        }
        Ok(DocName(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DocName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A doc version as given (`3`): a whole number from 1.
pub fn parse_version(s: &str) -> Result<u32, DocError> {
    match s.parse::<u32>() {
        Ok(v) if v >= 1 && s.bytes().all(|b| b.is_ascii_digit()) => Ok(v),
        _ => Err(DocError::InvalidVersion { given: s.to_string() }),
    }
}

/// A version given as a number (an API field, an MCP argument): it must be 1 or more.
pub fn check_version(v: u64) -> Result<u32, DocError> {
    match u32::try_from(v) {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(DocError::InvalidVersion { given: v.to_string() }),
    }
}

/// `NAME` (the newest version) or `NAME@VERSION`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocRef {
    pub name: DocName,
    pub version: Option<u32>,
}

impl DocRef {
    pub fn parse(s: &str) -> Result<DocRef, DocError> {
        match s.split_once('@') {
            Some((name, version)) => Ok(DocRef { name: DocName::parse(name)?, version: Some(parse_version(version)?) }),
            None => Ok(DocRef { name: DocName::parse(s)?, version: None }),
        }
    }
}

/// Checks a doc's text: not blank, at most [`MAX_DOC_BYTES`], and no control characters but tab,
/// line feed and carriage return (markdown is text; a control character means a binary file, and
/// the search's highlight markers are control characters).
pub fn check_text(text: &str) -> Result<(), DocError> {
    if text.len() > MAX_DOC_BYTES {
        return Err(DocError::TooLarge { bytes: text.len() });
    }
    if text.trim().is_empty() {
        return Err(DocError::EmptyText);
    }
    if let Some((at, c)) = text.char_indices().find(|(_, c)| c.is_control() && !matches!(c, '\t' | '\n' | '\r')) {
        let line = text.as_bytes()[..at].iter().filter(|b| **b == b'\n').count() + 1;
        return Err(DocError::ControlCharacter { code: c as u32, line });
    }
    Ok(())
}

/// Checks a search query's size (its syntax is the index's to judge).
pub fn check_query(query: &str) -> Result<(), DocError> {
    if query.trim().is_empty() {
        return Err(DocError::EmptyQuery);
    }
    if query.len() > MAX_QUERY_BYTES {
        return Err(DocError::QueryTooLong { bytes: query.len() });
    }
    Ok(())
}

/// A search's result count: the default when not given, else 1 to [`MAX_SEARCH_LIMIT`].
pub fn search_limit(given: Option<usize>) -> Result<usize, DocError> {
    match given {
        None => Ok(DEFAULT_SEARCH_LIMIT),
        Some(n) if (1..=MAX_SEARCH_LIMIT).contains(&n) => Ok(n),
        Some(n) => Err(DocError::InvalidLimit { given: n }),
    }
}

/// A doc's title: the text of its first level-1 heading, else of its first heading, else `None`;
/// whitespace collapsed, cut at 200 characters.
pub fn title_of(text: &str) -> Option<String> {
    let mut first: Option<String> = None;
    let mut current: Option<(HeadingLevel, String)> = None;
    for event in Parser::new(text) {
        match event {
            Event::Start(Tag::Heading { level, .. }) => current = Some((level, String::new())),
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, s)) = current.as_mut() {
                    s.push_str(&t);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some((_, s)) = current.as_mut() {
                    s.push(' ');
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some((level, s)) = current.take() {
                    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
                    if s.is_empty() {
                        continue;
                    }
                    let s = if s.chars().count() > MAX_TITLE_CHARS {
                        format!("{}…", s.chars().take(MAX_TITLE_CHARS).collect::<String>())
                    } else {
                        s
                    };
                    if level == HeadingLevel::H1 {
                        return Some(s);
                    }
                    first.get_or_insert(s);
                }
            }
            _ => {}
        }
    }
    first
}

/// What the index marks the start and the end of a matched term with in a snippet (control
/// characters, which [`check_text`] keeps out of every doc).
pub const HIGHLIGHT_START: char = '\u{1}';
pub const HIGHLIGHT_END: char = '\u{2}';

/// A snippet split into its plain and highlighted parts, in order.
pub fn snippet_parts(snippet: &str) -> Vec<(String, bool)> {
    let mut parts: Vec<(String, bool)> = Vec::new();
    let mut current = String::new();
    let mut highlighted = false;
    for c in snippet.chars() {
        if c == HIGHLIGHT_START || c == HIGHLIGHT_END {
            if !current.is_empty() {
                parts.push((std::mem::take(&mut current), highlighted));
            }
            highlighted = c == HIGHLIGHT_START;
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() {
        parts.push((current, highlighted));
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rule() {
        for ok in ["pca-clustering", "a", "Q3_report.v2", "0", &"x".repeat(128)] {
            assert!(DocName::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a/b", "../x", ".hidden", "-flag", "_x", "with space", "x@1", "é", "search", &"x".repeat(129)]
        {
            let e = DocName::parse(bad).unwrap_err();
            assert_eq!(e.field(), "name");
            assert!(e.to_string().contains("A-Z a-z 0-9 . _ -"), "{e}");
        }
    }

    #[test]
    fn references_name_a_version_or_the_newest() {
        assert_eq!(DocRef::parse("pca").unwrap(), DocRef { name: DocName::parse("pca").unwrap(), version: None });
        assert_eq!(DocRef::parse("pca@3").unwrap().version, Some(3));
        for bad in ["pca@", "pca@0", "pca@-1", "pca@x", "pca@1.0", "pca@+2", "@3", "pca@99999999999"] {
            assert!(DocRef::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(DocRef::parse("pca@x").unwrap_err().field(), "version");
        assert!(check_version(0).is_err());
        assert_eq!(check_version(7), Ok(7));
        assert!(check_version(u64::MAX).is_err());
    }

    #[test]
    fn text_is_checked() {
        assert_eq!(check_text(""), Err(DocError::EmptyText));
        assert_eq!(check_text(" \n\t\n"), Err(DocError::EmptyText));
        assert!(check_text("# T\n\ntab\there\r\n").is_ok());
        assert_eq!(check_text("a\nb\u{0}c"), Err(DocError::ControlCharacter { code: 0, line: 2 }));
        assert!(check_text(&"x".repeat(MAX_DOC_BYTES)).is_ok());
        let e = check_text(&"x".repeat(MAX_DOC_BYTES + 1)).unwrap_err();
        assert!(e.to_string().contains("1048577 bytes") && e.to_string().contains("1 MiB"), "{e}");
        assert_eq!(e.field(), "text");
    }

    #[test]
    fn queries_and_limits_are_bounded() {
        assert_eq!(check_query("  "), Err(DocError::EmptyQuery));
        assert!(check_query("pca").is_ok());
        assert!(check_query(&"x".repeat(MAX_QUERY_BYTES + 1)).is_err());
        assert_eq!(search_limit(None), Ok(DEFAULT_SEARCH_LIMIT));
        assert_eq!(search_limit(Some(100)), Ok(100));
        assert!(search_limit(Some(0)).is_err());
        assert!(search_limit(Some(101)).is_err());
    }

    #[test]
    fn the_title_is_the_first_heading() {
        assert_eq!(title_of("intro\n\n## Setup\n\n# The `PCA` run\n").as_deref(), Some("The PCA run"));
        assert_eq!(title_of("## Only a\n   second level\n").as_deref(), Some("Only a"));
        assert_eq!(title_of("Setext\n======\n").as_deref(), Some("Setext"));
        assert_eq!(title_of("no heading at all"), None);
        assert_eq!(title_of("```\n# not a heading\n```\n"), None);
        let long = format!("# {}", "w".repeat(300));
        assert_eq!(title_of(&long).unwrap().chars().count(), MAX_TITLE_CHARS + 1);
    }

    #[test]
    fn snippets_split_at_the_markers() {
        let s = format!("the {HIGHLIGHT_START}pca{HIGHLIGHT_END} run of {HIGHLIGHT_START}x{HIGHLIGHT_END}");
        assert_eq!(
            snippet_parts(&s),
            vec![
                ("the ".to_string(), false),
                ("pca".to_string(), true),
                (" run of ".to_string(), false),
                ("x".to_string(), true)
            ]
        );
        assert!(snippet_parts("").is_empty());
    }
}
