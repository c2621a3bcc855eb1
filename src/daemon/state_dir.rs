//! Where the daemon keeps what outlives it (`usage.db`, `clients.toml`): the state directory.
//!
//! In order: `--state-dir`; `daemon.state_dir`; `$STATE_DIRECTORY`, which systemd sets from the
//! unit's `StateDirectory=gpushare` (`/var/lib/gpushare`); `/var/lib/gpushare` itself where the
//! daemon may write it (root); else the user's own, as the XDG Base Directory specification
//! places it: `$XDG_STATE_HOME/gpushare`, or `~/.local/state/gpushare`. A daemon that a user
//! starts from a checkout thus keeps its usage in their home, and the service in `/var/lib`.

use crate::config::{StateDir, DEFAULT_STATE_DIR};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment the choice reads.
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub state_directory: Option<OsString>,
    pub xdg_state_home: Option<OsString>,
    pub home: Option<OsString>,
}

impl Env {
    pub fn from_process() -> Env {
        Env {
            state_directory: std::env::var_os("STATE_DIRECTORY"),
            xdg_state_home: std::env::var_os("XDG_STATE_HOME"),
            home: std::env::var_os("HOME"),
        }
    }
}

/// The state directory and why it is that one; `dir` is `None` when nothing is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub dir: Option<PathBuf>,
    pub why: String,
}

/// An absolute path from the environment, if `value` is one (the XDG specification says to
/// ignore relative ones).
fn absolute(value: &Option<OsString>) -> Option<PathBuf> {
    let p = PathBuf::from(value.as_ref()?);
    p.is_absolute().then_some(p)
}

/// Picks the state directory: `arg` is `--state-dir` (empty: none), `setting` the config's
/// `daemon.state_dir`, and `writable` tells whether the daemon could create and write a directory.
pub fn choose(
    arg: Option<&Path>,
    setting: &StateDir,
    env: &Env,
    writable: impl Fn(&Path) -> bool,
) -> Choice {
    let chosen = |dir: PathBuf, why: &str| Choice {
        dir: Some(dir),
        why: why.to_string(),
    };
    match (arg, setting) {
        (Some(dir), _) if dir.as_os_str().is_empty() => {
            return Choice {
                dir: None,
                why: "--state-dir is empty".into(),
            }
        }
        (Some(dir), _) => return chosen(dir.into(), "--state-dir"),
        (None, StateDir::Off) => {
            return Choice {
                dir: None,
                why: "daemon.state_dir is empty".into(),
            }
        }
        (None, StateDir::Path(dir)) => return chosen(dir.clone(), "daemon.state_dir"),
        (None, StateDir::Default) => {}
    }
    // systemd's StateDirectory= (several are separated by colons; the unit names one)
    if let Some(dir) = env
        .state_directory
        .as_ref()
        .and_then(|v| v.to_str())
        .and_then(|v| v.split(':').next())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        return chosen(dir, "$STATE_DIRECTORY, from the unit's StateDirectory=");
    }
    let system = Path::new(DEFAULT_STATE_DIR);
    if writable(system) {
        return chosen(system.into(), "the system's state directory");
    }
    let not_system = format!("{DEFAULT_STATE_DIR} is not writable");
    if let Some(xdg) = absolute(&env.xdg_state_home) {
        return chosen(
            xdg.join("gpushare"),
            &format!("$XDG_STATE_HOME, as {not_system}"),
        );
    }
    if let Some(home) = absolute(&env.home) {
        return chosen(
            home.join(".local/state/gpushare"),
            &format!("the user's ~/.local/state, as {not_system}"),
        );
    }
    Choice {
        dir: None,
        why: format!(
            "{not_system} and neither $XDG_STATE_HOME nor $HOME is set (give --state-dir)"
        ),
    }
}

/// Whether this process could create `dir` (its nearest existing ancestor is writable) and write
/// in it.
pub fn writable(dir: &Path) -> bool {
    use nix::unistd::{access, AccessFlags};
    let mut at = dir;
    loop {
        if at.exists() {
            return at.is_dir() && access(at, AccessFlags::W_OK | AccessFlags::X_OK).is_ok();
        }
        match at.parent() {
            Some(parent) => at = parent,
            None => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(state_directory: Option<&str>, xdg: Option<&str>, home: Option<&str>) -> Env {
        Env {
            state_directory: state_directory.map(Into::into),
            xdg_state_home: xdg.map(Into::into),
            home: home.map(Into::into),
        }
    }

    fn dir(c: Choice) -> Option<PathBuf> {
        c.dir
    }

    #[test]
    fn what_is_asked_for_comes_first() {
        let e = env(Some("/var/lib/gpushare"), Some("/x"), Some("/home/a"));
        let any = |_: &Path| true;
        assert_eq!(
            dir(choose(Some(Path::new("/srv/s")), &StateDir::Off, &e, any)),
            Some("/srv/s".into())
        );
        assert_eq!(
            dir(choose(Some(Path::new("")), &StateDir::Default, &e, any)),
            None
        );
        assert_eq!(dir(choose(None, &StateDir::Off, &e, any)), None);
        assert_eq!(
            dir(choose(None, &StateDir::Path("/srv/t".into()), &e, any)),
            Some("/srv/t".into())
        );
    }

    #[test]
    fn the_service_keeps_systemds_state_directory() {
        // StateDirectory=gpushare: systemd sets $STATE_DIRECTORY, whatever else is writable
        let e = env(Some("/var/lib/gpushare"), None, Some("/root"));
        let c = choose(None, &StateDir::Default, &e, |_| false);
        assert_eq!(c.dir, Some(PathBuf::from("/var/lib/gpushare")));
        assert!(c.why.contains("StateDirectory"), "{}", c.why);
        let e = env(Some("/var/lib/a:/var/lib/b"), None, None);
        assert_eq!(
            dir(choose(None, &StateDir::Default, &e, |_| false)),
            Some("/var/lib/a".into())
        );
    }

    #[test]
    fn root_keeps_var_lib_and_a_user_their_own() {
        let e = env(None, None, Some("/home/alice"));
        assert_eq!(
            dir(choose(None, &StateDir::Default, &e, |_| true)),
            Some(DEFAULT_STATE_DIR.into()),
            "writable: root's"
        );
        let c = choose(None, &StateDir::Default, &e, |_| false);
        assert_eq!(c.dir, Some("/home/alice/.local/state/gpushare".into()));
        assert!(c.why.contains("not writable"), "{}", c.why);
        let e = env(None, Some("/home/alice/state"), Some("/home/alice"));
        assert_eq!(
            dir(choose(None, &StateDir::Default, &e, |_| false)),
            Some("/home/alice/state/gpushare".into())
        );
        // relative values are ignored, as the XDG specification says
        let e = env(Some("var"), Some("state"), Some("/home/alice"));
        assert_eq!(
            dir(choose(None, &StateDir::Default, &e, |_| false)),
            Some("/home/alice/.local/state/gpushare".into())
        );
        let c = choose(None, &StateDir::Default, &env(None, None, None), |_| false);
        assert_eq!(c.dir, None);
        assert!(c.why.contains("--state-dir"), "{}", c.why);
    }

    #[test]
    fn a_directory_is_writable_where_it_could_be_made() {
        let t = tempfile::tempdir().unwrap();
        assert!(writable(t.path()));
        assert!(writable(&t.path().join("a/b")));
        let file = t.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(!writable(&file), "a file is no directory");
        assert!(!writable(&file.join("under")));
    }
}
