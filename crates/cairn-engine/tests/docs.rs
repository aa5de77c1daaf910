//! The procedure-doc index's use cases against a real registry: what each refusal says and
//! codes, that a refusal writes nothing, versions and tombstones as a reader sees them.

use cairn_core::docs::MAX_DOC_BYTES;
use cairn_engine::docs::{DocQuery, SaveDoc};
use cairn_engine::{Engine, EngineError, ErrorCode, ErrorKind};
use cairn_store::testing::{Kind, TestDatabase};
use tempfile::TempDir;

/// An engine over a new state root, its registry on `kind` (the database kept with the directory).
fn engine(kind: Kind) -> Option<((TempDir, TestDatabase), Engine)> {
    let db = kind.database()?;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::builder(&dir.path().join("state")).database(db.url()).open().unwrap();
    Some(((dir, db), engine))
}

fn save(e: &Engine, name: &str, text: &str) -> Result<cairn_engine::docs::SavedDoc, EngineError> {
    e.save_doc(
        &cairn_core::access::Caller::owner("cli"),
        &SaveDoc { name: name.into(), text: text.into(), verification_id: None },
    )
}

#[track_caller]
fn refused(r: Result<impl std::fmt::Debug, EngineError>, code: ErrorCode, words: &[&str]) -> EngineError {
    let e = r.expect_err("should be refused");
    assert_eq!(e.code(), code, "{e}");
    let text = e.to_string();
    for w in words {
        assert!(text.contains(w), "`{text}` does not say `{w}`");
    }
    e
}

fn saving_reading_and_the_versions_a_reader_sees(k: Kind) {
    let Some((_d, e)) = engine(k) else { return };
    let first = save(&e, "pca", "# PCA on new data\n\nDerive the number of components.\n").unwrap();
    assert!(first.created);
    assert_eq!((first.view.version.version, first.view.version.title.as_str()), (1, "PCA on new data"));
    let again = save(&e, "pca", "# PCA on new data\n\nDerive the number of components.\n").unwrap();
    assert!(!again.created, "the same text again writes nothing");
    assert_eq!(again.view.version.version, 1);
    let second = save(&e, "pca", "no heading this time\n").unwrap();
    assert_eq!((second.view.version.version, second.view.version.title.as_str()), (2, "pca"));
    assert_eq!(second.view.versions.len(), 2);

    let newest = e.read_doc("pca", None).unwrap();
    assert_eq!((newest.version.version, newest.text.as_str()), (2, "no heading this time\n"));
    let old = e.read_doc("pca", Some(1)).unwrap();
    assert!(old.text.contains("components"));
    assert_eq!(old.record.latest_version, 2);

    refused(e.read_doc("pca", Some(3)), ErrorCode::DocVersionNotFound, &["no version 3", "1 to 2"]);
    refused(e.read_doc("nope", None), ErrorCode::DocNotFound, &["`nope`", "cairn doc list"]);
    assert_eq!(e.read_doc("nope", None).unwrap_err().kind(), ErrorKind::NotFound);
}

fn bad_input_is_refused_naming_the_field_and_changes_nothing(k: Kind) {
    let Some((_d, e)) = engine(k) else { return };
    refused(save(&e, "a/b", "# x\n"), ErrorCode::InvalidDocName, &["name `a/b`", "A-Z a-z 0-9 . _ -"]);
    refused(save(&e, "", "# x\n"), ErrorCode::InvalidDocName, &["name ``"]);
    refused(save(&e, "ok", ""), ErrorCode::InvalidDocText, &["text is empty"]);
    refused(save(&e, "ok", "  \n\n"), ErrorCode::InvalidDocText, &["text is empty"]);
    refused(save(&e, "ok", &"x".repeat(MAX_DOC_BYTES + 1)), ErrorCode::InvalidDocText, &["1048577 bytes", "1 MiB"]);
    refused(save(&e, "ok", "bin\u{0}ary"), ErrorCode::InvalidDocText, &["U+0000", "line 1"]);
    let v = refused(
        e.save_doc(
            &cairn_core::access::Caller::owner("cli"),
            &SaveDoc { name: "ok".into(), text: "# x\n".into(), verification_id: Some("ver_nope".into()) },
        ),
        ErrorCode::VerificationNotFound,
        &["verification_id `ver_nope`", "--from", "cairn verify"],
    );
    assert_eq!(v.kind(), ErrorKind::NotFound);
    assert!(e.docs(true).unwrap().is_empty(), "nothing was saved");

    save(&e, "ok", "# fine\n\nsome words\n").unwrap();
    for (q, words) in [
        ("\"unbalanced", &["query `\"unbalanced`", "FTS5", "double quotes"][..]),
        ("AND OR", &["query `AND OR`", "\"AND\""][..]),
        ("k-means", &["\"k-means\""][..]),
    ] {
        let err = refused(e.search_docs(&DocQuery { query: q.into(), limit: None }), ErrorCode::InvalidDocQuery, words);
        assert_eq!(err.kind(), ErrorKind::Invalid);
    }
    refused(
        e.search_docs(&DocQuery { query: " ".into(), limit: None }),
        ErrorCode::InvalidDocQuery,
        &["query is empty"],
    );
    refused(e.search_docs(&DocQuery { query: "x".into(), limit: Some(0) }), ErrorCode::InvalidDocQuery, &["limit 0"]);
    refused(
        e.search_docs(&DocQuery { query: "x".into(), limit: Some(101) }),
        ErrorCode::InvalidDocQuery,
        &["1 to 100"],
    );
    assert_eq!(e.search_docs(&DocQuery { query: "words".into(), limit: None }).unwrap().hits.len(), 1);
    assert_eq!(e.read_doc("ok", None).unwrap().record.latest_version, 1);
}

fn a_removed_doc_leaves_the_list_and_the_search_and_keeps_its_versions(k: Kind) {
    let Some((_d, e)) = engine(k) else { return };
    save(&e, "gone", "# Gone\n\nflamingo\n").unwrap();
    save(&e, "kept", "# Kept\n\nflamingo too\n").unwrap();
    let removed = e.remove_doc(&cairn_core::access::Caller::owner("cli"), "gone").unwrap();
    assert!(removed.removed_at.is_some());
    assert_eq!(
        e.remove_doc(&cairn_core::access::Caller::owner("cli"), "gone").unwrap().removed_at,
        removed.removed_at,
        "removing again changes nothing"
    );
    refused(e.remove_doc(&cairn_core::access::Caller::owner("cli"), "never"), ErrorCode::DocNotFound, &["`never`"]);

    assert_eq!(e.docs(false).unwrap().iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["kept"]);
    assert_eq!(e.docs(true).unwrap().len(), 2);
    let hits = e.search_docs(&DocQuery { query: "flamingo".into(), limit: None }).unwrap().hits;
    assert_eq!(hits.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(), ["kept"]);
    refused(e.read_doc("gone", None), ErrorCode::DocRemoved, &["was removed", "`gone@1`", "version 2"]);
    assert_eq!(e.read_doc("gone", Some(1)).unwrap().text, "# Gone\n\nflamingo\n");

    let back = save(&e, "gone", "# Gone\n\nflamingo\n").unwrap();
    assert_eq!((back.created, back.view.version.version, back.view.record.removed_at), (true, 2, None));
}

cairn_store::on_both!(
    saving_reading_and_the_versions_a_reader_sees,
    bad_input_is_refused_naming_the_field_and_changes_nothing,
    a_removed_doc_leaves_the_list_and_the_search_and_keeps_its_versions,
);
