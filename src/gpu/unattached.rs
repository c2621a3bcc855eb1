//! Finding GPU processes that bypass the hook: the candidates of a scan, and which of them to
//! report (the scan acts on them by the `unattached` policy).

use std::collections::{HashMap, HashSet};

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

    /// Whether `pid` was reported and is still on the GPU.
    pub fn is_reported(&self, pid: u32) -> bool {
        self.reported.contains(&pid)
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

pub(crate) fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// True for NVIDIA's MPS control daemon and servers (`/proc/PID/comm` is cut at 15 bytes).
fn is_mps_daemon(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.starts_with("nvidia-cuda-mps"))
        .unwrap_or(false)
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
        assert!(t.is_reported(100) && t.is_reported(200));
        t.update(&[(1, 200)]);
        assert!(!t.is_reported(100), "gone from the GPU");
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
