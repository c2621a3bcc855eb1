//! Talking to systemd: READY=1 once the bus name and socket are up, STATUS= lines with client
//! counts, STOPPING=1, and WATCHDOG=1 while the state lock is responsive.

use super::state::{Event, State};
use sd_notify::NotifyState;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;

pub fn ready() {
    let _ = sd_notify::notify(
        false,
        &[
            NotifyState::Ready,
            NotifyState::Status("ready, no processes attached"),
        ],
    );
}

pub fn stopping() {
    let _ = sd_notify::notify(false, &[NotifyState::Stopping]);
}

fn status_line(st: &State) -> String {
    let reports = st.reports();
    let busy = reports.iter().filter(|r| !r.pids.is_empty()).count();
    let mut line = format!(
        "{} processes attached, {busy} of {} clients active",
        st.session_count(),
        reports.len()
    );
    if st.config_error.is_some() {
        line.push_str("; config file has errors, running the previous one");
    }
    line
}

/// Updates STATUS= whenever something changes.
pub async fn report_status(state: Arc<Mutex<State>>, mut events: broadcast::Receiver<Event>) {
    loop {
        match events.recv().await {
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
        let line = status_line(&state.lock().unwrap_or_else(|p| p.into_inner()));
        let _ = sd_notify::notify(false, &[NotifyState::Status(&line)]);
    }
}

/// When the unit sets WatchdogSec=, pings at half the interval as long as the state lock can be
/// taken (a deadlocked daemon stops pinging and systemd restarts it).
pub fn spawn_watchdog(state: Arc<Mutex<State>>) {
    let mut usec = 0u64;
    if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
        return;
    }
    let period = Duration::from_micros(usec / 2);
    std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || loop {
            std::thread::sleep(period);
            if state.try_lock().is_ok() || {
                std::thread::sleep(period / 4);
                state.try_lock().is_ok()
            } {
                let _ = sd_notify::notify(false, &[NotifyState::Watchdog]);
            }
        })
        .ok();
}
