//! A managed GPU as ListDevices reports it, and as the status document lists it.

use super::variant_on_dbus;
use serde::{Deserialize, Serialize};
use zbus::zvariant::Type;

/// A GPU with live memory and state, and the daemon's MPS.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Type)]
#[zvariant(signature = "a{sv}", crate = "zbus::zvariant")]
#[serde(default)]
pub struct Device {
    /// NVML index.
    #[serde(with = "variant_on_dbus")]
    pub index: u32,
    #[serde(with = "variant_on_dbus")]
    pub name: String,
    #[serde(with = "variant_on_dbus")]
    pub uuid: String,
    /// As nvidia-smi names it: Default, Exclusive_Process, Prohibited.
    #[serde(with = "variant_on_dbus")]
    pub compute_mode: String,
    /// The mode it had when the daemon started, put back at stop.
    #[serde(with = "variant_on_dbus")]
    pub original_compute_mode: String,
    /// Bytes.
    #[serde(with = "variant_on_dbus")]
    pub memory_total: u64,
    /// Bytes.
    #[serde(with = "variant_on_dbus")]
    pub memory_used: u64,
    /// Percent of the last sample period in which a kernel ran (0 when NVML cannot tell).
    #[serde(with = "variant_on_dbus")]
    pub utilization_gpu: u32,
    /// Processes with a compute context on it.
    #[serde(with = "variant_on_dbus")]
    pub pids: Vec<u32>,
    /// The daemon's MPS: "off", "running" or "down".
    #[serde(with = "variant_on_dbus")]
    pub mps: String,
    /// How often MPS was restarted since the daemon started.
    #[serde(with = "variant_on_dbus")]
    pub mps_restarts: u32,
    /// How leases run on it now: [`Device::MPS`], [`Device::ONE_AT_A_TIME`],
    /// [`Device::CONCURRENT`], [`Device::TOGETHER`] or [`Device::TURNS`]; empty from a daemon
    /// without it.
    #[serde(with = "variant_on_dbus")]
    pub leases: String,
}

impl Device {
    /// Leases run side by side under MPS, as many at once as `daemon.concurrent_leases` allows.
    pub const MPS: &'static str = "mps";
    /// One lease at a time (`daemon.concurrent_leases = 1`).
    pub const ONE_AT_A_TIME: &'static str = "one-at-a-time";
    /// Without MPS, as many leases at once as `daemon.concurrent_leases` allows, whatever the
    /// processes' demands; the driver time-slices the GPU between them.
    pub const CONCURRENT: &'static str = "concurrent";
    /// Without MPS, leases overlap by demand: a lease starts beside the running ones while the
    /// GPU has room for them or the weights allow.
    pub const TOGETHER: &'static str = "together";
    /// Without MPS, leases overlap by demand, but batch leases take exclusive turns: the
    /// processes progressed more in turns than together.
    pub const TURNS: &'static str = "turns";
}
