//! One D-Bus object per client (`/org/gpushare1/client/NAME`, interface `org.gpushare1.Client`)
//! and per managed device (`/org/gpushare1/device/INDEX`, `org.gpushare1.Device`), in systemd's
//! style: read-only properties, `PropertiesChanged` when they change (at most once a second per
//! object), and `org.freedesktop.DBus.ObjectManager` on `/org/gpushare1`, which announces
//! objects as clients and devices come and go.
//!
//! The objects hold a snapshot of their properties, refreshed every second from the daemon's
//! state by [`run`]; a property read never takes the state's lock.

use super::dbus_api::OBJECT_PATH;
use super::state::{ClientReport, State};
use crate::gpu::{DeviceInfo, MpsStatus};
use crate::protocol::DeviceId;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zbus::object_server::Interface;
use zbus::zvariant::Value;

/// How often the objects are refreshed, and so the most often a property changes.
const REFRESH: Duration = Duration::from_secs(1);

/// The D-Bus path of client `name`: every byte other than an ASCII letter or digit becomes
/// `_` and two hex digits, as systemd escapes unit names (`user.bob` is `user_2ebob`).
pub fn client_path(name: &str) -> String {
    format!("{OBJECT_PATH}/client/{}", escape(name))
}

pub fn device_path(index: u32) -> String {
    format!("{OBJECT_PATH}/device/{index}")
}

fn escape(name: &str) -> String {
    if name.is_empty() {
        return "_".into();
    }
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    out
}

/// What a client object shows.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientProps {
    name: String,
    origin: String,
    request: f64,
    limit: f64,
    memory_cap: u64,
    memory_used: u64,
    share: f64,
    gpu_time_ns: u64,
    charged_ns: u64,
    grants: u64,
    holding: bool,
    waiting: u32,
    interactive: bool,
    fair_share: f64,
    processes: Vec<u32>,
    users: Vec<String>,
    groups: Vec<String>,
    /// Per GPU: UUID, memory used, share, holding, waiting.
    devices: Vec<(String, u64, f64, bool, u32)>,
    /// Per GPU, as `devices`: UUID, demand.
    demand: Vec<(String, f64)>,
}

impl From<&ClientReport> for ClientProps {
    fn from(r: &ClientReport) -> Self {
        ClientProps {
            name: r.name.clone(),
            origin: r.origin.to_string(),
            request: r.request,
            limit: r.limit,
            memory_cap: r.memory.unwrap_or(0),
            memory_used: r.memory_used,
            share: r.share_used,
            gpu_time_ns: r.gpu_time_ns,
            charged_ns: r.charged_ns,
            grants: r.grants,
            holding: r.holding,
            waiting: r.waiting,
            interactive: r.interactive,
            fair_share: r.fair_share,
            processes: r.pids.clone(),
            users: r.users.clone(),
            groups: r.groups.clone(),
            devices: r
                .devices
                .iter()
                .map(|d| {
                    (
                        d.device.clone(),
                        d.memory_used,
                        d.share_used,
                        d.holding,
                        d.waiting,
                    )
                })
                .collect(),
            demand: r
                .devices
                .iter()
                .map(|d| (d.device.clone(), d.demand))
                .collect(),
        }
    }
}

impl ClientProps {
    /// Every property by its D-Bus name, for `PropertiesChanged`.
    fn values(&self) -> Vec<(&'static str, Value<'static>)> {
        vec![
            ("Name", Value::from(self.name.clone())),
            ("Origin", Value::from(self.origin.clone())),
            ("Request", Value::from(self.request)),
            ("Limit", Value::from(self.limit)),
            ("MemoryCap", Value::from(self.memory_cap)),
            ("MemoryUsed", Value::from(self.memory_used)),
            ("Share", Value::from(self.share)),
            ("GpuTimeNs", Value::from(self.gpu_time_ns)),
            ("ChargedNs", Value::from(self.charged_ns)),
            ("Grants", Value::from(self.grants)),
            ("Holding", Value::from(self.holding)),
            ("Waiting", Value::from(self.waiting)),
            ("Interactive", Value::from(self.interactive)),
            ("FairShare", Value::from(self.fair_share)),
            ("Processes", Value::from(self.processes.clone())),
            ("Users", Value::from(self.users.clone())),
            ("Groups", Value::from(self.groups.clone())),
            ("Devices", Value::from(self.devices.clone())),
            ("Demand", Value::from(self.demand.clone())),
        ]
    }
}

pub struct ClientObject(ClientProps);

