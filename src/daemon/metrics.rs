//! The Prometheus endpoint (`[metrics] listen`): usage per client and user, shares, memory and
//! the daemon's own health, in the OpenMetrics text format of `prometheus-client`; and per GPU,
//! with the labels NVIDIA's dcgm-exporter gives its series (`gpu`, the NVML index; `UUID`;
//! `Hostname`), so that the two join on one host: how leases run, holders, waiting and flagged
//! processes, and each client's GPU time, waits and memory there.
//!
//! Every scrape samples the state afresh ([`Accounting::read`]). The endpoint follows the
//! config: a reload that changes `metrics.listen` moves it, and one whose address cannot be bound
//! leaves the running endpoint as it is, with an error in the log.

mod http;

use super::accounting::Accounting;
use super::state::{ClientReport, Event, GpuLeases, State};
use super::usage::{ClientUser, Totals, UsageSnapshot};
use crate::api;
use crate::gpu::{DeviceInfo, FlaggedProcess, MpsStatus};
use crate::protocol::DeviceId;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio::sync::broadcast;

/// What the MPS supervisor reports.
pub type MpsReader = Arc<dyn Fn() -> MpsStatus + Send + Sync>;

/// What NVML shows of the managed GPUs (blocking).
pub type DeviceReader = Arc<dyn Fn() -> Vec<DeviceInfo> + Send + Sync>;

/// The processes the GPU scan flagged.
pub type FlaggedReader = Arc<dyn Fn() -> Vec<FlaggedProcess> + Send + Sync>;

/// Where a scrape reads the daemon.
#[derive(Clone)]
pub struct Sources {
    pub state: Arc<Mutex<State>>,
    pub accounting: Arc<Accounting>,
    pub mps: MpsReader,
    pub devices: DeviceReader,
    pub flagged: FlaggedReader,
}

/// How leases run on a GPU: the words of [`api::Device::leases`], each a series of
/// `gpushare_gpu_lease_mode`, 1 for the mode of now.
const LEASE_MODES: [&str; 5] = [
    api::Device::MPS,
    api::Device::ONE_AT_A_TIME,
    api::Device::CONCURRENT,
    api::Device::TOGETHER,
    api::Device::TURNS,
];

/// The kinds of flagged processes, each a series of `gpushare_gpu_flagged_processes`.
const FLAGGED_KINDS: [&str; 3] = ["unattached", "memory", "activity"];

/// A client's figures on one GPU.
#[derive(Debug, Clone, Default, PartialEq)]
struct GpuClientFigures {
    client: String,
    /// Since the client was made.
    charged_ns: u64,
    waited_ns: u64,
    waiting: u32,
    /// What its processes reserved through the hook there.
    reserved: u64,
    /// What NVML counts for its attached processes there; `None` where NVML does not list the
    /// GPU.
    used: Option<u64>,
}

/// One GPU's figures.
#[derive(Debug, Clone, PartialEq)]
struct GpuFigures {
    /// NVML index; `None` for a GPU that NVML does not list (no NVML).
    index: Option<u32>,
    uuid: String,
    leases: &'static str,
    holders: usize,
    /// Flagged processes per kind.
    flagged: BTreeMap<&'static str, u64>,
    clients: Vec<GpuClientFigures>,
}

