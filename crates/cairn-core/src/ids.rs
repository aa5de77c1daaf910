//! Typed identifiers. A user-chosen run id is validated once, here; generated ids carry a prefix
//! so a reader can tell what an id names.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{given}` is not a valid run id: use 1 to 128 characters from A-Z a-z 0-9 . _ -")]
pub struct InvalidRunId {
    pub given: String,
}

/// A run's id: user-chosen (`[A-Za-z0-9._-]{1,128}`) or generated as `run_<uuidv7>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(String);

impl RunId {
    pub fn parse(s: &str) -> Result<Self, InvalidRunId> {
        let ok = !s.is_empty()
            && s.len() <= 128
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            && s != "."
            && s != "..";
        if ok { Ok(RunId(s.to_string())) } else { Err(InvalidRunId { given: s.to_string() }) }
    }

    /// A generated id from a unique suffix the caller supplies (a UUIDv7 in the engine).
    pub fn generated(unique: &str) -> Self {
        RunId(format!("run_{unique}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The fencing token of one attempt; completion and failure writes are conditional on it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttemptToken(pub String);

impl fmt::Display for AttemptToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_validated() {
        assert!(RunId::parse("release-2.4.0_a").is_ok());
        assert!(RunId::parse("").is_err());
        assert!(RunId::parse("..").is_err());
        assert!(RunId::parse("a/b").is_err());
        assert!(RunId::parse(&"x".repeat(129)).is_err());
        assert!(RunId::parse(&"x".repeat(128)).is_ok());
    }
}
