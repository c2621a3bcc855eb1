//! Checking attached processes against what NVML sees of them: a process that reaches the driver
//! around the hook (its own copy of libcuda through `dlmopen`, `RTLD_DEEPBIND`, pointers taken
//! before the hook was loaded) allocates and launches unseen, but NVML still counts its memory
//! and its use of the SMs.
//!
//! Two checks, each a pure function of one scan's readings:
//! - *memory*: the device memory NVML shows for the process, over all managed devices, above
//!   what its hook reserved plus an allowance per context (the context, module images and local
//!   memory, which the hook never sees);
//! - *activity*: SM utilization in NVML's per-process samples of a window throughout which the
//!   process held no lease, give or take [`LEASE_SLACK`].
//!
//! A finding is reported once it shows in two scans in a row (one odd reading is not enough), and
//! once per episode: again only after the process has been clean for [`EPISODE_QUIET`], has left
//! the GPU, or has detached.

use super::attached::AttachedProcess;
use super::nvml::{ProcessMemory, UtilSample};
use crate::units::format_bytes;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

/// SM utilization (percent, averaged over a window) below which activity is not counted: the
/// driver's own work for a process (a memset, a copy done by a kernel) stays far under it.
pub const MIN_SM_UTIL: u32 = 10;

/// How long after a lease's end a process's work may still show in NVML's samples: a sample
/// covers up to a second before its time stamp, and the daemon notes a lease's end when the
/// release arrives, after the work. A window counts only when the process held no lease from
/// this long before its start.
pub const LEASE_SLACK: Duration = Duration::from_secs(2);

/// A finding that has not shown for this long ends its episode; showing again reports it again.
pub const EPISODE_QUIET: Duration = Duration::from_secs(30);

/// What an attached process did beyond what its hook reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// NVML counts `used` bytes for it, more than `reserved` (through the hook) plus `allowance`
    /// (per context, for all its contexts).
    Memory {
        used: u64,
        reserved: u64,
        allowance: u64,
    },
    /// Its work kept the SMs `sm_util` percent busy over a window in which it held no lease;
    /// `idle` is how long before the window's end its last lease ended (`None`: it never had one).
    Activity {
        sm_util: u32,
        idle: Option<Duration>,
    },
}

impl Violation {
    /// "memory" or "activity", as D-Bus and the CLI name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::Memory { .. } => "memory",
            Violation::Activity { .. } => "activity",
        }
    }

    /// The figure measured: bytes for memory, percent for activity.
    pub fn measured(&self) -> u64 {
        match self {
            Violation::Memory { used, .. } => *used,
            Violation::Activity { sm_util, .. } => u64::from(*sm_util),
        }
    }

    /// The most it could have been without a violation: bytes for memory, 0 for activity.
    pub fn allowed(&self) -> u64 {
        match self {
            Violation::Memory {
                reserved,
                allowance,
                ..
            } => reserved.saturating_add(*allowance),
            Violation::Activity { .. } => 0,
        }
    }

    /// The figures in words, e.g. "NVML counts 3GiB of device memory for it, more than the 1GiB
    /// it reserved through the hook plus 1GiB allowed for its context".
    pub fn describe(&self) -> String {
        match self {
            Violation::Memory {
                used,
                reserved,
                allowance,
            } => format!(
                "NVML counts {} of device memory for it, more than the {} it reserved through \
                 the hook plus {} allowed for its contexts",
                format_bytes(Some(*used)),
                format_bytes(Some(*reserved)),
                format_bytes(Some(*allowance)),
            ),
            Violation::Activity { sm_util, idle } => format!(
                "its work kept the GPU's SMs {sm_util}% busy while it held no lease ({})",
                match idle {
                    Some(d) => format!("its last lease ended {:.1} s ago", d.as_secs_f64()),
                    None => "it never had one".into(),
                }
            ),
        }
    }
}

/// One finding of a scan: on `device`, process `pid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub device: u32,
    pub pid: u32,
    pub violation: Violation,
}

/// The attached processes whose device memory, as NVML counts it, is above their reservations
/// plus `allowance` per device they have a context on. A process in both the compute and the
/// graphics list of a device counts once there, with the larger figure; a device where NVML
/// cannot tell its memory counts nothing (and no allowance). The device reported is the one
/// where it uses the most.
pub fn memory_violations(
    memory: &[ProcessMemory],
    attached: &[AttachedProcess],
    allowance: u64,
) -> Vec<Finding> {
    let mut per_context: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    for m in memory {
        if let Some(used) = m.used {
            let e = per_context.entry((m.pid, m.device)).or_default();
            *e = (*e).max(used);
        }
    }
    let mut findings = Vec::new();
    for p in attached {
        let contexts: Vec<(u32, u64)> = per_context
            .range((p.pid, 0)..=(p.pid, u32::MAX))
            .map(|(&(_, device), &used)| (device, used))
            .collect();
        let Some(&(device, _)) = contexts.iter().max_by_key(|(_, used)| *used) else {
            continue;
        };
        let used = contexts
            .iter()
            .fold(0u64, |sum, (_, u)| sum.saturating_add(*u));
        let allowance = allowance.saturating_mul(contexts.len() as u64);
        if used > p.reserved.saturating_add(allowance) {
            findings.push(Finding {
                device,
                pid: p.pid,
                violation: Violation::Memory {
                    used,
                    reserved: p.reserved,
                    allowance,
                },
            });
        }
    }
    findings
}

