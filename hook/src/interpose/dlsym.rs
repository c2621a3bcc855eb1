//! The `dlsym` interposer's decision.
//!
//! `dlsym` is called from everywhere, at any time (Rust's own `thread::spawn` calls it), so this
//! path allocates nothing, takes no lock, and guards against re-entry. It hands out a wrapper
//! only for the wrapped driver symbols (the [`Exports`] table); everything else is a tail jump
//! to the real `dlsym`, so that glibc still sees the caller's return address (`RTLD_NEXT`
//! depends on it). The exported `dlsym` trampoline, with the wrappers, calls [`decide`].

use std::ffi::{c_char, c_void};

use crate::driver::{real_dlsym_fn, Exports};

/// What the trampoline does: return `value` when `forward` is 0, else jump to `forward`
/// with the caller's arguments.
#[repr(C)]
pub struct Decision {
    value: *mut c_void,
    forward: usize,
}

/// The answer of `dlsym(handle, name)` for the wrapped symbols of `exports`.
///
/// # Safety
/// Called with `dlsym`'s arguments.
#[inline(always)]
pub unsafe fn decide(
    exports: &'static Exports,
    handle: *mut c_void,
    name: *const c_char,
) -> Decision {
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
    let Some(i) = exports.slot_by_name(name) else {
        return forward;
    };
    let p = real(handle, name);
    if p.is_null() {
        // Let the real call fail again so that `dlerror` says why.
        return forward;
    }
    let value = if exports.wrapper_index(p as usize).is_some() {
        p
    } else {
        // A slot filled here is filled by later bindings' standards too.
        exports.register();
        if exports.slots[i].offer(p as usize) {
            (exports.wrapper)(i) as *mut c_void
        } else {
            // Another library of the same name: not ours to manage.
            p
        }
    };
    Decision { value, forward: 0 }
}
