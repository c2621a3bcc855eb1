//! The status document the socket serves to any process that asks ([`Request::Status`]): what
//! the D-Bus API tells everyone (ListClients, ListDevices and the manager's properties), in the
//! shape `gpushare --json status` prints ([`api::Status`] as JSON), so that the CLI reads the
//! daemon without a bus; and the usage rows ([`Request::Usage`]), as GetUsage gives them (a
//! user's own, every user's to root and the admin groups).
//!
//! [`Request::Status`]: crate::protocol::Request::Status
//! [`Request::Usage`]: crate::protocol::Request::Usage

use super::accounting::{self, Accounting, QueryError};
use super::dbus_api::{client_record, DeviceLister, FlaggedLister};
use super::state::State;
use crate::api;
use crate::protocol::{status_replies, ErrorCode, Reply};
use std::sync::{Arc, Mutex};

/// Where the document's devices and flagged processes come from (the GPU side), as for
/// ListDevices and ListFlaggedProcesses, and the usage accounting the usage request reads, as
/// GetUsage does.
#[derive(Clone)]
pub struct Listers {
    pub devices: DeviceLister,
    pub flagged: FlaggedLister,
    pub accounting: Arc<Accounting>,
}

/// The document for the daemon's state, the devices and the processes the GPU scan flagged, as
/// ListDevices and ListFlaggedProcesses report them.
pub fn document(
    state: &State,
    devices: Vec<api::Device>,
    flagged: Vec<api::FlaggedProcess>,
) -> api::Status {
    api::Status {
        version: env!("CARGO_PKG_VERSION").into(),
        config_path: state.config_path.display().to_string(),
        config_error: state.config_error.clone().unwrap_or_default(),
        attached_processes: state.session_count() as u32,
        devices,
        flagged,
        clients: state.reports().iter().map(client_record).collect(),
    }
}

/// Reads the devices (NVML, off the async threads), the flagged processes and the state, and
/// returns the replies that carry the document as JSON.
pub async fn replies(state: &Arc<Mutex<State>>, listers: &Listers) -> Result<Vec<Reply>, String> {
    let devices = listers.devices.clone();
    let devices = tokio::task::spawn_blocking(move || devices())
        .await
        .unwrap_or_default();
    let flagged = (listers.flagged)();
    let doc = {
        let st = state.lock().unwrap_or_else(|p| p.into_inner());
        document(&st, devices, flagged)
    };
    let json = serde_json::to_vec(&doc).map_err(|e| format!("cannot write the status: {e}"))?;
    Ok(status_replies(&json))
}

/// The replies to a usage request ([`crate::protocol::Request::Usage`]) from the peer `uid`
/// (SO_PEERCRED): the rows GetUsage would give that user (every user's to root and the
/// admin_groups, their own to anyone else), as JSON, or the reason there are none as an error.
pub async fn usage_replies(
    listers: &Listers,
    uid: u32,
    since_seconds: u64,
    by: &str,
) -> Vec<Reply> {
    let refused = |message: String| {
        vec![Reply::Error {
            code: ErrorCode::Refused,
            message,
        }]
    };
    match accounting::query(listers.accounting.clone(), uid, since_seconds, by).await {
        Ok(rows) => match serde_json::to_vec(&rows) {
            Ok(json) => status_replies(&json),
            Err(e) => refused(format!("cannot write the usage: {e}")),
        },
        Err(QueryError::InvalidArgument(m) | QueryError::Failed(m)) => refused(m),
    }
}
