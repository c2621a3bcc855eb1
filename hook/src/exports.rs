//! The hook's exported entry points: every driver and NVML entry point the hook wraps, exported
//! under its own name (for programs linked with `-lcuda`) and handed out by the `dlsym` and
//! `cuGetProcAddress` interposers; the `dlsym` trampoline itself; and the functions PyTorch's
//! cache release calls.
//!
//! Each wrapper calls exactly one real symbol (its slot), so that ABI versions (`_v2`) and
//! per-thread default stream variants (`_ptsz`) keep their meaning.

#![allow(non_snake_case, clippy::too_many_arguments)]

use std::ffi::{c_char, c_void};

use crate::cuda::*;
use crate::driver::{Exports, Lib, Slot};
use crate::interpose::{dlsym as dlsym_decision, proc_address};
use crate::{launch, memory, memory_info, residency, session, waits};

macro_rules! wrappers {
    ($(
        $lib:ident $name:ident ( $($arg:ident : $ty:ty),* ) => $imp:path $([$($extra:expr),*])? ;
    )*) => {
        /// Index of each wrapped symbol in [`SLOTS`].
        #[allow(non_camel_case_types, dead_code)]
        #[derive(Clone, Copy)]
        enum Sym { $($name),* }

        const COUNT: usize = [$(stringify!($name)),*].len();

        /// The real functions behind the wrappers, in [`Sym`] order.
        pub static SLOTS: [Slot; COUNT] = [
            $(Slot::new(
                match std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                    Ok(c) => c,
                    Err(_) => panic!("bad symbol name"),
                },
                Lib::$lib,
            )),*
        ];

        /// Address of the wrapper of slot `i`.
        fn wrapper(i: usize) -> usize {
            match i {
                $(x if x == Sym::$name as usize => $name as *const () as usize,)*
                _ => 0,
            }
        }

        $(
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> u32 {
                let p = SLOTS[Sym::$name as usize].get_in(&EXPORTS);
                if p == 0 {
                    return Lib::$lib.missing();
                }
                // SAFETY: the slot holds the real symbol of this very name and signature.
                let real: unsafe extern "C" fn($($ty),*) -> u32 = unsafe { std::mem::transmute(p) };
                crate::guard::ffi(stringify!($name), || unsafe {
                    $imp(real, $($($extra,)*)? $($arg),*)
                })
            }
        )*
    };
}

wrappers! {
    Cuda cuInit(flags: u32) => session::cu_init;
    Cuda cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: i32, flags: u64)
        => proc_address::get_v1 [&EXPORTS];
    Cuda cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, version: i32, flags: u64,
        status: *mut i32) => proc_address::get_v2 [&EXPORTS];

    Cuda cuLaunchKernel(f: CUfunction, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32,
        shmem: u32, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void)
        => launch::kernel [false];
    Cuda cuLaunchKernel_ptsz(f: CUfunction, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32,
        shmem: u32, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void)
        => launch::kernel [true];
    Cuda cuLaunchKernelEx(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void,
        extra: *mut *mut c_void) => launch::kernel_ex [false];
    Cuda cuLaunchKernelEx_ptsz(config: *const CUlaunchConfig, f: CUfunction,
        params: *mut *mut c_void, extra: *mut *mut c_void) => launch::kernel_ex [true];
    Cuda cuLaunchCooperativeKernel(f: CUfunction, gx: u32, gy: u32, gz: u32, bx: u32, by: u32,
        bz: u32, shmem: u32, stream: CUstream, params: *mut *mut c_void)
        => launch::cooperative [false];
    Cuda cuLaunchCooperativeKernel_ptsz(f: CUfunction, gx: u32, gy: u32, gz: u32, bx: u32, by: u32,
        bz: u32, shmem: u32, stream: CUstream, params: *mut *mut c_void)
        => launch::cooperative [true];
    Cuda cuLaunchCooperativeKernelMultiDevice(list: *mut c_void, devices: u32, flags: u32)
        => launch::cooperative_multi_device;
    Cuda cuGraphLaunch(exec: CUgraphExec, stream: CUstream) => launch::graph [false];
    Cuda cuGraphLaunch_ptsz(exec: CUgraphExec, stream: CUstream) => launch::graph [true];

    Cuda cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize) => memory::alloc;
    Cuda cuMemAllocPitch_v2(dptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize,
        element: u32) => memory::alloc_pitch;
    Cuda cuMemAllocManaged(dptr: *mut CUdeviceptr, bytes: usize, flags: u32)
        => memory::alloc_managed;
    Cuda cuMemFree_v2(dptr: CUdeviceptr) => memory::free;
    Cuda cuMemAllocAsync(dptr: *mut CUdeviceptr, bytes: usize, stream: CUstream)
        => memory::alloc_async;
    Cuda cuMemAllocAsync_ptsz(dptr: *mut CUdeviceptr, bytes: usize, stream: CUstream)
        => memory::alloc_async;
    Cuda cuMemAllocFromPoolAsync(dptr: *mut CUdeviceptr, bytes: usize, pool: CUmemoryPool,
        stream: CUstream) => memory::alloc_from_pool_async;
    Cuda cuMemAllocFromPoolAsync_ptsz(dptr: *mut CUdeviceptr, bytes: usize, pool: CUmemoryPool,
        stream: CUstream) => memory::alloc_from_pool_async;
    Cuda cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream) => memory::free_async;
    Cuda cuMemFreeAsync_ptsz(dptr: CUdeviceptr, stream: CUstream) => memory::free_async;
    Cuda cuMemCreate(handle: *mut CUmemGenericAllocationHandle, bytes: usize,
        prop: *const CUmemAllocationProp, flags: u64) => memory::create;
    Cuda cuMemRelease(handle: CUmemGenericAllocationHandle) => memory::release;
    Cuda cuArrayCreate_v2(array: *mut CUarray, desc: *const CudaArrayDescriptor)
        => memory::array_create;
    Cuda cuArray3DCreate_v2(array: *mut CUarray, desc: *const CudaArray3dDescriptor)
        => memory::array3d_create;
    Cuda cuArrayDestroy(array: CUarray) => memory::array_destroy;
    Cuda cuMipmappedArrayCreate(array: *mut CUmipmappedArray, desc: *const CudaArray3dDescriptor,
        levels: u32) => memory::mipmapped_array_create;
    Cuda cuMipmappedArrayDestroy(array: CUmipmappedArray) => memory::mipmapped_array_destroy;

    Cuda cuMemGetInfo(free: *mut u32, total: *mut u32) => memory_info::get_info_v1;
    Cuda cuMemGetInfo_v2(free: *mut usize, total: *mut usize) => memory_info::get_info;
    Cuda cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) => memory_info::device_total;
    Cuda cuCtxSynchronize() => waits::ctx;
    Cuda cuCtxSynchronize_v2(ctx: CUcontext) => waits::ctx_v2;
    Cuda cuStreamSynchronize(stream: CUstream) => waits::stream;
    Cuda cuStreamSynchronize_ptsz(stream: CUstream) => waits::stream;
    Cuda cuEventSynchronize(event: CUevent) => waits::event;
    Nvml nvmlDeviceGetMemoryInfo(dev: nvmlDevice_t, mem: *mut NvmlMemory) => memory_info::nvml_info;
    Nvml nvmlDeviceGetMemoryInfo_v2(dev: nvmlDevice_t, mem: *mut NvmlMemoryV2)
        => memory_info::nvml_info_v2;
}