/// NVML's per-process samples of one device over a window of the daemon's clock.
#[derive(Debug, Clone)]
pub struct UtilWindow {
    pub device: u32,
    pub start: Instant,
    pub end: Instant,
    pub samples: Vec<UtilSample>,
}

/// The attached processes that kept the SMs at least [`MIN_SM_UTIL`] percent busy in a window
/// throughout which they held no lease: neither during it nor in the [`LEASE_SLACK`] before it.
pub fn activity_violations(windows: &[UtilWindow], attached: &[AttachedProcess]) -> Vec<Finding> {
    let by_pid: HashMap<u32, &AttachedProcess> = attached.iter().map(|p| (p.pid, p)).collect();
    let mut findings = Vec::new();
    for w in windows {
        // A sample may cover work from before the window; a lease then must have ended earlier.
        let Some(quiet_from) = w.start.checked_sub(LEASE_SLACK) else {
            continue;
        };
        for s in &w.samples {
            if s.sm_util < MIN_SM_UTIL {
                continue;
            }
            let Some(p) = by_pid.get(&s.pid) else {
                continue;
            };
            if p.last_held.is_some_and(|t| t >= quiet_from) {
                continue;
            }
            findings.push(Finding {
                device: w.device,
                pid: s.pid,
                violation: Violation::Activity {
                    sm_util: s.sm_util.min(100),
                    idle: p.last_held.map(|t| w.end.saturating_duration_since(t)),
                },
            });
        }
    }
    findings
}

