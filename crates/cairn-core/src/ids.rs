//! Typed identifiers. A user-chosen run id is validated once, here; generated ids carry a prefix
//! so a reader can tell what an id names.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{given}` is not a valid run id: use 1 to 128 characters from A-Z a-z 0-9 . _ -")]
pub struct InvalidRunId {
    pub given: String,
}

/// A run's id: user-chosen (`[A-Za-z0-9._-]{1,128}`) or generated as `run_<uuidv7>`.
///
/// Made three ways: [`RunId::parse`] for the id a user chooses for a new run (validated),
/// [`RunId::generated`] for one the engine makes, and [`RunId::lookup`] for the id of a run to
/// find (from a request, a URL, a flag or a stored row), which any text may be. Read as text
/// anywhere (a message, a wire field, a row): it serializes as its text, and reads back from any
/// text as [`RunId::lookup`] does.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct RunId(String);

impl RunId {
    /// The id a user chooses for a new run, validated.
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

    /// The id of a run to look up, as a request, a URL, a flag or a stored row gives it: any
    /// text, unchecked; a lookup of an id no run has finds nothing (so `bad id!` is a run not
    /// found, not an invalid id). Never the id of a new run: that is [`RunId::parse`].
    pub fn lookup(text: impl Into<String>) -> Self {
        RunId(text.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// As its text's (`"run_…"`), so a record or message that printed the id as text prints it the same.
impl fmt::Debug for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// As its text, padded and cut as a `str` is (`{:<40}` lines up a table as the id's text would).
impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// Read as text anywhere (a message, a path, a row); only the run's lookups need the type.
impl std::ops::Deref for RunId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for RunId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for RunId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> String {
        id.0
    }
}

impl From<&RunId> for String {
    fn from(id: &RunId) -> String {
        id.0.clone()
    }
}

impl PartialEq<str> for RunId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for RunId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for RunId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

/// The fencing token of one attempt; completion and failure writes are conditional on it. A
/// type of its own so no run id, step id or other text can be passed where a token is fenced on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct AttemptToken(pub String);

impl AttemptToken {
    pub fn new(token: impl Into<String>) -> AttemptToken {
        AttemptToken(token.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The attempt's nonce: what its tool's environment carries (`CAIRN_ATTEMPT_NONCE`), so the
    /// tool is found on its host by that alone, before (or without) its pid being recorded. It is
    /// the token's SHA-256 cut to 128 bits, not the token: a tool may print its environment into
    /// a log anyone with a viewer token reads, and the token fences the step's writes.
    pub fn nonce(&self) -> String {
        let mut digest = crate::canonical::sha256_hex(self.0.as_bytes());
        digest.truncate(32);
        format!("atn_{digest}")
    }
}

impl From<&str> for AttemptToken {
    fn from(token: &str) -> AttemptToken {
        AttemptToken(token.to_string())
    }
}

impl From<String> for AttemptToken {
    fn from(token: String) -> AttemptToken {
        AttemptToken(token)
    }
}

/// Read as text anywhere (a message, a row); only a fenced write needs the type.
impl std::ops::Deref for AttemptToken {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for AttemptToken {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for AttemptToken {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl fmt::Display for AttemptToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The process that executes a run (a daemon, or a CLI running `--in-process`): its pid and its
/// start time (clock ticks since boot, from `/proc`), so a successor can tell a live owner from a
/// later process that reuses the pid. Stored and shown as `pid:start_time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner {
    pub pid: u32,
    pub start_time: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{given}` is not a run owner: expected PID:START_TIME")]
pub struct InvalidOwner {
    pub given: String,
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.pid, self.start_time)
    }
}

impl std::str::FromStr for Owner {
    type Err = InvalidOwner;
    fn from_str(s: &str) -> Result<Owner, InvalidOwner> {
        let bad = || InvalidOwner { given: s.to_string() };
        let (pid, start) = s.split_once(':').ok_or_else(bad)?;
        Ok(Owner { pid: pid.parse().map_err(|_| bad())?, start_time: start.parse().map_err(|_| bad())? })
    }
}

impl serde::Serialize for Owner {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Owner {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Owner, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
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

    #[test]
    fn run_ids_to_look_up_are_any_text_and_read_as_text() {
        let id = RunId::lookup("bad id!");
        assert_eq!(id, "bad id!");
        assert_eq!(id.to_string(), "bad id!");
        assert_eq!(format!("[{:<9}]", RunId::lookup("r1")), "[r1       ]");
        assert_eq!(serde_json::to_string(&id).ok().as_deref(), Some("\"bad id!\""));
        let back: Result<RunId, _> = serde_json::from_str("\"r1\"");
        assert_eq!(back.ok(), Some(RunId::lookup("r1")));
        assert_eq!(RunId::parse("r1"), Ok(RunId::lookup("r1")));
    }

    #[test]
    fn an_attempts_nonce_is_fixed_by_its_token_and_does_not_show_it() {
        let token = AttemptToken::from("att_0123456789abcdef0123456789abcdef");
        let nonce = token.nonce();
        assert_eq!(nonce, token.clone().nonce());
        assert_eq!(nonce.len(), "atn_".len() + 32);
        assert!(nonce.starts_with("atn_") && !nonce.contains(token.as_str()));
        assert_ne!(nonce, AttemptToken::from("att_other").nonce());
    }

    #[test]
    fn owners_round_trip_through_their_text() {
        let o = Owner { pid: 42, start_time: 12345 };
        assert_eq!(o.to_string(), "42:12345");
        assert_eq!("42:12345".parse::<Owner>(), Ok(o));
        for bad in ["", "42", "42:", ":1", "a:1", "1:b", "1:2:3"] {
            assert!(bad.parse::<Owner>().is_err(), "{bad}");
        }
    }
}
