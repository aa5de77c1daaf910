//! The doc index's MCP tools: the workbench's `list_docs`, `read_doc`, `search_docs` (read-only)
//! and `save_doc` (an Operator's), and the app's `docs_overview`; the same objects as the CLI's
//! `--json` and the API for the same doc; a Viewer reads and its save changes nothing; bad
//! arguments are `isError` results naming the field.

use super::*;

/// One procedure doc's text.
fn text(title: &str, word: &str) -> String {
    format!(
        "# {title}\n\nDerive the cut-off from the new data ({word}), then filter.\n\n```python\ncut = values.mean()\n```\n"
    )
}

#[test]
fn the_doc_tools_agree_with_the_cli_and_the_api_and_only_an_operator_saves() {
    let Some(fx) = Fx::new() else { return };
    let client = fx.client();
    let op = client.stdio("workbench");
    let (url, viewer) = (fx.url(), fx.token("viewer"));
    let api = |path: &str| {
        let r = http("GET", &format!("{url}{path}"), Some(&viewer), None, &[]);
        assert_eq!(r.status, 200, "GET {path}: {}", r.text);
        r.body
    };

    let saved = op.call_ok("save_doc", json!({"name": "cutoff", "text": text("Derive a cut-off", "quantiles")}));
    assert_eq!((&saved["created"], &saved["version"]), (&json!(true), &json!(1)), "{saved:#}");
    let v2 = op.call_ok("save_doc", json!({"name": "cutoff", "text": text("Derive a cut-off, again", "medians")}));
    assert_eq!(v2["version"], 2);
    let same = op.call_ok("save_doc", json!({"name": "cutoff", "text": text("Derive a cut-off, again", "medians")}));
    assert_eq!((&same["created"], &same["version"]), (&json!(false), &json!(2)));
    op.call_ok("save_doc", json!({"name": "other", "text": text("Another procedure", "quantiles")}));

    // One doc, three surfaces, one object.
    let mcp = op.call_ok("read_doc", json!({"name": "cutoff"}));
    let cli = fx.c.json(&["doc", "show", "cutoff"]).expect(0).json;
    assert_eq!(mcp, api("/docs/cutoff"), "MCP read_doc and GET /docs/cutoff");
    assert_eq!(mcp, cli, "MCP read_doc and `cairn doc show --json`");
    let mut without_created = v2.clone();
    without_created.as_object_mut().unwrap().remove("created");
    assert_eq!(without_created, mcp, "save_doc answers with the doc as read");
    let old = op.call_ok("read_doc", json!({"name": "cutoff", "version": 1}));
    assert_eq!(old, fx.c.json(&["doc", "show", "cutoff@1"]).expect(0).json);
    assert_eq!(old, api("/docs/cutoff?version=1"));
    assert_eq!(op.call_ok("read_doc", json!({"name": "cutoff@1"})), old);
    assert_eq!(op.call_ok("list_docs", json!({})), fx.c.json(&["doc", "list"]).expect(0).json);
    assert_eq!(op.call_ok("list_docs", json!({})), api("/docs"));
    let found = op.call_ok("search_docs", json!({"query": "quantiles", "limit": 5}));
    assert_eq!(found, fx.c.json(&["doc", "search", "quantiles", "--limit", "5"]).expect(0).json);
    assert_eq!(found, api("/docs/search?query=quantiles&limit=5"));
    let names: Vec<&str> = found["results"].as_array().unwrap().iter().map(|h| h["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["other"], "only the newest version of `cutoff` is searched: {found:#}");

    // The app's overview is the list, for a person.
    let app = client.stdio("app");
    let overview = app.call_ok("docs_overview", json!({}));
    assert_eq!(overview, api("/docs"));

    // A Viewer reads through every tool and its save is refused, changing nothing.
    let before = (api("/docs"), fx.c.json(&["doc", "show", "cutoff"]).expect(0).json);
    let vw = client.http("workbench", "viewer");
    assert_eq!(vw.call_ok("read_doc", json!({"name": "cutoff"})), mcp);
    assert_eq!(vw.call_ok("list_docs", json!({})), before.0);
    assert_eq!(vw.call_ok("search_docs", json!({"query": "quantiles", "limit": 5})), found);
    for args in [json!({"name": "cutoff", "text": "# changed\n"}), json!({"name": "fresh", "text": "# fresh\n"})] {
        let e = vw.call_err("save_doc", args);
        assert_eq!((e["status"].as_u64(), e["code"].as_str()), (Some(403), Some("forbidden")), "{e:#}");
        assert!(e["message"].as_str().unwrap().contains("Operator token"), "{e:#}");
    }
    assert_eq!(
        (api("/docs"), fx.c.json(&["doc", "show", "cutoff"]).expect(0).json),
        before,
        "a Viewer changed nothing"
    );
    // Over HTTP, an Operator saves.
    let oh = client.http("workbench", "operator");
    assert_eq!(oh.call_ok("save_doc", json!({"name": "fresh", "text": "# fresh\n"}))["version"], 1);

    // Bad arguments: isError results naming the field and the fix; nothing changes.
    let before = (api("/docs"), fx.c.json(&["doc", "show", "cutoff"]).expect(0).json);
    let err = |tool: &str, args: Value, status: u64, words: &[&str]| {
        let e = op.call_err(tool, args.clone());
        assert_eq!(e["status"].as_u64(), Some(status), "{tool}({args}): {e:#}");
        let m = e["message"].as_str().unwrap();
        for w in words {
            assert!(m.contains(w), "{tool}({args}): `{m}` does not say `{w}`");
        }
    };
    err("save_doc", json!({"name": "a/b", "text": "# x\n"}), 422, &["name `a/b`", "A-Z a-z 0-9 . _ -"]);
    err("save_doc", json!({"name": "ok", "text": ""}), 422, &["text is empty"]);
    err("save_doc", json!({"name": "ok", "text": "x".repeat((1 << 20) + 1)}), 422, &["text is 1048577 bytes", "1 MiB"]);
    err(
        "save_doc",
        json!({"name": "ok", "text": "# x\n", "verification_id": "ver_nope"}),
        404,
        &["verification_id `ver_nope`"],
    );
    err("read_doc", json!({"name": "cutoff", "version": 9}), 404, &["no version 9", "1 to 2"]);
    err("read_doc", json!({"name": "cutoff", "version": 0}), 422, &["version `0`"]);
    err("read_doc", json!({"name": "cutoff@1", "version": 2}), 422, &["disagree"]);
    err("read_doc", json!({"name": "nope"}), 404, &["doc `nope`"]);
    err("search_docs", json!({"query": "\"unbalanced"}), 422, &["query `\"unbalanced`", "FTS5"]);
    err("search_docs", json!({"query": "AND OR"}), 422, &["query `AND OR`"]);
    err("search_docs", json!({"query": "x", "limit": 500}), 422, &["limit 500"]);
    assert_eq!(
        (api("/docs"), fx.c.json(&["doc", "show", "cutoff"]).expect(0).json),
        before,
        "bad arguments changed nothing"
    );

    // The guide says when to keep which artifact.
    let guide = op.read("cairn://guide").unwrap();
    let g = guide["text"].as_str().unwrap();
    for w in
        ["procedure doc", "minus the dataset", "re-run by a person", "re-run by an agent", "save_doc", "search_docs"]
    {
        assert!(g.contains(w), "the guide does not say `{w}`");
    }
}
