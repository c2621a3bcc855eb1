//! Allocation and free wrappers: every device allocation is reserved with the daemon before
//! the real call (over the cap: `CUDA_ERROR_OUT_OF_MEMORY` without calling the driver), and
//! every free gives back what its allocation counted.

use proto::protocol::DeviceId;

use crate::cuda::*;
use crate::devices;
use crate::driver::{current_device, helper, Helper};
use crate::ledger::{self, Counted, Kind, LEDGER};
use crate::residency;
use crate::session::{self, Reservation};

/// Reserves `bytes` on the calling thread's GPU, runs the allocation `f` (which returns its
/// result and the key of what it allocated), and keeps the books. `retry` runs before one more
/// try when the cap or the device is full (pools trim their cache there).
fn counted(
    kind: Kind,
    bytes: u64,
    retry: Option<&dyn Fn()>,
    f: &mut dyn FnMut() -> (CUresult, u64),
) -> CUresult {
    if bytes == 0 {
        return f().0;
    }
    counted_on(devices::current().id, kind, bytes, retry, f)
}

/// [`counted`] on `device`.
fn counted_on(
    device: DeviceId,
    kind: Kind,
    bytes: u64,
    retry: Option<&dyn Fn()>,
    f: &mut dyn FnMut() -> (CUresult, u64),
) -> CUresult {
    let mut reservation = session::reserve(device, bytes);
    if let (Reservation::OverCap, Some(retry)) = (&reservation, retry) {
        retry();
        reservation = session::reserve(device, bytes);
    }
    match reservation {
        Reservation::OverCap => CUDA_ERROR_OUT_OF_MEMORY,
        Reservation::Unmanaged => f().0,
        Reservation::Away => counted_while_away(device, kind, bytes, retry, f),
        Reservation::Counted => {
            let (mut r, mut key) = f();
            if let (CUDA_ERROR_OUT_OF_MEMORY, Some(retry)) = (r, retry) {
                retry();
                (r, key) = f();
            }
            if r == CUDA_SUCCESS {
                let stale = LEDGER.lock().record(kind, key, Counted { bytes, device });
                give_back(stale);
            } else {
                session::unreserve(device, bytes);
            }
            r
        }
    }
}

fn give_back(counted: Option<Counted>) {
    if let Some(c) = counted {
        session::unreserve(c.device, c.bytes);
    }
}

