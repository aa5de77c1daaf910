//! The workflow file's page, from the parser's own table of keys (`cairn_core::workflow::keys`,
//! which a test holds to the parser's types).

use cairn_core::workflow::keys::{TABLES, keys};

use super::{cell, code, header, slug, table, text};

pub(super) fn page() -> String {
    let mut out = header("The workflow file", "the parser's table of keys (crates/cairn-core/src/workflow/keys.rs)");
    out.push_str(&text(
        "A workflow is a folder with a `workflow.toml` and the files its tools run. `cairn workflow add FOLDER` \
         checks the file (every problem at once, each with its line, step and field) and registers it as \
         name@version. The file is TOML; an unknown key is an error. This page lists every key the parser reads.",
    ));
    out.push_str("\n\n## Contents\n\n");
    for t in TABLES {
        out.push_str(&format!("- [{}](#{})\n", title(t), slug(t)));
    }
    let all = keys();
    for t in TABLES {
        out.push_str(&format!("\n## {} {{#{}}}\n\n", title(t), slug(t)));
        let rows: Vec<Vec<String>> = all
            .iter()
            .filter(|k| k.table == t)
            .map(|k| {
                let default = match &k.default {
                    None => "required".to_string(),
                    Some(d) => cell(d),
                };
                vec![code(k.key), cell(k.kind), default, cell(&k.meaning)]
            })
            .collect();
        out.push_str(&table(&["Key", "Type", "Default", "Meaning"], &rows));
    }
    out.push_str(&format!("\n## An example {{#{}}}\n\n```toml\n{EXAMPLE}```\n", slug("an example")));
    out
}

/// A table's name as a heading: in code, but for the top level, which has none.
fn title(table: &str) -> String {
    if table.starts_with('(') { "The top level".to_string() } else { code(table) }
}

/// A small workflow using most keys; the `reference` test parses it, so it stays valid.
pub const EXAMPLE: &str = r#"[workflow]
name = "qc"
version = "1.0.0"
description = "Count the reads of a sample and check there are enough."
input_schema = "input.schema.json"

[tools.count]
command = ["python3", "tools/count.py"]
timeout_secs = 300
version = "1"
outputs = { counts = "counts.json" }

[[steps]]
id = "count"
tool = "count"
args = { sample = "${input.sample}" }
max_attempts = 3
retry_on = ["TIMED_OUT", "NO_SPACE"]

[[validator.rules]]
id = "enough_reads"
step = "count"
pointer = "/reads"
op = "ge"
value = 1000
finding = "fewer than 1,000 reads"
"#;
