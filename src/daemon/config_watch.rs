//! Reloading the config: on SIGHUP, on D-Bus Reload, and when the file changes on disk.

use super::state::State;
use crate::config::Config;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How often the file is looked at.
const POLL: Duration = Duration::from_secs(1);

/// Loads the config at `path` and applies it, keeping the old one on error.
pub fn reload_from_disk(state: &Mutex<State>) -> Result<(), String> {
    let path = state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .config_path
        .clone();
    let loaded = Config::load(&path);
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    match st.apply_config(loaded) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "config reloaded");
            Ok(())
        }
        Err(e) => {
            tracing::error!(path = %path.display(), "config not reloaded, the running one stays: {e}");
            Err(e)
        }
    }
}

/// What identifies a version of the file: modification time, size and inode.
fn stamp(path: &PathBuf) -> Option<(SystemTime, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

/// Reloads whenever the file's stamp changes (editors that replace the file included).
pub async fn watch_file(path: PathBuf, reload: Arc<dyn Fn() -> Result<(), String> + Send + Sync>) {
    let mut last = stamp(&path);
    loop {
        tokio::time::sleep(POLL).await;
        let now = stamp(&path);
        if now != last {
            last = now;
            tracing::info!(path = %path.display(), "config file changed");
            let _ = reload();
        }
    }
}
