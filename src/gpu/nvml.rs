//! NVML: device inventory, compute mode, the processes that hold a context on a device, their
//! memory and their per-process utilization.
//!
//! Every function here blocks on the driver; async code calls them through `spawn_blocking`.

use super::{DeviceInfo, GpuProcess};
use anyhow::{bail, Context};
use nvml_wrapper::enum_wrappers::device::ComputeMode;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::Nvml;
use std::path::Path;
use std::sync::Mutex;

/// The devices gpushare manages, with the compute mode each had when the daemon started.
pub(crate) struct NvmlDevices {
    nvml: Nvml,
    devices: Vec<Managed>,
}

struct Managed {
    index: u32,
    uuid: String,
    original: ComputeMode,
    /// Whether we changed the compute mode and must put `original` back.
    changed: Mutex<bool>,
}

/// The file, in the MPS pipe directory, that remembers the compute modes gpushare changed, so that
/// a gpushared started after a crash restores the modes from before, not Exclusive_Process.
pub const COMPUTE_MODE_RECORD: &str = "gpushare-compute-modes";

fn compute_mode_from_name(name: &str) -> Option<ComputeMode> {
    Some(match name {
        "Default" => ComputeMode::Default,
        "Exclusive_Thread" => ComputeMode::ExclusiveThread,
        "Prohibited" => ComputeMode::Prohibited,
        "Exclusive_Process" => ComputeMode::ExclusiveProcess,
        _ => return None,
    })
}

/// The name `nvidia-smi` uses for a compute mode.
pub fn compute_mode_name(mode: &ComputeMode) -> &'static str {
    match mode {
        ComputeMode::Default => "Default",
        ComputeMode::ExclusiveThread => "Exclusive_Thread",
        ComputeMode::Prohibited => "Prohibited",
        ComputeMode::ExclusiveProcess => "Exclusive_Process",
    }
}

/// A process's device memory as one of NVML's process lists reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessMemory {
    pub device: u32,
    pub pid: u32,
    /// `None` where NVML cannot tell (some drivers under MPS, or without permission).
    pub used: Option<u64>,
}

fn memory_of(device: u32, p: &ProcessInfo) -> ProcessMemory {
    ProcessMemory {
        device,
        pid: p.pid,
        used: match p.used_gpu_memory {
            UsedGpuMemory::Used(bytes) => Some(bytes),
            UsedGpuMemory::Unavailable => None,
        },
    }
}

#[derive(Debug, Default)]
pub struct ProcessLists {
    pub compute: Vec<ProcessMemory>,
    pub graphics: Vec<ProcessMemory>,
    /// Why the graphics list could not be read (then it is empty).
    pub graphics_unread: Option<Unread>,
}

/// One process's SM utilization on a device, in percent, over the samples asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtilSample {
    pub pid: u32,
    pub sm_util: u32,
    /// The newest sample's time, in microseconds since the epoch.
    pub timestamp_us: u64,
}

/// Why NVML gave no reading: the driver lacks the function or the device does not support it
/// (it will not change; the check is off), or this call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unread {
    Unsupported(String),
    Failed(String),
}

impl From<NvmlError> for Unread {
    fn from(e: NvmlError) -> Self {
        match e {
            NvmlError::FailedToLoadSymbol(_)
            | NvmlError::FunctionNotFound
            | NvmlError::NotSupported => Unread::Unsupported(e.to_string()),
            e => Unread::Failed(e.to_string()),
        }
    }
}

/// The NVML library the driver installs.
pub const SYSTEM_LIBRARY: &str = "libnvidia-ml.so.1";

impl NvmlDevices {
    /// Loads NVML from `library`, else the system's `libnvidia-ml.so.1`.
    pub fn load(library: Option<&Path>) -> anyhow::Result<Nvml> {
        let mut builder = Nvml::builder();
        // nvml-wrapper's own default is the unversioned name, which only the -dev package
        // provides; the driver installs libnvidia-ml.so.1.
        let default = std::ffi::OsStr::new(SYSTEM_LIBRARY);
        builder.lib_path(library.map_or(default, |lib| lib.as_os_str()));
        builder.init().with_context(|| match library {
            Some(lib) => format!("cannot initialise NVML from {}", lib.display()),
            None => "cannot initialise NVML (libnvidia-ml.so.1)".into(),
        })
    }