impl GpuFigures {
    /// The dcgm-exporter labels: `gpu` (empty where NVML does not list the GPU), `UUID`,
    /// `Hostname`.
    fn labels(&self, hostname: &str) -> [(&'static str, String); 3] {
        [
            ("gpu", self.index.map(|i| i.to_string()).unwrap_or_default()),
            ("UUID", self.uuid.clone()),
            ("Hostname", hostname.to_string()),
        ]
    }

    fn waiting(&self) -> u64 {
        self.clients.iter().map(|c| u64::from(c.waiting)).sum()
    }
}

/// NVML's text form of a UUID as the daemon writes it (lowercase, `GPU-`).
fn same_uuid(uuid: &str) -> String {
    DeviceId::parse(uuid).map_or_else(|| uuid.to_string(), |d| d.to_string())
}

/// The figures of each GPU: those NVML lists (`devices`) and those requests named, from the
/// clients' reports and how leases run (`leases`), the processes NVML shows on each GPU and the
/// flagged ones.
fn gpu_figures(
    devices: &[DeviceInfo],
    leases: Vec<GpuLeases>,
    reports: &[ClientReport],
    flagged: &[FlaggedProcess],
) -> Vec<GpuFigures> {
    leases
        .into_iter()
        .map(|l| {
            let uuid = same_uuid(&l.device);
            let nvml = devices.iter().find(|d| same_uuid(&d.uuid) == uuid);
            let mut clients: Vec<GpuClientFigures> = Vec::new();
            for r in reports {
                let here = r.devices.iter().find(|d| same_uuid(&d.device) == uuid);
                // what NVML counts for the client's attached processes on this GPU
                let used = nvml.map(|n| {
                    n.processes
                        .iter()
                        .filter(|p| r.pids.contains(&p.pid))
                        .map(|p| p.used_memory.unwrap_or(0))
                        .fold(0u64, u64::saturating_add)
                });
                let on_gpu =
                    nvml.is_some_and(|n| n.processes.iter().any(|p| r.pids.contains(&p.pid)));
                if here.is_none() && !on_gpu {
                    continue;
                }
                clients.push(GpuClientFigures {
                    client: r.name.clone(),
                    charged_ns: here.map_or(0, |d| d.charged_ns),
                    waited_ns: here.map_or(0, |d| d.waited_ns),
                    waiting: here.map_or(0, |d| d.waiting),
                    reserved: here.map_or(0, |d| d.memory_used),
                    used,
                });
            }
            let index = nvml.map(|n| n.index);
            let mut by_kind: BTreeMap<&'static str, u64> =
                FLAGGED_KINDS.iter().map(|k| (*k, 0)).collect();
            for f in flagged.iter().filter(|f| index == Some(f.device)) {
                *by_kind.entry(f.kind).or_default() += 1;
            }
            GpuFigures {
                index,
                uuid,
                leases: l.leases,
                holders: l.holders,
                flagged: by_kind,
                clients,
            }
        })
        .collect()
}

/// The host's name, as dcgm-exporter gives it in `Hostname`.
fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default()
}

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Everything one scrape reports.
#[derive(Debug)]
struct Figures {
    totals: BTreeMap<ClientUser, Totals>,
    snap: UsageSnapshot,
    mps: MpsStatus,
    write_failures: u64,
    gpus: Vec<GpuFigures>,
    hostname: String,
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// One metric family: its descriptor, then a sample per label set.
fn family<M: EncodeMetric, L: prometheus_client::encoding::EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    samples: impl IntoIterator<Item = (L, M)>,
) -> Result<(), std::fmt::Error> {
    let mut samples = samples.into_iter().peekable();
    let Some((_, first)) = samples.peek() else {
        return Ok(());
    };
    let mut metric = encoder.encode_descriptor(name, help, unit, first.metric_type())?;
    for (labels, m) in samples {
        m.encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

fn single<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    m: M,
) -> Result<(), std::fmt::Error> {
    let metric = encoder.encode_descriptor(name, help, unit, m.metric_type())?;
    m.encode(metric)
}

impl Collector for Figures {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let cu = |(client, user): &ClientUser| [("client", client.clone()), ("user", user.clone())];
        let t = &self.totals;
        family(
            &mut e,
            "gpushare_client_gpu",
            "GPU time charged to the client's processes of the user",
            Some(&Unit::Seconds),
            t.iter()
                .map(|(k, v)| (cu(k), ConstCounter::new(seconds(v.gpu_ns)))),
        )?;
        family(
            &mut e,
            "gpushare_client_leases",
            "Leases of the GPU token granted to the client's processes of the user",
            None,
            t.iter().map(|(k, v)| (cu(k), ConstCounter::new(v.leases))),
        )?;
        family(
            &mut e,
            "gpushare_client_wait",
            "Time the client's processes of the user waited for a lease",
            Some(&Unit::Seconds),
            t.iter()
                .map(|(k, v)| (cu(k), ConstCounter::new(seconds(v.wait_ns)))),
        )?;
        family(
            &mut e,
            "gpushare_client_memory",
            "Device memory held over time by the client's processes of the user (sampled every second)",
            Some(&Unit::Other("byte_seconds".into())),
            t.iter()
                .map(|(k, v)| (cu(k), ConstCounter::new(v.memory_byte_seconds))),
        )?;
        // gauges per client and user, from the processes attached now
        let mut live: BTreeMap<ClientUser, (u64, u64)> =
            t.keys().map(|k| (k.clone(), (0, 0))).collect();
        for s in &self.snap.sessions {
            let e = live.entry((s.client.clone(), s.user.clone())).or_default();
            e.0 += 1;
            e.1 += s.reserved;
        }
        family(
            &mut e,
            "gpushare_client_processes",
            "Processes of the user attached as the client",
            None,
            live.iter().map(|(k, v)| (cu(k), ConstGauge::new(v.0))),
        )?;
        family(
            &mut e,
            "gpushare_client_memory_used",
            "Device memory held by the client's processes of the user, on all GPUs together",
            Some(&Unit::Bytes),
            live.iter().map(|(k, v)| (cu(k), ConstGauge::new(v.1))),
        )?;
        let clients = &self.snap.clients;
        let c = |name: &String| [("client", name.clone())];
        family(
            &mut e,
            "gpushare_client_memory_cap",
            "Device memory cap of the client on each GPU (clients without a cap are left out)",
            Some(&Unit::Bytes),
            clients
                .iter()
                .filter_map(|x| Some((c(&x.name), ConstGauge::new(x.memory_cap?)))),
        )?;
        family(
            &mut e,
            "gpushare_client_request",
            "Guaranteed share of GPU time of the client",
            Some(&Unit::Other("ratio".into())),
            clients
                .iter()
                .map(|x| (c(&x.name), ConstGauge::new(x.request))),
        )?;
        family(
            &mut e,
            "gpushare_client_fair_share",
            "Decayed fair-share factor of the client: its weight is its request times this (1 while fair share is off)",
            Some(&Unit::Other("ratio".into())),
            clients
                .iter()
                .map(|x| (c(&x.name), ConstGauge::new(x.fair_share))),
        )?;
        family(
            &mut e,
            "gpushare_client_limit",
            "Largest share of GPU time of the client",
            Some(&Unit::Other("ratio".into())),
            clients
                .iter()
                .map(|x| (c(&x.name), ConstGauge::new(x.limit))),
        )?;
        self.encode_gpus(&mut e)?;
        single(
            &mut e,
            "gpushare_attached_processes",
            "Processes attached through the hook",
            None,
            ConstGauge::new(self.snap.sessions.len() as u64),
        )?;
        single(
            &mut e,
            "gpushare_config_reload_failures",
            "Config reloads refused (the running config stayed)",
            None,
            ConstCounter::new(self.snap.reload_failures),
        )?;
        single(
            &mut e,
            "gpushare_config_last_reload_successful",
            "1 when the running config is the file's, 0 when the last reload was refused",
            None,
            ConstGauge::new(u64::from(!self.snap.config_error)),
        )?;
        single(
            &mut e,
            "gpushare_mps_restarts",
            "Restarts of the MPS control daemon",
            None,
            ConstCounter::new(u64::from(self.mps.restarts)),
        )?;
        single(
            &mut e,
            "gpushare_mps_running",
            "1 while the MPS control daemon runs",
            None,
            ConstGauge::new(u64::from(self.mps.running)),
        )?;
        single(
            &mut e,
            "gpushare_accounting_write_failures",
            "Writes of usage to the state directory that failed",
            None,
            ConstCounter::new(self.write_failures),
        )?;
        single(
            &mut e,
            "gpushare_build",
            "The daemon's version",
            None,
            Info::new([("version", env!("CARGO_PKG_VERSION"))]),
        )
    }
}

