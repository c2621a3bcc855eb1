//! `/etc/gpushare/gpushare.toml`: parsing and validation.
//!
//! The file is read into the `File*` structs (what the admin wrote) and checked into [`Config`]
//! (what the daemon uses). Every error names the key it is about; a file that fails to check never
//! replaces a running config.

use crate::units::{parse_bytes, parse_duration};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DEFAULT_CONFIG_PATH: &str = "/etc/gpushare/gpushare.toml";
/// The system's state directory: where the service keeps usage accounting and registered
/// clients (systemd's `StateDirectory=gpushare`), and where a daemon that may write it keeps them
/// when `daemon.state_dir` is not set.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/gpushare";

/// `daemon.state_dir`: where usage accounting and registered clients are kept.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StateDir {
    /// Not set: the daemon picks one when it starts (see `crate::daemon::state_dir`).
    #[default]
    Default,
    /// `""`: nothing is kept.
    Off,
    /// An absolute path.
    Path(PathBuf),
}

/// How the daemon treats GPU processes that did not attach through the hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum UnattachedPolicy {
    Allow,
    #[default]
    Warn,
    Kill,
}

/// How the daemon treats attached processes that NVML shows using the GPU beyond what their hook
/// reported (`gpu.violations`): the same words as [`UnattachedPolicy`].
pub type ViolationPolicy = UnattachedPolicy;

/// Device memory NVML may show for an attached process beyond what its hook reserved, per device
/// it has a context on, before that counts as a violation: the CUDA context, its module images,
/// kernels' local memory and heaps, which the hook never sees (a few hundred MiB for a PyTorch
/// process with CUDA 12's lazy module loading).
pub const DEFAULT_CONTEXT_ALLOWANCE: u64 = 1 << 30;

/// A client's share of GPU time and memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// Guaranteed minimum fraction of GPU time, 0..=1.
    pub request: f64,
    /// Maximum fraction of GPU time, 0 < limit <= 1.
    pub limit: f64,
    /// Device memory cap in bytes; `None` is unlimited.
    pub memory: Option<u64>,
    /// Latency class: the client's work runs as soon as it has some, while batch clients pause.
    pub interactive: bool,
}

impl Default for Share {
    fn default() -> Self {
        Share {
            request: 0.0,
            limit: 1.0,
            memory: None,
            interactive: false,
        }
    }
}

impl Share {
    /// Checks the ranges; `what` names the entry in the message.
    pub fn check(&self, what: &str) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.request) {
            return Err(format!("{what}: request {} is outside 0..1", self.request));
        }
        if !(self.limit > 0.0 && self.limit <= 1.0) {
            return Err(format!("{what}: limit {} is outside (0, 1]", self.limit));
        }
        if self.request > self.limit {
            return Err(format!(
                "{what}: request {} is above its limit {}",
                self.request, self.limit
            ));
        }
        Ok(())
    }
}

/// MPS settings the hook applies to a client's CUDA context.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MpsShare {
    /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, 1..=100.
    pub thread_percentage: Option<u32>,
    /// `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` in bytes.
    pub pinned_mem_limit: Option<u64>,
    /// `CUDA_MPS_CLIENT_PRIORITY`: below-normal clients' work yields to normal clients' work.
    pub priority: MpsPriority,
}

/// Scheduling priority of an MPS client's work against other clients' work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MpsPriority {
    #[default]
    Normal,
    BelowNormal,
}

impl MpsPriority {
    /// The value of `CUDA_MPS_CLIENT_PRIORITY`.
    pub fn level(self) -> u32 {
        match self {
            MpsPriority::Normal => 0,
            MpsPriority::BelowNormal => 1,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MpsPriority::Normal => "normal",
            MpsPriority::BelowNormal => "below-normal",
        }
    }
}

/// How a client's device memory is served (see gpushare.toml(5), "Oversubscription").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryMode {
    /// Device allocations become managed (unified) memory, moved in and out at hand-overs.
    pub oversubscribe: bool,
    /// Bytes of the client's managed memory moved onto the GPU when it gets the token
    /// (`None`: all of it).
    pub resident: Option<u64>,
    /// PyTorch clients release their allocator's unused cached memory while others wait.
    pub release_cache: bool,
}

impl MemoryMode {
    /// A resident budget needs oversubscription and fits the client's memory `cap`; `what`
    /// names the client in the message.
    pub fn check(&self, what: &str, cap: Option<u64>) -> Result<(), String> {
        let Some(resident) = self.resident else {
            return Ok(());
        };
        if !self.oversubscribe {
            return Err(format!(
                "{what}: resident needs oversubscribe = true (it sizes the managed memory moved in)"
            ));
        }
        match cap {
            Some(cap) if resident > cap => Err(format!(
                "{what}: resident ({resident} bytes) is above the client's memory cap ({cap} bytes)"
            )),
            _ => Ok(()),
        }
    }
}

