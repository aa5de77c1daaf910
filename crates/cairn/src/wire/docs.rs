//! The procedure-doc index on the wire: the requests (`POST /docs` and MCP `save_doc`, MCP
//! `read_doc` and `search_docs`), and the objects every surface answers with — one doc version
//! with its text, the list, a search's results, a save's outcome.

use cairn_core::docs::{self, DocRef};
use cairn_core::store::{DocHit as StoreHit, DocRecord, DocVersion};
use cairn_engine::EngineError;
use cairn_engine::docs::{DocSearch, DocView, SavedDoc};
use rmcp::schemars::{self, JsonSchema};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::time;

// ------------------------------------------------------------------------------------ requests

/// Save a new version of a procedure doc: `POST /docs`, and the MCP workbench's `save_doc`
/// (`cairn doc save NAME FILE [--from VERIFICATION_ID]` reads the text from FILE).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SaveDoc {
    /// The doc's name: 1 to 128 of A-Z a-z 0-9 . _ -, starting with a letter or a digit.
    #[schema(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
    pub name: String,
    /// The procedure as markdown (at most 1 MiB): what to run and how to derive its parameters on
    /// new data, without the dataset.
    #[schema(min_length = 1, max_length = 1048576)]
    pub text: String,
    /// The passed verification the procedure was proven by (its id, as `verify_workflow`
    /// returned it); the doc links it and its notebook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification_id: Option<String>,
}

impl SaveDoc {
    pub fn into_request(self) -> cairn_engine::docs::SaveDoc {
        cairn_engine::docs::SaveDoc { name: self.name, text: self.text, verification_id: self.verification_id }
    }
}

/// Read one doc: the MCP workbench's `read_doc`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadDoc {
    /// The doc's name (`NAME@VERSION` is accepted too).
    pub name: String,
    /// A version number (default: the newest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
}

impl ReadDoc {
    /// The name and version to read, from `name` (maybe `NAME@VERSION`) and `version`.
    pub fn reference(&self) -> Result<(String, Option<u32>), EngineError> {
        let r = DocRef::parse(&self.name)?;
        let version = self.version.map(docs::check_version).transpose()?;
        match (r.version, version) {
            (Some(a), Some(b)) if a != b => Err(EngineError::InvalidField {
                field: "version",
                message: format!("version {b} and name `{}` (version {a}) disagree; give the version once", self.name),
            }),
            (a, b) => Ok((r.name.to_string(), a.or(b))),
        }
    }
}

/// Search the docs: the MCP workbench's `search_docs` (`GET /docs/search?query=…&limit=…`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchDocs {
    /// SQLite FTS5 syntax: words (all must match), "a phrase", OR, NOT, prefix*; quote a word with
    /// punctuation, e.g. "k-means".
    pub query: String,
    /// At most this many results, best first (1 to 100, default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

// ------------------------------------------------------------------------------------ answers

/// The verification a doc version was saved from.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DocVerification {
    pub verification_id: String,
    /// Its title, verdict and notebook as recorded now (null if the record is gone).
    pub title: Option<String>,
    pub verdict: Option<String>,
    /// The notebook the verification proved, as it was when the doc was saved.
    pub notebook: Option<String>,
}

/// One version of a doc, without its text.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DocVersionEntry {
    pub version: u32,
    pub title: String,
    pub bytes: u64,
    pub sha256: String,
    pub saved_at: String,
    pub verification_id: Option<String>,
}

impl DocVersionEntry {
    fn of(v: &DocVersion) -> DocVersionEntry {
        DocVersionEntry {
            version: v.version,
            title: v.title.clone(),
            bytes: v.bytes,
            sha256: v.sha256.clone(),
            saved_at: time(v.saved_at),
            verification_id: v.verification_id.clone(),
        }
    }
}

/// One version of a procedure doc with its text: `cairn doc show --json`, `GET /docs/{name}`,
/// MCP `read_doc`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Doc {
    pub name: String,
    /// The version shown.
    pub version: u32,
    /// The doc's newest version.
    pub latest_version: u32,
    /// The first heading of this version, else the doc's name.
    pub title: String,
    /// The markdown, as saved.
    pub text: String,
    pub bytes: u64,
    pub sha256: String,
    pub saved_at: String,
    /// When the doc's first version was saved.
    pub created_at: String,
    /// The passed verification this version was saved from, if any.
    pub verification: Option<DocVerification>,
    /// Every version, oldest first.
    pub versions: Vec<DocVersionEntry>,
    /// Set once the doc was removed (its versions stay readable by number).
    pub removed_at: Option<String>,
    /// The text rendered as HTML (raw HTML in it escaped), only when asked for with `render=html`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
}

