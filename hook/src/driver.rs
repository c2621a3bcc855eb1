//! The real driver functions: one slot per symbol the hook wraps or calls, filled from the
//! real `libcuda.so.1` / `libnvidia-ml.so.1`.
//!
//! A slot is filled either when the program's own `dlsym` hands us the real pointer, or in one
//! pass over the library (for programs linked with `-lcuda`, and before `cuGetProcAddress`
//! results are matched by pointer identity). Filling is lock-free and idempotent.
//!
//! The slots of the wrapped symbols and their wrappers are defined with the wrappers, at the
//! top of the hook; this layer knows them as an [`Exports`] table, handed to it by the wrappers
//! and interposers and kept for the slots filled in the same pass.

use std::cell::Cell;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering::*};

use crate::cuda::*;

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static RESOLVING: Cell<bool> = const { Cell::new(false) };
}

/// glibc's `dlsym`, found with `dlvsym` (never a private glibc symbol).
pub fn real_dlsym_fn() -> Option<DlsymFn> {
    let mut p = REAL_DLSYM.load(Acquire);
    if p == 0 {
        // `dlvsym` may allocate, and an allocator may call `dlsym`: do not recurse.
        if RESOLVING.with(|r| r.replace(true)) {
            return None;
        }
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
            // SAFETY: constant NUL-terminated strings.
            p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) }
                as usize;
            if p != 0 {
                break;
            }
        }
        RESOLVING.with(|r| r.set(false));
        if p == 0 {
            return None;
        }
        REAL_DLSYM.store(p, Release);
    }
    // SAFETY: `p` is glibc's dlsym.
    Some(unsafe { std::mem::transmute::<usize, DlsymFn>(p) })
}

/// Calls the real `dlsym` from inside the hook (with a handle; never `RTLD_NEXT`).
///
/// # Safety
/// As for `dlsym`.
pub unsafe fn real_dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    match real_dlsym_fn() {
        Some(f) => f(handle, name),
        None => std::ptr::null_mut(),
    }
}

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

    /// [`Slot::get`] for a slot of `exports`, which a first binding fills too.
    #[inline(always)]
    pub fn get_in(&self, exports: &'static Exports) -> usize {
        let p = self.real.load(Relaxed);
        if p != 0 {
            p
        } else {
            self.get_slow_in(exports)
        }
    }

    #[cold]
    fn get_slow(&self) -> usize {
        bind(self.lib, None);
        self.real.load(Relaxed)
    }

    #[cold]
    fn get_slow_in(&self, exports: &'static Exports) -> usize {
        bind(self.lib, Some(exports));
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

/// The wrapped symbols: the slots of their real functions and the addresses of their wrappers.
pub struct Exports {
    pub slots: &'static [Slot],
    /// Address of the wrapper of slot `i`.
    pub wrapper: fn(usize) -> usize,
}

impl Exports {
    /// The slot whose wrapper is at `p`, if `p` is one of ours.
    pub fn wrapper_index(&self, p: usize) -> Option<usize> {
        (0..self.slots.len()).find(|&i| (self.wrapper)(i) == p)
    }

    /// The slot of the symbol named `name` (allocation-free; called from inside `dlsym`).
    ///
    /// # Safety
    /// `name` must be a NUL-terminated string.
    pub unsafe fn slot_by_name(&self, name: *const c_char) -> Option<usize> {
        let first = *name as u8;
        if first != b'c' && first != b'n' {
            return None;
        }
        self.slots
            .iter()
            .position(|s| libc::strcmp(s.name.as_ptr(), name) == 0)
    }

    /// Makes this the table that later bindings fill (lock-free; the first one stays).
    pub fn register(&'static self) {
        if EXPORTS.load(Relaxed).is_null() {
            let _ = EXPORTS.compare_exchange(
                std::ptr::null_mut(),
                self as *const Exports as *mut Exports,
                AcqRel,
                Acquire,
            );
        }
    }
}

/// The table of the wrapped symbols, once the wrappers or an interposer handed it over.
static EXPORTS: AtomicPtr<Exports> = AtomicPtr::new(std::ptr::null_mut());

fn exports() -> Option<&'static Exports> {
    let p = EXPORTS.load(Acquire);
    // SAFETY: only ever set from a `&'static Exports`.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Per library: 0 unbound, 1 the helpers bound (no table of wrapped symbols yet), 2 all bound.
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

/// Fills every empty slot of `lib` from the real library (once it could be found): those of
/// the wrapped symbols (`exports`, or the table handed over before) and the helpers.
pub fn bind(lib: Lib, exports_now: Option<&'static Exports>) {
    if let Some(table) = exports_now {
        table.register();
    }
    let table = exports();
    let done = if table.is_some() { 2 } else { 1 };
    if BOUND[lib as usize].load(Acquire) >= done {
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
            if p != 0 && table.is_none_or(|t| t.wrapper_index(p).is_none()) {
                slot.offer(p);
            }
        }
    };
    if let Some(t) = table {
        t.slots.iter().for_each(fill);
    }
    HELPERS.iter().for_each(fill);
    BOUND[lib as usize].fetch_max(done, Release);
}