/// Who may attach as a named client.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Access {
    pub users: Vec<String>,
    pub groups: Vec<String>,
    /// Processes in a systemd unit matching one of these (`docker-*.scope`) may attach, whoever
    /// runs them, and get this client when they name none (see `crate::cgroup_place`).
    pub units: Vec<glob::Pattern>,
    /// The same for processes under a slice matching one of these (`user-1000.slice`).
    pub slices: Vec<glob::Pattern>,
}

/// Checks the `units` or `slices` patterns of a client (`key` names them in the message): each a
/// glob of one cgroup name (no '/') ending in `suffix` (or in '*').
fn unit_patterns(
    key: &str,
    patterns: &[String],
    suffixes: &[&str],
) -> Result<Vec<glob::Pattern>, String> {
    patterns
        .iter()
        .map(|p| {
            if p.is_empty() || p.contains('/') {
                return Err(format!(
                    "{key}: {p:?} must be the name of one systemd unit or a glob of it, without '/'"
                ));
            }
            if !suffixes.iter().any(|s| p.ends_with(s)) && !p.ends_with('*') {
                return Err(format!(
                    "{key}: {p:?} must end in {} (or '*')",
                    suffixes.join(" or ")
                ));
            }
            glob::Pattern::new(p).map_err(|e| format!("{key}: {p:?} is not a glob pattern: {e}"))
        })
        .collect()
}

/// A named client from the config or from a D-Bus registration.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientSpec {
    pub name: String,
    pub share: Share,
    pub mps: MpsShare,
    pub memory_mode: MemoryMode,
    pub access: Access,
}

#[cfg(test)]
impl ClientSpec {
    /// A client with `request`, no limit, cap or other setting (for tests).
    pub fn plain(name: &str, request: f64) -> ClientSpec {
        ClientSpec {
            name: name.into(),
            share: Share {
                request,
                limit: 1.0,
                memory: None,
                interactive: false,
            },
            mps: MpsShare::default(),
            memory_mode: MemoryMode::default(),
            access: Access::default(),
        }
    }
}

/// Default of `daemon.max_processes_per_user`: bounds what one user's processes can make the
/// daemon hold, far above what a lab user runs.
pub const DEFAULT_MAX_PROCESSES_PER_USER: usize = 1024;

#[derive(Debug, Clone, PartialEq)]
pub struct DaemonConfig {
    pub socket_dir: PathBuf,
    /// Length of a lease of the token.
    pub quantum: Duration,
    /// How long past its lease a holder may take to release (its queued work draining) before
    /// the token is taken back.
    pub lease_grace: Duration,
    /// How long a new connection has to say hello.
    pub client_timeout: Duration,
    /// Most processes of one Unix user attached at once; the next one is refused.
    pub max_processes_per_user: usize,
    /// How much work a lease holder may keep queued on the GPU past its lease's end: the hook
    /// holds its launches back beyond that, so that hand-overs are prompt.
    pub queue_ahead: Duration,
    /// How long a client's unused request is kept as burst credit (zero: none).
    pub burst_window: Duration,
    /// How many leases may run at once; [`ALL_LEASES`] for no bound.
    pub concurrent_leases: usize,
    /// Leases overlap only while the GPU has room, judged by the processes' measured demand
    /// (without MPS when `concurrent_leases` is not set).
    pub overlap_by_demand: bool,
    pub admin_groups: Vec<String>,
    /// Where usage accounting is kept (read at start).
    pub state_dir: StateDir,
    /// Decayed fair share: past GPU time, halving every this long, lowers the weight of a
    /// client's request; `None`: off.
    pub fairshare_half_life: Option<Duration>,
}

/// The Prometheus endpoint.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsConfig {
    /// Address and port to serve `/metrics` on; `None`: off.
    pub listen: Option<std::net::SocketAddr>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GpuConfig {
    pub nvml: bool,
    pub nvml_library: Option<PathBuf>,
    pub set_compute_mode: bool,
    pub devices: Vec<u32>,
    pub mps: bool,
    pub mps_control: PathBuf,
    pub mps_pipe_dir: PathBuf,
    pub mps_log_dir: PathBuf,
    pub unattached: UnattachedPolicy,
    /// What to do about an attached process that uses more device memory than it reserved (plus
    /// `context_allowance`), or keeps the GPU busy while it holds no lease.
    pub violations: ViolationPolicy,
    /// Device memory allowed per context beyond the reservations; `None`: memory is not checked.
    pub context_allowance: Option<u64>,
    pub scan_interval: Duration,
    /// Most managed memory all oversubscribing clients together may hold, in bytes; `None`:
    /// three quarters of the host memory available when the daemon starts.
    pub managed_memory: Option<u64>,
}

