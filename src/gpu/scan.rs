//! The periodic scan of the managed GPUs: processes that bypass the hook altogether
//! ([`unattached`](super::unattached), by the `unattached` policy) and attached processes that
//! use the GPU beyond what their hook reported ([`verify`](super::verify), by the `violations`
//! policy).

use super::attached::{AttachedProcess, AttachedProcesses};
use super::enforce::{self, action_word};
use super::flagged::{epoch_seconds, FlaggedList, FlaggedProcess};
use super::mps::MpsHandle;
use super::nvml::{NvmlDevices, ProcessLists, Unread};
use super::readings::{read_nvml, Readings};
use super::unattached::{self, process_exists, Tracker};
use super::verify::{self, Episodes, Finding};
use super::GpuEvent;
use crate::config::{UnattachedPolicy, ViolationPolicy};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

pub(crate) struct Scanner {
    pub nvml: Option<Arc<NvmlDevices>>,
    pub mps: Option<MpsHandle>,
    pub attached: AttachedProcesses,
    pub unattached: UnattachedPolicy,
    pub violations: ViolationPolicy,
    /// Device memory allowed per context beyond the reservations; `None`: memory not checked.
    pub context_allowance: Option<u64>,
    /// Whether GPU activity outside leases is checked (not under MPS, where NVML's per-process
    /// samples do not tell the clients of one server apart reliably and all of them hold leases).
    pub check_activity: bool,
    pub interval: Duration,
    /// Device reported for processes only MPS knows about.
    pub mps_device: u32,
    /// How often to ask MPS for its servers and clients while NVML lists processes too (each
    /// question is a few lines in the control daemon's log); without NVML, every scan.
    pub mps_list_every: Duration,
    pub events: mpsc::UnboundedSender<GpuEvent>,
    pub flagged: FlaggedList,
}

/// The last answer of MPS: server pids and client pids.
#[derive(Default)]
struct MpsLists {
    asked: Option<Instant>,
    servers: Vec<u32>,
    clients: Vec<u32>,
}

/// What the scan remembers from one scan to the next.
#[derive(Default)]
struct ScanState {
    tracker: Tracker,
    mps_lists: MpsLists,
    episodes: Episodes,
    /// Per device: when its last utilization window ended (monotonic, and microseconds since the
    /// epoch as NVML counts).
    util_from: HashMap<u32, (Instant, u64)>,
    /// Readings found unavailable (logged once, then not asked for again).
    unavailable: HashSet<&'static str>,
    /// Reported processes still at it, by pid and kind.
    flagged: BTreeMap<(u32, &'static str), FlaggedProcess>,
}

/// The first scan waits two scan intervals, at most this long, after the daemon starts:
/// processes that ran under the previous daemon (a restart, an upgrade) re-attach in that time,
/// and are not taken for unattached ones.
pub const START_GRACE: Duration = Duration::from_secs(2);

impl Scanner {
    pub async fn run(self) {
        let mut st = ScanState::default();
        let first = tokio::time::Instant::now() + START_GRACE.min(self.interval * 2);
        let mut tick = tokio::time::interval_at(first, self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.scan(&mut st).await;
        }
    }

    async fn scan(&self, st: &mut ScanState) {
        let readings = self.read(st).await;
        // After NVML's readings: a lease that started meanwhile counts as held in their windows.
        let attached = (self.attached)();
        let attached_pids: HashSet<u32> = attached.iter().map(|p| p.pid).collect();
        let now = Instant::now();

        if self.unattached != UnattachedPolicy::Allow {
            let (gpu, protected) = self.gpu_processes(&readings.lists, &mut st.mps_lists).await;
            let candidates = unattached::unattached(&gpu, &attached_pids, &protected);
            for (device, pid) in st.tracker.update(&candidates) {
                let flagged = self.act_unattached(device, pid);
                st.flagged.insert((pid, flagged.kind), flagged);
            }
            st.flagged
                .retain(|&(pid, kind), _| kind != "unattached" || st.tracker.is_reported(pid));
        }

        if self.violations != UnattachedPolicy::Allow && self.nvml.is_some() {
            let lists = &readings.lists;
            let memory: Vec<_> = lists
                .compute
                .iter()
                .chain(&lists.graphics)
                .copied()
                .collect();
            let mut found: Vec<Finding> = Vec::new();
            if let Some(allowance) = self.context_allowance {
                found.extend(verify::memory_violations(&memory, &attached, allowance));
            }
            found.extend(verify::activity_violations(&readings.windows, &attached));
            let sampled = readings.windows.iter().flat_map(|w| &w.samples);
            let on_gpu: HashSet<u32> = memory
                .iter()
                .map(|m| m.pid)
                .chain(sampled.map(|s| s.pid))
                .collect();
            let present: HashSet<u32> = attached_pids.intersection(&on_gpu).copied().collect();
            for f in st.episodes.update(found, &present, now) {
                let Some(p) = attached.iter().find(|p| p.pid == f.pid) else {
                    continue;
                };
                let flagged = self.act_violation(&f, p);
                st.flagged.insert((f.pid, flagged.kind), flagged);
            }
            st.flagged.retain(|&(pid, kind), _| {
                kind == "unattached" || st.episodes.is_reported(pid, kind)
            });
        }

        let list: Vec<FlaggedProcess> = st.flagged.values().cloned().collect();
        *self.flagged.lock().unwrap_or_else(|p| p.into_inner()) = list;
    }

