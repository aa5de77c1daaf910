//! The book's reference pages (`docs/src/reference/`), generated from the code so they cannot
//! drift: the command line from clap's `Command`, the HTTP API from the OpenAPI document, the MCP
//! tools from the servers' tool routers, the workflow file from the parser's table of keys, and
//! the exit and error codes from the tables that decide them. The `reference` test of the `cli`
//! test binary fails when a committed page differs from what this generates.

mod cli;
mod codes;
mod http;
mod mcp;
mod workflow;

pub use codes::EDGE_CODES;
pub use workflow::EXAMPLE as WORKFLOW_EXAMPLE;

/// How to regenerate the pages, as each page and the failing test say it.
pub const REGENERATE: &str = "CAIRN_BLESS=1 cargo test -p cairn --test cli reference::";

/// Every page: its file name in `docs/src/reference/` and its text.
pub fn pages() -> Vec<(&'static str, String)> {
    vec![
        ("cli.md", cli::page()),
        ("http-api.md", http::page()),
        ("mcp-tools.md", mcp::page()),
        ("workflow-file.md", workflow::page()),
        ("codes.md", codes::page()),
    ]
}

/// A page's first lines: its title, and a note that it is generated, for whoever opens the file.
fn header(title: &str, from: &str) -> String {
    format!(
        "# {title}\n\n<!-- Generated from {from} by crates/cairn/src/reference; do not edit. Regenerate with `{REGENERATE}`. -->\n\n"
    )
}

/// `text` for running markdown: `<` and `>` outside code spans escaped, so `<PATH>` or
/// `<state>/auth` reads as written instead of as an HTML tag.
fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_code = false;
    for c in s.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                out.push(c);
            }
            '<' if !in_code => out.push_str("&lt;"),
            '>' if !in_code => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

/// `s` for one table cell: on one line, its pipes escaped, its tags escaped.
fn cell(s: &str) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    text(&one_line).replace('|', "\\|")
}

/// The first sentence of `s`, on one line, with its full stop.
fn first_sentence(s: &str) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let first = one_line.split(". ").next().unwrap_or("").trim_end_matches('.');
    if first.is_empty() { String::new() } else { text(&format!("{first}.")) }
}

/// `s` ending with a full stop (clap drops a doc comment's last one).
fn sentence(s: &str) -> String {
    let s = s.trim_end();
    if s.ends_with(['.', '!', '?', ':']) || s.is_empty() { s.to_string() } else { format!("{s}.") }
}

/// A code span of `s`, for a table cell.
fn code(s: &str) -> String {
    if s.contains('`') { format!("`` {s} ``") } else { format!("`{s}`") }
}

/// A markdown table of `head` and `rows`.
fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n|{}\n", head.join(" | "), " --- |".repeat(head.len()));
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

/// An id for an anchor: lowercase letters, digits and `-`.
fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_escapes_tags_outside_code_and_cells_stay_on_one_line() {
        assert_eq!(text("<state>/auth and `<PATH>`"), "&lt;state&gt;/auth and `<PATH>`");
        assert_eq!(cell("a | b\n  c"), "a \\| b c");
        assert_eq!(slug("cairn workflow add"), "cairn-workflow-add");
        assert_eq!(slug("GET /runs/{run_id}"), "get-runs-run-id");
    }
}
