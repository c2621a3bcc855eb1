//! Clients registered over D-Bus outlive restarts: they are kept in `clients.toml` in the state
//! directory, as `[clients.NAME]` tables of the config's own format, written (to a new file,
//! renamed into place) whenever a registered client is added, changed or removed, and at stop,
//! and registered again when the daemon starts.
//!
//! Runtime clients (RegisterRuntimeClient, `gpushare register --runtime`) are kept the same way
//! in the socket's directory, `/run/gpushare`, which the host empties when it boots: they outlive
//! restarts and upgrades of the daemon, but not a reboot. Slurm's jobs are registered so.
//!
//! The file is read with the config's parser, so that what it holds is checked like the config.
//! A client it names that the config now names too stays the config's; an entry that fails the
//! checks is logged and left out, and the file is kept as it was until the next change or stop.

use super::state::{Event, State};
use crate::config::{ClientSpec, Config};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

const FILE: &str = "clients.toml";

/// Which registered clients a file keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Those kept across reboots, in the state directory.
    Always,
    /// Runtime clients, kept until the host reboots, in the socket's directory.
    UntilReboot,
}

impl Kept {
    fn runtime(self) -> bool {
        self == Kept::UntilReboot
    }

    fn header(self) -> &'static str {
        match self {
            Kept::Always => {
                "# Clients registered over D-Bus (RegisterClient, gpushare register), kept by gpushared\n\
                 # across restarts. Written by the daemon: change them with gpushare(1) or D-Bus.\n"
            }
            Kept::UntilReboot => {
                "# Runtime clients (RegisterRuntimeClient, gpushare register --runtime), kept by\n\
                 # gpushared across its restarts until the host reboots. Written by the daemon.\n"
            }
        }
    }
}

/// The clients as the file holds them.
pub fn render(kept: Kept, specs: &[ClientSpec]) -> String {
    let mut out = String::from(kept.header());
    for s in specs {
        let _ = writeln!(out, "\n[clients.\"{}\"]", s.name);
        let _ = writeln!(out, "request = {:?}", s.share.request);
        let _ = writeln!(out, "limit = {:?}", s.share.limit);
        match s.share.memory {
            Some(bytes) => {
                let _ = writeln!(out, "memory = {bytes}");
            }
            None => out.push_str("memory = \"unlimited\"\n"),
        }
        let _ = writeln!(out, "interactive = {}", s.share.interactive);
        let _ = writeln!(out, "users = {}", toml_list(&s.access.users));
        let _ = writeln!(out, "groups = {}", toml_list(&s.access.groups));
        let _ = writeln!(out, "oversubscribe = {}", s.memory_mode.oversubscribe);
        if let Some(bytes) = s.memory_mode.resident {
            let _ = writeln!(out, "resident = {bytes}");
        }
        let _ = writeln!(out, "release_cache = {}", s.memory_mode.release_cache);
    }
    out
}

fn toml_list(items: &[String]) -> String {
    let quoted: Vec<String> = items
        .iter()
        .map(|i| toml::Value::String(i.clone()).to_string())
        .collect();
    format!("[{}]", quoted.join(", "))
}

/// The clients in `text`, checked as the config checks them.
pub fn parse(text: &str) -> Result<Vec<ClientSpec>, String> {
    Config::parse(text).map(|c| c.clients.into_values().collect())
}

/// Registers the clients kept in `dir` (at start).
pub fn restore(state: &Mutex<State>, dir: &Path, kept: Kept) {
    let path = dir.join(FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => {
            tracing::warn!(
                "cannot read the registered clients in {}: {e}",
                path.display()
            );
            return;
        }
    };
    let specs = match parse(&text) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(
                "the registered clients in {} are not valid, none restored: {e}",
                path.display()
            );
            return;
        }
    };
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    for spec in specs {
        let name = spec.name.clone();
        match st.register(spec, kept.runtime()) {
            Ok(()) => tracing::info!(client = %name, "registered client restored"),
            Err(e) => tracing::warn!(client = %name, "registered client not restored: {e}"),
        }
    }
}

/// Writes the registered clients to `dir` after every change, off the state's lock.
pub async fn keep(
    state: Arc<Mutex<State>>,
    dir: PathBuf,
    kept: Kept,
    mut events: broadcast::Receiver<Event>,
) {
    loop {
        match events.recv().await {
            Ok(Event::Changed { .. }) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Ok(_) => continue,
            Err(broadcast::error::RecvError::Closed) => return,
        }
        let (state, dir) = (state.clone(), dir.clone());
        if let Err(e) = tokio::task::spawn_blocking(move || save(&state, &dir, kept)).await {
            tracing::warn!("cannot keep the registered clients: {e}");
        }
    }
}

