//! The layering, checked from the sources: the binary depends on the engine and the core only
//! (never on the store or the executors), and the top-level modules of every crate import each
//! other without a circle, so each can be read (and changed) from the bottom up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a source file belongs to (`src/api/runs.rs` → `api`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_string()
}

/// The first path segment of every `crate::…` path in `text`, including each item of a
/// `use crate::{a, b::c}` group.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in text.match_indices("crate::") {
        // `cairn_engine::` and the like end in `crate::` only by accident of the name.
        if at > 0 && (text.as_bytes()[at - 1].is_ascii_alphanumeric() || text.as_bytes()[at - 1] == b'_') {
            continue;
        }
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            out.insert(first_segment(&item));
        } else {
            out.insert(first_segment(rest));
        }
    }
    out.remove("");
    out
}

fn first_segment(path: &str) -> String {
    path.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

#[test]
fn the_binary_depends_on_neither_the_store_nor_the_executors() {
    let manifest = std::fs::read_to_string(crate_dir().join("Cargo.toml")).unwrap();
    let deps = manifest.split("[dependencies]").nth(1).unwrap().split("\n[").next().unwrap();
    for forbidden in ["cairn-store", "cairn-exec"] {
        assert!(!deps.contains(forbidden), "crates/cairn depends on {forbidden}: use the engine's call instead");
    }
    let mut files = Vec::new();
    rust_files(&crate_dir().join("src"), &mut files);
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for forbidden in ["cairn_store", "cairn_exec"] {
            assert!(!text.contains(forbidden), "{} names {forbidden}", f.display());
        }
    }
}

/// The module graph of a crate's `src/`: each top-level module and the top-level modules its
/// `crate::…` paths name (an item the crate root re-exports is named through its module).
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    // What lib.rs re-exports (`pub use failure::Failure;`, `pub use runs::{A, B};`) is named
    // through the crate root.
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mut reexported: BTreeMap<String, String> = BTreeMap::new();
    let flat = lib.replace('\n', " ");
    for stmt in flat.split(';') {
        let Some(rest) = stmt.trim().strip_prefix("pub use ") else { continue };
        let Some((module, items)) = rest.split_once("::") else { continue };
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim().rsplit("::").next().unwrap_or("").split(" as ").last().unwrap_or("").trim();
            if !item.is_empty() && item != "self" {
                reexported.insert(item.to_string(), module.trim().to_string());
            }
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let module = module_of(src, f);
        if module == "lib" || module == "main" {
            continue;
        }
        // Code only: a doc comment's link to another module is not an import.
        let text: String = std::fs::read_to_string(f)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .map(|l| format!("{l}\n"))
            .collect();
        let deps = graph.entry(module.clone()).or_default();
        for target in crate_paths(&text) {
            let target = reexported.get(&target).cloned().unwrap_or(target);
            if target != module {
                deps.insert(target);
            }
        }
    }
    graph
}

/// A circle in `graph`, named in full (`a → b → a`), if there is one.
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first search for a back edge.
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut circle = path[i..].to_vec();
            circle.push(m.to_string());
            return Some(circle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for d in graph.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_binary_s_modules_import_each_other_without_a_circle() {
    let graph = module_graph(&crate_dir().join("src"));
    assert!(graph.len() >= 10, "the binary's modules were not found: {graph:?}");
    if let Some(circle) = find_circle(&graph) {
        panic!("the binary's modules import each other in a circle: {}\n{graph:#?}", circle.join(" → "));
    }
}

/// Every library crate too: a module can be read, and changed, from the bottom up.
#[test]
fn every_crate_s_modules_import_each_other_without_a_circle() {
    for name in ["cairn-core", "cairn-store", "cairn-exec", "cairn-engine"] {
        let graph = module_graph(&crate_dir().join("..").join(name).join("src"));
        assert!(graph.len() >= 3, "{name}'s modules were not found: {graph:?}");
        if let Some(circle) = find_circle(&graph) {
            panic!("{name}'s modules import each other in a circle: {}\n{graph:#?}", circle.join(" → "));
        }
    }
}

#[test]
fn crate_paths_finds_single_paths_and_groups() {
    let text = "use crate::wire::{self, Run};\nuse crate::{Failure, auth::Role, follow};\nlet x = crate::input::read(p); cairn_engine::x;";
    let found: Vec<String> = crate_paths(text).into_iter().collect();
    assert_eq!(found, ["Failure", "auth", "follow", "input", "wire"]);
}
