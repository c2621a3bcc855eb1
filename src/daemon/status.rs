//! The status document the socket serves to any process that asks ([`Request::Status`]): what
//! the D-Bus API tells everyone (ListClients, ListDevices and the manager's properties), in the
//! shape `gpushare --json status` prints, so that the CLI reads the daemon without a bus.
//!
//! [`Request::Status`]: crate::protocol::Request::Status

use super::dbus_api::{client_dict, DeviceLister};
use super::state::State;
use crate::bus::dict_json;
use crate::protocol::{status_replies, Reply};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use zbus::zvariant::OwnedValue;

/// The document for the daemon's state and the devices as ListDevices reports them.
pub fn document(state: &State, devices: &[HashMap<String, OwnedValue>]) -> serde_json::Value {
    serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "config_path": state.config_path.display().to_string(),
        "config_error": state.config_error.clone().unwrap_or_default(),
        "attached_processes": state.session_count() as u32,
        "devices": devices.iter().map(dict_json).collect::<Vec<_>>(),
        "clients": state
            .reports()
            .iter()
            .map(|r| dict_json(&client_dict(r)))
            .collect::<Vec<_>>(),
    })
}

/// Reads the devices (NVML, off the async threads) and the state, and returns the replies that
/// carry the document.
pub async fn replies(state: &Arc<Mutex<State>>, devices: &DeviceLister) -> Vec<Reply> {
    let devices = devices.clone();
    let devices = tokio::task::spawn_blocking(move || devices())
        .await
        .unwrap_or_default();
    let doc = {
        let st = state.lock().unwrap_or_else(|p| p.into_inner());
        document(&st, &devices)
    };
    status_replies(doc.to_string().as_bytes())
}
