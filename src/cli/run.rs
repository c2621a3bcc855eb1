//! `gpushare run`: exec a program with the hook preloaded.

use std::os::unix::process::CommandExt;
use std::path::Path;

/// Where the Debian package installs the hook.
pub const DEFAULT_HOOK: &str = "/usr/lib/x86_64-linux-gnu/libgpushare.so";
/// Where the Debian package installs the Python start-up code.
pub const DEFAULT_PYTHON: &str = "/usr/lib/gpushare/python";

/// Replaces this process with `command`, the hook first in LD_PRELOAD and, where it exists, the
/// `python` directory first on PYTHONPATH. Returns only on failure.
pub fn exec(
    client: Option<&str>,
    hook: &Path,
    python: &Path,
    command: &[String],
) -> Result<(), String> {
    if !hook.is_file() {
        return Err(format!(
            "the hook library {} is missing; install gpushare's library or point --hook/GPUSHARE_HOOK at it",
            hook.display()
        ));
    }
    let hook = hook
        .canonicalize()
        .map_err(|e| format!("{}: {e}", hook.display()))?;
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(old) if !old.is_empty() => format!("{} {old}", hook.display()),
        _ => hook.display().to_string(),
    };
    let (program, args) = command.split_first().ok_or("no program to run")?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(args).env("LD_PRELOAD", preload);
    if python.is_dir() {
        let path = match std::env::var("PYTHONPATH") {
            Ok(old) if !old.is_empty() => format!("{}:{old}", python.display()),
            _ => python.display().to_string(),
        };
        cmd.env("PYTHONPATH", path);
    }
    if let Some(name) = client {
        cmd.env("GPUSHARE_CLIENT", name);
    }
    let err = cmd.exec();
    Err(format!("cannot run {program}: {err}"))
}
