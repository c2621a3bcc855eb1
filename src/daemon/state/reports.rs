//! What the state reports: clients with their live usage, and the usage of each process.

use super::*;
use crate::api;
use crate::scheduler::LeaseMode;

/// A client as reported over D-Bus and by the CLI.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClientReport {
    pub name: String,
    pub origin: &'static str,
    pub request: f64,
    pub limit: f64,
    /// Memory cap in bytes on each GPU, `None` for unlimited.
    pub memory: Option<u64>,
    /// Device memory its processes hold, on all GPUs together.
    pub memory_used: u64,
    pub interactive: bool,
    /// Fraction of GPU time its work took over the last ten seconds (USED), added up over the
    /// GPUs (1.0 is one GPU's time).
    pub share_used: f64,
    /// GPU time its work took, as in `share_used`.
    pub gpu_time_ns: u64,
    pub charged_ns: u64,
    pub grants: u64,
    /// Time its processes waited for a grant.
    pub waited_ns: u64,
    /// Whether one of its processes holds a lease on some GPU.
    pub holding: bool,
    /// Its processes waiting for a lease, counted once per GPU they wait for.
    pub waiting: u32,
    /// Its figures on each GPU it uses or used.
    pub devices: Vec<ClientDeviceReport>,
    pub pids: Vec<u32>,
    pub users: Vec<String>,
    pub groups: Vec<String>,
    pub mps_thread_percentage: Option<u32>,
    pub mps_pinned_mem_limit: Option<u64>,
    pub mps_priority: &'static str,
    pub oversubscribe: bool,
    /// Resident budget in bytes, `None` for all of the client's managed memory.
    pub resident: Option<u64>,
    pub release_cache: bool,
    /// Its fair-share factor (1 while fair share is off).
    pub fair_share: f64,
}

/// A client's figures on one GPU.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ClientDeviceReport {
    /// The GPU's UUID, as NVML writes it (`GPU-...`).
    pub device: String,
    /// Device memory its processes hold there.
    pub memory_used: u64,
    /// Fraction of that GPU's time its work took over the last ten seconds (USED).
    pub share_used: f64,
    /// Whether one of its processes holds a lease there.
    pub holding: bool,
    /// Its processes waiting for a lease there.
    pub waiting: u32,
    /// The demand estimates of its processes that hold or wait for a lease there, added up (0
    /// where leases do not overlap by demand).
    pub demand: f64,
    /// GPU time charged to it there, since the client was made.
    pub charged_ns: u64,
    /// Time its processes waited for a lease there, since the client was made.
    pub waited_ns: u64,
}

/// How leases run on one GPU now, for the metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuLeases {
    /// The GPU's UUID, as NVML writes it (`GPU-...`).
    pub device: String,
    /// In the words of [`api::Device::leases`].
    pub leases: &'static str,
    /// Leases running there.
    pub holders: usize,
}

impl State {
    pub fn report(&self, name: &str) -> Option<ClientReport> {
        let c = self.clients.get(name)?;
        let now = self.now();
        let u = self.sched.usage(c.id, now)?;
        Some(ClientReport {
            name: c.spec.name.clone(),
            origin: c.origin.as_str(),
            request: c.spec.share.request,
            limit: c.spec.share.limit,
            memory: c.spec.share.memory,
            memory_used: total(&c.memory_used),
            interactive: c.spec.share.interactive,
            share_used: u.share,
            gpu_time_ns: u.gpu_total,
            charged_ns: u.charged_total,
            grants: u.grants,
            waited_ns: u.waited_total,
            holding: u.holding,
            waiting: u.waiting as u32,
            devices: self.device_reports(c, now),
            pids: c
                .sessions
                .iter()
                .filter_map(|s| self.sessions.get(s))
                .map(|s| s.pid)
                .collect(),
            users: c.spec.access.users.clone(),
            groups: c.spec.access.groups.clone(),
            mps_thread_percentage: c.spec.mps.thread_percentage,
            mps_pinned_mem_limit: c.spec.mps.pinned_mem_limit,
            mps_priority: c.spec.mps.priority.as_str(),
            oversubscribe: c.spec.memory_mode.oversubscribe,
            resident: c.spec.memory_mode.resident,
            release_cache: c.spec.memory_mode.release_cache,
            fair_share: c.fair_factor,
        })
    }

