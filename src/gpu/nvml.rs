//! NVML: device inventory, compute mode and the processes that hold a compute context.
//!
//! Every function here blocks on the driver; async code calls them through `spawn_blocking`.

use super::{DeviceInfo, GpuProcess};
use anyhow::{bail, Context};
use nvml_wrapper::enum_wrappers::device::ComputeMode;
use nvml_wrapper::enums::device::UsedGpuMemory;
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

    /// The (device index, pid) of every process with a compute context on a managed device.
    pub fn processes(&self) -> Vec<(u32, u32)> {
        let mut all = Vec::new();
        for d in &self.devices {
            match self
                .nvml
                .device_by_index(d.index)
                .and_then(|device| device.running_compute_processes())
            {
                Ok(list) => all.extend(list.into_iter().map(|p| (d.index, p.pid))),
                Err(e) => tracing::debug!(device = d.index, "cannot list GPU processes: {e}"),
            }
        }
        all
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
