//! The program's waits for the GPU (`cuCtxSynchronize[_v2]`, `cuStreamSynchronize[_ptsz]`,
//! `cuEventSynchronize`), counted when they blocked: each is a moment where the program cannot
//! go on until the GPU has run its work, and beside another process's work the driver's
//! time-slicing makes it wait for the other's turn too ([`pacing::gpu_time`]).

use crate::clock::now_ns;
use crate::cuda::*;
use crate::devices;
use crate::pacing;

/// A wait shorter than this did not block: the work was done already.
const BLOCKED_NS: u64 = 5_000;

/// Calls `wait` (a synchronize), counting it in the lane its launches would go to if it blocked
/// (asking the driver nothing, and noting no device as used, in a process of one GPU).
fn counted(wait: impl FnOnce() -> CUresult) -> CUresult {
    let from = now_ns();
    let r = wait();
    if now_ns().saturating_sub(from) >= BLOCKED_NS {
        let (lane, _) = devices::launch_lane(devices::first_lane());
        pacing::gpu_time::waited(lane);
    }
    r
}

/// `cuCtxSynchronize`.
pub unsafe fn ctx(real: unsafe extern "C" fn() -> CUresult) -> CUresult {
    // SAFETY: the caller's call, passed on.
    counted(|| unsafe { real() })
}

/// `cuCtxSynchronize_v2` (CUDA 13's, of a context; the runtime's `cudaDeviceSynchronize`).
pub unsafe fn ctx_v2(
    real: unsafe extern "C" fn(CUcontext) -> CUresult,
    ctx: CUcontext,
) -> CUresult {
    // SAFETY: the caller's call, passed on.
    counted(|| unsafe { real(ctx) })
}

/// `cuStreamSynchronize[_ptsz]`.
pub unsafe fn stream(
    real: unsafe extern "C" fn(CUstream) -> CUresult,
    stream: CUstream,
) -> CUresult {
    // SAFETY: the caller's call, passed on.
    counted(|| unsafe { real(stream) })
}

/// `cuEventSynchronize`.
pub unsafe fn event(real: unsafe extern "C" fn(CUevent) -> CUresult, event: CUevent) -> CUresult {
    // SAFETY: the caller's call, passed on.
    counted(|| unsafe { real(event) })
}
