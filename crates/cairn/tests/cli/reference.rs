//! The book's generated reference (`docs/src/reference/`) is what the code says today: the pages
//! are regenerated into a temporary folder and compared with the committed ones. With
//! `CAIRN_BLESS=1` the committed pages are rewritten instead.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cairn::reference::{EDGE_CODES, REGENERATE, pages};

fn committed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/reference")
}

#[test]
fn the_committed_reference_pages_are_what_the_code_generates() {
    let dir = committed_dir();
    let fresh = tempfile::tempdir().unwrap();
    let pages = pages();
    for (name, text) in &pages {
        std::fs::write(fresh.path().join(name), text).unwrap();
    }
    if std::env::var("CAIRN_BLESS").is_ok_and(|v| v == "1") {
        for (name, _) in &pages {
            std::fs::copy(fresh.path().join(name), dir.join(name)).unwrap();
        }
        return;
    }
    let mut stale = Vec::new();
    for (name, _) in &pages {
        let generated = std::fs::read_to_string(fresh.path().join(name)).unwrap();
        let committed = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        if generated != committed {
            let line = generated
                .lines()
                .zip(committed.lines())
                .position(|(a, b)| a != b)
                .map_or_else(|| generated.lines().count().min(committed.lines().count()) + 1, |i| i + 1);
            stale.push(format!("docs/src/reference/{name} (first difference at line {line})"));
        }
    }
    let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".md"))
        .collect();
    let generated: BTreeSet<String> = pages.iter().map(|(n, _)| n.to_string()).collect();
    for extra in on_disk.difference(&generated) {
        stale.push(format!("docs/src/reference/{extra} is not generated: remove it, or generate it"));
    }
    assert!(
        stale.is_empty(),
        "the generated reference is out of date:\n  {}\nregenerate it with:\n  {REGENERATE}",
        stale.join("\n  ")
    );
}

/// The page's example of a workflow file is one the parser accepts.
#[test]
fn the_workflow_files_example_parses() {
    let spec = cairn_core::workflow::parse_workflow(cairn::reference::WORKFLOW_EXAMPLE, "workflow.toml")
        .unwrap_or_else(|e| panic!("the reference's example does not parse: {e}"));
    assert_eq!(spec.steps.len(), 1);
    assert_eq!(spec.rules.len(), 1);
}

/// The first string literal after each `call(` in `text`.
fn codes_after(text: &str, call: &str) -> Vec<String> {
    text.match_indices(call)
        .filter_map(|(at, _)| {
            let rest = &text[at + call.len()..];
            let open = rest.find('"')?;
            let close = rest[open + 1..].find('"')?;
            // Only a literal among the call's arguments, not one of a later statement.
            (!rest[..open].contains(')')).then(|| rest[open + 1..open + 1 + close].to_string())
        })
        .collect()
}

/// Every code the binary gives itself (not the engine's) is in the page's table of them.
#[test]
fn every_code_of_the_binarys_edge_is_documented() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src.clone()];
    let mut found = BTreeSet::new();
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if p.extension().is_none_or(|e| e != "rs") || p.ends_with("reference/codes.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for call in
            ["ApiError::new(", "CallError::new(", "Failure::conflict(", "Failure::unavailable(", "Failure::of_kind("]
        {
            for code in codes_after(&text, call) {
                found.insert((code, p.display().to_string()));
            }
        }
        if let Some(at) = text.find("impl From<JsonRejection> for ApiError") {
            let body = &text[at..at + text[at..].find("\n}\n").unwrap_or(text.len() - at)];
            for code in codes_after(body, "=> ") {
                found.insert((code, p.display().to_string()));
            }
        }
    }
    assert!(found.len() >= 15, "the scan found only {found:?}");
    let documented: BTreeSet<&str> = EDGE_CODES.iter().map(|c| c.0).collect();
    let missing: Vec<String> = found
        .iter()
        .filter(|(c, _)| !documented.contains(c.as_str()) && !c.contains('{') && !c.is_empty())
        .map(|(c, f)| format!("`{c}` ({f})"))
        .collect();
    assert!(missing.is_empty(), "codes missing from EDGE_CODES (crates/cairn/src/reference/codes.rs): {missing:?}");
}
