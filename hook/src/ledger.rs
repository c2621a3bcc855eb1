//! The process's own record of what it allocated (so that a free gives back exactly what its
//! allocation counted), and the size arithmetic of the memory hooks. Pure (but for the
//! process's one [`LEDGER`]); unit-tested.

use std::collections::BTreeMap;

use proto::protocol::DeviceId;

use crate::fork_safe::ForkSafe;

/// This process's record, kept by the allocation and free wrappers.
pub static LEDGER: ForkSafe<Ledger> = ForkSafe::new(Ledger::new());

pub fn after_fork_in_child() {
    // SAFETY: called from the fork child handler.
    unsafe { LEDGER.reset(Ledger::new()) };
}

/// What kind of object an allocation is; each has its own handle space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A device pointer (`cuMemAlloc*`, pitch, managed, async and pool allocations).
    Pointer,
    /// A `cuMemCreate` handle.
    Handle,
    /// A CUDA array or mipmapped array.
    Array,
}

/// What an allocation counted, and on which GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    pub bytes: u64,
    pub device: DeviceId,
}

#[derive(Default)]
pub struct Ledger {
    sizes: BTreeMap<(Kind, u64), Counted>,
}

impl Ledger {
    pub const fn new() -> Ledger {
        Ledger {
            sizes: BTreeMap::new(),
        }
    }

    /// Records a successful allocation; returns an entry it replaced (a handle the driver
    /// reused without our seeing the free), which the caller must unreserve.
    pub fn record(&mut self, kind: Kind, key: u64, counted: Counted) -> Option<Counted> {
        self.sizes.insert((kind, key), counted)
    }

    /// Forgets a freed allocation; what it counted (`None` if it was not counted).
    pub fn forget(&mut self, kind: Kind, key: u64) -> Option<Counted> {
        self.sizes.remove(&(kind, key))
    }

    /// Bytes recorded on `device`.
    pub fn total_on(&self, device: DeviceId) -> u64 {
        self.sizes
            .values()
            .filter(|c| c.device == device)
            .map(|c| c.bytes)
            .sum()
    }

    /// Bytes recorded on each GPU that has any.
    pub fn totals(&self) -> Vec<(DeviceId, u64)> {
        let mut by_device = BTreeMap::<DeviceId, u64>::new();
        for c in self.sizes.values() {
            *by_device.entry(c.device).or_default() += c.bytes;
        }
        by_device.into_iter().filter(|&(_, b)| b > 0).collect()
    }
}

/// Bytes per element of a `CUarray_format` (unknown and block formats: 4, an upper bound for
/// the common ones).
pub fn format_bytes(format: u32) -> u64 {
    match format {
        0x01 | 0x08 => 1,        // UNSIGNED_INT8, SIGNED_INT8
        0x02 | 0x09 | 0x10 => 2, // UNSIGNED_INT16, SIGNED_INT16, HALF
        0x03 | 0x0a | 0x20 => 4, // UNSIGNED_INT32, SIGNED_INT32, FLOAT
        _ => 4,
    }
}

/// Bytes of a CUDA array (a zero height or depth means one row or layer).
pub fn array_bytes(width: u64, height: u64, depth: u64, format: u32, channels: u32) -> u64 {
    width
        .saturating_mul(height.max(1))
        .saturating_mul(depth.max(1))
        .saturating_mul(format_bytes(format))
        .saturating_mul(u64::from(channels.max(1)))
}

/// `CUDA_ARRAY3D_LAYERED`: depth counts layers, which mip levels do not shrink.
const LAYERED: u32 = 0x01;