impl Figures {
    /// The per-GPU families.
    fn encode_gpus(&self, e: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let host = self.hostname.as_str();
        let gpu = |g: &GpuFigures| g.labels(host);
        let with = |g: &GpuFigures, key: &'static str, value: String| {
            let [a, b, c] = g.labels(host);
            [a, b, c, (key, value)]
        };
        let per_client = || {
            self.gpus
                .iter()
                .flat_map(move |g| g.clients.iter().map(move |c| (g, c)))
        };
        family(
            e,
            "gpushare_gpu_lease_mode",
            "How leases run on the GPU: 1 for the mode of now (mps, one-at-a-time, concurrent, together, turns), 0 for the others",
            None,
            self.gpus.iter().flat_map(|g| {
                LEASE_MODES.iter().map(move |m| {
                    (
                        with(g, "mode", m.to_string()),
                        ConstGauge::new(u64::from(g.leases == *m)),
                    )
                })
            }),
        )?;
        family(
            e,
            "gpushare_gpu_holders",
            "Leases running on the GPU",
            None,
            self.gpus
                .iter()
                .map(|g| (gpu(g), ConstGauge::new(g.holders as u64))),
        )?;
        family(
            e,
            "gpushare_gpu_waiting_processes",
            "Processes waiting for a lease on the GPU",
            None,
            self.gpus
                .iter()
                .map(|g| (gpu(g), ConstGauge::new(g.waiting()))),
        )?;
        family(
            e,
            "gpushare_gpu_flagged_processes",
            "Processes on the GPU that the scan flagged and that are still at it, by kind (unattached, memory, activity)",
            None,
            self.gpus.iter().flat_map(|g| {
                g.flagged
                    .iter()
                    .map(move |(k, n)| (with(g, "kind", k.to_string()), ConstGauge::new(*n)))
            }),
        )?;
        family(
            e,
            "gpushare_gpu_client_gpu",
            "GPU time charged to the client on the GPU, since the client was made",
            Some(&Unit::Seconds),
            per_client().map(|(g, c)| {
                (
                    with(g, "client", c.client.clone()),
                    ConstCounter::new(seconds(c.charged_ns)),
                )
            }),
        )?;
        family(
            e,
            "gpushare_gpu_client_wait",
            "Time the client's processes waited for a lease on the GPU, since the client was made",
            Some(&Unit::Seconds),
            per_client().map(|(g, c)| {
                (
                    with(g, "client", c.client.clone()),
                    ConstCounter::new(seconds(c.waited_ns)),
                )
            }),
        )?;
        family(
            e,
            "gpushare_gpu_client_waiting_processes",
            "The client's processes waiting for a lease on the GPU",
            None,
            per_client().map(|(g, c)| {
                (
                    with(g, "client", c.client.clone()),
                    ConstGauge::new(u64::from(c.waiting)),
                )
            }),
        )?;
        family(
            e,
            "gpushare_gpu_client_memory_reserved",
            "Device memory the client's processes reserved through the hook on the GPU (what its cap counts)",
            Some(&Unit::Bytes),
            per_client().map(|(g, c)| {
                (
                    with(g, "client", c.client.clone()),
                    ConstGauge::new(c.reserved),
                )
            }),
        )?;
        family(
            e,
            "gpushare_gpu_client_memory_used",
            "Device memory NVML counts for the client's attached processes on the GPU (GPUs NVML lists only)",
            Some(&Unit::Bytes),
            per_client().filter_map(|(g, c)| {
                Some((with(g, "client", c.client.clone()), ConstGauge::new(c.used?)))
            }),
        )
    }
}