/// While the daemon is away: the allocation is checked against the cap on its GPU by this
/// process's own record and recorded, so that the new daemon counts it when the process
/// re-attaches.
fn counted_while_away(
    device: DeviceId,
    kind: Kind,
    bytes: u64,
    retry: Option<&dyn Fn()>,
    f: &mut dyn FnMut() -> (CUresult, u64),
) -> CUresult {
    let Some(_books) = session::away_books() else {
        // Re-attached meanwhile: count it with the daemon.
        return counted_on(device, kind, bytes, retry, f);
    };
    let held = LEDGER.lock().total_on(device);
    if held.saturating_add(bytes) > session::cap() {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    let (r, key) = f();
    if r == CUDA_SUCCESS {
        LEDGER.lock().record(kind, key, Counted { bytes, device });
    }
    r
}

/// Runs the free `f` of `key` and gives back what its allocation counted. The entry leaves the
/// books before the real free: once the driver has freed the address, another thread's
/// allocation may get it (and its own entry) at once.
fn uncounted(kind: Kind, key: u64, f: impl FnOnce() -> CUresult) -> CUresult {
    // While the daemon is away, a re-attach waits until the record is up to date.
    let _books = session::away_books();
    let counted = LEDGER.lock().forget(kind, key);
    let r = f();
    if r == CUDA_SUCCESS {
        give_back(counted);
    } else if let Some(c) = counted {
        LEDGER.lock().record(kind, key, c);
    }
    r
}

unsafe fn read<T: Copy + Default>(p: *const T) -> T {
    if p.is_null() {
        T::default()
    } else {
        *p
    }
}

pub unsafe fn alloc(
    real: unsafe extern "C" fn(*mut CUdeviceptr, usize) -> CUresult,
    dptr: *mut CUdeviceptr,
    bytes: usize,
) -> CUresult {
    counted(Kind::Pointer, bytes as u64, None, &mut || {
        let r = if residency::oversubscribing() {
            residency::alloc(dptr, bytes)
        } else {
            real(dptr, bytes)
        };
        (r, read(dptr))
    })
}

pub unsafe fn alloc_managed(
    real: unsafe extern "C" fn(*mut CUdeviceptr, usize, u32) -> CUresult,
    dptr: *mut CUdeviceptr,
    bytes: usize,
    flags: u32,
) -> CUresult {
    counted(Kind::Pointer, bytes as u64, None, &mut || {
        (real(dptr, bytes, flags), read(dptr))
    })
}

/// Pitched allocations reserve the unpadded size first and the padding once the driver chose
/// the pitch.
pub unsafe fn alloc_pitch(
    real: unsafe extern "C" fn(*mut CUdeviceptr, *mut usize, usize, usize, u32) -> CUresult,
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element: u32,
) -> CUresult {
    let asked = (width as u64).saturating_mul(height as u64);
    let r = counted(Kind::Pointer, asked, None, &mut || {
        (real(dptr, pitch, width, height, element), read(dptr))
    });
    if r != CUDA_SUCCESS || asked == 0 {
        return r;
    }
    let got = (read(pitch) as u64).saturating_mul(height as u64);
    let padding = got.saturating_sub(asked);
    if padding == 0 {
        return r;
    }
    // The same thread and context as the allocation just counted.
    let device = devices::current().id;
    match session::reserve(device, padding) {
        Reservation::Counted | Reservation::Away => {
            LEDGER
                .lock()
                .record(Kind::Pointer, read(dptr), Counted { bytes: got, device });
            r
        }
        Reservation::Unmanaged => r,
        Reservation::OverCap => {
            type Free = unsafe extern "C" fn(CUdeviceptr) -> CUresult;
            let free = helper::<Free>(Helper::cuMemFree_v2);
            uncounted(Kind::Pointer, read(dptr), || {
                free.map_or(CUDA_SUCCESS, |f| f(read(dptr)))
            });
            CUDA_ERROR_OUT_OF_MEMORY
        }
    }
}

pub unsafe fn free(
    real: unsafe extern "C" fn(CUdeviceptr) -> CUresult,
    dptr: CUdeviceptr,
) -> CUresult {
    residency::freed(dptr);
    uncounted(Kind::Pointer, dptr, || real(dptr))
}

/// Trims the pool to nothing cached (`pool` null: the current device's current pool).
unsafe fn trim(pool: CUmemoryPool) {
    type GetPool = unsafe extern "C" fn(*mut CUmemoryPool, CUdevice) -> CUresult;
    type Trim = unsafe extern "C" fn(CUmemoryPool, usize) -> CUresult;
    let mut pool = pool;
    if pool.is_null() {
        let (Some(dev), Some(get_pool)) = (
            current_device(),
            helper::<GetPool>(Helper::cuDeviceGetMemPool),
        ) else {
            return;
        };
        if get_pool(&mut pool, dev) != CUDA_SUCCESS {
            return;
        }
    }
    if let Some(trim_to) = helper::<Trim>(Helper::cuMemPoolTrimTo) {
        trim_to(pool, 0);
    }
}

pub unsafe fn alloc_async(
    real: unsafe extern "C" fn(*mut CUdeviceptr, usize, CUstream) -> CUresult,
    dptr: *mut CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    let retry = || trim(std::ptr::null_mut());
    counted(Kind::Pointer, bytes as u64, Some(&retry), &mut || {
        (real(dptr, bytes, stream), read(dptr))
    })
}

pub unsafe fn alloc_from_pool_async(
    real: unsafe extern "C" fn(*mut CUdeviceptr, usize, CUmemoryPool, CUstream) -> CUresult,
    dptr: *mut CUdeviceptr,
    bytes: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> CUresult {
    let retry = || trim(pool);
    counted(Kind::Pointer, bytes as u64, Some(&retry), &mut || {
        (real(dptr, bytes, pool, stream), read(dptr))
    })
}

pub unsafe fn free_async(
    real: unsafe extern "C" fn(CUdeviceptr, CUstream) -> CUresult,
    dptr: CUdeviceptr,
    stream: CUstream,
) -> CUresult {
    uncounted(Kind::Pointer, dptr, || real(dptr, stream))
}

/// `cuMemCreate`: physical memory; counted when it is on a device (mapping it allocates
/// nothing more).
pub unsafe fn create(
    real: unsafe extern "C" fn(
        *mut CUmemGenericAllocationHandle,
        usize,
        *const CUmemAllocationProp,
        u64,
    ) -> CUresult,
    handle: *mut CUmemGenericAllocationHandle,
    bytes: usize,
    prop: *const CUmemAllocationProp,
    flags: u64,
) -> CUresult {
    let on_device = !prop.is_null() && (*prop).location_type == CU_MEM_LOCATION_TYPE_DEVICE;
    if !on_device {
        return real(handle, bytes, prop, flags);
    }
    // Physical memory is on the device the properties name, whichever is current.
    let device = devices::id_of((*prop).location_id);
    if bytes == 0 {
        return real(handle, bytes, prop, flags);
    }
    counted_on(device, Kind::Handle, bytes as u64, None, &mut || {
        (real(handle, bytes, prop, flags), read(handle))
    })
}

pub unsafe fn release(
    real: unsafe extern "C" fn(CUmemGenericAllocationHandle) -> CUresult,
    handle: CUmemGenericAllocationHandle,
) -> CUresult {
    uncounted(Kind::Handle, handle, || real(handle))
}

pub unsafe fn array_create(
    real: unsafe extern "C" fn(*mut CUarray, *const CudaArrayDescriptor) -> CUresult,
    array: *mut CUarray,
    desc: *const CudaArrayDescriptor,
) -> CUresult {
    if desc.is_null() {
        return real(array, desc);
    }
    let d = &*desc;
    let bytes = ledger::array_bytes(d.width as u64, d.height as u64, 1, d.format, d.num_channels);
    counted(Kind::Array, bytes, None, &mut || {
        (real(array, desc), read(array) as u64)
    })
}

pub unsafe fn array3d_create(
    real: unsafe extern "C" fn(*mut CUarray, *const CudaArray3dDescriptor) -> CUresult,
    array: *mut CUarray,
    desc: *const CudaArray3dDescriptor,
) -> CUresult {
    if desc.is_null() {
        return real(array, desc);
    }
    let d = &*desc;
    let bytes = ledger::array_bytes(
        d.width as u64,
        d.height as u64,
        d.depth as u64,
        d.format,
        d.num_channels,
    );
    counted(Kind::Array, bytes, None, &mut || {
        (real(array, desc), read(array) as u64)
    })
}

pub unsafe fn array_destroy(
    real: unsafe extern "C" fn(CUarray) -> CUresult,
    array: CUarray,
) -> CUresult {
    uncounted(Kind::Array, array as u64, || real(array))
}

pub unsafe fn mipmapped_array_create(
    real: unsafe extern "C" fn(
        *mut CUmipmappedArray,
        *const CudaArray3dDescriptor,
        u32,
    ) -> CUresult,
    array: *mut CUmipmappedArray,
    desc: *const CudaArray3dDescriptor,
    levels: u32,
) -> CUresult {
    if desc.is_null() {
        return real(array, desc, levels);
    }
    let d = &*desc;
    let bytes = ledger::mipmapped_bytes(
        d.width as u64,
        d.height as u64,
        d.depth as u64,
        d.format,
        d.num_channels,
        d.flags,
        levels,
    );
    counted(Kind::Array, bytes, None, &mut || {
        (real(array, desc, levels), read(array) as u64)
    })
}

pub unsafe fn mipmapped_array_destroy(
    real: unsafe extern "C" fn(CUmipmappedArray) -> CUresult,
    array: CUmipmappedArray,
) -> CUresult {
    uncounted(Kind::Array, array as u64, || real(array))
}
