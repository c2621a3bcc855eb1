//! Memory-size wrappers: `cuMemGetInfo`, `cuDeviceTotalMem_v2` and NVML's memory info
//! report the client's cap, so that frameworks size their caches to it.

use proto::protocol::NO_CAP;

use crate::cuda::*;
use crate::devices;
use crate::ledger;
use crate::session;

unsafe fn read<T: Copy + Default>(p: *const T) -> T {
    if p.is_null() {
        T::default()
    } else {
        *p
    }
}

/// Applies the cap to a (free, total) pair the driver reported for the calling thread's GPU;
/// `None` when uncapped. The cap holds on each GPU, against the client's use of that GPU.
fn capped(free: u64, total: u64) -> Option<(u64, u64)> {
    let cap = session::cap();
    if cap == NO_CAP {
        return None;
    }
    let used = session::used(devices::current().id).unwrap_or(0);
    Some(ledger::capped_info(free, total, cap, used))
}

/// `cuMemGetInfo_v2`. Either pointer may be null (the driver decides whether that is an
/// error); the cap is applied to the ones given.
pub unsafe fn get_info(
    real: unsafe extern "C" fn(*mut usize, *mut usize) -> CUresult,
    free: *mut usize,
    total: *mut usize,
) -> CUresult {
    let r = real(free, total);
    if r == CUDA_SUCCESS {
        let (f, t) = (
            read(free) as u64,
            if total.is_null() {
                u64::MAX
            } else {
                *total as u64
            },
        );
        if let Some((f, t)) = capped(if free.is_null() { u64::MAX } else { f }, t) {
            if !free.is_null() {
                *free = f as usize;
            }
            if !total.is_null() {
                *total = t as usize;
            }
        }
    }
    r
}

/// `cuMemGetInfo` (the 32-bit ABI of CUDA 3.1 and older).
pub unsafe fn get_info_v1(
    real: unsafe extern "C" fn(*mut u32, *mut u32) -> CUresult,
    free: *mut u32,
    total: *mut u32,
) -> CUresult {
    let r = real(free, total);
    if r == CUDA_SUCCESS {
        let f = if free.is_null() {
            u64::MAX
        } else {
            u64::from(*free)
        };
        let t = if total.is_null() {
            u64::MAX
        } else {
            u64::from(*total)
        };
        if let Some((f, t)) = capped(f, t) {
            if !free.is_null() {
                *free = f.min(u64::from(u32::MAX)) as u32;
            }
            if !total.is_null() {
                *total = t.min(u64::from(u32::MAX)) as u32;
            }
        }
    }
    r
}

pub unsafe fn device_total(
    real: unsafe extern "C" fn(*mut usize, CUdevice) -> CUresult,
    bytes: *mut usize,
    dev: CUdevice,
) -> CUresult {
    let r = real(bytes, dev);
    if r == CUDA_SUCCESS && !bytes.is_null() {
        let cap = session::cap();
        if cap != NO_CAP {
            *bytes = (*bytes as u64).min(cap) as usize;
        }
    }
    r
}

/// NVML reports the cap only for processes already attached through CUDA: tools that use NVML
/// alone (nvidia-smi) are not clients.
fn nvml_capped(free: u64, total: u64) -> Option<(u64, u64)> {
    if !matches!(
        session::state_if_tried(),
        Some(session::Attach::Managed | session::Attach::Away)
    ) {
        return None;
    }
    capped(free, total)
}

pub unsafe fn nvml_info(
    real: unsafe extern "C" fn(nvmlDevice_t, *mut NvmlMemory) -> nvmlReturn_t,
    dev: nvmlDevice_t,
    mem: *mut NvmlMemory,
) -> nvmlReturn_t {
    let r = real(dev, mem);
    if r == NVML_SUCCESS && !mem.is_null() {
        let m = &mut *mem;
        if let Some((free, total)) = nvml_capped(m.free, m.total) {
            m.total = total;
            m.free = free;
            m.used = total - free;
        }
    }
    r
}

pub unsafe fn nvml_info_v2(
    real: unsafe extern "C" fn(nvmlDevice_t, *mut NvmlMemoryV2) -> nvmlReturn_t,
    dev: nvmlDevice_t,
    mem: *mut NvmlMemoryV2,
) -> nvmlReturn_t {
    let r = real(dev, mem);
    if r == NVML_SUCCESS && !mem.is_null() {
        let m = &mut *mem;
        if let Some((free, total)) = nvml_capped(m.free, m.total) {
            m.total = total;
            m.free = free;
            m.used = (total - free).saturating_sub(m.reserved);
        }
    }
    r
}