/// A client of the scheduler: its shares, memory and live usage.
#[zbus::interface(name = "org.gpushare1.Client")]
impl ClientObject {
    #[zbus(property)]
    fn name(&self) -> &str {
        &self.0.name
    }
    /// Where it comes from: config, registered (over D-Bus) or default (a user's).
    #[zbus(property)]
    fn origin(&self) -> &str {
        &self.0.origin
    }
    /// Guaranteed share of GPU time, 0..1.
    #[zbus(property)]
    fn request(&self) -> f64 {
        self.0.request
    }
    /// Most share of GPU time, 0..1.
    #[zbus(property)]
    fn limit(&self) -> f64 {
        self.0.limit
    }
    /// Device memory cap in bytes on each GPU, 0 for none.
    #[zbus(property)]
    fn memory_cap(&self) -> u64 {
        self.0.memory_cap
    }
    /// Device memory its processes hold on all GPUs together, in bytes.
    #[zbus(property)]
    fn memory_used(&self) -> u64 {
        self.0.memory_used
    }
    /// Share of GPU time its work took over the last ten seconds, added up over the GPUs (1.0
    /// is one GPU's time): its USED (gpushare-scheduler(7)).
    #[zbus(property)]
    fn share(&self) -> f64 {
        self.0.share
    }
    /// GPU time its work took, as in Share, in nanoseconds.
    #[zbus(property)]
    fn gpu_time_ns(&self) -> u64 {
        self.0.gpu_time_ns
    }
    /// GPU time charged to it, in nanoseconds.
    #[zbus(property)]
    fn charged_ns(&self) -> u64 {
        self.0.charged_ns
    }
    /// Leases granted to it.
    #[zbus(property)]
    fn grants(&self) -> u64 {
        self.0.grants
    }
    /// Whether one of its processes holds a lease on some GPU now.
    #[zbus(property)]
    fn holding(&self) -> bool {
        self.0.holding
    }
    /// How many of its processes wait for a lease, counted once per GPU they wait for.
    #[zbus(property)]
    fn waiting(&self) -> u32 {
        self.0.waiting
    }
    #[zbus(property)]
    fn interactive(&self) -> bool {
        self.0.interactive
    }
    /// Its decayed fair-share factor: its weight is its request times this (1 while fair share
    /// is off).
    #[zbus(property)]
    fn fair_share(&self) -> f64 {
        self.0.fair_share
    }
    /// The pids of its attached processes.
    #[zbus(property)]
    fn processes(&self) -> Vec<u32> {
        self.0.processes.clone()
    }
    #[zbus(property)]
    fn users(&self) -> Vec<String> {
        self.0.users.clone()
    }
    #[zbus(property)]
    fn groups(&self) -> Vec<String> {
        self.0.groups.clone()
    }
    /// Its figures on each GPU it uses or used: the GPU's UUID, the device memory its processes
    /// hold there (bytes), its share of that GPU's time over the last ten seconds, whether one
    /// of its processes holds a lease there and how many wait for one.
    #[zbus(property)]
    fn devices(&self) -> Vec<(String, u64, f64, bool, u32)> {
        self.0.devices.clone()
    }
    /// The scheduler's demand estimate on each GPU of Devices, in the same order: the GPU's UUID
    /// and the estimates of its processes that hold or wait for a lease there, added up (the
    /// fraction of the GPU their work keeps busy; 1.0 is the whole GPU). 0 where none does, and
    /// where leases do not overlap by demand (under MPS, or with concurrent_leases set).
    #[zbus(property)]
    fn demand(&self) -> Vec<(String, f64)> {
        self.0.demand.clone()
    }
}

/// What a device object shows.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceProps {
    index: u32,
    name: String,
    uuid: String,
    compute_mode: String,
    memory_total: u64,
    memory_used: u64,
    utilization: u32,
    processes: Vec<u32>,
    mps: String,
    holders: Vec<String>,
    leases: String,
}

impl DeviceProps {
    /// The device's properties; `reports` tell which clients hold a lease on it, and `leases`
    /// how leases run on it ([`State::leases`]).
    fn new(d: &DeviceInfo, mps: &MpsStatus, reports: &[ClientReport], leases: &str) -> Self {
        let id = DeviceId::parse(&d.uuid);
        let holders = reports
            .iter()
            .filter(|r| {
                r.devices
                    .iter()
                    .any(|u| u.holding && id.is_some() && DeviceId::parse(&u.device) == id)
            })
            .map(|r| r.name.clone())
            .collect();
        DeviceProps {
            index: d.index,
            name: d.name.clone(),
            uuid: d.uuid.clone(),
            compute_mode: d.compute_mode.clone(),
            memory_total: d.memory_total,
            memory_used: d.memory_used,
            utilization: d.utilization_gpu.unwrap_or(0),
            processes: d.processes.iter().map(|p| p.pid).collect(),
            mps: match (mps.enabled, mps.running) {
                (false, _) => "off",
                (true, true) => "running",
                (true, false) => "down",
            }
            .into(),
            holders,
            leases: leases.into(),
        }
    }

