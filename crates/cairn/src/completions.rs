//! `cairn completions SHELL` and `cairn man`: the shell completions and the man pages, generated
//! from the command line's definition (`cli.rs`), so they cannot drift from it. Neither opens a
//! state root or calls a daemon: an installer (scripts/install.sh) runs them on a machine where
//! nothing of Cairn exists yet.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::Failure;
use crate::cli::Cli;

/// `cairn completions SHELL`: the script on stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<u8, Failure> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "cairn", &mut script);
    to_stdout(&script)
}

/// `cairn man`: the page of `cairn` on stdout; with `--out DIR`, it and every subcommand's page
/// written into DIR (their names on stdout, one a line).
pub fn man(out: Option<&Path>) -> Result<u8, Failure> {
    let Some(dir) = out else {
        return to_stdout(&render(&page_of(command()))?);
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::usage(format!("{}: {e} (give --out a folder you can write)", dir.display())))?;
    let mut written = Vec::new();
    write_pages(command(), dir, &mut written)?;
    let listing: String = written.iter().map(|p| format!("{}\n", p.display())).collect();
    eprintln!("wrote {} man pages into {}", written.len(), dir.display());
    to_stdout(listing.as_bytes())
}

/// The command as the pages show it: built, so every subcommand knows its full name
/// (`cairn-workflow-add`), and without clap's `help` subcommand, which needs no page.
fn command() -> clap::Command {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// One command's page, its footer naming this version of Cairn (clap gives a subcommand none).
fn page_of(cmd: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd).source(format!("cairn {}", env!("CARGO_PKG_VERSION"))).manual("Cairn Manual")
}

/// Writes the page of `cmd` and of each of its visible subcommands, at any depth, into `dir`.
fn write_pages(cmd: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> Result<(), Failure> {
    let subs: Vec<clap::Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned().collect();
    let page = page_of(cmd);
    let path = dir.join(page.get_filename());
    std::fs::write(&path, render(&page)?).map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
    written.push(path);
    subs.into_iter().try_for_each(|sub| write_pages(sub, dir, written))
}

/// The page's roff in ASCII: every other character as groff's `\[uXXXX]`, so `groff -man` and
/// older man tools read the help's "…" and "—" without a preprocessor (man-db runs `preconv`;
/// plain groff warns and drops them).
fn render(page: &clap_mangen::Man) -> Result<Vec<u8>, Failure> {
    let mut roff = Vec::new();
    page.render(&mut roff).map_err(|e| Failure::usage(format!("the man page: {e}")))?;
    let text = String::from_utf8_lossy(&roff);
    let mut ascii = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            ascii.push(c);
        } else {
            ascii.push_str(&format!("\\[u{:04X}]", u32::from(c)));
        }
    }
    Ok(ascii.into_bytes())
}

/// Writes `bytes` to stdout. A reader that closed the pipe early (`cairn man | head`) ends the
/// command as it ends every other: status 141, SIGPIPE's, and no message.
fn to_stdout(bytes: &[u8]) -> Result<u8, Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(141),
        Err(e) => Err(Failure::usage(format!("stdout: {e}"))),
    }
}
