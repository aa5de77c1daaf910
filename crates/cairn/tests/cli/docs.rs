//! The procedure-doc index through the real binary: `cairn doc save|list|show|search|remove`
//! with `--json`, the `/docs` endpoints for a Viewer (reads) and an Operator (saves and removes),
//! bad input refused naming the field and the fix with nothing changed, a doc linked to the
//! passed verification (and notebook) it came from, and saves killed with SIGKILL mid-flight
//! leaving no half-saved version. The MCP tools are in `mcp/docs.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::support::*;

/// A procedure doc with a heading, prose and a code block; `word` makes it findable alone.
fn procedure(title: &str, word: &str) -> String {
    format!(
        "# {title}\n\nLoad the new dataset, then derive the parameters from it: {word}.\n\n## Steps\n\n```python\nimport numpy as np\nthreshold = np.percentile(values, 95)\n```\n"
    )
}

/// Writes a file in the scratch directory; its path as a string.
fn file(c: &Cairn, name: &str, bytes: impl AsRef<[u8]>) -> String {
    let p = c.path(name);
    std::fs::write(&p, bytes).unwrap();
    p.display().to_string()
}

/// `cairn doc save NAME FILE --json`, expecting exit 0: the saved doc.
#[track_caller]
fn save(c: &Cairn, name: &str, path: &str) -> Value {
    c.json(&["doc", "save", name, path]).expect(0).json
}

/// Versions in the registry, by doc, straight from the database (what no surface filters).
fn stored_versions(c: &Cairn) -> Option<String> {
    c.sql(&[], "SELECT name, version, sha256 FROM doc_versions ORDER BY name, version")
}