/// The exposition text of a scrape (blocking: it reads NVML).
pub fn render(sources: &Sources) -> String {
    let accounting = &sources.accounting;
    let (totals, snap) = accounting.read(|t| (t.totals().clone(), t.latest().clone()));
    let devices = (sources.devices)();
    let flagged = (sources.flagged)();
    let (leases, reports) = {
        let st = sources.state.lock().unwrap_or_else(|p| p.into_inner());
        let uuids: Vec<String> = devices.iter().map(|d| d.uuid.clone()).collect();
        (st.gpu_leases(&uuids), st.reports())
    };
    let figures = Figures {
        totals,
        snap,
        mps: (sources.mps)(),
        write_failures: accounting.write_failures(),
        gpus: gpu_figures(&devices, leases, &reports, &flagged),
        hostname: hostname(),
    };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(figures));
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &registry) {
        tracing::error!("cannot encode the metrics: {e}");
        text = "# EOF\n".into();
    }
    text
}

/// Serves the endpoint while `metrics.listen` asks for one, following config reloads.
pub async fn run(sources: Sources, mut events: broadcast::Receiver<Event>) {
    let want = || {
        sources
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .config
            .metrics
            .listen
    };
    let mut serving: Option<(SocketAddr, tokio::task::JoinHandle<()>)> = None;
    loop {
        let target = want();
        if target != serving.as_ref().map(|(a, _)| *a) {
            match target {
                None => {
                    if let Some((addr, task)) = serving.take() {
                        task.abort();
                        tracing::info!(%addr, "metrics endpoint off");
                    }
                }
                Some(addr) => match TcpListener::bind(addr).await {
                    Ok(listener) => {
                        if let Some((_, task)) = serving.take() {
                            task.abort();
                        }
                        tracing::info!(%addr, "serving metrics on http://{addr}/metrics");
                        let page = {
                            let sources = sources.clone();
                            http::Page {
                                content_type: CONTENT_TYPE,
                                body: Arc::new(move || render(&sources)),
                            }
                        };
                        serving = Some((addr, tokio::spawn(http::serve(listener, page))));
                    }
                    Err(e) => match &serving {
                        Some((old, _)) => tracing::error!(
                            "cannot serve metrics on {addr}: {e}; they stay on {old}"
                        ),
                        None => tracing::error!("cannot serve metrics on {addr}: {e}"),
                    },
                },
            }
        }
        // look again after each successful reload
        loop {
            match events.recv().await {
                Ok(Event::ConfigReloaded { ok: true, .. }) => break,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => break,
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}
