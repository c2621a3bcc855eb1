//! What the GPU side reports (MPS state, processes that bypass the hook, attached processes that
//! use the GPU beyond what their hook reported) goes out as D-Bus signals; the GPU side has
//! logged it already.

use super::dbus_api::{value, Manager, OBJECT_PATH};
use super::state::State;
use crate::gpu::{action_word, DeviceInfo, FlaggedProcess, GpuEvent, MpsStatus};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use zbus::object_server::SignalEmitter;
use zbus::zvariant::OwnedValue;

pub async fn report(
    mut events: mpsc::UnboundedReceiver<GpuEvent>,
    bus: Option<zbus::Connection>,
    state: Arc<Mutex<State>>,
) {
    let emitter = bus
        .as_ref()
        .and_then(|c| SignalEmitter::new(c, OBJECT_PATH).ok());
    while let Some(event) = events.recv().await {
        let sent = match &event {
            GpuEvent::MpsStarted => signal_mps(&emitter, "started", "").await,
            GpuEvent::MpsDied { reason, restart_in } => {
                let msg = format!("{reason}; restarting in {restart_in:?}");
                signal_mps(&emitter, "died", &msg).await
            }
            GpuEvent::MpsGaveUp { reason } => {
                // MPS stays off until the daemon restarts: new clients run without it rather than
                // look for a server that will not come.
                state.lock().unwrap_or_else(|p| p.into_inner()).mps_pipe_dir = None;
                signal_mps(&emitter, "gave-up", reason).await
            }

            GpuEvent::Unattached {
                device,
                pid,
                action,
            } => match &emitter {
                Some(e) => {
                    Manager::unattached_process(e, *device, *pid, action_word(*action)).await
                }
                None => Ok(()),
            },
            GpuEvent::Violation {
                device,
                pid,
                uid,
                client,
                violation,
                action,
            } => match &emitter {
                Some(e) => {
                    Manager::process_violation(
                        e,
                        *device,
                        *pid,
                        *uid,
                        client,
                        violation.kind(),
                        violation.measured(),
                        violation.allowed(),
                        action_word(*action),
                    )
                    .await
                }
                None => Ok(()),
            },
        };
        if let Err(e) = sent {
            tracing::debug!("could not signal {event:?}: {e}");
        }
    }
}

async fn signal_mps(
    emitter: &Option<SignalEmitter<'_>>,
    state: &str,
    message: &str,
) -> zbus::Result<()> {
    match emitter {
        Some(e) => Manager::mps_state_changed(e, state, message).await,
        None => Ok(()),
    }
}

/// A flagged process as a D-Bus dictionary.
pub fn flagged_dict(f: &FlaggedProcess) -> HashMap<String, OwnedValue> {
    let mut m = HashMap::new();
    m.insert("device".into(), value(f.device));
    m.insert("pid".into(), value(f.pid));
    // u32::MAX: the process was gone before its uid could be read
    m.insert("uid".into(), value(f.uid.unwrap_or(u32::MAX)));
    m.insert("client".into(), value(f.client.as_str()));
    m.insert("kind".into(), value(f.kind));
    m.insert("measured".into(), value(f.measured));
    m.insert("allowed".into(), value(f.allowed));
    m.insert("details".into(), value(f.details.as_str()));
    m.insert("action".into(), value(f.action));
    m.insert("since".into(), value(f.since));
    m
}

/// A device as a D-Bus dictionary, with the daemon's MPS state.
pub fn device_dict(d: &DeviceInfo, mps: &MpsStatus) -> HashMap<String, OwnedValue> {
    let mps_state = match (mps.enabled, mps.running) {
        (false, _) => "off",
        (true, true) => "running",
        (true, false) => "down",
    };
    let mut m = HashMap::new();
    m.insert("index".into(), value(d.index));
    m.insert("name".into(), value(d.name.as_str()));
    m.insert("uuid".into(), value(d.uuid.as_str()));
    m.insert("compute_mode".into(), value(d.compute_mode.as_str()));
    m.insert(
        "original_compute_mode".into(),
        value(d.original_compute_mode.as_str()),
    );
    m.insert("memory_total".into(), value(d.memory_total));
    m.insert("memory_used".into(), value(d.memory_used));
    m.insert(
        "utilization_gpu".into(),
        value(d.utilization_gpu.unwrap_or(0)),
    );
    m.insert(
        "pids".into(),
        value(d.processes.iter().map(|p| p.pid).collect::<Vec<u32>>()),
    );
    m.insert("mps".into(), value(mps_state));
    m.insert("mps_restarts".into(), value(mps.restarts));
    m
}
