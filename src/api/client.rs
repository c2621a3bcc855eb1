//! A client as ListClients and GetClient report it, and as the status document lists it.

use super::variant_on_dbus;
use serde::{Deserialize, Serialize};
use zbus::zvariant::Type;

/// A client with its shares and live usage. `memory_used`, `share_used`, `holding` and
/// `waiting` are added up over the GPUs; `devices` has them on each GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Type)]
#[zvariant(signature = "a{sv}", crate = "zbus::zvariant")]
#[serde(default)]
pub struct Client {
    #[serde(with = "variant_on_dbus")]
    pub name: String,
    /// Where it comes from: "config", "registered" (over D-Bus) or "default" (a user's).
    #[serde(with = "variant_on_dbus")]
    pub origin: String,
    /// Guaranteed share of each GPU's time, 0..1.
    #[serde(with = "variant_on_dbus")]
    pub request: f64,
    /// Most share of each GPU's time, 0..1.
    #[serde(with = "variant_on_dbus")]
    pub limit: f64,
    /// Device memory cap in bytes on each GPU, 0 for none.
    #[serde(with = "variant_on_dbus")]
    pub memory: u64,
    /// Device memory its processes hold on all GPUs together, in bytes.
    #[serde(with = "variant_on_dbus")]
    pub memory_used: u64,
    #[serde(with = "variant_on_dbus")]
    pub interactive: bool,
    /// Share of GPU time its work took over the last ten seconds, its USED (1.0: one GPU's
    /// time).
    #[serde(with = "variant_on_dbus")]
    pub share_used: f64,
    /// GPU time its work took, as in `share_used`.
    #[serde(with = "variant_on_dbus")]
    pub gpu_time_ns: u64,
    /// GPU time charged to it.
    #[serde(with = "variant_on_dbus")]
    pub charged_ns: u64,
    /// Leases granted to it.
    #[serde(with = "variant_on_dbus")]
    pub grants: u64,
    /// Time its processes waited for a lease.
    #[serde(with = "variant_on_dbus")]
    pub waited_ns: u64,
    /// Whether one of its processes holds a lease on some GPU now.
    #[serde(with = "variant_on_dbus")]
    pub holding: bool,
    /// Its processes waiting for a lease, counted once per GPU they wait for.
    #[serde(with = "variant_on_dbus")]
    pub waiting: u32,
    /// Its figures on each GPU it uses or used.
    #[serde(with = "variant_on_dbus")]
    pub devices: Vec<ClientDevice>,
    /// Its attached processes.
    #[serde(with = "variant_on_dbus")]
    pub pids: Vec<u32>,
    /// Who may attach as it ("*": everyone).
    #[serde(with = "variant_on_dbus")]
    pub users: Vec<String>,
    #[serde(with = "variant_on_dbus")]
    pub groups: Vec<String>,
    /// 0 for MPS's default.
    #[serde(with = "variant_on_dbus")]
    pub mps_thread_percentage: u32,
    /// Bytes, 0 for MPS's default.
    #[serde(with = "variant_on_dbus")]
    pub mps_pinned_mem_limit: u64,
    #[serde(with = "variant_on_dbus")]
    pub mps_priority: String,
    /// Whether its device memory is managed memory moved in and out at hand-overs.
    #[serde(with = "variant_on_dbus")]
    pub oversubscribe: bool,
    /// How much of its managed memory moves onto the GPU at a grant, in bytes; 0 for all.
    #[serde(with = "variant_on_dbus")]
    pub resident: u64,
    /// Whether its PyTorch processes release their cached memory while others wait.
    #[serde(with = "variant_on_dbus")]
    pub release_cache: bool,
    /// Its decayed fair-share factor (`daemon.fairshare_half_life`): the scheduler weighs it by
    /// its request times this; 1 while fair share is off (and from a daemon without it).
    #[serde(with = "variant_on_dbus", default = "one")]
    pub fair_share: f64,
}

/// A client's figures on one GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Type)]
#[zvariant(signature = "a{sv}", crate = "zbus::zvariant")]
#[serde(default)]
pub struct ClientDevice {
    /// The GPU's UUID (`GPU-...`).
    #[serde(with = "variant_on_dbus")]
    pub device: String,
    /// Device memory its processes hold there, in bytes.
    #[serde(with = "variant_on_dbus")]
    pub memory_used: u64,
    /// Its share of that GPU's time over the last ten seconds.
    #[serde(with = "variant_on_dbus")]
    pub share_used: f64,
    /// Whether one of its processes holds a lease there.
    #[serde(with = "variant_on_dbus")]
    pub holding: bool,
    /// Its processes waiting for a lease there.
    #[serde(with = "variant_on_dbus")]
    pub waiting: u32,
    /// The scheduler's demand estimates of its processes that hold or wait for a lease there,
    /// added up: the fraction of the GPU their work keeps busy, as their hooks measured it (1.0:
    /// the whole GPU). 0 when none does, and where leases do not overlap by demand (under MPS,
    /// or with `daemon.concurrent_leases` set), where there is no estimate.
    #[serde(with = "variant_on_dbus")]
    pub demand: f64,
}

/// The fair-share factor of a record without one: fair share off.
fn one() -> f64 {
    1.0
}
