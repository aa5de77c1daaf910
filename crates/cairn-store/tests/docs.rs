//! The procedure-doc index, on SQLite and on PostgreSQL (every test runs on both): numbered
//! versions never overwritten, the full-text search over each live doc's newest version (FTS5's
//! query syntax on both), tombstones, and the refusals of the index itself.

use cairn_core::canonical::sha256_hex;
use cairn_core::docs::{HIGHLIGHT_END, HIGHLIGHT_START};
use cairn_core::store::*;
use cairn_store::testing::{Kind, TestSchema};
use cairn_store::{PostgresStore, SqliteStore};
use rusqlite::Connection;
use tempfile::TempDir;

enum Raw {
    Sqlite(TempDir),
    Postgres(TestSchema),
}

struct Db {
    raw: Raw,
    store: Box<dyn RunStore>,
}

/// A fresh registry on `kind`; `None` where the test database is not set up (outside CI).
fn db(kind: Kind) -> Option<Db> {
    Some(match kind {
        Kind::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let store = SqliteStore::open(&dir.path().join("cairn.db")).unwrap();
            Db { raw: Raw::Sqlite(dir), store: Box::new(store) }
        }
        Kind::Postgres => {
            let schema = TestSchema::create()?;
            let store = PostgresStore::connect(&schema.url).unwrap();
            Db { raw: Raw::Postgres(schema), store: Box::new(store) }
        }
    })
}

impl Db {
    /// Runs `sql` on a connection of its own, as anyone who reaches the database could.
    fn raw_execute(&self, sql: &str) -> Result<u64, String> {
        match &self.raw {
            Raw::Sqlite(dir) => Connection::open(dir.path().join("cairn.db"))
                .unwrap()
                .execute(sql, [])
                .map(|n| n as u64)
                .map_err(|e| e.to_string()),
            Raw::Postgres(schema) => {
                schema.client().execute(sql, &[]).map_err(|e| format!("{e}: {:?}", e.as_db_error()))
            }
        }
    }

    fn raw_count(&self, sql: &str) -> i64 {
        match &self.raw {
            Raw::Sqlite(dir) => {
                Connection::open(dir.path().join("cairn.db")).unwrap().query_row(sql, [], |r| r.get(0)).unwrap()
            }
            Raw::Postgres(schema) => schema.client().query_one(sql, &[]).unwrap().get(0),
        }
    }
}

fn new(name: &str, text: &str, at: i64) -> NewDocVersion {
    NewDocVersion {
        name: name.into(),
        text: text.into(),
        sha256: sha256_hex(text.as_bytes()),
        title: cairn_core::docs::title_of(text).unwrap_or_else(|| name.into()),
        verification_id: None,
        notebook: None,
        at,
    }
}

fn saved(store: &dyn RunStore, name: &str, text: &str, at: i64) -> DocVersion {
    match store.save_doc(&new(name, text, at)).unwrap() {
        SaveDoc::Saved(v) => v,
        other => panic!("expected a new version, got {other:?}"),
    }
}

fn names(hits: &[DocHit]) -> Vec<&str> {
    hits.iter().map(|h| h.name.as_str()).collect()
}

fn versions_are_numbered_kept_and_an_identical_save_writes_nothing(k: Kind) {
    let Some(d) = db(k) else { return };
    let v1 = saved(&*d.store, "pca", "# PCA\n\nfirst draft\n", 10);
    assert_eq!((v1.version, v1.title.as_str(), v1.bytes, v1.saved_at), (1, "PCA", 19, 10));
    let v2 = saved(&*d.store, "pca", "# PCA run\n\nsecond draft\n", 20);
    assert_eq!(v2.version, 2);
    match d.store.save_doc(&new("pca", "# PCA run\n\nsecond draft\n", 30)).unwrap() {
        SaveDoc::Unchanged(v) => assert_eq!(v, v2),
        other => panic!("{other:?}"),
    }
    let rec = d.store.doc("pca").unwrap().unwrap();
    assert_eq!((rec.latest_version, rec.created_at, rec.updated_at, rec.removed_at), (2, 10, 20, None));
    assert_eq!(rec.latest, v2);
    let versions = d.store.doc_versions("pca").unwrap();
    assert_eq!(versions.iter().map(|v| v.version).collect::<Vec<_>>(), [1, 2]);
    let (v, text) = d.store.doc_text("pca", 1).unwrap().unwrap();
    assert_eq!((v, text.as_str()), (v1, "# PCA\n\nfirst draft\n"));
    assert!(d.store.doc_text("pca", 3).unwrap().is_none());
    assert!(d.store.doc("nope").unwrap().is_none());
}

