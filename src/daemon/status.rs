//! The status document the socket serves to any process that asks ([`Request::Status`]): what
//! the D-Bus API tells everyone (ListClients, ListDevices and the manager's properties), in the
//! shape `gpushare --json status` prints, so that the CLI reads the daemon without a bus.
//!
//! [`Request::Status`]: crate::protocol::Request::Status

use super::dbus_api::{client_dict, DeviceLister, FlaggedLister};
use super::state::State;
use crate::bus::dict_json;
use crate::protocol::{status_replies, Reply};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use zbus::zvariant::OwnedValue;

/// Where the document's devices and flagged processes come from (the GPU side), as for
/// ListDevices and ListFlaggedProcesses.
#[derive(Clone)]
pub struct Listers {
    pub devices: DeviceLister,
    pub flagged: FlaggedLister,
}

type Dicts = [HashMap<String, OwnedValue>];

/// The document for the daemon's state, the devices and the processes the GPU scan flagged, as
/// ListDevices and ListFlaggedProcesses report them.
pub fn document(state: &State, devices: &Dicts, flagged: &Dicts) -> serde_json::Value {
    serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "config_path": state.config_path.display().to_string(),
        "config_error": state.config_error.clone().unwrap_or_default(),
        "attached_processes": state.session_count() as u32,
        "devices": devices.iter().map(dict_json).collect::<Vec<_>>(),
        "flagged": flagged.iter().map(dict_json).collect::<Vec<_>>(),
        "clients": state
            .reports()
            .iter()
            .map(|r| dict_json(&client_dict(r)))
            .collect::<Vec<_>>(),
    })
}

/// Reads the devices (NVML, off the async threads), the flagged processes and the state, and
/// returns the replies that carry the document.
pub async fn replies(state: &Arc<Mutex<State>>, listers: &Listers) -> Vec<Reply> {
    let devices = listers.devices.clone();
    let devices = tokio::task::spawn_blocking(move || devices())
        .await
        .unwrap_or_default();
    let flagged = (listers.flagged)();
    let doc = {
        let st = state.lock().unwrap_or_else(|p| p.into_inner());
        document(&st, &devices, &flagged)
    };
    status_replies(doc.to_string().as_bytes())
}
