//! Acting on a process the scan flagged, by policy: a warning, or SIGKILL.

use crate::config::UnattachedPolicy;

/// Sends SIGKILL to `pid` when `policy` is `Kill`. Returns what was done: `Kill` when the signal
/// went out, `Warn` otherwise (also when the kill failed, with why), `Allow` for nothing.
pub fn apply(policy: UnattachedPolicy, pid: u32) -> (UnattachedPolicy, Option<String>) {
    match policy {
        UnattachedPolicy::Allow => (UnattachedPolicy::Allow, None),
        UnattachedPolicy::Warn => (UnattachedPolicy::Warn, None),
        UnattachedPolicy::Kill => {
            let raw = match i32::try_from(pid) {
                Ok(raw) if raw > 1 => raw,
                _ => {
                    return (
                        UnattachedPolicy::Warn,
                        Some(format!("pid {pid} is not signalled")),
                    )
                }
            };
            let target = nix::unistd::Pid::from_raw(raw);
            match nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGKILL) {
                Ok(()) => (UnattachedPolicy::Kill, None),
                Err(e) => (UnattachedPolicy::Warn, Some(e.to_string())),
            }
        }
    }
}

/// How D-Bus and the CLI name what was done: "killed" or "warned".
pub fn action_word(done: UnattachedPolicy) -> &'static str {
    match done {
        UnattachedPolicy::Kill => "killed",
        _ => "warned",
    }
}

/// The real uid of `pid` (`/proc/PID/status`), if it still runs.
pub fn uid_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warn_and_allow_send_nothing() {
        let me = std::process::id();
        assert_eq!(apply(UnattachedPolicy::Warn, me).0, UnattachedPolicy::Warn);
        assert_eq!(
            apply(UnattachedPolicy::Allow, me).0,
            UnattachedPolicy::Allow
        );
    }

    #[test]
    fn a_kill_that_cannot_be_sent_is_a_warning_with_why() {
        let (done, why) = apply(UnattachedPolicy::Kill, u32::MAX);
        assert_eq!(done, UnattachedPolicy::Warn);
        assert!(why.is_some());
    }

    #[test]
    fn reads_its_own_uid() {
        assert_eq!(
            uid_of(std::process::id()),
            Some(nix::unistd::getuid().as_raw())
        );
    }
}