    fn values(&self) -> Vec<(&'static str, Value<'static>)> {
        vec![
            ("Index", Value::from(self.index)),
            ("Name", Value::from(self.name.clone())),
            ("Uuid", Value::from(self.uuid.clone())),
            ("ComputeMode", Value::from(self.compute_mode.clone())),
            ("MemoryTotal", Value::from(self.memory_total)),
            ("MemoryUsed", Value::from(self.memory_used)),
            ("Utilization", Value::from(self.utilization)),
            ("Processes", Value::from(self.processes.clone())),
            ("Mps", Value::from(self.mps.clone())),
            ("Holders", Value::from(self.holders.clone())),
            ("Leases", Value::from(self.leases.clone())),
        ]
    }
}

pub struct DeviceObject(DeviceProps);

/// A GPU the daemon manages, as NVML reports it.
#[zbus::interface(name = "org.gpushare1.Device")]
impl DeviceObject {
    /// NVML index.
    #[zbus(property)]
    fn index(&self) -> u32 {
        self.0.index
    }
    #[zbus(property)]
    fn name(&self) -> &str {
        &self.0.name
    }
    #[zbus(property)]
    fn uuid(&self) -> &str {
        &self.0.uuid
    }
    /// As nvidia-smi names it: Default, Exclusive_Process, Prohibited.
    #[zbus(property)]
    fn compute_mode(&self) -> &str {
        &self.0.compute_mode
    }
    #[zbus(property)]
    fn memory_total(&self) -> u64 {
        self.0.memory_total
    }
    #[zbus(property)]
    fn memory_used(&self) -> u64 {
        self.0.memory_used
    }
    /// Percent of the last sample period in which a kernel ran.
    #[zbus(property)]
    fn utilization(&self) -> u32 {
        self.0.utilization
    }
    /// Pids with a compute context on it.
    #[zbus(property)]
    fn processes(&self) -> Vec<u32> {
        self.0.processes.clone()
    }
    /// The daemon's MPS: off, running or down.
    #[zbus(property)]
    fn mps(&self) -> &str {
        &self.0.mps
    }
    /// The clients with a process holding a lease on it (each GPU has its own token).
    #[zbus(property)]
    fn holders(&self) -> Vec<String> {
        self.0.holders.clone()
    }
    /// How leases run on it now: mps (side by side under MPS), one-at-a-time
    /// (concurrent_leases = 1), concurrent (as many at once as concurrent_leases allows, without
    /// MPS), together (overlapping by demand: while the GPU has room or the weights allow) or
    /// turns (overlapping by demand, but batch leases take exclusive turns: the processes
    /// progressed more so).
    #[zbus(property)]
    fn leases(&self) -> &str {
        &self.0.leases
    }
}

/// The objects' properties and how they come and go, kept apart from the bus (unit-tested).
trait Snapshot: Clone + PartialEq {
    fn values(&self) -> Vec<(&'static str, Value<'static>)>;
}
impl Snapshot for ClientProps {
    fn values(&self) -> Vec<(&'static str, Value<'static>)> {
        ClientProps::values(self)
    }
}
impl Snapshot for DeviceProps {
    fn values(&self) -> Vec<(&'static str, Value<'static>)> {
        DeviceProps::values(self)
    }
}

/// The properties of `new` that differ from `old`.
fn changed<S: Snapshot>(old: &S, new: &S) -> Vec<(&'static str, Value<'static>)> {
    old.values()
        .into_iter()
        .zip(new.values())
        .filter(|(a, b)| a.1 != b.1)
        .map(|(_, b)| b)
        .collect()
}