/// The wrapped symbols, as the interposers and the driver's slots see them.
pub static EXPORTS: Exports = Exports {
    slots: &SLOTS,
    wrapper,
};

unsafe extern "C" fn decide(handle: *mut c_void, name: *const c_char) -> dlsym_decision::Decision {
    dlsym_decision::decide(&EXPORTS, handle, name)
}

/// `dlsym`: decides without touching the caller's frame, then returns or tail-jumps.
///
/// # Safety
/// Called by C with `dlsym`'s contract.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    std::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {decide}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rdx, rdx",
        "jz 2f",
        "jmp rdx",
        "2:",
        "ret",
        decide = sym decide,
    )
}

/// `dlsym` for aarch64 (same scheme; built but not exercised in CI).
///
/// # Safety
/// Called by C with `dlsym`'s contract.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    std::arch::naked_asm!(
        "stp x0, x1, [sp, #-32]!",
        "str x30, [sp, #16]",
        "bl {decide}",
        "ldr x30, [sp, #16]",
        "cbz x1, 2f",
        "mov x16, x1",
        "ldp x0, x1, [sp], #32",
        "br x16",
        "2:",
        "add sp, sp, #32",
        "ret",
        decide = sym decide,
    )
}

/// For PyTorch's cache release (see `dist/python/gpushare_release.py`): 1 when the process should
/// release its allocator's cached memory now, given that its next iteration takes about
/// `iteration_ns`.
#[unsafe(no_mangle)]
pub extern "C" fn gpushare_release_due(iteration_ns: u64) -> i32 {
    std::panic::catch_unwind(|| residency::release_due(iteration_ns.saturating_mul(3) / 2))
        .map_or(0, i32::from)
}

/// For PyTorch's cache release: -1 before this process attached to the daemon, 1 when its
/// client releases cached memory, 0 otherwise.
#[unsafe(no_mangle)]
pub extern "C" fn gpushare_release_wanted() -> i32 {
    match session::state_if_tried() {
        None => -1,
        Some(session::Attach::Managed) => i32::from(residency::releasing_cache()),
        Some(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_has_its_own_name_and_wrapper() {
        for (i, s) in SLOTS.iter().enumerate() {
            // SAFETY: NUL-terminated names.
            assert_eq!(
                unsafe { EXPORTS.slot_by_name(s.name.as_ptr()) },
                Some(i),
                "{:?}",
                s.name
            );
            assert_eq!(EXPORTS.wrapper_index(wrapper(i)), Some(i));
        }
        assert_eq!(
            unsafe { EXPORTS.slot_by_name(c"cuMemAlloc".as_ptr()) },
            None,
            "v1 is not wrapped"
        );
        assert_eq!(unsafe { EXPORTS.slot_by_name(c"malloc".as_ptr()) }, None);
        assert_eq!(EXPORTS.wrapper_index(0), None);
    }

    #[test]
    fn forwards_unrelated_names() {
        // SAFETY: plain dlsym calls.
        unsafe {
            let p = dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr());
            assert_eq!(p as usize, libc::malloc as *const () as usize);
            let q = dlsym(libc::RTLD_DEFAULT, c"no_such_symbol_here".as_ptr());
            assert!(q.is_null());
        }
    }
}
