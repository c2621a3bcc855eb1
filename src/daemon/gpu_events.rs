//! What the GPU side reports (MPS state, processes that bypass the hook, attached processes that
//! use the GPU beyond what their hook reported) goes out as D-Bus signals; the GPU side has
//! logged it already.

use super::dbus_api::{Manager, OBJECT_PATH};
use super::state::State;
use crate::api;
use crate::gpu::{action_word, DeviceInfo, FlaggedProcess, GpuEvent, MpsStatus};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use zbus::object_server::SignalEmitter;

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

/// A flagged process as ListFlaggedProcesses reports it.
pub fn flagged_record(f: &FlaggedProcess) -> api::FlaggedProcess {
    api::FlaggedProcess {
        device: f.device,
        pid: f.pid,
        uid: f.uid.unwrap_or(api::FlaggedProcess::UNKNOWN_UID),
        client: f.client.clone(),
        kind: f.kind.into(),
        measured: f.measured,
        allowed: f.allowed,
        details: f.details.clone(),
        action: f.action.into(),
        since: f.since,
    }
}

/// A device as ListDevices reports it, with the daemon's MPS state and how `leases` run on it
/// ([`State::leases`]).
pub fn device_record(d: &DeviceInfo, mps: &MpsStatus, leases: &str) -> api::Device {
    let mps_state = match (mps.enabled, mps.running) {
        (false, _) => "off",
        (true, true) => "running",
        (true, false) => "down",
    };
    api::Device {
        index: d.index,
        name: d.name.clone(),
        uuid: d.uuid.clone(),
        compute_mode: d.compute_mode.clone(),
        original_compute_mode: d.original_compute_mode.clone(),
        memory_total: d.memory_total,
        memory_used: d.memory_used,
        utilization_gpu: d.utilization_gpu.unwrap_or(0),
        pids: d.processes.iter().map(|p| p.pid).collect(),
        mps: mps_state.into(),
        mps_restarts: mps.restarts,
        leases: leases.into(),
    }
}