impl Doc {
    pub fn from_view(v: &DocView) -> Doc {
        Doc {
            name: v.record.name.clone(),
            version: v.version.version,
            latest_version: v.record.latest_version,
            title: v.version.title.clone(),
            text: v.text.clone(),
            bytes: v.version.bytes,
            sha256: v.version.sha256.clone(),
            saved_at: time(v.version.saved_at),
            created_at: time(v.record.created_at),
            verification: v.version.verification_id.as_ref().map(|id| DocVerification {
                verification_id: id.clone(),
                title: v.verification.as_ref().map(|r| r.title.clone()),
                verdict: v.verification.as_ref().and_then(|r| r.verdict.clone()),
                notebook: v.version.notebook.clone(),
            }),
            versions: v.versions.iter().map(DocVersionEntry::of).collect(),
            removed_at: v.record.removed_at.map(time),
            html: None,
        }
    }
}

/// What a save did: the version now newest (the doc object), and `created: false` when the
/// newest version already held this text from the same verification (nothing was written).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DocSaved {
    pub created: bool,
    #[serde(flatten)]
    pub doc: Doc,
}

impl DocSaved {
    pub fn from_saved(s: &SavedDoc) -> DocSaved {
        DocSaved { created: s.created, doc: Doc::from_view(&s.view) }
    }
}

/// A doc in the list: its newest version's summary.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DocSummary {
    pub name: String,
    pub latest_version: u32,
    pub title: String,
    pub bytes: u64,
    pub sha256: String,
    pub created_at: String,
    /// When its newest version was saved (or it was removed).
    pub updated_at: String,
    /// The verification its newest version was saved from.
    pub verification_id: Option<String>,
    pub removed_at: Option<String>,
}

impl DocSummary {
    pub fn from_record(d: &DocRecord) -> DocSummary {
        DocSummary {
            name: d.name.clone(),
            latest_version: d.latest_version,
            title: d.latest.title.clone(),
            bytes: d.latest.bytes,
            sha256: d.latest.sha256.clone(),
            created_at: time(d.created_at),
            updated_at: time(d.updated_at),
            verification_id: d.latest.verification_id.clone(),
            removed_at: d.removed_at.map(time),
        }
    }
}

/// `cairn doc list --json`, `GET /docs`, MCP `list_docs`: by name.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DocList {
    pub docs: Vec<DocSummary>,
}

impl DocList {
    pub fn from_records(all: &[DocRecord]) -> DocList {
        DocList { docs: all.iter().map(DocSummary::from_record).collect() }
    }
}

/// A piece of a snippet: matched text is `highlighted`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SnippetPart {
    pub text: String,
    pub highlighted: bool,
}

/// One doc a search found (its newest version).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DocHit {
    pub name: String,
    pub version: u32,
    pub title: String,
    /// An excerpt around the matches, each matched term in `**` (markdown bold).
    pub snippet: String,
    /// The same excerpt in pieces, the matched ones `highlighted`.
    pub snippet_parts: Vec<SnippetPart>,
    /// BM25 relevance, higher is better (a match in the name or title weighs more).
    pub score: f64,
}

impl DocHit {
    fn of(h: &StoreHit) -> DocHit {
        let parts = docs::snippet_parts(&h.snippet);
        let snippet = parts.iter().map(|(t, hl)| if *hl { format!("**{t}**") } else { t.clone() }).collect::<String>();
        DocHit {
            name: h.name.clone(),
            version: h.version,
            title: h.title.clone(),
            snippet,
            snippet_parts: parts.into_iter().map(|(text, highlighted)| SnippetPart { text, highlighted }).collect(),
            score: h.score,
        }
    }
}

/// `cairn doc search --json`, `GET /docs/search`, MCP `search_docs`: best first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DocSearchResult {
    pub query: String,
    pub limit: usize,
    pub results: Vec<DocHit>,
}

impl DocSearchResult {
    pub fn from_search(s: &DocSearch) -> DocSearchResult {
        DocSearchResult { query: s.query.clone(), limit: s.limit, results: s.hits.iter().map(DocHit::of).collect() }
    }
}
