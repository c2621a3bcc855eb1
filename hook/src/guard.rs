//! Keeping Rust panics and chatter inside the hook.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::cuda::CUDA_ERROR_UNKNOWN;

/// Runs a hooked call; a panic inside the hook becomes one stderr line and
/// `CUDA_ERROR_UNKNOWN` (999, the same code as `NVML_ERROR_UNKNOWN`) instead of unwinding into C.
#[inline(always)]
pub fn ffi(name: &'static str, f: impl FnOnce() -> u32) -> u32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            say(format_args!(
                "internal error in {name}; the call fails with error 999"
            ));
            CUDA_ERROR_UNKNOWN
        }
    }
}

/// One line on stderr, prefixed with `gpushare: `. Never on the hot path.
pub fn say(msg: std::fmt::Arguments<'_>) {
    use std::io::Write;
    // One write for the whole line: written in pieces, it interleaved with the program's own
    // output on a shared pipe (a container's, under podman).
    let line = format!("gpushare: {msg}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}
