//! gpushare(1) and gpushared(8) are generated from the command-line definitions, so that they
//! cannot drift from the programs; hand-written sections (files, MPS, examples) are appended from
//! `man/*.extra` roff fragments.

use clap::CommandFactory;

/// Renders a page: the generated sections, then `extra` (roff), then SEE ALSO.
fn render(cmd: clap::Command, section: &str, extra: &str) -> std::io::Result<String> {
    let has_subcommands = cmd.has_subcommands();
    let cmd_copy = cmd.clone();
    let man = clap_mangen::Man::new(cmd)
        .section(section)
        .date("2026-11")
        .source("gpushare")
        .manual("gpushare");
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    if has_subcommands {
        out.extend_from_slice(commands_section(&cmd_copy).as_bytes());
    }
    out.extend_from_slice(extra.as_bytes());
    if !extra.ends_with('\n') {
        out.push(b'\n');
    }
    man.render_version_section(&mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

pub fn gpushare_1(extra: &str) -> std::io::Result<String> {
    render(crate::cli::Cli::command(), "1", extra)
}

pub fn gpushared_8(extra: &str) -> std::io::Result<String> {
    render(crate::daemon::args::DaemonArgs::command(), "8", extra)
}

/// Escapes text for roff: backslashes and leading dots or quotes.
fn roff(text: &str) -> String {
    let t = text.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

/// A COMMANDS section listing each subcommand with its arguments, on this one page; a
/// subcommand's own subcommands follow it (`gpushare preload enable`).
fn commands_section(cmd: &clap::Command) -> String {
    let mut s = String::from(".SH COMMANDS\n");
    list_commands(cmd.get_name(), cmd, &mut s);
    s
}

/// Adds `cmd`'s subcommands, called as `prefix SUBCOMMAND`, and theirs after each.
fn list_commands(prefix: &str, cmd: &clap::Command, s: &mut String) {
    for sub in cmd.get_subcommands().filter(|c| c.get_name() != "help") {
        let called = format!("{prefix} {}", sub.get_name());
        let mut synopsis = format!("\\fB{called}\\fR");
        if sub.has_subcommands() {
            synopsis.push_str(" \\fICOMMAND\\fR");
        }
        let args: Vec<&clap::Arg> = sub
            .get_arguments()
            .filter(|a| !a.is_hide_set() && a.get_id() != "help")
            .collect();
        for a in args.iter().filter(|a| a.is_positional()) {
            let name = a
                .get_value_names()
                .and_then(|v| v.first())
                .map_or(a.get_id().as_str().to_uppercase(), |n| n.to_string());
            if a.is_required_set() {
                synopsis.push_str(&format!(" \\fI{}\\fR", roff(&name)));
            } else {
                synopsis.push_str(&format!(" [\\fI{}\\fR]", roff(&name)));
            }
        }
        s.push_str(&format!(
            ".TP\n{synopsis}\n{}\n",
            roff(&sub.get_about().map(|a| a.to_string()).unwrap_or_default())
        ));
        for a in args.iter().filter(|a| !a.is_positional()) {
            let Some(long) = a.get_long() else { continue };
            let takes_value = a.get_action().takes_values();
            let value = if takes_value {
                let v = a
                    .get_value_names()
                    .and_then(|v| v.first())
                    .map_or("VALUE".to_string(), |n| n.to_string());
                format!(" \\fI{}\\fR", roff(&v))
            } else {
                String::new()
            };
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            s.push_str(&format!(
                ".RS\n.TP\n\\fB\\-\\-{}\\fR{value}\n{}\n.RE\n",
                roff(long),
                roff(&help)
            ));
        }
        list_commands(&called, sub, s);
    }
}
