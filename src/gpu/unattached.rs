//! Finding GPU processes that bypass the hook, and acting on them by the `unattached` policy.

use super::mps::MpsHandle;
use super::nvml::NvmlDevices;
use super::GpuEvent;
use crate::config::UnattachedPolicy;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The set of pids attached through the hook, asked for on every scan.
pub type AttachedPids = Arc<dyn Fn() -> HashSet<u32> + Send + Sync>;

/// Remembers what the previous scans saw. A process is reported once it has been seen unattached
/// in two scans in a row (a client may hold a context a moment before its hook says hello), and
/// only once for as long as it stays on the GPU.
#[derive(Default)]
pub(crate) struct Tracker {
    previous: HashSet<u32>,
    reported: HashSet<u32>,
}

impl Tracker {
    /// `unattached`: (device, pid) of this scan's GPU processes that are neither attached nor
    /// protected. Returns those to report now.
    pub fn update(&mut self, unattached: &[(u32, u32)]) -> Vec<(u32, u32)> {
        let now: HashMap<u32, u32> = unattached.iter().map(|&(d, p)| (p, d)).collect();
        let mut report: Vec<(u32, u32)> = now
            .iter()
            .filter(|(pid, _)| self.previous.contains(pid) && !self.reported.contains(pid))
            .map(|(&pid, &device)| (device, pid))
            .collect();
        report.sort_unstable();
        self.reported.retain(|p| now.contains_key(p));
        self.reported.extend(report.iter().map(|&(_, p)| p));
        self.previous = now.into_keys().collect();
        report
    }
}

/// The GPU processes that are neither attached nor protected (pid 0, ourselves, MPS daemons).
pub(crate) fn unattached(
    gpu: &[(u32, u32)],
    attached: &HashSet<u32>,
    protected: &HashSet<u32>,
) -> Vec<(u32, u32)> {
    gpu.iter()
        .copied()
        .filter(|&(_, pid)| {
            pid > 1 && !attached.contains(&pid) && !protected.contains(&pid) && !is_mps_daemon(pid)
        })
        .collect()
}

fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// True for NVIDIA's MPS control daemon and servers (`/proc/PID/comm` is cut at 15 bytes).
fn is_mps_daemon(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.starts_with("nvidia-cuda-mps"))
        .unwrap_or(false)
}

pub(crate) struct Scanner {
    pub nvml: Option<Arc<NvmlDevices>>,
    pub mps: Option<MpsHandle>,
    pub attached: AttachedPids,
    pub policy: UnattachedPolicy,
    pub interval: Duration,
    /// Device reported for processes only MPS knows about.
    pub mps_device: u32,
    /// How often to ask MPS for its servers and clients while NVML lists processes too (each
    /// question is a few lines in the control daemon's log); without NVML, every scan.
    pub mps_list_every: Duration,
    pub events: mpsc::UnboundedSender<GpuEvent>,
}

/// The last answer of MPS: server pids and client pids.
#[derive(Default)]
struct MpsLists {
    asked: Option<Instant>,
    servers: Vec<u32>,
    clients: Vec<u32>,
}

/// The first scan waits two scan intervals, at most this long, after the daemon starts:
/// processes that ran under the previous daemon (a restart, an upgrade) re-attach in that time,
/// and are not taken for unattached ones.
pub const START_GRACE: Duration = Duration::from_secs(2);

impl Scanner {
    pub async fn run(self) {
        let mut tracker = Tracker::default();
        let mut mps_lists = MpsLists::default();
        let first = tokio::time::Instant::now() + START_GRACE.min(self.interval * 2);
        let mut tick = tokio::time::interval_at(first, self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let (gpu, protected) = self.gpu_processes(&mut mps_lists).await;
            let attached = (self.attached)();
            let found = tracker.update(&unattached(&gpu, &attached, &protected));
            for (device, pid) in found {
                self.act(device, pid);
            }
        }
    }

