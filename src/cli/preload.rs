//! `gpushare preload enable|disable|status`: the hook in `/etc/ld.so.preload`, so that every
//! program of the server loads it (the whole-server mode).
//!
//! The file is read by the dynamic loader before every program starts, set-user-ID ones
//! included: a name in it that does not load makes every program print an error. So the hook
//! is checked before it goes in (a regular file, readable by everyone, that a program loads
//! without complaint), and the file is always replaced whole (written beside, then renamed), so
//! that no program ever reads half of it.

use super::ld_preload;
use serde::Serialize;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The dynamic loader's system-wide preload list.
pub const DEFAULT_FILE: &str = "/etc/ld.so.preload";

/// What `status` reports.
#[derive(Debug, Serialize)]
pub struct Status {
    pub file: PathBuf,
    pub enabled: bool,
    /// gpushare's entries in the file.
    pub entries: Vec<String>,
    /// Entries whose file is missing: every program prints an error until they go.
    pub missing: Vec<String>,
}

pub fn status(file: &Path) -> Result<Status, String> {
    let text = read(file)?;
    let entries: Vec<String> = ld_preload::entries(&text)
        .into_iter()
        .map(str::to_owned)
        .collect();
    let missing = entries
        .iter()
        .filter(|e| !Path::new(e).is_file())
        .cloned()
        .collect();
    Ok(Status {
        file: file.to_owned(),
        enabled: !entries.is_empty(),
        entries,
        missing,
    })
}

/// Puts `hook` in `file`; true if the file changed.
pub fn enable(file: &Path, hook: &Path) -> Result<bool, String> {
    require_root("enable")?;
    let hook = usable_hook(hook)?;
    let text = read(file)?;
    let new = ld_preload::enable(&text, &hook);
    if new == text {
        return Ok(false);
    }
    replace(file, &new)?;
    Ok(true)
}

/// Takes gpushare's entries out of `file`; true if the file changed.
pub fn disable(file: &Path) -> Result<bool, String> {
    require_root("disable")?;
    let text = read(file)?;
    let new = ld_preload::disable(&text);
    if new == text {
        return Ok(false);
    }
    replace(file, &new)?;
    Ok(true)
}

fn require_root(action: &str) -> Result<(), String> {
    if nix::unistd::Uid::effective().is_root() {
        Ok(())
    } else {
        Err(format!(
            "preload {action} changes what every program of this server loads: run it as root"
        ))
    }
}

/// The file's text; a missing file is an empty list.
fn read(file: &Path) -> Result<String, String> {
    match std::fs::read(file) {
        Ok(bytes) => String::from_utf8(bytes)
            .map_err(|_| format!("{} is not text; fix it by hand first", file.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(format!("cannot read {}: {e}", file.display())),
    }
}

/// The hook's absolute path once it is fit to preload into every program.
fn usable_hook(hook: &Path) -> Result<String, String> {
    let shown = hook.display();
    let meta = std::fs::metadata(hook).map_err(|e| {
        format!(
            "the hook {shown} is not there ({e}): install gpushare's library or give --hook; \
             a missing file in the preload list would make every program print an error"
        )
    })?;
    if !meta.is_file() {
        return Err(format!("the hook {shown} is not a regular file"));
    }
    if meta.permissions().mode() & 0o004 == 0 {
        return Err(format!(
            "the hook {shown} is not readable by everyone (mode {:o}): every other user's \
             programs would print an error",
            meta.permissions().mode() & 0o7777
        ));
    }
    let path = hook
        .canonicalize()
        .map_err(|e| format!("the hook {shown}: {e}"))?;
    let path = path
        .to_str()
        .filter(|p| !p.contains(|c: char| c.is_ascii_whitespace() || c == ':' || c == '#'))
        .ok_or_else(|| {
            format!(
                "the hook's path {} has a space, ':' or '#', which the preload list cannot hold",
                path.display()
            )
        })?
        .to_owned();
    if Path::new(&path).file_name().and_then(|n| n.to_str()) != Some(ld_preload::HOOK_FILE_NAME) {
        return Err(format!(
            "the hook must be named {} (gpushare finds its entry by that name); {path} is not",
            ld_preload::HOOK_FILE_NAME
        ));
    }
    loads(&path)?;
    Ok(path)
}

/// A program starts with `hook` preloaded, and the loader says nothing about it.
fn loads(hook: &str) -> Result<(), String> {
    let out = std::process::Command::new("/bin/true")
        .env("LD_PRELOAD", hook)
        .env_remove("LD_LIBRARY_PATH")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot start /bin/true to try the hook: {e}"))?;
    // Complaints about the names already in the system's list are not about this hook (and
    // may be what this command is about to put right).
    let said: String = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.contains(&format!("from {DEFAULT_FILE}")))
        .collect::<Vec<_>>()
        .join("\n");
    if out.status.success() && said.trim().is_empty() {
        Ok(())
    } else {
        Err(format!(
            "a program with {hook} preloaded does not start cleanly ({}): {}",
            out.status,
            said.trim()
        ))
    }
}

/// Replaces `file` with `text` in one rename (an empty text removes the file), keeping the
/// mode of the file it replaces.
fn replace(file: &Path, text: &str) -> Result<(), String> {
    // Through a symbolic link, the file it names is the one replaced.
    let target = match std::fs::canonicalize(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => file.to_owned(),
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    if text.is_empty() {
        return match std::fs::remove_file(&target) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("cannot remove {}: {e}", target.display())),
        };
    }
    let mode = std::fs::metadata(&target)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o644);
    let dir = target.parent().unwrap_or(Path::new("/"));
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", target.display());
    let mut tmp = tempfile::Builder::new()
        .prefix(".ld.so.preload.")
        .tempfile_in(dir)
        .map_err(fail)?;
    tmp.write_all(text.as_bytes()).map_err(fail)?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(fail)?;
    tmp.as_file().sync_all().map_err(fail)?;
    tmp.persist(&target).map_err(|e| fail(e.error))?;
    Ok(())
}
