//! Which GPU a call is about: the device of the context current in the calling thread, named to
//! the daemon by its UUID ([`DeviceId`]), which is the same whatever `CUDA_VISIBLE_DEVICES`
//! makes of its ordinal. Each GPU has its own token and memory accounts in the daemon.
//!
//! UUIDs are read once per ordinal and kept. A process is *multi-device* once it has used a
//! second ordinal; only then does the launch path ask the driver which device a launch goes to,
//! to find its lane ([`crate::lanes`]); one process per GPU, the common case, never pays for
//! that.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::*};

use proto::protocol::DeviceId;

use crate::cuda::*;
use crate::driver::{current_device, helper, Helper};
use crate::fork_safe::ForkSafe;
use crate::lanes::Lane;

/// Ordinals whose UUID is kept; a larger one is named by its ordinal (see [`by_ordinal`]).
const KEPT: usize = 64;

static IDS: ForkSafe<[Option<DeviceId>; KEPT]> = ForkSafe::new([None; KEPT]);
/// The first ordinal this process used (-1: none yet).
static FIRST: AtomicI32 = AtomicI32::new(-1);
/// A second ordinal was used.
static MULTI: AtomicBool = AtomicBool::new(false);

/// A GPU as the hook knows it: its ordinal in this process and its UUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device {
    pub ordinal: CUdevice,
    pub id: DeviceId,
}

impl Device {
    /// No device yet.
    pub const NONE: Device = Device {
        ordinal: -1,
        id: DeviceId([0; 16]),
    };
}

/// The device of the calling thread's current context (the first one used, or ordinal 0, when
/// no context is current).
pub fn current() -> Device {
    let ordinal = current_device().unwrap_or_else(|| FIRST.load(Acquire).max(0));
    note_used(ordinal);
    Device {
        ordinal,
        id: id_of(ordinal),
    }
}

impl Device {
    /// Its lane.
    pub fn lane(self) -> Lane {
        Lane::of(self.ordinal)
    }
}

/// The lane of the first device this process used (the first lane before any).
#[inline(always)]
pub fn first_lane() -> Lane {
    Lane::of(FIRST.load(Relaxed))
}

/// The lane a launch of the calling thread goes to, and its device ordinal where the driver was
/// asked: only in a multi-device process (otherwise every launch goes to the one device, the
/// `first` lane).
#[inline(always)]
pub fn launch_lane(first: Lane) -> (Lane, Option<CUdevice>) {
    if !MULTI.load(Relaxed) {
        return (first, None);
    }
    match current_device() {
        Some(d) => (Lane::of(d), Some(d)),
        None => (first, None),
    }
}

/// The lane of the device named `id` to the daemon, among those this process used.
pub fn lane_of(id: DeviceId) -> Option<Lane> {
    let ids = IDS.lock();
    let i = ids.iter().position(|kept| *kept == Some(id));
    if let Some(i) = i {
        return Some(Lane::of(i as CUdevice));
    }
    // an ordinal past those kept, named by it
    let ordinal = CUdevice::from_be_bytes(id.0[12..].try_into().ok()?);
    (by_ordinal(ordinal) == id).then(|| Lane::of(ordinal))
}

fn note_used(ordinal: CUdevice) {
    match FIRST.compare_exchange(-1, ordinal, AcqRel, Acquire) {
        Ok(_) => {}
        Err(first) if first != ordinal => MULTI.store(true, Release),
        Err(_) => {}
    }
}

/// The UUID of `ordinal`, read from the driver once.
pub fn id_of(ordinal: CUdevice) -> DeviceId {
    let slot = usize::try_from(ordinal).ok().filter(|&i| i < KEPT);
    if let Some(i) = slot {
        if let Some(id) = IDS.lock()[i] {
            return id;
        }
    }
    let id = read_uuid(ordinal).unwrap_or_else(|| by_ordinal(ordinal));
    if let Some(i) = slot {
        IDS.lock()[i] = Some(id);
    }
    id
}

/// The name of a device whose UUID the driver does not tell: zeros and its ordinal.
pub fn by_ordinal(ordinal: CUdevice) -> DeviceId {
    let mut id = [0u8; 16];
    id[12..].copy_from_slice(&ordinal.to_be_bytes());
    DeviceId(id)
}

fn read_uuid(ordinal: CUdevice) -> Option<DeviceId> {
    type F = unsafe extern "C" fn(*mut [u8; 16], CUdevice) -> CUresult;
    let mut uuid = [0u8; 16];
    // SAFETY: the signature of cuDeviceGetUuid(_v2) (CUuuid is 16 bytes); a valid out-pointer.
    let get = unsafe {
        helper::<F>(Helper::cuDeviceGetUuid_v2).or_else(|| helper::<F>(Helper::cuDeviceGetUuid))
    }?;
    (unsafe { get(&mut uuid, ordinal) } == CUDA_SUCCESS).then_some(DeviceId(uuid))
}

pub fn after_fork_in_child() {
    // The same GPUs under the same ordinals, read again if needed (another thread may have held
    // the lock at the fork).
    // SAFETY: called from the fork child handler.
    unsafe { IDS.reset([None; KEPT]) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_without_a_uuid_are_named_by_ordinal() {
        assert_eq!(by_ordinal(0), DeviceId([0; 16]));
        assert_eq!(by_ordinal(3).0[15], 3);
        assert_ne!(by_ordinal(1), by_ordinal(2));
    }
}
