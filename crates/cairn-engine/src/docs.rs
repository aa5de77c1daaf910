//! The procedure-doc index: markdown docs that hold a proven procedure minus its dataset, saved
//! by name in numbered versions (never overwritten), optionally linked to the passed verification
//! (and so the notebook) they came from, and found again by a full-text search over each live
//! doc's newest version. A removed doc is a tombstone: it leaves the list and the search, and its
//! versions stay readable by number.
//!
//! **Invariant:** a save is one transaction (the version, the doc's index row and its search
//! row): a crash never leaves a version the index does not know, nor a search row of a version
//! that is not stored.

use cairn_core::access::{Caller, Permission, Scope};
use cairn_core::canonical::sha256_hex;
use cairn_core::docs::{self, DocName};
use cairn_core::store::{
    DocHit, DocRecord, DocVersion, NewDocVersion, SaveDoc as Saved, StoreError, VerificationRecord,
};

use crate::{Engine, EngineError};

/// Save a new version of a doc.
#[derive(Debug, Clone)]
pub struct SaveDoc {
    pub name: String,
    /// Markdown, at most [`docs::MAX_DOC_BYTES`].
    pub text: String,
    /// A passed verification the doc was written from: the doc links it and its notebook.
    pub verification_id: Option<String>,
}

/// One version of a doc, with its text, every version of the doc, and the verification it came from.
#[derive(Debug, Clone)]
pub struct DocView {
    /// The doc in the index: its newest version and its tombstone.
    pub record: DocRecord,
    /// The version shown.
    pub version: DocVersion,
    pub text: String,
    /// Oldest first.
    pub versions: Vec<DocVersion>,
    /// The verification the shown version was saved from, as recorded now.
    pub verification: Option<VerificationRecord>,
}

/// What a save did: the version now newest, and whether it was written (`false`: the newest
/// version already held this text from the same verification).
#[derive(Debug, Clone)]
pub struct SavedDoc {
    pub view: DocView,
    pub created: bool,
}

/// Search the newest version of every live doc.
#[derive(Debug, Clone)]
pub struct DocQuery {
    /// SQLite FTS5 query syntax.
    pub query: String,
    /// 1 to [`docs::MAX_SEARCH_LIMIT`]; default [`docs::DEFAULT_SEARCH_LIMIT`].
    pub limit: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct DocSearch {
    pub query: String,
    pub limit: usize,
    /// Best first.
    pub hits: Vec<DocHit>,
}

impl Engine {
    /// Stores a new version of a doc (or finds its newest version already holding this text).
    /// Bad input is refused before anything is written.
    pub fn save_doc(&self, caller: &Caller, req: &SaveDoc) -> Result<SavedDoc, EngineError> {
        self.authorize(caller, Permission::Docs, &Scope::everywhere())?;
        let name = DocName::parse(&req.name)?;
        docs::check_text(&req.text)?;
        let notebook = match &req.verification_id {
            None => None,
            Some(id) => {
                let v = self
                    .store
                    .verification(id)?
                    .ok_or_else(|| EngineError::DocVerificationNotFound { id: id.clone() })?;
                if v.verdict.as_deref() != Some("passed") {
                    return Err(EngineError::VerificationNotPassed {
                        id: id.clone(),
                        verdict: v
                            .verdict
                            .map(|v| format!("`{v}`"))
                            .unwrap_or_else(|| "none yet (it is still running)".into()),
                    });
                }
                v.notebook
            }
        };
        let new = NewDocVersion {
            name: name.to_string(),
            text: req.text.clone(),
            sha256: sha256_hex(req.text.as_bytes()),
            title: docs::title_of(&req.text).unwrap_or_else(|| name.to_string()),
            verification_id: req.verification_id.clone(),
            notebook,
            at: self.clock.now_ms(),
        };
        let (version, created) = match self.store.save_doc(&new)? {
            Saved::Saved(v) => (v.version, true),
            Saved::Unchanged(v) => (v.version, false),
        };
        if created {
            self.record(caller, "doc.saved", name.as_str(), serde_json::json!({"version": version}));
        }
        Ok(SavedDoc { view: self.read_doc(name.as_str(), Some(version))?, created })
    }

    /// Every live doc by name, each with its newest version (the removed ones too when asked).
    pub fn docs(&self, include_removed: bool) -> Result<Vec<DocRecord>, EngineError> {
        Ok(self.store.docs(include_removed)?)
    }

    /// A doc's newest version (refused for a removed doc), or the version asked for (a removed
    /// doc's too), with its text and its versions.
    pub fn read_doc(&self, name: &str, version: Option<u32>) -> Result<DocView, EngineError> {
        let name = DocName::parse(name)?;
        let record =
            self.store.doc(name.as_str())?.ok_or_else(|| EngineError::DocNotFound { name: name.to_string() })?;
        let latest = record.latest_version;
        let wanted = match version {
            None if record.removed_at.is_some() => {
                return Err(EngineError::DocRemoved { name: name.to_string(), latest });
            }
            None => latest,
            Some(v) if v == 0 || v > latest => {
                return Err(EngineError::DocVersionNotFound { name: name.to_string(), version: v, latest });
            }
            Some(v) => v,
        };
        let (shown, text) = self.store.doc_text(name.as_str(), wanted)?.ok_or_else(|| {
            EngineError::Store(StoreError::Corrupt(format!("doc `{name}` has no stored version {wanted}")))
        })?;
        let verification = match &shown.verification_id {
            Some(id) => self.store.verification(id)?,
            None => None,
        };
        Ok(DocView { versions: self.store.doc_versions(name.as_str())?, record, version: shown, text, verification })
    }

    /// Full-text search over the newest version of every live doc: BM25-ranked (a doc's name
    /// and title weigh more than its body), each hit with a snippet around its matches.
    pub fn search_docs(&self, q: &DocQuery) -> Result<DocSearch, EngineError> {
        docs::check_query(&q.query)?;
        let limit = docs::search_limit(q.limit)?;
        let hits = self.store.search_docs(&q.query, limit).map_err(|e| match e {
            StoreError::InvalidDocQuery(message) => EngineError::DocQuery { query: q.query.clone(), message },
            other => other.into(),
        })?;
        Ok(DocSearch { query: q.query.clone(), limit, hits })
    }

    /// Tombstones a doc: it leaves the list and the search; its versions stay readable by number,
    /// and a later save makes the next version. Removing a removed doc changes nothing.
    pub fn remove_doc(&self, caller: &Caller, name: &str) -> Result<DocRecord, EngineError> {
        self.authorize(caller, Permission::Docs, &Scope::everywhere())?;
        let name = DocName::parse(name)?;
        let removed = self
            .store
            .remove_doc(name.as_str(), self.clock.now_ms())?
            .ok_or_else(|| EngineError::DocNotFound { name: name.to_string() })?;
        self.record(caller, "doc.removed", name.as_str(), serde_json::json!({}));
        Ok(removed)
    }
}
