//! A GPU process the scan flagged, as ListFlaggedProcesses reports it and the status document
//! lists it.

use super::variant_on_dbus;
use serde::{Deserialize, Serialize};
use zbus::zvariant::Type;

/// A process that bypasses the hook, or an attached one that uses the GPU beyond what its hook
/// reported.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Type)]
#[zvariant(signature = "a{sv}", crate = "zbus::zvariant")]
#[serde(default)]
pub struct FlaggedProcess {
    /// NVML index of the GPU.
    #[serde(with = "variant_on_dbus")]
    pub device: u32,
    #[serde(with = "variant_on_dbus")]
    pub pid: u32,
    /// [`FlaggedProcess::UNKNOWN_UID`] when it could not be read.
    #[serde(with = "variant_on_dbus", default = "unknown_uid")]
    pub uid: u32,
    /// The client it attached as; empty for "unattached".
    #[serde(with = "variant_on_dbus")]
    pub client: String,
    /// "unattached", "memory" or "activity".
    #[serde(with = "variant_on_dbus")]
    pub kind: String,
    /// "memory": the bytes NVML counts; "activity": SM percent; 0 for "unattached".
    #[serde(with = "variant_on_dbus")]
    pub measured: u64,
    /// "memory": what it reserved plus the context allowance, in bytes; 0 otherwise.
    #[serde(with = "variant_on_dbus")]
    pub allowed: u64,
    /// The figures in words.
    #[serde(with = "variant_on_dbus")]
    pub details: String,
    /// What was done: "warned" or "killed".
    #[serde(with = "variant_on_dbus")]
    pub action: String,
    /// When it was reported, in seconds since the epoch.
    #[serde(with = "variant_on_dbus")]
    pub since: u64,
}

impl FlaggedProcess {
    /// The uid of a process that was gone before its uid could be read.
    pub const UNKNOWN_UID: u32 = u32::MAX;
}

/// What a record without a uid (an older daemon's) means: not known.
fn unknown_uid() -> u32 {
    FlaggedProcess::UNKNOWN_UID
}
