//! The `dlsym` interposer.
//!
//! `dlsym` is called from everywhere, at any time (Rust's own `thread::spawn` calls it), so this
//! path allocates nothing, takes no lock, and guards against re-entry. It hands out a wrapper
//! only for the driver symbols in [`crate::exports`]; everything else is a tail jump to the real
//! `dlsym`, so that glibc still sees the caller's return address (`RTLD_NEXT` depends on it).

use std::cell::Cell;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicUsize, Ordering::*};

use crate::exports;

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static RESOLVING: Cell<bool> = const { Cell::new(false) };
}

/// glibc's `dlsym`, found with `dlvsym` (never a private glibc symbol).
fn real_dlsym_fn() -> Option<DlsymFn> {
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

/// What the trampoline does: return `value` when `forward` is 0, else jump to `forward`
/// with the caller's arguments.
#[repr(C)]
struct Decision {
    value: *mut c_void,
    forward: usize,
}

unsafe extern "C" fn decide(handle: *mut c_void, name: *const c_char) -> Decision {
    let Some(real) = real_dlsym_fn() else {
        return Decision {
            value: std::ptr::null_mut(),
            forward: 0,
        };
    };
    let forward = Decision {
        value: std::ptr::null_mut(),
        forward: real as usize,
    };
    if name.is_null() || handle == libc::RTLD_NEXT {
        return forward;
    }
    let Some(i) = exports::slot_by_name(name) else {
        return forward;
    };
    let p = real(handle, name);
    if p.is_null() {
        // Let the real call fail again so that `dlerror` says why.
        return forward;
    }
    let value = if exports::wrapper_index(p as usize).is_some() {
        p
    } else if exports::SLOTS[i].offer(p as usize) {
        exports::wrapper(i) as *mut c_void
    } else {
        // Another library of the same name: not ours to manage.
        p
    };
    Decision { value, forward: 0 }
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

#[cfg(test)]
mod tests {
    #[test]
    fn forwards_unrelated_names() {
        // SAFETY: plain dlsym calls.
        unsafe {
            let p = super::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr());
            assert_eq!(p as usize, libc::malloc as *const () as usize);
            let q = super::dlsym(libc::RTLD_DEFAULT, c"no_such_symbol_here".as_ptr());
            assert!(q.is_null());
        }
    }
}
