//! Reloading the config: on SIGHUP, on D-Bus Reload, and when the file changes on disk.

use super::state::State;
use crate::config::Config;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How often the file is looked at.
const POLL: Duration = Duration::from_secs(1);
/// A changed file is read once it has stayed the same this long: a file written in several
/// steps (`cat > file`, an editor that truncates first) is never read half written.
const SETTLE: Duration = Duration::from_millis(300);
/// A file that keeps changing is read after this long all the same.
const SETTLE_AT_MOST: Duration = Duration::from_secs(10);

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

/// Reloads whenever the file's stamp changes (editors that replace the file included), once
/// the file has settled.
pub async fn watch_file(path: PathBuf, reload: Arc<dyn Fn() -> Result<(), String> + Send + Sync>) {
    let mut last = stamp(&path);
    loop {
        tokio::time::sleep(POLL).await;
        let mut now = stamp(&path);
        if now == last {
            continue;
        }
        let since = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(SETTLE).await;
            let again = stamp(&path);
            if again == now || since.elapsed() >= SETTLE_AT_MOST {
                now = again;
                break;
            }
            now = again;
        }
        last = now;
        tracing::info!(path = %path.display(), "config file changed");
        let _ = reload();
    }
}