    /// Records the compute mode of each device in `indices` (empty = all).
    pub fn open(nvml: Nvml, indices: &[u32]) -> anyhow::Result<NvmlDevices> {
        let count = nvml
            .device_count()
            .context("NVML: cannot count the devices")?;
        let wanted: Vec<u32> = if indices.is_empty() {
            (0..count).collect()
        } else {
            indices.to_vec()
        };
        let mut devices = Vec::with_capacity(wanted.len());
        for index in wanted {
            if index >= count {
                bail!("gpu.devices: device {index} does not exist; NVML sees {count} device(s)");
            }
            let device = nvml
                .device_by_index(index)
                .with_context(|| format!("NVML: cannot open device {index}"))?;
            let original = device
                .compute_mode()
                .with_context(|| format!("NVML: cannot read the compute mode of device {index}"))?;
            let uuid = device
                .uuid()
                .with_context(|| format!("NVML: cannot read the UUID of device {index}"))?;
            devices.push(Managed {
                index,
                uuid,
                original,
                changed: Mutex::new(false),
            });
        }
        Ok(NvmlDevices { nvml, devices })
    }

    pub fn indices(&self) -> Vec<u32> {
        self.devices.iter().map(|d| d.index).collect()
    }

    pub fn uuids(&self) -> Vec<String> {
        self.devices.iter().map(|d| d.uuid.clone()).collect()
    }