/// Driver functions the hook calls itself, the real ones (a few of them are wrapped too).
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
    cuDeviceGetUuid_v2,
    cuDeviceGetUuid,
    cuEventElapsedTime_v2,
    cuEventElapsedTime,
    cuCtxGetFlags,
}

static HELPERS: [Slot; 22] = [
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
    Slot::new(c"cuDeviceGetUuid_v2", Lib::Cuda),
    Slot::new(c"cuDeviceGetUuid", Lib::Cuda),
    Slot::new(c"cuEventElapsedTime_v2", Lib::Cuda),
    Slot::new(c"cuEventElapsedTime", Lib::Cuda),
    Slot::new(c"cuCtxGetFlags", Lib::Cuda),
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

/// `cuThreadExchangeStreamCaptureMode`.
type ExchangeCaptureMode = unsafe extern "C" fn(*mut u32) -> CUresult;

/// This thread's stream-capture interaction mode, relaxed while the guard lives and restored
/// when it drops ([`relaxed_capture`]): the driver's function and the mode to restore.
pub struct RelaxedCapture(Option<(ExchangeCaptureMode, u32)>);

/// Makes this thread's stream-capture interaction mode relaxed until the guard drops. The hook's
/// own event queries and synchronizes are then never taken for a program's unsafe calls: in the
/// driver's default (global) mode, one made by any thread while a thread of the process captures
/// a graph in the global mode (as PyTorch's `torch.cuda.graph` does) fails, and the capture is
/// lost.
pub fn relaxed_capture() -> RelaxedCapture {
    // SAFETY: signature of cuThreadExchangeStreamCaptureMode; valid in/out pointer.
    let exchanged =
        unsafe { helper::<ExchangeCaptureMode>(Helper::cuThreadExchangeStreamCaptureMode) }
            .and_then(|exchange| {
                let mut mode = CU_STREAM_CAPTURE_MODE_RELAXED;
                (unsafe { exchange(&mut mode) } == CUDA_SUCCESS).then_some((exchange, mode))
            });
    RelaxedCapture(exchanged)
}

impl Drop for RelaxedCapture {
    fn drop(&mut self) {
        if let Some((exchange, mut mode)) = self.0 {
            // SAFETY: as in relaxed_capture.
            unsafe { exchange(&mut mode) };
        }
    }
}

/// The context current in this thread (0: none, or it cannot be read).
pub fn current_context() -> usize {
    type F = unsafe extern "C" fn(*mut *mut c_void) -> CUresult;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: signature of cuCtxGetCurrent; valid out-pointer.
    match unsafe { helper::<F>(Helper::cuCtxGetCurrent) } {
        Some(get) if (unsafe { get(&mut ctx) }) == CUDA_SUCCESS => ctx as usize,
        _ => 0,
    }
}

/// The device of the context current in this thread.
pub fn current_device() -> Option<CUdevice> {
    type F = unsafe extern "C" fn(*mut CUdevice) -> CUresult;
    let mut dev: CUdevice = 0;
    // SAFETY: the signature of cuCtxGetDevice; a valid out-pointer.
    let get = unsafe { helper::<F>(Helper::cuCtxGetDevice) }?;
    (unsafe { get(&mut dev) } == CUDA_SUCCESS).then_some(dev)
}
