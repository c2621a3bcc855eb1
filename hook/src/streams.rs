//! The streams a lease's work went to, so that the end of the lease can wait for all of them;
//! kept per lane ([`crate::lanes`]), as leases are.
//!
//! Each launch compares its stream with the last one noted (one atomic load); only a launch on
//! another stream than the previous one does more. Up to [`MAX`] streams per lease are kept;
//! work on more streams than that is not waited for.

use std::sync::atomic::{AtomicUsize, Ordering::*};

use crate::cuda::CUstream;
use crate::lanes::{Lane, PerLane};

pub const MAX: usize = 8;
const EMPTY: usize = 0;
/// Keys are handles with the top bit flipped, so that the null stream is not [`EMPTY`].
const TAG: usize = 1 << (usize::BITS - 1);

static LAST: PerLane<AtomicUsize> = PerLane([const { AtomicUsize::new(EMPTY) }; crate::lanes::MAX]);
static USED: PerLane<[AtomicUsize; MAX]> =
    PerLane([const { [const { AtomicUsize::new(EMPTY) }; MAX] }; crate::lanes::MAX]);

/// Notes that work was launched on `handle` (a plain-call stream handle) in `lane`.
#[inline(always)]
pub fn note(lane: Lane, handle: CUstream) {
    let key = handle as usize ^ TAG;
    if LAST[lane].load(Relaxed) != key {
        note_new(lane, key);
    }
}

#[cold]
fn note_new(lane: Lane, key: usize) {
    LAST[lane].store(key, Relaxed);
    for slot in &USED[lane] {
        match slot.compare_exchange(EMPTY, key, AcqRel, Acquire) {
            Ok(_) => return,
            Err(current) if current == key => return,
            Err(_) => {}
        }
    }
}

/// The stream launched on last in the lease of `lane`, if any.
pub fn last(lane: Lane) -> Option<CUstream> {
    match LAST[lane].load(Relaxed) {
        EMPTY => None,
        key => Some((key ^ TAG) as CUstream),
    }
}

/// The streams noted in `lane` since the last call, which starts a new set; returns how many.
pub fn take(lane: Lane, out: &mut [CUstream; MAX]) -> usize {
    LAST[lane].store(EMPTY, Relaxed);
    let mut n = 0;
    for slot in &USED[lane] {
        let key = slot.swap(EMPTY, AcqRel);
        if key != EMPTY {
            out[n] = (key ^ TAG) as CUstream;
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_collected_once_each_and_the_set_restarts() {
        let mut out = [std::ptr::null_mut(); MAX];
        let (l, other) = (Lane::of(5), Lane::of(6));
        take(l, &mut out);
        let (a, b) = (0x1000 as CUstream, 0x2000 as CUstream);
        for s in [a, a, std::ptr::null_mut(), a, b, b, a] {
            note(l, s);
        }
        assert_eq!(
            take(other, &mut out),
            0,
            "another lane's streams are its own"
        );
        let n = take(l, &mut out);
        let mut got: Vec<usize> = out[..n].iter().map(|s| *s as usize).collect();
        got.sort();
        assert_eq!(got, [0, 0x1000, 0x2000]);
        assert_eq!(take(l, &mut out), 0);
        note(l, a);
        assert_eq!(
            take(l, &mut out),
            1,
            "a new set notes the same stream again"
        );
        for i in 1..=20 {
            note(l, (i * 0x100) as CUstream);
        }
        assert_eq!(take(l, &mut out), MAX, "at most MAX are kept");
    }
}