/// Writes the clients registered now, where the file holds something else; also the last write
/// at stop, so that a change made just before (its write still pending in [`keep`]) is not lost.
/// Writes run one at a time and each renders the state when it runs, so the last one written is
/// the latest.
pub fn save(state: &Mutex<State>, dir: &Path, kept: Kept) {
    static WRITING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    let text = render(
        kept,
        &state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .registered_specs(kept.runtime()),
    );
    let on_disk = std::fs::read_to_string(dir.join(FILE)).ok();
    // nothing registered and no file: nothing to keep
    if on_disk.as_deref() == Some(text.as_str()) || (on_disk.is_none() && text == render(kept, &[]))
    {
        return;
    }
    if let Err(e) = write(dir, &text) {
        tracing::warn!(
            "cannot keep the registered clients in {}: {e}",
            dir.join(FILE).display()
        );
    }
}

fn write(dir: &Path, text: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{FILE}.new"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, dir.join(FILE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Access, MemoryMode, MpsShare, Share};

    #[test]
    fn registered_clients_read_back_as_written() {
        let specs = vec![
            ClientSpec {
                name: "in.fer".into(),
                share: Share {
                    request: 0.3,
                    limit: 0.8,
                    memory: Some(2 << 30),
                    interactive: true,
                },
                mps: MpsShare::default(),
                memory_mode: MemoryMode {
                    oversubscribe: true,
                    resident: Some(1 << 30),
                    release_cache: true,
                },
                access: Access {
                    users: vec!["bob".into(), "*".into()],
                    groups: vec!["lab \"a\"".into()],
                    ..Access::default()
                },
            },
            ClientSpec::plain("b", 0.0),
        ];
        let mut back = parse(&render(Kept::Always, &specs)).unwrap();
        back.sort_by(|a, b| b.name.cmp(&a.name));
        assert_eq!(back, specs);
    }

    #[test]
    fn the_last_save_at_stop_keeps_what_is_registered_now() {
        let (tx, _rx) = broadcast::channel(8);
        let config = Config::parse("").unwrap();
        let state = Mutex::new(State::new(config, "/etc/gpushare/gpushare.toml".into(), tx));
        let dir = tempfile::tempdir().unwrap();
        save(&state, dir.path(), Kept::Always);
        assert!(
            !dir.path().join(FILE).exists(),
            "nothing registered, no file"
        );
        state
            .lock()
            .unwrap()
            .register(ClientSpec::plain("gone", 0.1), false)
            .unwrap();
        save(&state, dir.path(), Kept::Always);
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert_eq!(parse(&text).unwrap().len(), 1);
        // unregistered just before the stop: the file says so
        state.lock().unwrap().unregister("gone").unwrap();
        save(&state, dir.path(), Kept::Always);
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(parse(&text).unwrap().is_empty(), "{text}");
    }

    #[test]
    fn runtime_clients_are_kept_apart_from_the_others() {
        let (tx, _rx) = broadcast::channel(8);
        let config = Config::parse("").unwrap();
        let state = Mutex::new(State::new(config, "/etc/gpushare/gpushare.toml".into(), tx));
        let (always, until_reboot) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        {
            let mut st = state.lock().unwrap();
            st.register(ClientSpec::plain("lab", 0.2), false).unwrap();
            st.register(ClientSpec::plain("slurm-7", 0.25), true)
                .unwrap();
        }
        save(&state, always.path(), Kept::Always);
        save(&state, until_reboot.path(), Kept::UntilReboot);
        let names = |dir: &Path| -> Vec<String> {
            let text = std::fs::read_to_string(dir.join(FILE)).unwrap();
            parse(&text).unwrap().into_iter().map(|s| s.name).collect()
        };
        assert_eq!(names(always.path()), ["lab"]);
        assert_eq!(names(until_reboot.path()), ["slurm-7"]);

        // restored from each: a runtime client stays one
        let (tx, _rx) = broadcast::channel(8);
        let fresh = Mutex::new(State::new(
            Config::parse("").unwrap(),
            "/etc/gpushare/gpushare.toml".into(),
            tx,
        ));
        restore(&fresh, always.path(), Kept::Always);
        restore(&fresh, until_reboot.path(), Kept::UntilReboot);
        let st = fresh.lock().unwrap();
        let name = |s: Vec<ClientSpec>| s.into_iter().map(|s| s.name).collect::<Vec<_>>();
        assert_eq!(name(st.registered_specs(false)), ["lab"]);
        assert_eq!(name(st.registered_specs(true)), ["slurm-7"]);
    }

    #[test]
    fn a_damaged_file_is_an_error() {
        assert!(parse("[clients.x]\nrequest = 2.0\n").is_err());
        assert!(parse("[clients.x\n").is_err());
    }
}
