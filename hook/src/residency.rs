//! Oversubscription: a client whose config says `oversubscribe = true` gets its device
//! allocations (`cuMemAlloc`) as managed memory, so that the clients together may allocate more
//! than the GPU holds. When its lease ends with others waiting, the hook moves all of its managed
//! memory to the host in one bulk prefetch before the token moves on; when the token comes back
//! it moves its memory back, oldest allocations first (model state before scratch), up to the
//! client's resident budget. Without these prefetches the pages would move one fault at a time.
//!
//! For comparison, `GPUSHARE_PREFETCH=out` moves memory out at hand-overs but lets it come back
//! by page faults, and `GPUSHARE_PREFETCH=0` moves nothing (the driver moves pages on demand).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};

use proto::protocol::{MEMORY_OVERSUBSCRIBE, MEMORY_RELEASE_CACHE, NO_CAP};

use crate::cuda::*;
use crate::driver::{current_context, current_device, helper, Helper};
use crate::fork_safe::ForkSafe;
use crate::lease::lease_left_ns;

static FLAGS: AtomicU32 = AtomicU32::new(0);
static RESIDENT: AtomicU64 = AtomicU64::new(NO_CAP);
static PREFETCH_OUT: AtomicBool = AtomicBool::new(true);
static PREFETCH_IN: AtomicBool = AtomicBool::new(true);
/// This process's memory was moved to the host at its last hand-over.
static EVICTED: AtomicBool = AtomicBool::new(false);
/// Others waited for the token when this process's last lease ended.
static CONTENDED: AtomicBool = AtomicBool::new(false);
static TABLE: ForkSafe<Table> = ForkSafe::new(Table::new());

/// `CU_MEM_ATTACH_GLOBAL`: the managed memory is accessible from any stream.
const ATTACH_GLOBAL: u32 = 1;
const CU_STREAM_NON_BLOCKING: u32 = 1;
const CU_MEM_LOCATION_TYPE_HOST: u32 = 2;
/// `CU_DEVICE_CPU` of the older `cuMemPrefetchAsync`.
const DEVICE_CPU: i32 = -1;

/// The managed allocations this process made for device allocations, oldest first, and the
/// stream the hook prefetches on.
pub struct Table {
    allocations: Vec<(u64, u64)>,
    stream: usize,
    context: usize,
}

impl Table {
    pub const fn new() -> Table {
        Table {
            allocations: Vec::new(),
            stream: 0,
            context: 0,
        }
    }

    pub fn add(&mut self, addr: u64, bytes: u64) {
        self.allocations.push((addr, bytes));
    }

    pub fn remove(&mut self, addr: u64) {
        if let Some(i) = self.allocations.iter().rposition(|&(a, _)| a == addr) {
            self.allocations.remove(i);
        }
    }
}

/// What to move back onto the GPU: the allocations oldest first, the last one cut short, until
/// `budget` bytes.
pub fn restore_plan(allocations: &[(u64, u64)], budget: u64) -> Vec<(u64, u64)> {
    let mut left = budget;
    let mut plan = Vec::new();
    for &(addr, bytes) in allocations {
        if left == 0 {
            break;
        }
        let n = bytes.min(left);
        plan.push((addr, n));
        left -= n;
    }
    plan
}

/// Takes the client's memory settings from the daemon's welcome.
pub fn configure(flags: u32, resident: u64) {
    RESIDENT.store(resident, Relaxed);
    let mode = crate::env::var("GPUSHARE_PREFETCH").unwrap_or_default();
    PREFETCH_OUT.store(mode != "0", Relaxed);
    PREFETCH_IN.store(mode != "0" && mode != "out", Relaxed);
    FLAGS.store(flags, Release);
}

/// Device allocations become managed memory.
#[inline]
pub fn oversubscribing() -> bool {
    FLAGS.load(Acquire) & MEMORY_OVERSUBSCRIBE != 0
}

/// A device allocation as managed memory, recorded for the hand-over prefetches.
///
/// # Safety
/// `dptr` is the caller's out-pointer of `cuMemAlloc`.
pub unsafe fn alloc(dptr: *mut CUdeviceptr, bytes: usize) -> CUresult {
    type AllocManaged = unsafe extern "C" fn(*mut CUdeviceptr, usize, u32) -> CUresult;
    let Some(alloc) = helper::<AllocManaged>(Helper::cuMemAllocManaged) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let r = alloc(dptr, bytes, ATTACH_GLOBAL);
    if r == CUDA_SUCCESS && !dptr.is_null() {
        TABLE.lock().add(*dptr, bytes as u64);
    }
    r
}

/// A free of device memory: forget it if it was managed.
pub fn freed(addr: CUdeviceptr) {
    if oversubscribing() {
        TABLE.lock().remove(addr);
    }
}

/// The lease was extended; `contended`: others wait for the token all the same (it is still
/// ahead of them).
pub fn extended(contended: bool) {
    CONTENDED.store(contended, Relaxed);
}

