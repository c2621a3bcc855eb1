//! The status document: what the D-Bus API tells everyone (the manager's properties,
//! ListDevices, ListFlaggedProcesses and ListClients) in one record. The socket serves it as JSON
//! and `gpushare --json status` prints it.

use super::variant_on_dbus;
use super::{Client, Device, FlaggedProcess};
use serde::{Deserialize, Serialize};
use zbus::zvariant::Type;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Type)]
#[zvariant(signature = "a{sv}", crate = "zbus::zvariant")]
#[serde(default)]
pub struct Status {
    /// The daemon's version.
    #[serde(with = "variant_on_dbus")]
    pub version: String,
    #[serde(with = "variant_on_dbus")]
    pub config_path: String,
    /// Why the last reload failed; empty when the file on disk is the running config.
    #[serde(with = "variant_on_dbus")]
    pub config_error: String,
    /// Processes attached through the hook.
    #[serde(with = "variant_on_dbus")]
    pub attached_processes: u32,
    #[serde(with = "variant_on_dbus")]
    pub devices: Vec<Device>,
    /// Empty from a daemon older than ListFlaggedProcesses.
    #[serde(with = "variant_on_dbus")]
    pub flagged: Vec<FlaggedProcess>,
    #[serde(with = "variant_on_dbus")]
    pub clients: Vec<Client>,
}