    /// Every (device, pid) with a GPU context, and the pids never to act on.
    async fn gpu_processes(&self, lists: &mut MpsLists) -> (Vec<(u32, u32)>, HashSet<u32>) {
        let mut gpu = Vec::new();
        let mut protected: HashSet<u32> = [0, 1, std::process::id()].into();
        if let Some(nvml) = &self.nvml {
            let nvml = nvml.clone();
            match tokio::task::spawn_blocking(move || nvml.processes()).await {
                Ok(list) => gpu = list,
                Err(e) => tracing::warn!("listing GPU processes failed: {e}"),
            }
        }
        if let Some(mps) = &self.mps {
            let state = mps.state();
            if let Some(pid) = state.pid {
                protected.insert(pid);
            }
            let due = self.nvml.is_none()
                || lists
                    .asked
                    .is_none_or(|t| t.elapsed() >= self.mps_list_every);
            if state.running && due {
                lists.asked = Some(Instant::now());
                match mps.env.servers_and_clients().await {
                    Ok((servers, clients)) => {
                        lists.servers = servers;
                        lists.clients = clients;
                    }
                    Err(e) => tracing::debug!("cannot list MPS clients: {e:#}"),
                }
            }
            protected.extend(lists.servers.iter().copied());
            for &pid in &lists.clients {
                if !gpu.iter().any(|&(_, p)| p == pid) && process_exists(pid) {
                    gpu.push((self.mps_device, pid));
                }
            }
        }
        (gpu, protected)
    }

    fn act(&self, device: u32, pid: u32) {
        let action = match self.policy {
            UnattachedPolicy::Allow => return,
            UnattachedPolicy::Warn => {
                tracing::warn!(
                    device,
                    pid,
                    "process {pid} uses GPU {device} without gpushare (not attached through the hook)"
                );
                UnattachedPolicy::Warn
            }
            UnattachedPolicy::Kill => {
                let target = nix::unistd::Pid::from_raw(pid as i32);
                match nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGKILL) {
                    Ok(()) => {
                        tracing::warn!(
                            device,
                            pid,
                            "killed process {pid}: it used GPU {device} without gpushare"
                        );
                        UnattachedPolicy::Kill
                    }
                    Err(e) => {
                        tracing::warn!(
                            device,
                            pid,
                            "process {pid} uses GPU {device} without gpushare and cannot be killed: {e}"
                        );
                        UnattachedPolicy::Warn
                    }
                }
            }
        };
        let _ = self.events.send(GpuEvent::Unattached {
            device,
            pid,
            action,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_after_two_scans_and_only_once() {
        let mut t = Tracker::default();
        assert!(t.update(&[(0, 100)]).is_empty());
        assert_eq!(t.update(&[(0, 100), (1, 200)]), vec![(0, 100)]);
        assert_eq!(t.update(&[(0, 100), (1, 200)]), vec![(1, 200)]);
        assert!(t.update(&[(0, 100), (1, 200)]).is_empty());
    }

    #[test]
    fn a_pid_that_left_and_came_back_is_reported_again() {
        let mut t = Tracker::default();
        t.update(&[(0, 100)]);
        assert_eq!(t.update(&[(0, 100)]), vec![(0, 100)]);
        assert!(t.update(&[]).is_empty());
        assert!(t.update(&[(0, 100)]).is_empty());
        assert_eq!(t.update(&[(0, 100)]), vec![(0, 100)]);
    }

    #[test]
    fn a_pid_seen_once_then_attached_is_never_reported() {
        let mut t = Tracker::default();
        t.update(&[(0, 100)]);
        assert!(t.update(&[]).is_empty());
        assert!(t.update(&[]).is_empty());
    }

    #[test]
    fn attached_protected_and_low_pids_are_not_candidates() {
        let gpu = [(0, 0), (0, 1), (0, 10), (0, 11), (0, 12)];
        let attached: HashSet<u32> = [10].into();
        let protected: HashSet<u32> = [11].into();
        assert_eq!(unattached(&gpu, &attached, &protected), vec![(0, 12)]);
    }
}