/// The lease ends with others waiting, its work done: move this process's managed memory to the
/// host before the token moves on.
pub fn hand_over() {
    CONTENDED.store(true, Relaxed);
    if !oversubscribing() || !PREFETCH_OUT.load(Relaxed) {
        return;
    }
    let mut table = TABLE.lock();
    let Some(stream) = stream(&mut table) else {
        return;
    };
    if prefetch(stream, &table.allocations, None) {
        EVICTED.store(true, Relaxed);
    }
}

/// The token came back: move the memory moved out at the hand-over back, up to the resident
/// budget.
pub fn regained() {
    if !EVICTED.swap(false, Relaxed) || !PREFETCH_IN.load(Relaxed) {
        return;
    }
    let mut table = TABLE.lock();
    let (Some(device), Some(stream)) = (current_device(), stream(&mut table)) else {
        return;
    };
    prefetch(
        stream,
        &restore_plan(&table.allocations, RESIDENT.load(Relaxed)),
        Some(device),
    );
}

/// True when a PyTorch process should release its cached memory now: its client asks for it,
/// others wait for the token, and the lease of the calling thread's GPU ends within
/// `horizon_ns` (or is over).
pub fn release_due(horizon_ns: u64) -> bool {
    releasing_cache()
        && CONTENDED.load(Relaxed)
        && lease_left_ns(crate::devices::current().lane()) <= horizon_ns
}

/// The client releases PyTorch's cached memory (`release_cache`).
pub fn releasing_cache() -> bool {
    FLAGS.load(Acquire) & MEMORY_RELEASE_CACHE != 0
}

/// The hook's own stream in the current context (made on first use there).
fn stream(table: &mut Table) -> Option<CUstream> {
    let ctx = current_context();
    if ctx == 0 {
        return None;
    }
    if table.context != ctx || table.stream == 0 {
        type Create = unsafe extern "C" fn(*mut CUstream, u32) -> CUresult;
        // SAFETY: the signature of cuStreamCreate; a valid out-pointer.
        let create = unsafe { helper::<Create>(Helper::cuStreamCreate) }?;
        let mut s: CUstream = std::ptr::null_mut();
        if unsafe { create(&mut s, CU_STREAM_NON_BLOCKING) } != CUDA_SUCCESS {
            return None;
        }
        table.stream = s as usize;
        table.context = ctx;
    }
    Some(table.stream as CUstream)
}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Location {
    kind: u32,
    id: i32,
}

/// Prefetches `ranges` to `device` (`None`: the host) on `stream` and waits for them.
fn prefetch(stream: CUstream, ranges: &[(u64, u64)], device: Option<i32>) -> bool {
    if ranges.is_empty() {
        return true;
    }
    type PrefetchV2 = unsafe extern "C" fn(CUdeviceptr, usize, Location, u32, CUstream) -> CUresult;
    type PrefetchV1 = unsafe extern "C" fn(CUdeviceptr, usize, i32, CUstream) -> CUresult;
    type Sync = unsafe extern "C" fn(CUstream) -> CUresult;
    // SAFETY: the driver's signatures of these functions.
    let (v2, v1, sync) = unsafe {
        (
            helper::<PrefetchV2>(Helper::cuMemPrefetchAsync_v2),
            helper::<PrefetchV1>(Helper::cuMemPrefetchAsync),
            helper::<Sync>(Helper::cuStreamSynchronize),
        )
    };
    let Some(sync) = sync else {
        return false;
    };
    let mut ok = true;
    for &(addr, bytes) in ranges {
        // SAFETY: the ranges are managed allocations this process holds.
        let r = unsafe {
            match (v2, v1) {
                (Some(f), _) => {
                    let to = match device {
                        Some(id) => Location {
                            kind: CU_MEM_LOCATION_TYPE_DEVICE,
                            id,
                        },
                        None => Location {
                            kind: CU_MEM_LOCATION_TYPE_HOST,
                            id: 0,
                        },
                    };
                    f(addr, bytes as usize, to, 0, stream)
                }
                (None, Some(f)) => f(addr, bytes as usize, device.unwrap_or(DEVICE_CPU), stream),
                (None, None) => return false,
            }
        };
        ok &= r == CUDA_SUCCESS;
    }
    // SAFETY: the hook's own stream.
    ok &= unsafe { sync(stream) } == CUDA_SUCCESS;
    ok
}

pub fn after_fork_in_child() {
    FLAGS.store(0, Release);
    EVICTED.store(false, Relaxed);
    CONTENDED.store(false, Relaxed);
    // SAFETY: called from the fork child handler.
    unsafe { TABLE.reset(Table::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_allocations_come_back_first_up_to_the_budget() {
        let a = [(0x1000, 100), (0x2000, 50), (0x3000, 70)];
        assert_eq!(restore_plan(&a, NO_CAP), a.to_vec());
        assert_eq!(restore_plan(&a, 120), vec![(0x1000, 100), (0x2000, 20)]);
        assert_eq!(restore_plan(&a, 100), vec![(0x1000, 100)]);
        assert!(restore_plan(&a, 0).is_empty());
    }

    #[test]
    fn the_table_forgets_freed_allocations() {
        let mut t = Table::new();
        t.add(1, 10);
        t.add(2, 20);
        t.add(3, 30);
        t.remove(2);
        t.remove(9);
        assert_eq!(t.allocations, vec![(1, 10), (3, 30)]);
    }
}