    /// This scan's NVML readings; empty without NVML. Notes (once) the readings the driver
    /// cannot give.
    async fn read(&self, st: &mut ScanState) -> Readings {
        let Some(nvml) = &self.nvml else {
            return Readings::default();
        };
        let verifying = self.violations != UnattachedPolicy::Allow;
        let graphics = verifying && !st.unavailable.contains("graphics");
        let util = verifying && self.check_activity && !st.unavailable.contains("activity");
        let util_from = util.then(|| std::mem::take(&mut st.util_from));
        let nvml = nvml.clone();
        let (readings, next) = match tokio::task::spawn_blocking(move || {
            read_nvml(&nvml, graphics, util_from)
        })
        .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("reading NVML failed: {e}");
                return Readings::default();
            }
        };
        st.util_from = next;
        if let Some(why) = &readings.lists.graphics_unread {
            self.note_unavailable(st, "graphics", why);
        }
        if let Some(why) = &readings.util_unread {
            self.note_unavailable(st, "activity", why);
        }
        readings
    }

    fn note_unavailable(&self, st: &mut ScanState, what: &'static str, why: &Unread) {
        match why {
            Unread::Failed(e) => tracing::debug!("cannot read {what}: {e}"),
            Unread::Unsupported(e) => {
                if st.unavailable.insert(what) {
                    match what {
                        "activity" => tracing::warn!(
                            "NVML gives no per-process utilization here ({e}): GPU activity of \
                             attached processes outside their leases is not checked"
                        ),
                        _ => tracing::info!(
                            "NVML gives no list of graphics processes here ({e}): device memory \
                             of attached processes is checked from the compute list only"
                        ),
                    }
                }
            }
        }
    }

    /// Every (device, pid) with a compute context, and the pids never to act on.
    async fn gpu_processes(
        &self,
        lists: &ProcessLists,
        mps_lists: &mut MpsLists,
    ) -> (Vec<(u32, u32)>, HashSet<u32>) {
        let mut gpu: Vec<(u32, u32)> = lists.compute.iter().map(|m| (m.device, m.pid)).collect();
        let mut protected: HashSet<u32> = [0, 1, std::process::id()].into();
        if let Some(mps) = &self.mps {
            let state = mps.state();
            if let Some(pid) = state.pid {
                protected.insert(pid);
            }
            let due = self.nvml.is_none()
                || mps_lists
                    .asked
                    .is_none_or(|t| t.elapsed() >= self.mps_list_every);
            if state.running && due {
                mps_lists.asked = Some(Instant::now());
                match mps.env.servers_and_clients().await {
                    Ok((servers, clients)) => {
                        mps_lists.servers = servers;
                        mps_lists.clients = clients;
                    }
                    Err(e) => tracing::debug!("cannot list MPS clients: {e:#}"),
                }
            }
            protected.extend(mps_lists.servers.iter().copied());
            for &pid in &mps_lists.clients {
                if !gpu.iter().any(|&(_, p)| p == pid) && process_exists(pid) {
                    gpu.push((self.mps_device, pid));
                }
            }
        }
        (gpu, protected)
    }

    fn act_unattached(&self, device: u32, pid: u32) -> FlaggedProcess {
        let uid = enforce::uid_of(pid);
        let (done, why) = enforce::apply(self.unattached, pid);
        match (done, why) {
            (UnattachedPolicy::Kill, _) => tracing::warn!(
                device,
                pid,
                "killed process {pid}: it used GPU {device} without gpushare"
            ),
            (_, Some(why)) => tracing::warn!(
                device,
                pid,
                "process {pid} uses GPU {device} without gpushare and cannot be killed: {why}"
            ),
            (_, None) => tracing::warn!(
                device,
                pid,
                "process {pid} uses GPU {device} without gpushare (not attached through the hook)"
            ),
        }
        let _ = self.events.send(GpuEvent::Unattached {
            device,
            pid,
            action: done,
        });
        FlaggedProcess {
            device,
            pid,
            uid,
            client: String::new(),
            kind: "unattached",
            measured: 0,
            allowed: 0,
            details: "not attached through the hook".into(),
            action: action_word(done),
            since: epoch_seconds(),
        }
    }

    fn act_violation(&self, f: &Finding, p: &AttachedProcess) -> FlaggedProcess {
        let (device, pid, uid, client) = (f.device, f.pid, p.uid, p.client.as_str());
        let details = f.violation.describe();
        let kind = f.violation.kind();
        let (done, why) = enforce::apply(self.violations, pid);
        match (done, why) {
            (UnattachedPolicy::Kill, _) => tracing::warn!(
                device,
                pid,
                uid,
                client,
                kind,
                "killed process {pid} (uid {uid}, client {client}): it used GPU {device} around \
                 the hook: {details}"
            ),
            (_, Some(why)) => tracing::warn!(
                device,
                pid,
                uid,
                client,
                kind,
                "process {pid} (uid {uid}, client {client}) uses GPU {device} around the hook \
                 and cannot be killed ({why}): {details}"
            ),
            (_, None) => tracing::warn!(
                device,
                pid,
                uid,
                client,
                kind,
                "process {pid} (uid {uid}, client {client}) uses GPU {device} around the hook: \
                 {details}"
            ),
        }
        let _ = self.events.send(GpuEvent::Violation {
            device,
            pid,
            uid,
            client: client.to_string(),
            violation: f.violation.clone(),
            action: done,
        });
        FlaggedProcess {
            device,
            pid,
            uid: Some(uid),
            client: client.to_string(),
            kind,
            measured: f.violation.measured(),
            allowed: f.violation.allowed(),
            details,
            action: action_word(done),
            since: epoch_seconds(),
        }
    }
}
