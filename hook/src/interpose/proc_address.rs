//! The `cuGetProcAddress` interposer: ask the real driver with the caller's exact arguments,
//! then swap the answer for the wrapper that calls exactly that pointer.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cuda::{CUresult, CUDA_SUCCESS};
use crate::driver::{self, Exports, Lib};
use crate::guard::say;

type GetV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, i32, u64) -> CUresult;
type GetV2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, i32, u64, *mut i32) -> CUresult;

/// `cuGetProcAddress` (CUDA 11.3+, four arguments).
pub unsafe fn get_v1(
    real: GetV1,
    exports: &'static Exports,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: i32,
    flags: u64,
) -> CUresult {
    let r = real(symbol, pfn, version, flags);
    substitute(exports, r, symbol, pfn);
    r
}

/// `cuGetProcAddress_v2` (CUDA 12+, with the query status).
pub unsafe fn get_v2(
    real: GetV2,
    exports: &'static Exports,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: i32,
    flags: u64,
    status: *mut i32,
) -> CUresult {
    let r = real(symbol, pfn, version, flags, status);
    substitute(exports, r, symbol, pfn);
    r
}

unsafe fn substitute(
    exports: &'static Exports,
    r: CUresult,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
) {
    if r != CUDA_SUCCESS || pfn.is_null() || symbol.is_null() || (*pfn).is_null() {
        return;
    }
    let requested = base_name(CStr::from_ptr(symbol).to_bytes());
    match wrapper_for(exports, requested, *pfn as usize) {
        Some(w) => *pfn = w as *mut c_void,
        None => warn_if_unknown(exports, requested, *pfn),
    }
}

/// For a name the hook wraps, the driver answered with a function that is no exported symbol
/// (an old ABI like `cuMemAlloc` v1 is one, and is not wrapped on purpose): that entry point
/// runs unmanaged. Said once per process.
fn warn_if_unknown(exports: &Exports, requested: &[u8], p: *mut c_void) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let wrapped = exports
        .slots
        .iter()
        .any(|s| base_name(s.name.to_bytes()) == requested);
    if !wrapped || WARNED.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: dladdr only reads the loader's tables; `info` is a valid out-pointer.
    let exported = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        libc::dladdr(p, &mut info) != 0 && info.dli_saddr == p && !info.dli_sname.is_null()
    };
    if !exported && !WARNED.swap(true, Ordering::AcqRel) {
        say(format_args!(
            "cuGetProcAddress gave a version of {} that the hook does not wrap; it runs unmanaged",
            String::from_utf8_lossy(requested)
        ));
    }
}

/// The wrapper that calls exactly `p`, among the slots for the base name `requested`.
fn wrapper_for(exports: &'static Exports, requested: &[u8], p: usize) -> Option<usize> {
    if exports.wrapper_index(p).is_some() {
        return None;
    }
    driver::bind(Lib::Cuda, Some(exports));
    exports
        .slots
        .iter()
        .position(|s| {
            s.lib == Lib::Cuda
                && base_name(s.name.to_bytes()) == requested
                && s.real.load(Ordering::Acquire) == p
        })
        .map(exports.wrapper)
}

/// A symbol without its ABI suffixes: `cuMemAlloc_v2` and `cuLaunchKernel_ptsz` become
/// `cuMemAlloc` and `cuLaunchKernel`, the names `cuGetProcAddress` is asked for.
pub fn base_name(name: &[u8]) -> &[u8] {
    let mut n = name;
    loop {
        let before = n.len();
        for suffix in [&b"_ptsz"[..], b"_ptds"] {
            if let Some(s) = n.strip_suffix(suffix) {
                n = s;
            }
        }
        if let Some(pos) = n.iter().rposition(|&c| c == b'_') {
            let tail = &n[pos + 1..];
            if tail.len() >= 2 && tail[0] == b'v' && tail[1..].iter().all(u8::is_ascii_digit) {
                n = &n[..pos];
            }
        }
        if n.len() == before {
            return n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::base_name;

    #[test]
    fn base_names_drop_abi_suffixes() {
        assert_eq!(base_name(b"cuMemAlloc_v2"), b"cuMemAlloc");
        assert_eq!(base_name(b"cuLaunchKernel_ptsz"), b"cuLaunchKernel");
        assert_eq!(base_name(b"cuMemAllocAsync_ptsz"), b"cuMemAllocAsync");
        assert_eq!(base_name(b"cuMemcpy2DAsync_v2_ptsz"), b"cuMemcpy2DAsync");
        assert_eq!(base_name(b"cuGetProcAddress_v2"), b"cuGetProcAddress");
        assert_eq!(base_name(b"cuEventDestroy_v2"), b"cuEventDestroy");
        assert_eq!(base_name(b"cuInit"), b"cuInit");
        assert_eq!(base_name(b"cuMemGetInfo_v"), b"cuMemGetInfo_v");
    }
}
