//! Launch wrappers: each waits at the gate, calls its real function unchanged, and leaves the
//! gate (where a queue check may have asked for a marker after the launch).

#![allow(clippy::too_many_arguments)]

use std::ffi::c_void;

use crate::cuda::*;
use crate::gate::{self, Stream};

type LaunchKernel = unsafe extern "C" fn(
    CUfunction,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    CUstream,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CUresult;
type LaunchKernelEx = unsafe extern "C" fn(
    *const CUlaunchConfig,
    CUfunction,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CUresult;
type LaunchCooperative = unsafe extern "C" fn(
    CUfunction,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    CUstream,
    *mut *mut c_void,
) -> CUresult;

/// `cuLaunchKernel` and `cuLaunchKernel_ptsz`.
#[inline(always)]
pub unsafe fn kernel(
    real: LaunchKernel,
    per_thread: bool,
    f: CUfunction,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    shmem: u32,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    let s = Stream::Of {
        handle: stream,
        per_thread,
    };
    let lane = gate::enter(s);
    let r = real(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
    gate::leave(lane, s);
    r
}

/// `cuLaunchKernelEx` and `cuLaunchKernelEx_ptsz` (the stream is in the configuration).
#[inline(always)]
pub unsafe fn kernel_ex(
    real: LaunchKernelEx,
    per_thread: bool,
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    let stream = if config.is_null() {
        Stream::Unknown
    } else {
        Stream::Of {
            handle: (*config).h_stream,
            per_thread,
        }
    };
    let lane = gate::enter(stream);
    let r = real(config, f, params, extra);
    gate::leave(lane, stream);
    r
}

/// `cuLaunchCooperativeKernel` and its `_ptsz` form.
#[inline(always)]
pub unsafe fn cooperative(
    real: LaunchCooperative,
    per_thread: bool,
    f: CUfunction,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    shmem: u32,
    stream: CUstream,
    params: *mut *mut c_void,
) -> CUresult {
    let s = Stream::Of {
        handle: stream,
        per_thread,
    };
    let lane = gate::enter(s);
    let r = real(f, gx, gy, gz, bx, by, bz, shmem, stream, params);
    gate::leave(lane, s);
    r
}

/// `cuLaunchCooperativeKernelMultiDevice` (deprecated; one launch on several streams).
#[inline(always)]
pub unsafe fn cooperative_multi_device(
    real: unsafe extern "C" fn(*mut c_void, u32, u32) -> CUresult,
    list: *mut c_void,
    devices: u32,
    flags: u32,
) -> CUresult {
    gate::enter(Stream::Unknown);
    real(list, devices, flags)
}

/// `cuGraphLaunch` and `cuGraphLaunch_ptsz`.
#[inline(always)]
pub unsafe fn graph(
    real: unsafe extern "C" fn(CUgraphExec, CUstream) -> CUresult,
    per_thread: bool,
    exec: CUgraphExec,
    stream: CUstream,
) -> CUresult {
    let s = Stream::Of {
        handle: stream,
        per_thread,
    };
    let lane = gate::enter(s);
    let r = real(exec, stream);
    gate::leave(lane, s);
    r
}