/// Which findings to report: those seen in this scan and the one before, once per episode.
#[derive(Debug, Default)]
pub struct Episodes {
    /// (pid, kind) of the previous scan's findings.
    previous: HashSet<(u32, &'static str)>,
    /// Episodes reported, with when their finding last showed.
    reported: HashMap<(u32, &'static str), Instant>,
}

impl Episodes {
    /// `found`: this scan's findings; `present`: the attached pids on the GPU now (an episode
    /// ends when its process leaves). Returns the findings to report now.
    pub fn update(
        &mut self,
        found: Vec<Finding>,
        present: &HashSet<u32>,
        now: Instant,
    ) -> Vec<Finding> {
        let mut report = Vec::new();
        let mut seen = HashSet::new();
        for f in found {
            let key = (f.pid, f.violation.kind());
            if !seen.insert(key) {
                continue;
            }
            if let Some(last) = self.reported.get_mut(&key) {
                *last = now;
            } else if self.previous.contains(&key) {
                self.reported.insert(key, now);
                report.push(f);
            }
        }
        self.reported.retain(|(pid, _), last| {
            present.contains(pid) && now.saturating_duration_since(*last) < EPISODE_QUIET
        });
        self.previous = seen;
        report
    }

    /// Whether an episode of `kind` runs for `pid`.
    pub fn is_reported(&self, pid: u32, kind: &'static str) -> bool {
        self.reported.contains_key(&(pid, kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn attached(pid: u32, reserved: u64, last_held: Option<Instant>) -> AttachedProcess {
        AttachedProcess {
            pid,
            uid: 1000,
            client: "train".into(),
            reserved,
            last_held,
        }
    }

    fn mem(device: u32, pid: u32, used: Option<u64>) -> ProcessMemory {
        ProcessMemory { device, pid, used }
    }

    #[test]
    fn memory_above_reservation_and_allowance_is_a_violation() {
        let procs = [attached(10, 2 * GIB, None), attached(11, 2 * GIB, None)];
        let memory = [mem(0, 10, Some(3 * GIB)), mem(0, 11, Some(3 * GIB + 1))];
        let found = memory_violations(&memory, &procs, GIB);
        assert_eq!(
            found,
            vec![Finding {
                device: 0,
                pid: 11,
                violation: Violation::Memory {
                    used: 3 * GIB + 1,
                    reserved: 2 * GIB,
                    allowance: GIB,
                },
            }],
            "exactly at the limit is within it"
        );
        assert_eq!(found[0].violation.allowed(), 3 * GIB);
        let text = found[0].violation.describe();
        assert!(text.contains("3.0GiB") && text.contains("2GiB"), "{text}");
    }

    #[test]
    fn each_context_gets_an_allowance_and_graphics_is_not_counted_twice() {
        let procs = [attached(10, 4 * GIB, None)];
        // 3 + 3 GiB on two devices against 4 + 2 x 1 GiB: within
        let memory = [
            mem(0, 10, Some(3 * GIB)),
            mem(0, 10, Some(3 * GIB)), // the graphics list, same context
            mem(1, 10, Some(3 * GIB)),
        ];
        assert!(memory_violations(&memory, &procs, GIB).is_empty());
        let more = [mem(0, 10, Some(3 * GIB)), mem(1, 10, Some(4 * GIB))];
        let found = memory_violations(&more, &procs, GIB);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].device, 1, "the device where it uses the most");
        assert_eq!(found[0].violation.measured(), 7 * GIB);
    }

    #[test]
    fn unknown_memory_and_unattached_processes_are_not_checked() {
        let procs = [attached(10, 0, None)];
        let memory = [mem(0, 10, None), mem(0, 99, Some(50 * GIB))];
        assert!(memory_violations(&memory, &procs, 0).is_empty());
        // sums that would overflow saturate instead
        let huge = [mem(0, 10, Some(u64::MAX)), mem(1, 10, Some(u64::MAX))];
        assert_eq!(memory_violations(&huge, &procs, u64::MAX).len(), 0);
        assert_eq!(memory_violations(&huge, &procs, 0).len(), 1);
    }

    fn window(start: Instant, secs: u64, samples: &[(u32, u32)]) -> UtilWindow {
        UtilWindow {
            device: 0,
            start,
            end: start + Duration::from_secs(secs),
            samples: samples
                .iter()
                .map(|&(pid, sm_util)| UtilSample {
                    pid,
                    sm_util,
                    timestamp_us: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn activity_counts_only_without_a_lease_through_the_window_and_its_slack() {
        let t0 = Instant::now() + Duration::from_secs(100);
        let start = t0 + Duration::from_secs(10);
        let procs = [
            attached(1, 0, None),                                   // never held
            attached(2, 0, Some(start - Duration::from_secs(5))),   // long before
            attached(3, 0, Some(start - Duration::from_secs(1))),   // within the slack
            attached(4, 0, Some(start + Duration::from_millis(1))), // during the window
            attached(5, 0, Some(start + Duration::from_secs(2))),   // holding at the end
            attached(6, 0, None),                                   // too little activity
        ];
        let w = window(
            start,
            2,
            &[
                (1, 80),
                (2, 80),
                (3, 80),
                (4, 80),
                (5, 80),
                (6, MIN_SM_UTIL - 1),
                (7, 90),
            ],
        );
        let found = activity_violations(&[w], &procs);
        let pids: Vec<u32> = found.iter().map(|f| f.pid).collect();
        assert_eq!(
            pids,
            vec![1, 2],
            "7 is not attached: the unattached scan's business"
        );
        assert_eq!(
            found[1].violation,
            Violation::Activity {
                sm_util: 80,
                idle: Some(Duration::from_secs(7)),
            }
        );
        assert!(found[0].violation.describe().contains("never had one"));
    }

    fn finding(pid: u32) -> Finding {
        Finding {
            device: 0,
            pid,
            violation: Violation::Activity {
                sm_util: 50,
                idle: None,
            },
        }
    }

    #[test]
    fn reported_after_two_scans_in_a_row_and_once_per_episode() {
        let mut e = Episodes::default();
        let present: HashSet<u32> = [1, 2].into();
        let t = Instant::now();
        let s = |n: u64| t + Duration::from_secs(2 * n);
        assert!(e.update(vec![finding(1)], &present, s(0)).is_empty());
        assert!(e.update(vec![], &present, s(1)).is_empty(), "not in a row");
        assert!(e.update(vec![finding(1)], &present, s(2)).is_empty());
        assert_eq!(e.update(vec![finding(1)], &present, s(3)), vec![finding(1)]);
        assert!(e.is_reported(1, "activity"));
        assert!(e.update(vec![finding(1)], &present, s(4)).is_empty());
        // quiet, but not for long: the same episode
        assert!(e.update(vec![], &present, s(5)).is_empty());
        assert!(e.update(vec![finding(1)], &present, s(6)).is_empty());
        assert!(e.update(vec![finding(1)], &present, s(7)).is_empty());
        // a memory finding of the same process is its own episode
        let m = Finding {
            device: 0,
            pid: 1,
            violation: Violation::Memory {
                used: 2,
                reserved: 0,
                allowance: 1,
            },
        };
        e.update(vec![finding(1), m.clone()], &present, s(8));
        assert_eq!(
            e.update(vec![finding(1), m.clone()], &present, s(9)),
            vec![m]
        );
    }

    #[test]
    fn an_episode_ends_after_a_quiet_spell_or_when_the_process_leaves() {
        let mut e = Episodes::default();
        let present: HashSet<u32> = [1].into();
        let t = Instant::now();
        e.update(vec![finding(1)], &present, t);
        assert_eq!(e.update(vec![finding(1)], &present, t).len(), 1);
        let later = t + EPISODE_QUIET + Duration::from_secs(1);
        assert!(e.update(vec![], &present, later).is_empty());
        assert!(!e.is_reported(1, "activity"));
        e.update(vec![finding(1)], &present, later);
        assert_eq!(e.update(vec![finding(1)], &present, later).len(), 1);
        // gone from the GPU (or detached): the next one is a new episode
        e.update(vec![], &HashSet::new(), later);
        e.update(vec![finding(1)], &present, later);
        assert_eq!(e.update(vec![finding(1)], &present, later).len(), 1);
    }
}