/// The checked configuration the daemon runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub daemon: DaemonConfig,
    pub gpu: GpuConfig,
    pub defaults: Share,
    pub user_defaults: BTreeMap<String, Share>,
    pub group_defaults: BTreeMap<String, Share>,
    pub clients: BTreeMap<String, ClientSpec>,
    pub metrics: MetricsConfig,
    /// Settings the file gives that have no effect with the rest of it, each in a sentence (the
    /// daemon logs them when it starts).
    pub notes: Vec<String>,
}

// ---- the file as written ----

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    daemon: FileDaemon,
    #[serde(default)]
    gpu: FileGpu,
    #[serde(default)]
    defaults: FileDefaults,
    #[serde(default)]
    clients: BTreeMap<String, FileClient>,
    #[serde(default)]
    metrics: FileMetrics,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileMetrics {
    listen: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileDaemon {
    socket_dir: Option<PathBuf>,
    quantum: Option<String>,
    lease_grace: Option<String>,
    client_timeout: Option<String>,
    max_processes_per_user: Option<i64>,
    queue_ahead: Option<String>,
    burst_window: Option<String>,
    concurrent_leases: Option<LeaseCount>,
    #[serde(default)]
    admin_groups: Vec<String>,
    state_dir: Option<PathBuf>,
    fairshare_half_life: Option<String>,
}

/// `concurrent_leases`: a number, or "all".
#[derive(Deserialize)]
#[serde(untagged)]
enum LeaseCount {
    Number(i64),
    Word(String),
}

/// `concurrent_leases = "all"`: every process that asks holds a lease.
pub const ALL_LEASES: usize = usize::MAX;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileGpu {
    nvml: Option<bool>,
    nvml_library: Option<PathBuf>,
    set_compute_mode: Option<bool>,
    #[serde(default)]
    devices: Vec<u32>,
    mps: Option<bool>,
    mps_control: Option<PathBuf>,
    mps_pipe_dir: Option<PathBuf>,
    mps_log_dir: Option<PathBuf>,
    unattached: Option<UnattachedPolicy>,
    violations: Option<ViolationPolicy>,
    context_allowance: Option<MemoryValue>,
    scan_interval: Option<String>,
    managed_memory: Option<MemoryValue>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct FileShare {
    request: Option<f64>,
    limit: Option<f64>,
    memory: Option<MemoryValue>,
    interactive: Option<bool>,
}

/// `memory` may be written as a string ("8GiB") or a plain number of bytes.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum MemoryValue {
    Bytes(u64),
    Text(String),
}

impl MemoryValue {
    fn bytes(&self, what: &str) -> Result<Option<u64>, String> {
        match self {
            MemoryValue::Bytes(0) => Ok(None),
            MemoryValue::Bytes(b) => Ok(Some(*b)),
            MemoryValue::Text(t) => parse_bytes(t).map_err(|e| format!("{what}: memory: {e}")),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileDefaults {
    #[serde(flatten)]
    share: FileShare,
    #[serde(default)]
    users: BTreeMap<String, FileShare>,
    #[serde(default)]
    groups: BTreeMap<String, FileShare>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileClient {
    #[serde(flatten)]
    share: FileShare,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    units: Vec<String>,
    #[serde(default)]
    slices: Vec<String>,
    mps_thread_percentage: Option<u32>,
    mps_pinned_mem_limit: Option<MemoryValue>,
    mps_priority: Option<MpsPriority>,
    oversubscribe: Option<bool>,
    resident: Option<MemoryValue>,
    release_cache: Option<bool>,
}

impl FileShare {
    fn resolve(&self, base: &Share, what: &str) -> Result<Share, String> {
        let share = Share {
            request: self.request.unwrap_or(base.request),
            limit: self.limit.unwrap_or(base.limit),
            memory: match &self.memory {
                Some(m) => m.bytes(what)?,
                None => base.memory,
            },
            interactive: self.interactive.unwrap_or(base.interactive),
        };
        share.check(what)?;
        Ok(share)
    }
}

fn duration(value: &Option<String>, default: Duration, what: &str) -> Result<Duration, String> {
    match value {
        None => Ok(default),
        Some(t) => {
            let d = parse_duration(t).map_err(|e| format!("{what}: {e}"))?;
            if d.is_zero() {
                return Err(format!("{what}: must be longer than zero"));
            }
            Ok(d)
        }
    }
}

/// A client or user name usable in D-Bus object paths and log lines.
pub fn check_client_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= crate::protocol::MAX_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "client name {name:?} must be 1-{} characters of letters, digits, '_', '-' or '.'",
            crate::protocol::MAX_NAME
        ))
    }
}

/// Fails when the requests of `clients` add up to more than the whole GPU.
pub fn check_request_sum<'a>(
    clients: impl IntoIterator<Item = (&'a str, f64)>,
) -> Result<(), String> {
    let all: Vec<(&str, f64)> = clients.into_iter().collect();
    let sum: f64 = all.iter().map(|(_, r)| r).sum();
    if sum > 1.0 + 1e-9 {
        let parts: Vec<String> = all
            .iter()
            .filter(|(_, r)| *r > 0.0)
            .map(|(n, r)| format!("{n}={r}"))
            .collect();
        return Err(format!(
            "the clients' requests add up to {sum:.3}, more than the whole GPU (1.0): {}; lower some requests",
            parts.join(", ")
        ));
    }
    Ok(())
}

impl Config {
    /// Parses and checks the text of a config file.
    pub fn parse(text: &str) -> Result<Config, String> {
        let file: FileConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        let d = &file.daemon;
        let daemon = DaemonConfig {
            socket_dir: d
                .socket_dir
                .clone()
                .unwrap_or_else(|| crate::protocol::DEFAULT_SOCKET_DIR.into()),
            quantum: duration(&d.quantum, Duration::from_millis(20), "daemon.quantum")?,
            lease_grace: match &d.lease_grace {
                Some(t) => parse_duration(t).map_err(|e| format!("daemon.lease_grace: {e}"))?,
                None => Duration::from_millis(50),
            },
            client_timeout: duration(
                &d.client_timeout,
                Duration::from_secs(2),
                "daemon.client_timeout",
            )?,
            max_processes_per_user: match d.max_processes_per_user {
                None => DEFAULT_MAX_PROCESSES_PER_USER,
                Some(n) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX),
                Some(_) => return Err("daemon.max_processes_per_user: must be at least 1".into()),
            },
            queue_ahead: duration(
                &d.queue_ahead,
                Duration::from_millis(2),
                "daemon.queue_ahead",
            )?,
            burst_window: match &d.burst_window {
                Some(t) => parse_duration(t).map_err(|e| format!("daemon.burst_window: {e}"))?,
                None => Duration::from_nanos(crate::scheduler::guarantee::WINDOW),
            },
            concurrent_leases: match &d.concurrent_leases {
                Some(LeaseCount::Number(n)) if *n >= 1 => usize::try_from(*n).unwrap_or(ALL_LEASES),
                Some(LeaseCount::Word(w)) if w == "all" => ALL_LEASES,
                Some(_) => {
                    return Err(
                        "daemon.concurrent_leases: must be a number of at least 1, or \"all\""
                            .into(),
                    )
                }
                // Under MPS the kernels of all processes run together, as with plain MPS;
                // without it, leases overlap only while the GPU has room (see the scheduler).
                None => ALL_LEASES,
            },
            overlap_by_demand: d.concurrent_leases.is_none() && file.gpu.mps != Some(true),
            admin_groups: d.admin_groups.clone(),
            state_dir: match &d.state_dir {
                None => StateDir::Default,
                Some(p) if p.as_os_str().is_empty() => StateDir::Off,
                Some(p) if p.is_absolute() => StateDir::Path(p.clone()),
                Some(p) => {
                    return Err(format!(
                    "daemon.state_dir: {:?} must be an absolute path (or \"\" for no accounting)",
                    p.display()
                ))
                }
            },
            fairshare_half_life: match &d.fairshare_half_life {
                None => None,
                half_life => Some(duration(
                    half_life,
                    Duration::ZERO,
                    "daemon.fairshare_half_life",
                )?),
            },
        };
        let g = &file.gpu;
        let mps_pipe_dir = g
            .mps_pipe_dir
            .clone()
            .unwrap_or_else(|| daemon.socket_dir.join("mps"));
        let gpu = GpuConfig {
            nvml: g.nvml.unwrap_or(true),
            nvml_library: g.nvml_library.clone().filter(|p| !p.as_os_str().is_empty()),
            set_compute_mode: g.set_compute_mode.unwrap_or(true),
            devices: g.devices.clone(),
            mps: g.mps.unwrap_or(false),
            mps_control: g
                .mps_control
                .clone()
                .unwrap_or_else(|| "nvidia-cuda-mps-control".into()),
            mps_pipe_dir,
            mps_log_dir: g
                .mps_log_dir
                .clone()
                .unwrap_or_else(|| "/var/log/gpushare/mps".into()),
            unattached: g.unattached.unwrap_or_default(),
            violations: g.violations.unwrap_or_default(),
            context_allowance: match &g.context_allowance {
                None => Some(DEFAULT_CONTEXT_ALLOWANCE),
                Some(MemoryValue::Bytes(b)) => Some(*b),
                Some(MemoryValue::Text(t)) => {
                    parse_bytes(t).map_err(|e| format!("gpu.context_allowance: {e}"))?
                }
            },
            scan_interval: duration(
                &g.scan_interval,
                Duration::from_secs(2),
                "gpu.scan_interval",
            )?,
            managed_memory: match &g.managed_memory {
                Some(MemoryValue::Text(t)) if t == "auto" => None,
                Some(m) => Some(
                    m.bytes("gpu.managed_memory")?
                        .ok_or("gpu.managed_memory: must be more than zero, or \"auto\"")?,
                ),
                None => None,
            },
        };
        let defaults = file.defaults.share.resolve(&Share::default(), "defaults")?;
        let mut user_defaults = BTreeMap::new();
        for (user, s) in &file.defaults.users {
            user_defaults.insert(
                user.clone(),
                s.resolve(&defaults, &format!("defaults.users.{user}"))?,
            );
        }
        let mut group_defaults = BTreeMap::new();
        for (group, s) in &file.defaults.groups {
            group_defaults.insert(
                group.clone(),
                s.resolve(&defaults, &format!("defaults.groups.{group}"))?,
            );
        }
        let mut clients = BTreeMap::new();
        for (name, c) in &file.clients {
            let what = format!("clients.{name}");
            check_client_name(name).map_err(|e| format!("{what}: {e}"))?;
            let share = c.share.resolve(&Share::default(), &what)?;
            if let Some(p) = c.mps_thread_percentage {
                if !(1..=100).contains(&p) {
                    return Err(format!(
                        "{what}: mps_thread_percentage {p} is outside 1..100"
                    ));
                }
            }
            let pinned = match &c.mps_pinned_mem_limit {
                Some(m) => m.bytes(&what)?,
                None => None,
            };
            let resident = match &c.resident {
                Some(m) => m.bytes(&format!("{what}.resident"))?,
                None => None,
            };
            let spec = ClientSpec {
                name: name.clone(),
                share,
                mps: MpsShare {
                    thread_percentage: c.mps_thread_percentage,
                    pinned_mem_limit: pinned,
                    priority: c.mps_priority.unwrap_or_default(),
                },
                memory_mode: MemoryMode {
                    oversubscribe: c.oversubscribe.unwrap_or(false),
                    resident,
                    release_cache: c.release_cache.unwrap_or(false),
                },
                access: Access {
                    users: c.users.clone(),
                    groups: c.groups.clone(),
                    units: unit_patterns(
                        &format!("{what}.units"),
                        &c.units,
                        &[".scope", ".service"],
                    )?,
                    slices: unit_patterns(&format!("{what}.slices"), &c.slices, &[".slice"])?,
                },
            };
            spec.memory_mode.check(&what, spec.share.memory)?;
            clients.insert(name.clone(), spec);
        }
        check_request_sum(clients.values().map(|c| (c.name.as_str(), c.share.request)))?;
        let metrics = MetricsConfig {
            listen: match file.metrics.listen.as_deref().map(str::trim) {
                None | Some("") => None,
                Some(text) => Some(text.parse().map_err(|_| {
                    format!(
                        "metrics.listen: {text:?} is not an IP address and port, such as \"127.0.0.1:9464\" or \"[::1]:9464\""
                    )
                })?),
            },
        };
        let mut notes = Vec::new();
        if g.set_compute_mode == Some(true) && gpu.nvml && !gpu.mps {
            notes.push(
                "gpu.set_compute_mode = true applies only with gpu.mps = true (without MPS, \
                 Exclusive_Process would let a single process use the GPU); compute modes are \
                 left as they are"
                    .to_string(),
            );
        }
        Ok(Config {
            daemon,
            gpu,
            defaults,
            user_defaults,
            group_defaults,
            clients,
            metrics,
            notes,
        })
    }

    /// Reads and checks a config file. A missing file gives the built-in defaults.
    pub fn load(path: &Path) -> Result<Config, String> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::parse(&text).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Config::parse(""),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// The share for a process that attached without naming a client: its user's defaults, else
    /// the first of its groups that has defaults, else the global defaults.
    pub fn defaults_for(&self, user: &str, groups: &[String]) -> Share {
        if let Some(s) = self.user_defaults.get(user) {
            return *s;
        }
        groups
            .iter()
            .find_map(|g| self.group_defaults.get(g))
            .copied()
            .unwrap_or(self.defaults)
    }

    pub fn socket_path(&self) -> PathBuf {
        self.daemon.socket_dir.join(crate::protocol::SOCKET_NAME)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
        [daemon]
        quantum = "10ms"
        admin_groups = ["gpuadmin"]
        [gpu]
        nvml = false
        mps = true
        unattached = "kill"
        [defaults]
        limit = 0.5
        memory = "4GiB"
        [defaults.users.alice]
        memory = "8GiB"
        [defaults.groups.students]
        limit = 0.25
        [clients.train]
        request = 0.5
        memory = "16GiB"
        users = ["alice", "1001"]
        groups = ["ml"]
        mps_thread_percentage = 50
        [clients.infer]
        request = 0.3
        limit = 0.6
        interactive = true
    "#;

    #[test]
    fn example_parses() {
        let c = Config::parse(EXAMPLE).unwrap();
        assert_eq!(c.daemon.quantum, Duration::from_millis(10));
        assert_eq!(c.daemon.client_timeout, Duration::from_secs(2));
        assert_eq!(
            c.daemon.max_processes_per_user,
            DEFAULT_MAX_PROCESSES_PER_USER
        );
        assert_eq!(c.daemon.lease_grace, Duration::from_millis(50));
        assert_eq!(
            c.daemon.concurrent_leases, ALL_LEASES,
            "the default under MPS"
        );
        assert!(!c.gpu.nvml && c.gpu.mps && c.gpu.set_compute_mode);
        assert_eq!(c.gpu.unattached, UnattachedPolicy::Kill);
        assert_eq!(c.gpu.violations, ViolationPolicy::Warn, "the default");
        assert_eq!(c.gpu.context_allowance, Some(DEFAULT_CONTEXT_ALLOWANCE));
        assert_eq!(c.gpu.mps_pipe_dir, PathBuf::from("/run/gpushare/mps"));
        assert_eq!(
            c.defaults,
            Share {
                request: 0.0,
                limit: 0.5,
                memory: Some(4 << 30),
                interactive: false,
            }
        );
        // user defaults inherit from the global defaults
        assert_eq!(
            c.defaults_for("alice", &[]),
            Share {
                request: 0.0,
                limit: 0.5,
                memory: Some(8 << 30),
                interactive: false,
            }
        );
        assert_eq!(
            c.defaults_for("bob", &["x".into(), "students".into()])
                .limit,
            0.25
        );
        assert_eq!(c.defaults_for("bob", &[]).limit, 0.5);
        let train = &c.clients["train"];
        assert_eq!(
            train.share,
            Share {
                request: 0.5,
                limit: 1.0,
                memory: Some(16 << 30),
                interactive: false,
            }
        );
        assert_eq!(train.access.users, vec!["alice", "1001"]);
        assert_eq!(train.mps.thread_percentage, Some(50));
        assert_eq!(c.clients["infer"].share.limit, 0.6);
        assert!(c.clients["infer"].share.interactive);
        assert!(!c.defaults_for("alice", &[]).interactive);
    }

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.defaults, Share::default());
        assert_eq!(c.daemon.quantum, Duration::from_millis(20));
        assert_eq!(
            c.socket_path(),
            PathBuf::from("/run/gpushare/gpushare.sock")
        );
        assert_eq!(
            c.daemon.concurrent_leases, ALL_LEASES,
            "gated by demand without MPS"
        );
        assert_eq!(c.daemon.queue_ahead, Duration::from_millis(2));
        assert_eq!(c.daemon.burst_window, Duration::from_secs(1));
        assert!(c.daemon.overlap_by_demand);
        let c = Config::parse("[daemon]\nburst_window = \"0s\"\n").unwrap();
        assert_eq!(c.daemon.burst_window, Duration::ZERO, "burst credit off");
        let e = Config::parse("[daemon]\nburst_window = \"soon\"\n").unwrap_err();
        assert!(e.contains("daemon.burst_window"), "{e}");
        let c = Config::parse("[daemon]\nconcurrent_leases = 3\n").unwrap();
        assert!(
            !c.daemon.overlap_by_demand,
            "an explicit count is taken as it is"
        );
        let c = Config::parse("[gpu]\nmps = true\n").unwrap();
        assert!(!c.daemon.overlap_by_demand, "MPS runs kernels together");
    }

    #[test]
    fn concurrent_leases_number_all_and_the_mps_default() {
        let leases = |text: &str| Config::parse(text).unwrap().daemon.concurrent_leases;
        assert_eq!(leases("[gpu]\nmps = false\n"), ALL_LEASES);
        assert_eq!(leases("[daemon]\nconcurrent_leases = 1\n"), 1);
        assert_eq!(leases("[gpu]\nmps = true\n"), ALL_LEASES);
        assert_eq!(
            leases("[daemon]\nconcurrent_leases = 4\n[gpu]\nmps = true\n"),
            4
        );
        assert_eq!(
            leases("[daemon]\nconcurrent_leases = 1\n[gpu]\nmps = true\n"),
            1
        );
        assert_eq!(
            leases("[daemon]\nconcurrent_leases = \"all\"\n"),
            ALL_LEASES
        );
    }

    #[test]
    fn request_sum_over_one_is_refused_with_names() {
        let e =
            Config::parse("[clients.a]\nrequest = 0.6\n[clients.b]\nrequest = 0.5\n").unwrap_err();
        assert!(e.contains("add up to 1.100"), "{e}");
        assert!(e.contains("a=0.6") && e.contains("b=0.5"), "{e}");
    }

    #[test]
    fn memory_modes_and_mps_priority() {
        let c = Config::parse(
            r#"
[gpu]
managed_memory = "64GiB"
[clients.big]
memory = "24GiB"
oversubscribe = true
resident = "8GiB"
release_cache = true
mps_priority = "below-normal"
[clients.plain]
"#,
        )
        .unwrap();
        assert_eq!(c.gpu.managed_memory, Some(64 << 30));
        let big = &c.clients["big"];
        assert_eq!(
            big.memory_mode,
            MemoryMode {
                oversubscribe: true,
                resident: Some(8 << 30),
                release_cache: true
            }
        );
        assert_eq!(big.mps.priority, MpsPriority::BelowNormal);
        assert_eq!(big.mps.priority.level(), 1);
        assert_eq!(c.clients["plain"].memory_mode, MemoryMode::default());
        assert_eq!(c.clients["plain"].mps.priority, MpsPriority::Normal);
        let auto = Config::parse("[gpu]\nmanaged_memory = \"auto\"\n").unwrap();
        assert_eq!(auto.gpu.managed_memory, None);
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            ("[clients.a]\nrequest = 1.5\n", "clients.a: request 1.5"),
            ("[clients.a]\nlimit = 0\n", "clients.a: limit 0"),
            (
                "[clients.a]\nrequest = 0.5\nlimit = 0.4\n",
                "above its limit",
            ),
            ("[clients.a]\nmemory = \"lots\"\n", "clients.a: memory"),
            ("[clients.\"a b\"]\n", "client name"),
            ("[daemon]\nquantum = \"20\"\n", "daemon.quantum"),
            ("[daemon]\nquantum = \"0ms\"\n", "longer than zero"),
            ("[daemon]\nconcurrent_leases = 0\n", "at least 1"),
            ("[daemon]\nconcurrent_leases = \"some\"\n", "or \"all\""),
            (
                "[daemon]\nmax_processes_per_user = 0\n",
                "daemon.max_processes_per_user: must be at least 1",
            ),
            (
                "[clients.a]\nmps_thread_percentage = 0\n",
                "mps_thread_percentage",
            ),
            ("[gpu]\nunattached = \"shrug\"\n", "unknown variant"),
            ("[gpu]\nviolations = \"shrug\"\n", "unknown variant"),
            (
                "[gpu]\ncontext_allowance = \"lots\"\n",
                "gpu.context_allowance",
            ),
            ("[clients.a]\nmps_priority = \"high\"\n", "unknown variant"),
            ("[clients.a]\nresident = \"1GiB\"\n", "needs oversubscribe"),
            (
                "[clients.a]\nmemory = \"1GiB\"\noversubscribe = true\nresident = \"2GiB\"\n",
                "above the client's memory cap",
            ),
            ("[gpu]\nmanaged_memory = 0\n", "gpu.managed_memory"),
            ("[metrics]\nlisten = \"localhost\"\n", "metrics.listen"),
            ("[metrics]\nlisten = \"1.2.3.4:99999\"\n", "metrics.listen"),
            ("[metrics]\nport = 9464\n", "unknown field"),
            ("[daemon]\nstate_dir = \"var/lib\"\n", "daemon.state_dir"),
            ("[daemon]\nsokcet_dir = \"/x\"\n", "unknown field"),
            ("[clients.a\n", "expected"),
        ];
        for (text, want) in cases {
            let e = Config::parse(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn units_and_slices_are_globs_of_one_unit_name() {
        let c = Config::parse(
            "[clients.containers]\nunits = [\"docker-*.scope\", \"libpod-*\"]\n\
             [clients.lab]\nslices = [\"user-1000.slice\"]\nusers = [\"bob\"]\n",
        )
        .unwrap();
        let units = &c.clients["containers"].access.units;
        assert_eq!(units.len(), 2);
        assert!(units[0].matches("docker-4f1e.scope") && !units[0].matches("docker-4f1e.service"));
        assert!(units[1].matches("libpod-conmon-1.scope"));
        assert!(c.clients["containers"].access.slices.is_empty());
        assert!(c.clients["lab"].access.slices[0].matches("user-1000.slice"));
        assert_eq!(c.clients["lab"].access.users, vec!["bob"]);
        let cases = [
            (
                "units = [\"docker-*.slice\"]",
                "clients.a.units: \"docker-*.slice\" must end in .scope or .service",
            ),
            ("units = [\"system.slice/docker.service\"]", "without '/'"),
            ("units = [\"\"]", "clients.a.units"),
            (
                "slices = [\"user-1000.scope\"]",
                "clients.a.slices: \"user-1000.scope\" must end in .slice",
            ),
            ("slices = [\"user-[.slice\"]", "is not a glob pattern"),
            ("slices = \"user.slice\"", "invalid type"),
        ];
        for (line, want) in cases {
            let e = Config::parse(&format!("[clients.a]\n{line}\n")).unwrap_err();
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn violation_policy_and_context_allowance() {
        let c = Config::parse(
            "[gpu]\nunattached = \"kill\"\nviolations = \"allow\"\ncontext_allowance = \"1.5GiB\"\n",
        )
        .unwrap();
        assert_eq!(c.gpu.unattached, UnattachedPolicy::Kill);
        assert_eq!(c.gpu.violations, ViolationPolicy::Allow);
        assert_eq!(c.gpu.context_allowance, Some(3 << 29));
        let c = Config::parse("[gpu]\ncontext_allowance = 0\n").unwrap();
        assert_eq!(
            c.gpu.context_allowance,
            Some(0),
            "0 is no allowance, not unlimited"
        );
        let c = Config::parse("[gpu]\ncontext_allowance = \"unlimited\"\n").unwrap();
        assert_eq!(c.gpu.context_allowance, None);
    }

    #[test]
    fn the_shipped_example_parses_with_the_defaults_it_spells_out() {
        let c = Config::parse(include_str!("../dist/gpushare.toml")).unwrap();
        let defaults = Config::parse("").unwrap();
        assert_eq!(c.gpu.unattached, defaults.gpu.unattached);
        assert_eq!(c.gpu.violations, defaults.gpu.violations);
        assert_eq!(c.gpu.context_allowance, defaults.gpu.context_allowance);
        assert_eq!(c.gpu.scan_interval, defaults.gpu.scan_interval);
    }

    #[test]
    fn the_shipped_example_has_no_setting_that_does_not_apply() {
        let c = Config::parse(include_str!("../dist/gpushare.toml")).unwrap();
        assert_eq!(c.notes, Vec::<String>::new());
        assert_eq!(c.daemon.state_dir, StateDir::Default);
    }

    #[test]
    fn a_compute_mode_asked_for_without_mps_is_noted() {
        // the default (true) applies only with MPS: nothing to say
        assert!(Config::parse("").unwrap().notes.is_empty());
        assert!(
            Config::parse("[gpu]\nmps = true\nset_compute_mode = true\n")
                .unwrap()
                .notes
                .is_empty()
        );
        assert!(Config::parse("[gpu]\nset_compute_mode = false\n")
            .unwrap()
            .notes
            .is_empty());
        let c = Config::parse("[gpu]\nset_compute_mode = true\n").unwrap();
        assert_eq!(c.notes.len(), 1, "{:?}", c.notes);
        assert!(c.notes[0].contains("gpu.set_compute_mode"), "{:?}", c.notes);
    }

    #[test]
    fn metrics_are_off_unless_asked_and_the_state_dir_has_a_default() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.metrics.listen, None);
        assert_eq!(c.daemon.state_dir, StateDir::Default);
        let c =
            Config::parse("[daemon]\nstate_dir = \"\"\n[metrics]\nlisten = \"127.0.0.1:9464\"\n")
                .unwrap();
        assert_eq!(c.metrics.listen, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(c.daemon.state_dir, StateDir::Off);
        let c = Config::parse("[daemon]\nstate_dir = \"/srv/gpushare\"\n").unwrap();
        assert_eq!(c.daemon.state_dir, StateDir::Path("/srv/gpushare".into()));
        let c = Config::parse("[metrics]\nlisten = \"[::1]:9464\"\n").unwrap();
        assert_eq!(c.metrics.listen.unwrap().port(), 9464);
    }

    #[test]
    fn fair_share_is_off_unless_a_half_life_is_given() {
        assert_eq!(Config::parse("").unwrap().daemon.fairshare_half_life, None);
        let c = Config::parse("[daemon]\nfairshare_half_life = \"7d\"\n").unwrap();
        assert_eq!(
            c.daemon.fairshare_half_life,
            Some(Duration::from_secs(7 * 86_400))
        );
        let e = Config::parse("[daemon]\nfairshare_half_life = \"0s\"\n").unwrap_err();
        assert!(e.contains("daemon.fairshare_half_life"), "{e}");
        let e = Config::parse("[daemon]\nfairshare_half_life = \"a week\"\n").unwrap_err();
        assert!(e.contains("daemon.fairshare_half_life"), "{e}");
    }

    #[test]
    fn missing_file_is_defaults_but_unreadable_is_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Config::load(&dir.path().join("none.toml")).is_ok());
        let e = Config::load(dir.path()).unwrap_err();
        assert!(e.contains(&dir.path().display().to_string()));
    }
}