    /// Takes over the record an earlier gpushared left (it stopped without restoring): a device
    /// still in Exclusive_Process gets back the mode recorded for its UUID at stop.
    pub fn adopt_record(&mut self, record: &Path) {
        let Ok(text) = std::fs::read_to_string(record) else {
            return;
        };
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some(uuid), Some(mode)) = (words.next(), words.next()) else {
                continue;
            };
            let Some(mode) = compute_mode_from_name(mode) else {
                continue;
            };
            for d in self.devices.iter_mut().filter(|d| d.uuid == uuid) {
                if d.original == ComputeMode::ExclusiveProcess && mode != d.original {
                    tracing::warn!(
                        device = d.index,
                        "Exclusive_Process was left by an earlier gpushared; {} will be restored",
                        compute_mode_name(&mode)
                    );
                    d.original = mode.clone();
                    *d.changed.lock().unwrap() = true;
                }
            }
        }
    }

    fn write_record(&self, record: &Path) {
        let mut text = String::new();
        for d in &self.devices {
            if *d.changed.lock().unwrap() {
                text.push_str(&format!("{} {}\n", d.uuid, compute_mode_name(&d.original)));
            }
        }
        let result = if text.is_empty() {
            std::fs::remove_file(record).or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            })
        } else {
            std::fs::write(record, text)
        };
        if let Err(e) = result {
            tracing::warn!("cannot write {}: {e}", record.display());
        }
    }

    /// Sets EXCLUSIVE_PROCESS on every managed device that is not in it already, and notes the
    /// modes to restore in `record`. A device that refuses (no permission, not supported) is
    /// logged and left as it is.
    pub fn set_exclusive_process(&self, record: Option<&Path>) {
        for d in &self.devices {
            if d.original == ComputeMode::ExclusiveProcess {
                continue;
            }
            let result = self
                .nvml
                .device_by_index(d.index)
                .and_then(|mut device| device.set_compute_mode(ComputeMode::ExclusiveProcess));
            match result {
                Ok(()) => {
                    *d.changed.lock().unwrap() = true;
                    tracing::info!(
                        device = d.index,
                        "compute mode set to Exclusive_Process (was {})",
                        compute_mode_name(&d.original)
                    );
                }
                Err(e) => tracing::warn!(
                    device = d.index,
                    "cannot set the compute mode to Exclusive_Process: {e}; leaving it {}",
                    compute_mode_name(&d.original)
                ),
            }
        }
        if let Some(record) = record {
            self.write_record(record);
        }
    }

    /// Puts back the compute modes changed by [`set_exclusive_process`](Self::set_exclusive_process)
    /// and updates `record` (removed once everything is restored).
    pub fn restore_compute_modes(&self, record: Option<&Path>) {
        for d in &self.devices {
            let mut changed = d.changed.lock().unwrap();
            if !*changed {
                continue;
            }
            let result = self
                .nvml
                .device_by_index(d.index)
                .and_then(|mut device| device.set_compute_mode(d.original.clone()));
            match result {
                Ok(()) => {
                    *changed = false;
                    tracing::info!(
                        device = d.index,
                        "compute mode restored to {}",
                        compute_mode_name(&d.original)
                    );
                }
                Err(e) => tracing::error!(
                    device = d.index,
                    "cannot restore the compute mode {}: {e}",
                    compute_mode_name(&d.original)
                ),
            }
        }
        if let Some(record) = record {
            self.write_record(record);
        }
    }

    /// Every process with a compute context on a managed device, with its memory; and, when
    /// `graphics`, those with a graphics context (a process with both is in both lists).
    pub fn process_lists(&self, graphics: bool) -> ProcessLists {
        let mut lists = ProcessLists::default();
        for d in &self.devices {
            let device = match self.nvml.device_by_index(d.index) {
                Ok(device) => device,
                Err(e) => {
                    tracing::debug!(device = d.index, "cannot open the device: {e}");
                    continue;
                }
            };
            match device.running_compute_processes() {
                Ok(list) => lists
                    .compute
                    .extend(list.iter().map(|p| memory_of(d.index, p))),
                Err(e) => tracing::debug!(device = d.index, "cannot list GPU processes: {e}"),
            }
            if graphics && lists.graphics_unread.is_none() {
                match device.running_graphics_processes() {
                    Ok(list) => lists
                        .graphics
                        .extend(list.iter().map(|p| memory_of(d.index, p))),
                    Err(e) => lists.graphics_unread = Some(Unread::from(e)),
                }
            }
        }
        lists
    }

    /// The per-process utilization of device `index` over the samples NVML took after
    /// `since_us` (microseconds since the epoch, as NVML stamps them): one entry per process
    /// that was busy, with the newest sample's time.
    pub fn process_utilization(
        &self,
        index: u32,
        since_us: u64,
    ) -> Result<Vec<UtilSample>, Unread> {
        let device = self.nvml.device_by_index(index).map_err(Unread::from)?;
        match device.process_utilization_stats(since_us) {
            Ok(samples) => Ok(samples
                .into_iter()
                .map(|s| UtilSample {
                    pid: s.pid,
                    sm_util: s.sm_util,
                    timestamp_us: s.timestamp,
                })
                .collect()),
            // no sample since `since_us`
            Err(NvmlError::NotFound) => Ok(Vec::new()),
            Err(e) => Err(Unread::from(e)),
        }
    }

    /// A fresh reading of every managed device.
    pub fn snapshot(&self) -> Vec<DeviceInfo> {
        self.devices
            .iter()
            .filter_map(|d| match self.read(d) {
                Ok(info) => Some(info),
                Err(e) => {
                    tracing::warn!(device = d.index, "cannot read the device: {e}");
                    None
                }
            })
            .collect()
    }

    fn read(&self, d: &Managed) -> Result<DeviceInfo, nvml_wrapper::error::NvmlError> {
        let device = self.nvml.device_by_index(d.index)?;
        let memory = device.memory_info()?;
        let processes = device
            .running_compute_processes()?
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_memory: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect();
        Ok(DeviceInfo {
            index: d.index,
            name: device.name()?,
            uuid: d.uuid.clone(),
            compute_mode: compute_mode_name(&device.compute_mode()?).to_string(),
            original_compute_mode: compute_mode_name(&d.original).to_string(),
            memory_total: memory.total,
            memory_used: memory.used,
            utilization_gpu: device.utilization_rates().ok().map(|u| u.gpu),
            processes,
        })
    }
}
