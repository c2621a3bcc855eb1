//! The processes the scan reported and that are still at it, for `gpushare status`.

use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlaggedProcess {
    pub device: u32,
    pub pid: u32,
    /// `None` when the process was gone before its uid could be read.
    pub uid: Option<u32>,
    /// The client it attached as; empty for a process that did not attach.
    pub client: String,
    /// "unattached", "memory" or "activity".
    pub kind: &'static str,
    /// For "memory": the bytes NVML counts, and the reservations plus allowance; for
    /// "activity": the SM utilization in percent, and 0. Both 0 for "unattached".
    pub measured: u64,
    pub allowed: u64,
    /// The figures in words.
    pub details: String,
    /// What was done: "warned" or "killed".
    pub action: &'static str,
    /// When it was reported, in seconds since the epoch.
    pub since: u64,
}

/// Shared between the scan, which rewrites it after every scan, and the readers.
pub type FlaggedList = Arc<Mutex<Vec<FlaggedProcess>>>;

/// Seconds since the epoch now.
pub fn epoch_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