#[test]
fn the_cli_saves_versions_lists_shows_searches_and_removes() {
    let c = Cairn::new();
    let v1 = procedure("PCA then clustering", "eigengap");
    let p1 = file(&c, "pca-1.md", &v1);
    let saved = save(&c, "pca-clustering", &p1);
    assert_eq!(
        (&saved["created"], &saved["name"], &saved["version"], &saved["latest_version"], &saved["title"]),
        (&json!(true), &json!("pca-clustering"), &json!(1), &json!(1), &json!("PCA then clustering"))
    );
    assert_eq!(saved["text"], v1.as_str());
    assert_eq!(
        (saved["bytes"].as_u64(), saved["sha256"].as_str()),
        (Some(v1.len() as u64), Some(sha256_hex(v1.as_bytes()).as_str()))
    );
    assert!(saved["verification"].is_null() && saved["removed_at"].is_null(), "{saved:#}");

    // The same text again saves nothing; a new text is version 2, and version 1 is kept.
    let again = save(&c, "pca-clustering", &p1);
    assert_eq!((&again["created"], &again["version"]), (&json!(false), &json!(1)));
    let v2 = procedure("PCA then clustering, revised", "silhouette");
    let p2 = file(&c, "pca-2.md", &v2);
    let second = save(&c, "pca-clustering", &p2);
    assert_eq!(
        (&second["created"], &second["version"], &second["latest_version"]),
        (&json!(true), &json!(2), &json!(2))
    );
    let versions: Vec<u64> =
        second["versions"].as_array().unwrap().iter().map(|v| v["version"].as_u64().unwrap()).collect();
    assert_eq!(versions, [1, 2]);
    save(&c, "qc", &file(&c, "qc.md", procedure("Quality control", "mitochondrial")));

    // show: the newest by default, or NAME@VERSION; without --json the markdown itself on stdout.
    let newest = c.json(&["doc", "show", "pca-clustering"]).expect(0).json;
    assert_eq!((&newest["version"], newest["text"].as_str()), (&json!(2), Some(v2.as_str())));
    let old = c.json(&["doc", "show", "pca-clustering@1"]).expect(0).json;
    assert_eq!(
        (&old["version"], &old["latest_version"], old["text"].as_str()),
        (&json!(1), &json!(2), Some(v1.as_str()))
    );
    let raw = c.raw(&["doc", "show", "pca-clustering@1"]).expect(0);
    assert_eq!(raw.stdout, v1, "`cairn doc show` prints the doc byte for byte");
    assert!(raw.stderr.contains("pca-clustering@1 of 2"), "{}", raw.stderr);

    // list: by name, each with its newest version.
    let list = c.json(&["doc", "list"]).expect(0).json;
    let rows: Vec<(String, u64)> = list["docs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (str_of(&d["name"]).to_string(), d["latest_version"].as_u64().unwrap()))
        .collect();
    assert_eq!(rows, [("pca-clustering".to_string(), 2), ("qc".to_string(), 1)]);
    assert!(c.raw(&["doc", "list"]).expect(0).stdout.contains("PCA then clustering, revised"));

    // search: the newest version only, best first, with highlighted snippets.
    let found = c.json(&["doc", "search", "silhouette"]).expect(0).json;
    let hits = found["results"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{found:#}");
    assert_eq!((&hits[0]["name"], &hits[0]["version"]), (&json!("pca-clustering"), &json!(2)));
    assert!(str_of(&hits[0]["snippet"]).contains("**silhouette**"), "{found:#}");
    assert!(
        hits[0]["snippet_parts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["highlighted"] == true && p["text"] == "silhouette")
    );
    assert_eq!(
        c.json(&["doc", "search", "eigengap"]).expect(0).json["results"],
        json!([]),
        "version 1 is not searched"
    );
    let both = c.json(&["doc", "search", "derive OR mitochondrial", "--limit", "5"]).expect(0).json;
    assert_eq!(both["results"].as_array().unwrap().len(), 2, "{both:#}");
    let one = c.json(&["doc", "search", "clustering"]).expect(0).json;
    assert_eq!(one["results"][0]["name"], "pca-clustering", "the name and title weigh most: {one:#}");
    assert!(c.raw(&["doc", "search", "silhouette"]).expect(0).stdout.contains("pca-clustering@2"));

    // remove: a tombstone; versions stay readable by number, the search and list forget it.
    let removed = c.json(&["doc", "remove", "pca-clustering"]).expect(0).json;
    assert!(removed["removed_at"].is_string(), "{removed:#}");
    assert_eq!(removed["latest_version"], 2);
    assert_eq!(c.json(&["doc", "search", "silhouette"]).expect(0).json["results"], json!([]));
    let names: Vec<String> = c.json(&["doc", "list"]).expect(0).json["docs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| str_of(&d["name"]).to_string())
        .collect();
    assert_eq!(names, ["qc"]);
    let all = c.json(&["doc", "list", "--removed"]).expect(0).json;
    assert_eq!(all["docs"].as_array().unwrap().len(), 2);
    let gone = c.json(&["doc", "show", "pca-clustering"]).expect(2);
    assert!(gone.stderr.contains("was removed") && gone.stderr.contains("pca-clustering@2"), "{}", gone.stderr);
    assert_eq!(c.json(&["doc", "show", "pca-clustering@2"]).expect(0).json["removed_at"], removed["removed_at"]);
    c.json(&["doc", "remove", "pca-clustering"]).expect(0);

    // Saving it again brings it back as version 3.
    let back = save(&c, "pca-clustering", &p1);
    assert_eq!((&back["version"], &back["created"], &back["removed_at"]), (&json!(3), &json!(true), &Value::Null));
    if let Some(rows) = stored_versions(&c) {
        assert_eq!(rows.lines().filter(|l| l.starts_with("pca-clustering|")).count(), 3, "{rows}");
    }
}

/// One refusal: exit 2, the error object on stdout, and stderr naming the field and saying what to do.
#[track_caller]
fn refused(c: &Cairn, args: &[&str], words: &[&str]) {
    let out = c.json(args).expect(2);
    assert_error_body(&out.json, &format!("{args:?}"));
    for w in words {
        assert!(out.stderr.contains(w), "{args:?}: stderr does not say `{w}`:\n{}", out.stderr);
    }
}

#[test]
fn bad_input_is_refused_naming_the_field_and_the_fix_and_changes_nothing() {
    let c = Cairn::new();
    let good = file(&c, "good.md", procedure("Good", "kept"));
    save(&c, "good", &good);
    let before = (c.json(&["doc", "list", "--removed"]).expect(0).json, stored_versions(&c));

    let rule = "A-Z a-z 0-9 . _ -";
    for name in ["a/b", "../up", ".hidden", "_x", "with space", "x@1", "é", "search", &"n".repeat(129)] {
        refused(&c, &["doc", "save", name, &good], &[&format!("name `{name}`"), rule]);
    }
    refused(&c, &["doc", "save", "", &good], &["name ``", rule]);
    refused(&c, &["doc", "save", "empty", &file(&c, "empty.md", "")], &["text is empty"]);
    refused(&c, &["doc", "save", "blank", &file(&c, "blank.md", "  \n\t\n")], &["text is empty"]);
    let huge = file(&c, "huge.md", "x".repeat((1 << 20) + 1));
    refused(&c, &["doc", "save", "huge", &huge], &["text is 1048577 bytes", "1 MiB"]);
    let bigger = file(&c, "bigger.md", "x".repeat(5 << 20));
    refused(&c, &["doc", "save", "huge", &bigger], &["text is 5242880 bytes", "1 MiB"]);
    refused(
        &c,
        &["doc", "save", "bin", &file(&c, "bin.md", b"# ok\n\xff\xfe")],
        &["not UTF-8", "save the file as UTF-8"],
    );
    refused(&c, &["doc", "save", "nul", &file(&c, "nul.md", "# ok\n\n\0")], &["U+0000", "line 3"]);
    refused(&c, &["doc", "save", "missing", &c.path_str("missing.md")], &["FILE", "missing.md"]);
    refused(&c, &["doc", "save", "dir", &c.path_str("")], &["is a directory"]);
    refused(
        &c,
        &["doc", "save", "fromnone", &good, "--from", "ver_nope"],
        &["verification_id `ver_nope`", "--from", "cairn verify"],
    );

    for q in ["\"unbalanced", "AND OR", "k-means", "nocolumn: x", "(open"] {
        refused(&c, &["doc", "search", q], &[&format!("query `{q}`"), "FTS5", "double quotes"]);
    }
    refused(&c, &["doc", "search", "  "], &["query is empty"]);
    refused(&c, &["doc", "search", &"w ".repeat(600)], &["query is 1200 bytes", "1024"]);
    refused(&c, &["doc", "search", "kept", "--limit", "0"], &["limit 0", "1 to 100"]);
    refused(&c, &["doc", "search", "kept", "--limit", "1000"], &["limit 1000", "1 to 100"]);

    refused(&c, &["doc", "show", "good@2"], &["no version 2", "1 to 1"]);
    for bad in ["good@0", "good@x", "good@", "good@1.5"] {
        refused(&c, &["doc", "show", bad], &["version `", "whole numbers from 1"]);
    }
    refused(&c, &["doc", "show", "nothing"], &["doc `nothing`", "cairn doc list"]);
    refused(&c, &["doc", "remove", "nothing"], &["doc `nothing`"]);
    refused(&c, &["doc", "remove", "a/b"], &["name `a/b`"]);

    assert_eq!(
        (c.json(&["doc", "list", "--removed"]).expect(0).json, stored_versions(&c)),
        before,
        "a refusal changes nothing"
    );
    assert_eq!(c.json(&["doc", "search", "kept"]).expect(0).json["results"][0]["name"], "good");
}

/// Every `/docs` endpoint with a Viewer token (reads; saving and removing are refused and change
/// nothing) and an Operator token (saves and removes), with the API's answers for bad input.
#[test]
fn every_doc_endpoint_reads_for_a_viewer_and_saves_for_an_operator() {
    let c = Cairn::new();
    let d = c.start_daemon();
    let (viewer, operator) = (c.token("viewer"), c.token("operator"));
    let url = |p: &str| format!("{}{p}", d.url);
    let body = |v: &Value| v.to_string();
    let text = procedure("Normalise counts", "scran");

    let created =
        http("POST", &url("/docs"), Some(&operator), Some(&body(&json!({"name": "norm", "text": text}))), &[]);
    assert_eq!(created.status, 201, "{}", created.text);
    assert_eq!((&created.body["created"], &created.body["version"]), (&json!(true), &json!(1)));
    let same = http("POST", &url("/docs"), Some(&operator), Some(&body(&json!({"name": "norm", "text": text}))), &[]);
    assert_eq!((same.status, &same.body["created"]), (200, &json!(false)), "{}", same.text);

    // The Viewer reads everything…
    let list = http("GET", &url("/docs"), Some(&viewer), None, &[]);
    assert_eq!((list.status, list.body["docs"].as_array().map(Vec::len)), (200, Some(1)), "{}", list.text);
    let doc = http("GET", &url("/docs/norm"), Some(&viewer), None, &[]);
    assert_eq!((doc.status, doc.body["text"].as_str()), (200, Some(text.as_str())), "{}", doc.text);
    assert!(doc.body.get("html").is_none(), "html only when asked: {}", doc.text);
    let v1 = http("GET", &url("/docs/norm?version=1&render=html"), Some(&viewer), None, &[]);
    assert_eq!(v1.status, 200, "{}", v1.text);
    let html = str_of(&v1.body["html"]);
    assert!(
        html.contains("<h1>Normalise counts</h1>") && html.contains("<pre><code class=\"language-python\">"),
        "{html}"
    );
    assert_eq!(http("GET", &url("/docs/norm@1"), Some(&viewer), None, &[]).body["version"], 1);
    let found = http("GET", &url("/docs/search?query=scran"), Some(&viewer), None, &[]);
    assert_eq!((found.status, &found.body["results"][0]["name"]), (200, &json!("norm")), "{}", found.text);
    assert_eq!(
        http("GET", &url("/docs/search?q=scran&limit=1"), Some(&viewer), None, &[]).body["results"][0]["name"],
        "norm"
    );

    // …and may not change anything.
    let state = || (http("GET", &url("/docs?removed=true"), Some(&viewer), None, &[]).body, stored_versions(&c));
    let before = state();
    let denied =
        http("POST", &url("/docs"), Some(&viewer), Some(&body(&json!({"name": "norm", "text": "# changed\n"}))), &[]);
    assert_eq!((denied.status, denied.body["error"]["code"].as_str()), (403, Some("forbidden")), "{}", denied.text);
    assert!(str_of(&denied.body["error"]["message"]).contains("Operator token"), "{}", denied.text);
    let denied =
        http("POST", &url("/docs"), Some(&viewer), Some(&body(&json!({"name": "new", "text": "# new\n"}))), &[]);
    assert_eq!(denied.status, 403);
    let denied = http("DELETE", &url("/docs/norm"), Some(&viewer), None, &[]);
    assert_eq!(denied.status, 403, "{}", denied.text);
    assert_eq!(http("GET", &url("/docs"), None, None, &[]).status, 401);
    assert_eq!(state(), before, "a Viewer changed nothing");

    // Bad input: 422 (or 404) naming the field and the fix; nothing changes.
    let bad = |method: &str, path: &str, b: Option<Value>, status: u16, words: &[&str]| {
        let b = b.map(|v| body(&v));
        let r = http(method, &url(path), Some(&operator), b.as_deref(), &[]);
        assert_eq!(r.status, status, "{method} {path}: {}", r.text);
        let message = str_of(&r.body["error"]["message"]);
        for w in words {
            assert!(message.contains(w), "{method} {path}: `{message}` does not say `{w}`");
        }
    };
    bad("POST", "/docs", Some(json!({"name": "a/b", "text": "# x\n"})), 422, &["name `a/b`", "A-Z a-z 0-9 . _ -"]);
    bad("POST", "/docs", Some(json!({"name": "ok", "text": ""})), 422, &["text is empty"]);
    bad(
        "POST",
        "/docs",
        Some(json!({"name": "ok", "text": "x".repeat((1 << 20) + 1)})),
        422,
        &["text is 1048577 bytes"],
    );
    bad(
        "POST",
        "/docs",
        Some(json!({"name": "ok", "text": "# x\n", "verification_id": "ver_nope"})),
        404,
        &["verification_id `ver_nope`"],
    );
    bad("POST", "/docs", Some(json!({"name": "ok"})), 422, &["text"]);
    bad("POST", "/docs", Some(json!({"name": "ok", "text": "# x\n", "extra": 1})), 422, &["extra"]);
    bad("GET", "/docs/search?query=%22unbalanced", None, 422, &["query `\"unbalanced`", "FTS5"]);
    bad("GET", "/docs/search?query=AND%20OR", None, 422, &["query `AND OR`"]);
    bad("GET", "/docs/search", None, 422, &["query is required"]);
    bad("GET", "/docs/search?query=x&limit=0", None, 422, &["limit 0"]);
    bad("GET", "/docs/norm?version=7", None, 404, &["no version 7", "1 to 1"]);
    bad("GET", "/docs/norm?version=zero", None, 422, &["version `zero`"]);
    bad("GET", "/docs/norm?render=pdf", None, 422, &["render `pdf`"]);
    bad("GET", "/docs/nope", None, 404, &["doc `nope`"]);
    bad("DELETE", "/docs/nope", None, 404, &["doc `nope`"]);
    assert_eq!(state(), before, "bad input changed nothing");

    // The Operator removes; the versions stay readable.
    let removed = http("DELETE", &url("/docs/norm"), Some(&operator), None, &[]);
    assert_eq!(removed.status, 200, "{}", removed.text);
    assert!(removed.body["removed_at"].is_string());
    assert_eq!(http("GET", &url("/docs/norm"), Some(&viewer), None, &[]).status, 404);
    assert_eq!(http("GET", &url("/docs/norm?version=1"), Some(&viewer), None, &[]).status, 200);
    assert_eq!(http("GET", &url("/docs/search?query=scran"), Some(&viewer), None, &[]).body["results"], json!([]));

    // The OpenAPI document describes them.
    let doc = http("GET", &url("/openapi.json"), None, None, &[]).body;
    for (path, method) in [
        ("/docs", "get"),
        ("/docs", "post"),
        ("/docs/search", "get"),
        ("/docs/{name}", "get"),
        ("/docs/{name}", "delete"),
    ] {
        assert!(doc["paths"][path][method].is_object(), "no {method} {path} in the OpenAPI document");
    }
    c.stop_daemon();
}

/// A doc saved `--from` a passed verification links it and its notebook; a failed verification
/// is refused as a source.
#[test]
fn a_doc_saved_from_a_verification_links_it_and_its_notebook() {
    let config = tempfile::Builder::new().prefix("cairn-dcfg-").tempdir().unwrap();
    let c = Cairn::new().with_env("CAIRN_PYTHON", python()).with_env("CAIRN_CONFIG", config.path());
    let passing = file(&c, "proof.md", "# Proof\n\n```python\nvalues = [1, 2, 3]\nprint(sum(values))\n```\n");
    let passed = c.json(&["verify", &passing]).expect(0).json;
    let vid = str_of(&passed["verification_id"]).to_string();
    let notebook = str_of(&passed["notebook"]).to_string();
    let failing = file(&c, "broken.md", "# Broken\n\n```python\nraise ValueError('no')\n```\n");
    let failed = c.json(&["verify", &failing]).expect(1).json;
    let fid = str_of(&failed["verification_id"]).to_string();

    let text = file(&c, "sum.md", procedure("Sum the values", "total"));
    let saved = c.json(&["doc", "save", "sum", &text, "--from", &vid]).expect(0).json;
    let v = &saved["verification"];
    assert_eq!(
        (v["verification_id"].as_str(), v["verdict"].as_str()),
        (Some(vid.as_str()), Some("passed")),
        "{saved:#}"
    );
    assert_eq!((v["notebook"].as_str(), v["title"].as_str()), (Some(notebook.as_str()), passed["title"].as_str()));
    assert!(Path::new(&notebook).is_file());
    assert_eq!(saved["versions"][0]["verification_id"], vid.as_str());
    let shown = c.json(&["doc", "show", "sum"]).expect(0).json;
    assert_eq!(shown["verification"], saved["verification"]);
    assert_eq!(c.json(&["doc", "list"]).expect(0).json["docs"][0]["verification_id"], vid.as_str());
    assert!(c.raw(&["doc", "show", "sum"]).expect(0).stderr.contains(&vid));

    // The same text without the verification is a new version (the link is part of it).
    let plain = c.json(&["doc", "save", "sum", &text]).expect(0).json;
    assert_eq!((&plain["version"], &plain["verification"]), (&json!(2), &Value::Null));

    let before = stored_versions(&c);
    refused(
        &c,
        &["doc", "save", "sum", &text, "--from", &fid],
        &[&format!("verification_id `{fid}`"), "verdict `failed`", "passed verification"],
    );
    assert_eq!(stored_versions(&c), before);
}

// ------------------------------------------------------------------------------------------------
// crash safety

/// A small deterministic generator (no dependency for a handful of delays).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// One `cairn doc save` of the loop, and when it is to be killed.
struct Saver {
    child: Child,
    spawned: Instant,
    kill_at: Instant,
    doc: String,
    file: usize,
    /// Where its `--json` answer goes.
    out: PathBuf,
}

/// SIGKILLs, at a random moment, `cairn doc save` processes saving 256 KiB docs three at a time
/// (a save of that size takes long enough to be caught inside its transaction), then checks
/// that every stored version is whole and the index agrees with the versions: no version without
/// its index row, no search row of another version, the database and its FTS index intact.
#[test]
fn a_kill_9_during_heavy_saving_leaves_no_half_saved_version() {
    const DOCS: [&str; 3] = ["heavy-a", "heavy-b", "heavy-c"];
    const SAVES: usize = 80;
    let c = Cairn::new();
    // Four texts of 256 KiB, each with its own marker word.
    let texts: Vec<String> = (0..4)
        .map(|i| {
            let line = format!("Step {i}: derive the threshold from the data, then filter. ");
            format!("# Heavy procedure {i}\n\nmarker{i}x\n\n{}\n", line.repeat((256 << 10) / line.len()))
        })
        .collect();
    let files: Vec<String> = texts.iter().enumerate().map(|(i, t)| file(&c, &format!("heavy-{i}.md"), t)).collect();
    let sums: BTreeSet<String> = texts.iter().map(|t| sha256_hex(t.as_bytes())).collect();
    // The first save of each doc completes, so every doc exists; the slowest of them but the very
    // first (which also creates and migrates the registry, a one-time cost that on a loaded
    // machine took a second and made every later save finish before its kill) sets the window
    // kills fall in (twice it), so that on a loaded machine, where a whole save takes longer,
    // about as many saves complete as are killed.
    let mut slowest = Duration::ZERO;
    for (k, d) in DOCS.iter().enumerate() {
        let t = Instant::now();
        save(&c, d, &files[k]);
        if k > 0 {
            slowest = slowest.max(t.elapsed());
        }
    }
    // Each kill falls within twice the median of the last saves seen to complete on their own
    // (the calibration above to begin with): the window follows the machine's load as it changes.
    let mut recent: Vec<u64> = vec![slowest.as_millis() as u64];
    let window_now = |recent: &[u64]| {
        let mut r = recent.to_vec();
        r.sort_unstable();
        (2 * r[r.len() / 2]).max(70)
    };
    let mut window = window_now(&recent);

    let mut rng = Lcg(0x5eed_d0c5);
    let mut running: Vec<Saver> = Vec::new();
    let (mut killed, mut completed) = (0, 0);
    // Saves that exited 0: (doc, version, file) as each printed it.
    let mut acknowledged: Vec<(String, u64, usize)> = Vec::new();
    let mut started = 0;
    let reap = |s: Saver, killed: &mut usize, completed: &mut usize, acknowledged: &mut Vec<(String, u64, usize)>| {
        let out = s.child.wait_with_output().unwrap();
        match out.status.code() {
            Some(0) => {
                *completed += 1;
                let v: Value = serde_json::from_slice(&std::fs::read(&s.out).unwrap()).unwrap();
                acknowledged.push((s.doc, v["version"].as_u64().unwrap(), s.file));
            }
            None => *killed += 1,
            Some(code) => panic!("a save exited {code}: {}", String::from_utf8_lossy(&out.stderr)),
        }
    };
    while started < SAVES || !running.is_empty() {
        while started < SAVES && running.len() < 3 {
            let doc = DOCS[started % DOCS.len()].to_string();
            let f = (started + 1 + started / DOCS.len()) % files.len();
            // Its answer goes to a file: a pipe nobody reads would hold a finished save up.
            let out = c.path(&format!("save-{started}.json"));
            let child = c
                .std_command(&["doc", "save", &doc, &files[f], "--json"])
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(&out).unwrap())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            window = window_now(&recent);
            let spawned = Instant::now();
            let kill_at = spawned + Duration::from_millis(rng.below(window));
            running.push(Saver { child, spawned, kill_at, doc, file: f, out });
            started += 1;
        }
        std::thread::sleep(Duration::from_millis(2));
        let now = Instant::now();
        let mut i = 0;
        while i < running.len() {
            if matches!(running[i].child.try_wait(), Ok(Some(_))) {
                let s = running.swap_remove(i);
                recent.push(now.duration_since(s.spawned).as_millis() as u64);
                if recent.len() > 10 {
                    recent.remove(0);
                }
                reap(s, &mut killed, &mut completed, &mut acknowledged);
            } else if running[i].kill_at <= now {
                let s = running.swap_remove(i);
                // It may have exited already (then this kills nothing).
                let _ = kill(Pid::from_raw(s.child.id() as i32), Signal::SIGKILL);
                reap(s, &mut killed, &mut completed, &mut acknowledged);
            } else {
                i += 1;
            }
        }
    }
    eprintln!("{SAVES} saves: {killed} killed, {completed} completed (kills within {window} ms)");
    assert!(killed >= 5, "too few saves were killed ({killed}) for the test to mean anything");
    assert!(completed >= 3, "too few saves completed ({completed})");

    // The database and its full-text index are intact.
    let Some(check) = c.sql(&[], "PRAGMA integrity_check") else { return };
    assert_eq!(check.trim(), "ok");
    let db = c.home().join("cairn.db");
    let fts = std::process::Command::new("sqlite3")
        .arg(&db)
        .arg("INSERT INTO doc_search (doc_search) VALUES ('integrity-check');")
        .output()
        .unwrap();
    assert!(fts.status.success(), "the FTS index is damaged: {}", String::from_utf8_lossy(&fts.stderr));
    assert_eq!(c.sql(&[], "SELECT count(*) FROM doc_search").unwrap().trim(), "3", "one search row per doc");

    let mut latest = BTreeMap::new();
    for d in DOCS {
        let newest = c.json(&["doc", "show", d]).expect(0).json;
        let top = newest["latest_version"].as_u64().unwrap();
        let versions: Vec<u64> =
            newest["versions"].as_array().unwrap().iter().map(|v| v["version"].as_u64().unwrap()).collect();
        assert_eq!(versions, (1..=top).collect::<Vec<_>>(), "{d}: versions are 1 to {top} with no gap");
        // Every version is whole: its text is one of the four files, its sha256 and size its own.
        for v in 1..=top {
            let shown = c.json(&["doc", "show", &format!("{d}@{v}")]).expect(0).json;
            let t = str_of(&shown["text"]);
            assert!(sums.contains(&sha256_hex(t.as_bytes())), "{d}@{v} holds a text that was never saved");
            assert_eq!(
                (shown["sha256"].as_str(), shown["bytes"].as_u64()),
                (Some(sha256_hex(t.as_bytes()).as_str()), Some(t.len() as u64))
            );
        }
        // The search row is the newest version's.
        let marker = (0..4).find(|i| str_of(&newest["text"]).contains(&format!("marker{i}x"))).unwrap();
        let hits = c.json(&["doc", "search", &format!("marker{marker}x")]).expect(0).json;
        let hit = hits["results"].as_array().unwrap().iter().find(|h| h["name"] == d).cloned();
        assert_eq!(
            hit.map(|h| h["version"].clone()),
            Some(json!(top)),
            "{d}: the index holds its newest version: {hits:#}"
        );
        latest.insert(d.to_string(), top);
    }
    // Every acknowledged save is there, with the text it saved.
    for (d, v, f) in &acknowledged {
        let shown = c.json(&["doc", "show", &format!("{d}@{v}")]).expect(0).json;
        assert_eq!(str_of(&shown["text"]), texts[*f], "{d}@{v} was acknowledged with file {f}");
    }
    // And saving goes on from there.
    let next = save(&c, "heavy-a", &file(&c, "after.md", "# After the crashes\n"));
    assert_eq!(next["version"].as_u64(), Some(latest["heavy-a"] + 1));
}
