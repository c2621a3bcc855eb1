//! The Prometheus endpoint (`[metrics] listen`): usage per client and user, shares, memory and
//! the daemon's own health, in the OpenMetrics text format of `prometheus-client`.
//!
//! Every scrape samples the state afresh ([`Accounting::read`]). The endpoint follows the
//! config: a reload that changes `metrics.listen` moves it, and one whose address cannot be bound
//! leaves the running endpoint as it is, with an error in the log.

mod http;

use super::accounting::Accounting;
use super::state::{Event, State};
use super::usage::{ClientUser, Totals, UsageSnapshot};
use crate::gpu::MpsStatus;
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

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Everything one scrape reports.
#[derive(Debug)]
struct Figures {
    totals: BTreeMap<ClientUser, Totals>,
    snap: UsageSnapshot,
    mps: MpsStatus,
    write_failures: u64,
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

/// The exposition text of a scrape.
pub fn render(accounting: &Accounting, mps: &MpsReader) -> String {
    let (totals, snap) = accounting.read(|t| (t.totals().clone(), t.latest().clone()));
    let figures = Figures {
        totals,
        snap,
        mps: mps(),
        write_failures: accounting.write_failures(),
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
pub async fn run(
    state: Arc<Mutex<State>>,
    accounting: Arc<Accounting>,
    mps: MpsReader,
    mut events: broadcast::Receiver<Event>,
) {
    let want = || {
        state
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
                            let accounting = accounting.clone();
                            let mps = mps.clone();
                            http::Page {
                                content_type: CONTENT_TYPE,
                                body: Arc::new(move || render(&accounting, &mps)),
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