/// Bytes of a mipmapped array: the sum of its levels, each half the previous (at least 1).
pub fn mipmapped_bytes(
    width: u64,
    height: u64,
    depth: u64,
    format: u32,
    channels: u32,
    flags: u32,
    levels: u32,
) -> u64 {
    let (mut w, mut h, mut d) = (width.max(1), height, depth);
    let mut sum = 0u64;
    for _ in 0..levels.max(1) {
        sum = sum.saturating_add(array_bytes(w, h, d, format, channels));
        w = (w / 2).max(1);
        if h > 0 {
            h = (h / 2).max(1);
        }
        if d > 0 && flags & LAYERED == 0 {
            d = (d / 2).max(1);
        }
    }
    sum
}

/// What `cuMemGetInfo` reports under a cap: total is the cap (never more than the device),
/// free is what the device has and the cap still allows.
pub fn capped_info(free: u64, total: u64, cap: u64, used: u64) -> (u64, u64) {
    let total = total.min(cap);
    (free.min(total.saturating_sub(used)), total)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: DeviceId = DeviceId([1; 16]);
    const B: DeviceId = DeviceId([2; 16]);

    fn on(device: DeviceId, bytes: u64) -> Counted {
        Counted { bytes, device }
    }

    #[test]
    fn frees_give_back_what_was_counted_on_its_gpu() {
        let mut l = Ledger::new();
        assert_eq!(l.record(Kind::Pointer, 0x1000, on(A, 100)), None);
        assert_eq!(l.record(Kind::Handle, 0x1000, on(B, 7)), None);
        assert_eq!(l.record(Kind::Array, 0x2000, on(A, 5)), None);
        assert_eq!((l.total_on(A), l.total_on(B)), (105, 7));
        assert_eq!(l.totals(), vec![(A, 105), (B, 7)]);
        assert_eq!(l.forget(Kind::Pointer, 0x1000), Some(on(A, 100)));
        assert_eq!(
            l.forget(Kind::Pointer, 0x1000),
            None,
            "double free counts nothing"
        );
        assert_eq!(l.forget(Kind::Array, 0x1000), None, "kinds do not mix");
        assert_eq!(l.forget(Kind::Handle, 0x1000), Some(on(B, 7)));
        assert_eq!(l.totals(), vec![(A, 5)]);
    }

    #[test]
    fn a_reused_key_returns_the_stale_entry() {
        let mut l = Ledger::new();
        l.record(Kind::Pointer, 1, on(A, 10));
        assert_eq!(l.record(Kind::Pointer, 1, on(B, 20)), Some(on(A, 10)));
        assert_eq!((l.total_on(A), l.total_on(B)), (0, 20));
    }

    #[test]
    fn array_sizes() {
        assert_eq!(array_bytes(1024, 0, 0, 0x20, 4), 16384);
        assert_eq!(array_bytes(10, 10, 10, 0x01, 1), 1000);
        assert_eq!(array_bytes(u64::MAX, 2, 1, 0x20, 1), u64::MAX);
        // 8x8 floats, 4 levels: 64 + 16 + 4 + 1 elements.
        assert_eq!(mipmapped_bytes(8, 8, 0, 0x20, 1, 0, 4), 4 * 85);
        // Layered: the 3 layers stay.
        assert_eq!(mipmapped_bytes(4, 4, 3, 0x01, 1, LAYERED, 2), 48 + 12);
    }

    #[test]
    fn capped_memory_info() {
        let gib = 1u64 << 30;
        assert_eq!(
            capped_info(70 * gib, 80 * gib, 8 * gib, 3 * gib),
            (5 * gib, 8 * gib)
        );
        // The device is fuller than the cap allows: report the device.
        assert_eq!(capped_info(gib, 80 * gib, 8 * gib, 0), (gib, 8 * gib));
        // Over the cap (other processes of the client): nothing free, no underflow.
        assert_eq!(
            capped_info(70 * gib, 80 * gib, 8 * gib, 9 * gib),
            (0, 8 * gib)
        );
        // A cap above the device is the device.
        assert_eq!(
            capped_info(70 * gib, 80 * gib, u64::MAX, 0),
            (70 * gib, 80 * gib)
        );
    }
}
