//! The real driver functions: one slot per symbol the hook wraps or calls, filled from the
//! real `libcuda.so.1` / `libnvidia-ml.so.1`.
//!
//! A slot is filled either when the program's own `dlsym` hands us the real pointer, or in one
//! pass over the library (for programs linked with `-lcuda`, and before `cuGetProcAddress`
//! results are matched by pointer identity). Filling is lock-free and idempotent.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::*};

use crate::cuda::*;
use crate::interpose::dlsym::real_dlsym;

/// Which library a symbol comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Lib {
    Cuda = 0,
    Nvml = 1,
}

impl Lib {
    fn soname(self) -> &'static CStr {
        match self {
            Lib::Cuda => c"libcuda.so.1",
            Lib::Nvml => c"libnvidia-ml.so.1",
        }
    }

    /// What a wrapper returns when the real function cannot be found.
    pub fn missing(self) -> u32 {
        match self {
            Lib::Cuda => CUDA_ERROR_NOT_INITIALIZED,
            Lib::Nvml => NVML_ERROR_UNINITIALIZED,
        }
    }
}

/// One real function.
pub struct Slot {
    pub name: &'static CStr,
    pub lib: Lib,
    pub real: AtomicUsize,
}

impl Slot {
    pub const fn new(name: &'static CStr, lib: Lib) -> Slot {
        Slot {
            name,
            lib,
            real: AtomicUsize::new(0),
        }
    }

    /// The real function, binding the library on first use; 0 when it does not exist.
    #[inline(always)]
    pub fn get(&self) -> usize {
        let p = self.real.load(Relaxed);
        if p != 0 {
            p
        } else {
            self.get_slow()
        }
    }

    #[cold]
    fn get_slow(&self) -> usize {
        bind(self.lib);
        self.real.load(Relaxed)
    }

    /// Records `p` as the real function unless another one was recorded; true if `p` is it.
    pub fn offer(&self, p: usize) -> bool {
        match self.real.compare_exchange(0, p, AcqRel, Acquire) {
            Ok(_) => true,
            Err(current) => current == p,
        }
    }
}

static BOUND: [AtomicU8; 2] = [AtomicU8::new(0), AtomicU8::new(0)];
static HANDLES: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// A handle of the real library: the loaded one, else (CUDA only) loading it.
fn handle(lib: Lib) -> *mut c_void {
    let cached = HANDLES[lib as usize].load(Acquire);
    if cached != 0 {
        return cached as *mut c_void;
    }
    // SAFETY: plain dlopen calls with constant names.
    let mut h = unsafe { libc::dlopen(lib.soname().as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if h.is_null() && lib == Lib::Cuda {
        h = unsafe { libc::dlopen(lib.soname().as_ptr(), libc::RTLD_LAZY) };
    }
    if !h.is_null() {
        HANDLES[lib as usize].store(h as usize, Release);
    }
    h
}

/// Fills every empty slot of `lib` from the real library (once it could be found).
pub fn bind(lib: Lib) {
    if BOUND[lib as usize].load(Acquire) == 2 {
        return;
    }
    let h = handle(lib);
    if h.is_null() {
        return;
    }
    let fill = |slot: &Slot| {
        if slot.lib == lib && slot.real.load(Relaxed) == 0 {
            // SAFETY: a valid handle and a NUL-terminated name.
            let p = unsafe { real_dlsym(h, slot.name.as_ptr()) } as usize;
            if p != 0 && crate::exports::wrapper_index(p).is_none() {
                slot.offer(p);
            }
        }
    };
    crate::exports::SLOTS.iter().for_each(fill);
    HELPERS.iter().for_each(fill);
    BOUND[lib as usize].store(2, Release);
}

/// Driver functions the hook calls itself but does not wrap.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy)]
pub enum Helper {
    cuStreamIsCapturing,
    cuThreadExchangeStreamCaptureMode,
    cuEventCreate,
    cuEventRecord,
    cuEventQuery,
    cuEventDestroy_v2,
    cuCtxGetDevice,
    cuDeviceGetMemPool,
    cuMemPoolTrimTo,
    cuMemFree_v2,
    cuCtxGetCurrent,
    cuCtxSetCurrent,
    cuMemAllocManaged,
    cuMemPrefetchAsync_v2,
    cuMemPrefetchAsync,
    cuStreamCreate,
    cuStreamSynchronize,
}

static HELPERS: [Slot; 17] = [
    Slot::new(c"cuStreamIsCapturing", Lib::Cuda),
    Slot::new(c"cuThreadExchangeStreamCaptureMode", Lib::Cuda),
    Slot::new(c"cuEventCreate", Lib::Cuda),
    Slot::new(c"cuEventRecord", Lib::Cuda),
    Slot::new(c"cuEventQuery", Lib::Cuda),
    Slot::new(c"cuEventDestroy_v2", Lib::Cuda),
    Slot::new(c"cuCtxGetDevice", Lib::Cuda),
    Slot::new(c"cuDeviceGetMemPool", Lib::Cuda),
    Slot::new(c"cuMemPoolTrimTo", Lib::Cuda),
    Slot::new(c"cuMemFree_v2", Lib::Cuda),
    Slot::new(c"cuCtxGetCurrent", Lib::Cuda),
    Slot::new(c"cuCtxSetCurrent", Lib::Cuda),
    Slot::new(c"cuMemAllocManaged", Lib::Cuda),
    Slot::new(c"cuMemPrefetchAsync_v2", Lib::Cuda),
    Slot::new(c"cuMemPrefetchAsync", Lib::Cuda),
    Slot::new(c"cuStreamCreate", Lib::Cuda),
    Slot::new(c"cuStreamSynchronize", Lib::Cuda),
];

/// The real helper function as `F` (an `unsafe extern "C" fn` type of the right signature).
///
/// # Safety
/// `F` must be the C signature of that driver function.
pub unsafe fn helper<F: Copy>(h: Helper) -> Option<F> {
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<usize>());
    let p = HELPERS[h as usize].get();
    (p != 0).then(|| std::mem::transmute_copy::<usize, F>(&p))
}
