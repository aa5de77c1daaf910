//! The command line's page: every command that is not hidden, from clap's own `Command`, with
//! its usage and every argument.

use clap::{Arg, Command, CommandFactory};

use super::{cell, code, first_sentence, header, sentence, slug, table, text};

pub(super) fn page() -> String {
    page_of(crate::cli::Cli::command())
}

/// The page of the command line `root`.
fn page_of(mut root: Command) -> String {
    root.build();
    let globals: Vec<String> =
        root.get_arguments().filter(|a| a.is_global_set()).map(|a| a.get_id().to_string()).collect();
    let mut out = header("Command line", "clap's definition of the CLI (crates/cairn/src/cli.rs)");
    out.push_str(&text(&sentence(&about(&root))));
    out.push_str(
        "\n\nEvery command takes `--help`. Data goes to stdout (one JSON object with `--json`); \
         progress and messages go to stderr. The exit codes are in [Exit codes and error codes](codes.md).\n\n",
    );
    out.push_str("## Global options\n\nThese apply to every command.\n\n");
    out.push_str(&arguments(root.get_arguments().filter(|a| a.is_global_set())));
    out.push_str("\n## Commands\n\n");
    for sub in visible(&root) {
        toc(&mut out, sub, 0);
    }
    for sub in visible(&root) {
        section(&mut out, sub, &globals, 2);
    }
    out
}

/// The subcommands a user sees (`help` and the hidden ones left out), in clap's order.
fn visible(cmd: &Command) -> impl Iterator<Item = &Command> {
    cmd.get_subcommands().filter(|c| !c.is_hide_set() && c.get_name() != "help")
}

/// A command's full name, as clap's usage writes it (`cairn workflow add`).
fn full_name(cmd: &Command) -> String {
    cmd.get_bin_name().unwrap_or(cmd.get_name()).to_string()
}

fn about(cmd: &Command) -> String {
    cmd.get_long_about().or(cmd.get_about()).map(|s| s.to_string()).unwrap_or_default()
}

fn toc(out: &mut String, cmd: &Command, depth: usize) {
    let name = full_name(cmd);
    let short = cmd.get_about().map(|s| s.to_string()).unwrap_or_default();
    out.push_str(&format!("{}- [`{name}`](#{}): {}\n", "  ".repeat(depth), slug(&name), first_sentence(&short)));
    for sub in visible(cmd) {
        toc(out, sub, depth + 1);
    }
}

fn section(out: &mut String, cmd: &Command, globals: &[String], level: usize) {
    let name = full_name(cmd);
    out.push_str(&format!("\n{} `{name}` {{#{}}}\n\n", "#".repeat(level.min(6)), slug(&name)));
    let about = about(cmd);
    if !about.is_empty() {
        out.push_str(&text(&sentence(&about)));
        out.push_str("\n\n");
    }
    let usage = cmd.clone().render_usage().to_string();
    let usage = usage.trim().trim_start_matches("Usage:").trim();
    out.push_str(&format!("```text\n{usage}\n```\n\n"));
    let own: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !globals.iter().any(|g| g == a.get_id().as_str()))
        .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if !own.is_empty() {
        out.push_str(&arguments(own.into_iter()));
    }
    let subs: Vec<&Command> = visible(cmd).collect();
    if !subs.is_empty() {
        let list: Vec<String> =
            subs.iter().map(|s| format!("[`{}`](#{})", s.get_name(), slug(&full_name(s)))).collect();
        out.push_str(&format!("\nSubcommands: {}.\n", list.join(", ")));
    }
    for sub in subs {
        section(out, sub, globals, level + 1);
    }
}

/// A table of arguments: how each is written, its default and environment variable, and what
/// it means, with its possible values.
fn arguments<'a>(args: impl Iterator<Item = &'a Arg>) -> String {
    let rows: Vec<Vec<String>> = args
        .filter(|a| !a.is_hide_set())
        .map(|a| {
            let takes_value = a.get_num_args().is_some_and(|n| n.takes_values());
            // A flag's default (`false`) says nothing.
            let defaults: Vec<String> = match takes_value {
                true => a.get_default_values().iter().map(|v| code(&v.to_string_lossy())).collect(),
                false => Vec::new(),
            };
            let env = a.get_env().map(|e| code(&e.to_string_lossy())).unwrap_or_default();
            vec![
                written(a),
                if a.is_required_set() { "yes".into() } else { String::new() },
                defaults.join(", "),
                env,
                meaning(a),
            ]
        })
        .collect();
    table(&["Argument", "Required", "Default", "Environment", "Meaning"], &rows)
}

/// How the argument is written: `--name <VALUE>`, `-s`, or `<NAME>` for a positional one.
fn written(a: &Arg) -> String {
    let value = || {
        a.get_value_names()
            .map(|names| names.iter().map(|n| format!("<{n}>")).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| format!("<{}>", a.get_id().as_str().to_uppercase()))
    };
    let takes_value = a.get_num_args().is_some_and(|n| n.takes_values());
    if a.is_positional() {
        let dots = if a.get_num_args().is_some_and(|n| n.max_values() > 1) { "..." } else { "" };
        return code(&format!("{}{dots}", value()));
    }
    let mut names = Vec::new();
    if let Some(l) = a.get_long() {
        names.push(format!("--{l}"));
    }
    if let Some(s) = a.get_short() {
        names.push(format!("-{s}"));
    }
    let names = names.join(", ");
    code(&if takes_value { format!("{names} {}", value()) } else { names })
}

/// Its help, and the values it takes when they are a closed set.
fn meaning(a: &Arg) -> String {
    let mut m = sentence(&a.get_long_help().or(a.get_help()).map(|s| s.to_string()).unwrap_or_default());
    if a.get_id() == "json" && m.is_empty() {
        m = "Print the answer as one JSON object on stdout.".into();
    }
    let values: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| match v.get_help() {
            Some(h) => format!("{}: {}", code(v.get_name()), h.to_string().trim_end_matches('.')),
            None => code(v.get_name()),
        })
        .collect();
    let is_bool = !a.get_num_args().is_some_and(|n| n.takes_values());
    if !values.is_empty() && !is_bool {
        m = format!("{m} One of: {}.", values.join("; ")).trim().to_string();
    }
    cell(&m)
}

#[cfg(test)]
mod tests {
    use clap::{Arg, ArgAction, Command};

    use super::page_of;

    #[test]
    fn hidden_commands_and_arguments_stay_hidden() {
        let root = Command::new("cairn")
            .about("Runs.")
            .arg(Arg::new("home").long("home").global(true).help("The state root."))
            .subcommand(
                Command::new("shown")
                    .about("Shown.")
                    .arg(Arg::new("seen").long("seen").help("A flag one sees.").action(ArgAction::SetTrue))
                    .arg(Arg::new("unseen").long("unseen").hide(true).action(ArgAction::SetTrue)),
            )
            .subcommand(Command::new("secret").about("Not for users.").hide(true));
        let page = page_of(root);
        assert!(page.contains("`cairn shown`") && page.contains("`--seen`"), "{page}");
        assert!(!page.contains("secret") && !page.contains("--unseen"), "{page}");
        // A global option is listed once, not again under each command.
        assert_eq!(page.matches("`--home <HOME>`").count(), 1, "{page}");
    }
}
