//! The hook's environment variables, read as `secure_getenv(3)` reads them.
//!
//! With the hook preloaded into every program (`/etc/ld.so.preload`), set-user-ID and
//! set-group-ID programs (and programs with file capabilities) load it too. In such a process
//! the loader runs in secure-execution mode (`AT_SECURE`), and the hook reads none of its
//! variables: the user who started the program must not steer the hook of a privileged one (to
//! another socket, another client, or its statistics on stderr). Variables are read once, when
//! the process attaches on its first CUDA call, never at load time.

use std::ffi::OsString;

/// The process runs in secure-execution mode.
pub fn secure() -> bool {
    // SAFETY: getauxval reads the auxiliary vector; AT_SECURE is always present on Linux.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// `name`'s value, unless it is unset, not Unicode, or the process runs in secure mode.
pub fn var(name: &str) -> Option<String> {
    if secure() {
        return None;
    }
    std::env::var(name).ok()
}

/// [`var`] for values that are paths.
pub fn var_os(name: &str) -> Option<OsString> {
    if secure() {
        return None;
    }
    std::env::var_os(name)
}