    /// A client's figures on each GPU where it holds memory or got or waits for a lease.
    fn device_reports(&self, c: &ClientEntry, now: Nanos) -> Vec<ClientDeviceReport> {
        let mut by_device: BTreeMap<DeviceId, ClientDeviceReport> = BTreeMap::new();
        for (device, u) in self.sched.device_usage(c.id, now) {
            if u.grants > 0 || u.waiting > 0 || u.holding {
                by_device.insert(
                    device,
                    ClientDeviceReport {
                        device: device.to_string(),
                        memory_used: 0,
                        share_used: u.share,
                        holding: u.holding,
                        waiting: u.waiting as u32,
                        demand: u.demand,
                        charged_ns: u.charged_total,
                        waited_ns: u.waited_total,
                    },
                );
            }
        }
        for (&device, &bytes) in &c.memory_used {
            by_device
                .entry(device)
                .or_insert_with(|| ClientDeviceReport {
                    device: device.to_string(),
                    memory_used: 0,
                    share_used: 0.0,
                    holding: false,
                    waiting: 0,
                    demand: 0.0,
                    charged_ns: 0,
                    waited_ns: 0,
                })
                .memory_used = bytes;
        }
        by_device.into_values().collect()
    }

    /// How leases run now on the GPU of `uuid` (NVML's text form), in the words of
    /// [`api::Device::leases`]: the scheduler's mode, "mps" for concurrent leases while clients
    /// are handed MPS. A GPU no request named yet has the mode leases would start in there.
    pub fn leases(&self, uuid: &str) -> &'static str {
        let mode = match DeviceId::parse(uuid) {
            Some(device) => self.sched.lease_mode(device, self.now()),
            None => self.sched.starting_lease_mode(),
        };
        match mode {
            LeaseMode::OneAtATime => api::Device::ONE_AT_A_TIME,
            LeaseMode::Concurrent if self.mps_pipe_dir.is_some() => api::Device::MPS,
            LeaseMode::Concurrent => api::Device::CONCURRENT,
            LeaseMode::Together => api::Device::TOGETHER,
            LeaseMode::Turns => api::Device::TURNS,
        }
    }

    /// How leases run on each GPU a request named and on each of `uuids` (the managed GPUs),
    /// each once.
    pub fn gpu_leases(&self, uuids: &[String]) -> Vec<GpuLeases> {
        let mut devices: Vec<String> = self.sched.devices().map(|d| d.to_string()).collect();
        for uuid in uuids {
            let known = DeviceId::parse(uuid).map(|d| d.to_string());
            if !devices
                .iter()
                .any(|d| Some(d) == known.as_ref() || d == uuid)
            {
                devices.push(uuid.clone());
            }
        }
        devices
            .into_iter()
            .map(|device| GpuLeases {
                leases: self.leases(&device),
                holders: DeviceId::parse(&device).map_or(0, |d| self.sched.holder_count(d)),
                device,
            })
            .collect()
    }

    pub fn reports(&self) -> Vec<ClientReport> {
        self.clients.keys().filter_map(|n| self.report(n)).collect()
    }

    /// The figures accounting and metrics count from; hands over the processes gone since the
    /// last call.
    pub fn usage_snapshot(&mut self) -> UsageSnapshot {
        let now = self.now();
        UsageSnapshot {
            now,
            sessions: self
                .sessions
                .iter()
                .map(|(id, s)| figures(*id, s, self.sched.session_usage(*id, now)))
                .collect(),
            ended: std::mem::take(&mut self.ended),
            clients: self
                .clients
                .values()
                .map(|c| ClientFigures {
                    name: c.spec.name.clone(),
                    request: c.spec.share.request,
                    limit: c.spec.share.limit,
                    memory_cap: c.spec.share.memory,
                    memory_used: total(&c.memory_used),
                    fair_share: c.fair_factor,
                })
                .collect(),
            reload_failures: self.reload_failures,
            config_error: self.config_error.is_some(),
        }
    }
}

pub(super) fn figures(
    id: SessionId,
    s: &Session,
    u: crate::scheduler::SessionUsage,
) -> SessionFigures {
    SessionFigures {
        session: id,
        user: s.user.clone(),
        client: s.client.clone(),
        charged_ns: u.charged,
        grants: u.grants,
        waited_ns: u.waited,
        reserved: s.reserved_total(),
    }
}

/// Memory per GPU added up.
fn total(per_device: &BTreeMap<DeviceId, u64>) -> u64 {
    per_device
        .values()
        .fold(0u64, |sum, b| sum.saturating_add(*b))
}
