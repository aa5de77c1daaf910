//! `cairn doc …`: the procedure-doc index from the command line, in this process (a save is one
//! transaction of the registry, as a workflow's registration is). `show` prints the markdown
//! itself on stdout, so `cairn doc show NAME > NAME.md` gives the doc back byte for byte; the
//! details go to stderr.

use std::io::{IsTerminal, Read};
use std::path::Path;

use cairn_core::docs::{DocError, DocRef, MAX_DOC_BYTES};
use cairn_engine::Engine;
use cairn_engine::docs::{DocQuery, SaveDoc};

use crate::Failure;
use crate::cli::DocCommand;
use crate::output::print_wire;
use crate::wire;

pub fn run(engine: &Engine, command: DocCommand) -> Result<u8, Failure> {
    match command {
        DocCommand::Save { name, file, from, json } => {
            let text = read_doc_file(&file)?;
            let saved =
                engine.save_doc(&crate::input::owner_caller(), &SaveDoc { name, text, verification_id: from })?;
            let out = wire::DocSaved::from_saved(&saved);
            if json {
                print_wire(&out);
            } else {
                let d = &out.doc;
                if out.created {
                    println!("saved {} version {} ({} bytes, sha256 {}…)", d.name, d.version, d.bytes, &d.sha256[..12]);
                } else {
                    println!("unchanged: {} version {} already holds this text; nothing was saved", d.name, d.version);
                }
                if let Some(v) = &d.verification {
                    let notebook = v.notebook.as_deref().unwrap_or("no notebook");
                    println!("  from verification {} ({notebook})", v.verification_id);
                }
            }
            Ok(0)
        }
        DocCommand::List { removed, json } => {
            let list = wire::DocList::from_records(&engine.docs(removed)?);
            if json {
                print_wire(&list);
            } else if list.docs.is_empty() {
                eprintln!("no procedure docs yet; save one with `cairn doc save NAME FILE`");
            } else {
                println!("{:<32} {:>7}  {:<24}  TITLE", "NAME", "VERSION", "SAVED");
                for d in &list.docs {
                    let gone = if d.removed_at.is_some() { "  (removed)" } else { "" };
                    println!("{:<32} {:>7}  {:<24}  {}{gone}", d.name, d.latest_version, d.updated_at, d.title);
                }
            }
            Ok(0)
        }
        DocCommand::Show { doc, json } => {
            let r = DocRef::parse(&doc).map_err(cairn_engine::EngineError::from)?;
            let shown = wire::Doc::from_view(&engine.read_doc(r.name.as_str(), r.version)?);
            if json {
                print_wire(&shown);
                return Ok(0);
            }
            use std::io::Write;
            let _ = std::io::stdout().lock().write_all(shown.text.as_bytes());
            eprintln!(
                "\n{}@{} of {} · {} bytes · saved {}{}",
                shown.name,
                shown.version,
                shown.latest_version,
                shown.bytes,
                shown.saved_at,
                shown.removed_at.as_deref().map(|t| format!(" · removed {t}")).unwrap_or_default()
            );
            if let Some(v) = &shown.verification {
                eprintln!(
                    "from verification {} ({}){}",
                    v.verification_id,
                    v.verdict.as_deref().unwrap_or("record gone"),
                    v.notebook.as_deref().map(|n| format!(", notebook {n}")).unwrap_or_default()
                );
            }
            Ok(0)
        }
        DocCommand::Search { query, limit, json } => {
            let found =
                wire::DocSearchResult::from_search(&engine.search_docs(&DocQuery { query, limit: Some(limit) })?);
            if json {
                print_wire(&found);
            } else if found.results.is_empty() {
                eprintln!("no doc matches `{}`", found.query);
            } else {
                let bold = std::io::stdout().is_terminal();
                for h in &found.results {
                    println!("{}@{}  {}", h.name, h.version, h.title);
                    let snippet: String = if bold {
                        h.snippet_parts
                            .iter()
                            .map(|p| if p.highlighted { format!("\x1b[1m{}\x1b[0m", p.text) } else { p.text.clone() })
                            .collect()
                    } else {
                        h.snippet.clone()
                    };
                    println!("    {}", snippet.split_whitespace().collect::<Vec<_>>().join(" "));
                }
            }
            Ok(0)
        }
        DocCommand::Remove { name, json } => {
            let removed = wire::DocSummary::from_record(&engine.remove_doc(&crate::input::owner_caller(), &name)?);
            if json {
                print_wire(&removed);
            } else {
                println!(
                    "doc {} removed; its versions 1 to {} stay readable as {}@VERSION",
                    removed.name, removed.latest_version, removed.name
                );
            }
            Ok(0)
        }
    }
}

/// The doc's text from FILE (or stdin for `-`), refused before it is read whole when it is over
/// the limit, and refused if it is not UTF-8.
fn read_doc_file(path: &Path) -> Result<String, Failure> {
    let label = path.display().to_string();
    let mut bytes = Vec::new();
    let limit = MAX_DOC_BYTES as u64 + 1;
    let read = if label == "-" {
        std::io::stdin().take(limit).read_to_end(&mut bytes)
    } else {
        let file =
            std::fs::File::open(path).map_err(|e| Failure::usage(format!("FILE {label}: cannot read the doc: {e}")))?;
        if file.metadata().is_ok_and(|m| m.is_dir()) {
            return Err(Failure::usage(format!("FILE {label} is a directory; give the markdown file to save")));
        }
        file.take(limit).read_to_end(&mut bytes)
    };
    read.map_err(|e| Failure::usage(format!("FILE {label}: cannot read the doc: {e}")))?;
    if bytes.len() > MAX_DOC_BYTES {
        let size = std::fs::metadata(path).map(|m| m.len() as usize).unwrap_or(bytes.len());
        return Err(cairn_engine::EngineError::from(DocError::TooLarge { bytes: size }).into());
    }
    String::from_utf8(bytes).map_err(|e| {
        Failure::usage(format!(
            "text of FILE {label} is not UTF-8 (an invalid byte at offset {}); a procedure doc is markdown text: save the file as UTF-8",
            e.utf8_error().valid_up_to()
        ))
    })
}
