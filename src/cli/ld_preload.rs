//! gpushare's entry in `/etc/ld.so.preload`, as edits of the file's text.
//!
//! The dynamic loader reads that file before every program starts: names of libraries
//! separated by white space or `:`, with comments from `#` to the end of a line. gpushare's
//! entry is a line of its own naming the hook; any name whose file name is the hook's
//! (`libgpushare.so`) counts as gpushare's, wherever it stands, so that a stale path (another
//! library directory, an older install) is replaced rather than kept beside the new one.
//! Everything else in the file is kept as it was, byte for byte.

/// The hook's file name, which marks gpushare's entries.
pub const HOOK_FILE_NAME: &str = "libgpushare.so";

/// gpushare's entries in `text`: every preloaded name whose file name is the hook's.
pub fn entries(text: &str) -> Vec<&str> {
    text.lines()
        .flat_map(|line| names(line).map(|(_, name)| name))
        .filter(|name| is_ours(name))
        .collect()
}

/// `text` with `hook` preloaded: unchanged when `hook` is already gpushare's only entry;
/// otherwise gpushare's other entries are dropped and `hook` gets a line at the end.
pub fn enable(text: &str, hook: &str) -> String {
    if entries(text) == [hook] {
        return text.to_owned();
    }
    let mut out = disable(text);
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(hook);
    out.push('\n');
    out
}

/// `text` without gpushare's entries. A line that named only gpushare's hook goes; a line that
/// named other libraries too keeps them (and its comment); other lines are kept as they are.
pub fn disable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let ours: Vec<(usize, &str)> = names(line).filter(|(_, n)| is_ours(n)).collect();
        if ours.is_empty() {
            out.push_str(line);
            continue;
        }
        let others = names(line).count() - ours.len();
        let comment = line.find('#').is_some();
        if others == 0 && !comment {
            continue;
        }
        // Cut our names out, with the separator after each (or before, for the last).
        let mut kept = line.to_owned();
        for &(start, name) in ours.iter().rev() {
            let bytes = kept.as_bytes();
            let mut begin = start;
            let mut end = start + name.len();
            while end < bytes.len() && is_separator(bytes[end]) {
                end += 1;
            }
            let last = end == bytes.len() || matches!(bytes[end], b'#' | b'\r' | b'\n');
            if last {
                // Last name on the line: take the separators before it instead, if any,
                // keeping what ends the line.
                while begin > 0 && is_separator(bytes[begin - 1]) {
                    begin -= 1;
                }
                if begin < start {
                    end = start + name.len();
                }
            }
            kept.replace_range(begin..end, "");
        }
        out.push_str(&kept);
    }
    out
}

fn is_ours(name: &str) -> bool {
    name.rsplit('/').next() == Some(HOOK_FILE_NAME)
}

fn is_separator(b: u8) -> bool {
    b == b' ' || b == b'\t' || b == b':'
}

/// The names on one line (before any `#`), with their byte offsets in it.
fn names(line: &str) -> impl Iterator<Item = (usize, &str)> {
    let body = &line[..line.find('#').unwrap_or(line.len())];
    let mut at = 0;
    body.split(|c: char| c.is_ascii_whitespace() || c == ':')
        .filter_map(move |piece| {
            let start = at;
            at += piece.len() + 1;
            (!piece.is_empty()).then_some((start, piece))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOOK: &str = "/usr/lib/x86_64-linux-gnu/libgpushare.so";

    #[test]
    fn enable_adds_a_line_to_an_empty_or_missing_file() {
        assert_eq!(enable("", HOOK), format!("{HOOK}\n"));
    }

    #[test]
    fn enable_keeps_other_lines_and_adds_a_newline_where_one_is_missing() {
        let text = "# admin's\n/usr/lib/libfoo.so\n/opt/bar.so";
        assert_eq!(
            enable(text, HOOK),
            format!("# admin's\n/usr/lib/libfoo.so\n/opt/bar.so\n{HOOK}\n")
        );
    }

    #[test]
    fn enable_is_idempotent() {
        let once = enable("/usr/lib/libfoo.so\n", HOOK);
        assert_eq!(enable(&once, HOOK), once);
        // An entry the admin placed elsewhere in the file stays where it is.
        let placed = format!("{HOOK}\n/usr/lib/libfoo.so\n");
        assert_eq!(enable(&placed, HOOK), placed);
    }

    #[test]
    fn enable_replaces_a_stale_path_and_duplicates() {
        let text = format!("/usr/local/lib/libgpushare.so\n/lib/libfoo.so\n{HOOK}\n");
        assert_eq!(
            enable(&text, HOOK),
            format!("/lib/libfoo.so\n{HOOK}\n"),
            "one entry, the path asked for"
        );
    }

    #[test]
    fn disable_removes_only_our_lines() {
        let text = format!("/lib/libfoo.so\n{HOOK}\n# note\n\n/opt/bar.so\n");
        assert_eq!(disable(&text), "/lib/libfoo.so\n# note\n\n/opt/bar.so\n");
    }

    #[test]
    fn disable_of_a_file_without_our_entry_changes_nothing() {
        for text in [
            "",
            "/lib/libfoo.so",
            "/lib/libfoo.so\n# libgpushare.so\n",
            "\n\n",
        ] {
            assert_eq!(disable(text), text);
        }
    }

    #[test]
    fn disable_keeps_other_names_and_comments_on_a_shared_line() {
        assert_eq!(
            disable(&format!("/lib/a.so {HOOK} /lib/b.so\n")),
            "/lib/a.so /lib/b.so\n"
        );
        assert_eq!(disable(&format!("/lib/a.so:{HOOK}\n")), "/lib/a.so\n");
        assert_eq!(disable(&format!("{HOOK}:/lib/a.so\n")), "/lib/a.so\n");
        assert_eq!(
            disable(&format!("{HOOK}  # whole server\n")),
            "# whole server\n"
        );
        assert_eq!(
            disable(&format!("/lib/a.so {HOOK}\t# both\r\n")),
            "/lib/a.so\t# both\r\n"
        );
    }

    #[test]
    fn a_name_merely_containing_ours_is_not_ours() {
        let text = "/opt/libgpushare.so.old\n/opt/notlibgpushare.so\n";
        assert!(entries(text).is_empty());
        assert_eq!(disable(text), text);
        assert_eq!(enable(text, HOOK), format!("{text}{HOOK}\n"));
    }

    #[test]
    fn entries_finds_ours_anywhere_but_in_comments() {
        let text = format!("/lib/a.so {HOOK}\n# {HOOK}\n/x/libgpushare.so:/lib/b.so\n");
        assert_eq!(entries(&text), vec![HOOK, "/x/libgpushare.so"]);
    }

    #[test]
    fn enable_then_disable_gives_back_the_file() {
        for text in ["", "/lib/libfoo.so\n", "# c\n/lib/a.so /lib/b.so\n\n"] {
            assert_eq!(disable(&enable(text, HOOK)), text);
        }
    }
}