/// Keeps one object per key on the bus in step with `now`.
async fn sync<S, O>(
    conn: &zbus::Connection,
    shown: &mut BTreeMap<String, S>,
    now: BTreeMap<String, S>,
    object: impl Fn(S) -> O,
    get: impl Fn(&mut O) -> &mut S,
) where
    S: Snapshot,
    O: Interface,
{
    let server = conn.object_server();
    let gone: Vec<String> = shown
        .keys()
        .filter(|k| !now.contains_key(*k))
        .cloned()
        .collect();
    for path in gone {
        shown.remove(&path);
        if let Err(e) = server.remove::<O, _>(path.as_str()).await {
            tracing::debug!("cannot remove {path}: {e}");
        }
    }
    for (path, props) in now {
        match shown.get(&path) {
            None => match server.at(path.as_str(), object(props.clone())).await {
                Ok(_) => {
                    shown.insert(path, props);
                }
                Err(e) => tracing::debug!("cannot serve {path}: {e}"),
            },
            Some(old) if *old == props => {}
            Some(old) => {
                let diff = changed(old, &props);
                shown.insert(path.clone(), props.clone());
                let Ok(iface) = server.interface::<_, O>(path.as_str()).await else {
                    continue;
                };
                *get(&mut *iface.get_mut().await) = props;
                let map: HashMap<&str, Value<'_>> = diff.into_iter().collect();
                let emitted = zbus::fdo::Properties::properties_changed(
                    iface.signal_emitter(),
                    O::name(),
                    map,
                    Cow::Borrowed(&[]),
                )
                .await;
                if let Err(e) = emitted {
                    tracing::debug!("PropertiesChanged on {path}: {e}");
                }
            }
        }
    }
}

/// Refreshes the client and device objects every second while the daemon runs.
pub async fn run(
    conn: zbus::Connection,
    state: Arc<Mutex<State>>,
    devices: Arc<dyn Fn() -> Vec<DeviceInfo> + Send + Sync>,
    mps: Arc<dyn Fn() -> MpsStatus + Send + Sync>,
) {
    let mut clients: BTreeMap<String, ClientProps> = BTreeMap::new();
    let mut shown_devices: BTreeMap<String, DeviceProps> = BTreeMap::new();
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let reports = state.lock().unwrap_or_else(|p| p.into_inner()).reports();
        let now = reports
            .iter()
            .map(|r| (client_path(&r.name), ClientProps::from(r)))
            .collect();
        sync(&conn, &mut clients, now, ClientObject, |o| &mut o.0).await;
        let read = {
            let (devices, mps) = (devices.clone(), mps.clone());
            tokio::task::spawn_blocking(move || (devices(), mps())).await
        };
        let Ok((devices, mps)) = read else {
            continue;
        };
        let leases: Vec<&str> = {
            let st = state.lock().unwrap_or_else(|p| p.into_inner());
            devices.iter().map(|d| st.leases(&d.uuid)).collect()
        };
        let now = devices
            .iter()
            .zip(leases)
            .map(|(d, leases)| {
                let props = DeviceProps::new(d, &mps, &reports, leases);
                (device_path(d.index), props)
            })
            .collect();
        sync(&conn, &mut shown_devices, now, DeviceObject, |o| &mut o.0).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::zvariant::{ObjectPath, OwnedObjectPath};

    fn object_path(path: &str) -> Option<OwnedObjectPath> {
        ObjectPath::try_from(path).ok().map(OwnedObjectPath::from)
    }

    #[test]
    fn names_are_escaped_as_systemd_escapes_unit_names() {
        assert_eq!(client_path("train"), "/org/gpushare1/client/train");
        assert_eq!(client_path("user.bob"), "/org/gpushare1/client/user_2ebob");
        assert_eq!(client_path("a-b_c"), "/org/gpushare1/client/a_2db_5fc");
        assert_eq!(client_path(""), "/org/gpushare1/client/_");
        assert_eq!(client_path("é"), "/org/gpushare1/client/_c3_a9");
        for name in ["train", "user.bob", "a-b_c", "", "é", "x/y z"] {
            assert!(object_path(&client_path(name)).is_some(), "{name}");
        }
        assert_ne!(client_path("a.b"), client_path("a_b"));
    }

    fn props(share: f64, pids: Vec<u32>) -> ClientProps {
        ClientProps {
            name: "a".into(),
            origin: "config".into(),
            request: 0.5,
            limit: 1.0,
            memory_cap: 0,
            memory_used: 0,
            share,
            gpu_time_ns: 0,
            charged_ns: 0,
            grants: 0,
            holding: false,
            waiting: 0,
            interactive: false,
            fair_share: 1.0,
            processes: pids,
            users: vec![],
            groups: vec![],
            devices: vec![],
            demand: vec![],
        }
    }

    #[test]
    fn only_changed_properties_are_announced() {
        let a = props(0.1, vec![1]);
        assert!(changed(&a, &a).is_empty());
        let b = props(0.2, vec![1, 2]);
        let names: Vec<&str> = changed(&a, &b).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["Share", "Processes"]);
    }
}