fn a_search_finds_the_newest_version_of_live_docs_ranked_with_highlights(k: Kind) {
    let Some(d) = db(k) else { return };
    saved(&*d.store, "pca-clustering", "# PCA clustering\n\nReduce with PCA, then cluster with k-means.\n", 1);
    saved(&*d.store, "qc", "# Quality control\n\nDrop cells with few genes. Never use pca here.\n", 2);
    saved(&*d.store, "old", "# Old\n\nmentions zebrafish once\n", 3);
    saved(&*d.store, "old", "# Old\n\nnow about medaka\n", 4);

    let hits = d.store.search_docs("pca", 10).unwrap();
    // The doc named and titled for it first, then the one that only mentions it.
    assert_eq!(names(&hits), ["pca-clustering", "qc"]);
    assert!(hits[0].score > hits[1].score, "{hits:?}");
    assert!(hits.iter().all(|h| h.snippet.contains(HIGHLIGHT_START) && h.snippet.contains(HIGHLIGHT_END)), "{hits:?}");
    assert_eq!(hits[0].version, 1);

    // Only the newest version is searched.
    assert!(d.store.search_docs("zebrafish", 10).unwrap().is_empty());
    let medaka = d.store.search_docs("medaka", 10).unwrap();
    assert_eq!((names(&medaka), medaka[0].version), (vec!["old"], 2));
    // Phrases, prefixes, boolean operators, and the limit.
    assert_eq!(names(&d.store.search_docs("\"few genes\"", 10).unwrap()), ["qc"]);
    assert_eq!(names(&d.store.search_docs("clust*", 10).unwrap()), ["pca-clustering"]);
    assert_eq!(names(&d.store.search_docs("pca NOT genes", 10).unwrap()), ["pca-clustering"]);
    assert_eq!(d.store.search_docs("pca", 1).unwrap().len(), 1);
    // Diacritics fold.
    saved(&*d.store, "cafe", "# Café au lait\n", 5);
    assert_eq!(names(&d.store.search_docs("cafe", 10).unwrap()), ["cafe"]);
}

fn a_query_the_index_cannot_parse_is_refused_as_such(k: Kind) {
    let Some(d) = db(k) else { return };
    saved(&*d.store, "a", "# A\n\ntext\n", 1);
    for bad in ["\"unbalanced", "AND OR", "nocolumn: x", "(a", "a AND", "*"] {
        match d.store.search_docs(bad, 10) {
            Err(StoreError::InvalidDocQuery(m)) => assert!(!m.is_empty(), "{bad}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    // Still searchable afterwards.
    assert_eq!(d.store.search_docs("text", 10).unwrap().len(), 1);
}

fn a_removed_doc_is_a_tombstone_and_a_later_save_continues_its_versions(k: Kind) {
    let Some(d) = db(k) else { return };
    saved(&*d.store, "gone", "# Gone\n\nunique-word-xyzzy\n", 1);
    saved(&*d.store, "gone", "# Gone\n\nunique xyzzy again\n", 2);
    let removed = d.store.remove_doc("gone", 3).unwrap().unwrap();
    assert_eq!((removed.removed_at, removed.latest_version), (Some(3), 2));
    // Removing again keeps the first tombstone.
    assert_eq!(d.store.remove_doc("gone", 9).unwrap().unwrap().removed_at, Some(3));
    assert!(d.store.remove_doc("never", 9).unwrap().is_none());
    assert!(d.store.search_docs("xyzzy", 10).unwrap().is_empty());
    assert!(d.store.docs(false).unwrap().is_empty());
    assert_eq!(d.store.docs(true).unwrap().len(), 1);
    assert_eq!(d.store.doc_text("gone", 1).unwrap().unwrap().1, "# Gone\n\nunique-word-xyzzy\n");

    // The same text again is a new version: the doc was removed, so it comes back.
    let v3 = saved(&*d.store, "gone", "# Gone\n\nunique xyzzy again\n", 4);
    assert_eq!(v3.version, 3);
    assert_eq!(d.store.doc("gone").unwrap().unwrap().removed_at, None);
    assert_eq!(names(&d.store.search_docs("xyzzy", 10).unwrap()), ["gone"]);
}

fn versions_are_append_only_and_a_verification_must_exist(k: Kind) {
    let Some(d) = db(k) else { return };
    saved(&*d.store, "a", "# A\n", 1);
    let e = d.raw_execute("UPDATE doc_versions SET text = 'x'").unwrap_err();
    assert!(e.contains("never changed"), "{e}");
    let e = d.raw_execute("DELETE FROM doc_versions").unwrap_err();
    assert!(e.contains("never deleted"), "{e}");

    let mut n = new("b", "# B\n", 2);
    n.verification_id = Some("ver_missing".into());
    assert!(matches!(d.store.save_doc(&n), Err(StoreError::Database(_))));
    assert!(d.store.doc("b").unwrap().is_none(), "a refused save leaves nothing");
    assert!(d.store.search_docs("b", 10).unwrap().is_empty());
}

fn the_index_holds_one_search_row_per_live_doc(k: Kind) {
    let Some(d) = db(k) else { return };
    for i in 0..20 {
        saved(&*d.store, &format!("d{}", i % 5), &format!("# Doc {i}\n\nbody {i}\n"), i);
    }
    d.store.remove_doc("d0", 100).unwrap();
    assert_eq!(d.raw_count("SELECT count(*) FROM doc_search"), 4);
    if let Raw::Sqlite(_) = d.raw {
        d.raw_execute("INSERT INTO doc_search (doc_search) VALUES ('integrity-check')").unwrap();
    }
    assert_eq!(d.raw_count("SELECT count(*) FROM doc_versions"), 20);
}

cairn_store::on_both!(
    versions_are_numbered_kept_and_an_identical_save_writes_nothing,
    a_search_finds_the_newest_version_of_live_docs_ranked_with_highlights,
    a_query_the_index_cannot_parse_is_refused_as_such,
    a_removed_doc_is_a_tombstone_and_a_later_save_continues_its_versions,
    versions_are_append_only_and_a_verification_must_exist,
    the_index_holds_one_search_row_per_live_doc,
);
