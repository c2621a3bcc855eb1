//! The streams a lease's work went to, so that the end of the lease can wait for all of them.
//!
//! Each launch compares its stream with the last one noted (one atomic load); only a launch on
//! another stream than the previous one does more. Up to [`MAX`] streams per lease are kept;
//! work on more streams than that is not waited for.

use std::sync::atomic::{AtomicUsize, Ordering::*};

use crate::cuda::CUstream;

pub const MAX: usize = 8;
const EMPTY: usize = 0;
/// Keys are handles with the top bit flipped, so that the null stream is not [`EMPTY`].
const TAG: usize = 1 << (usize::BITS - 1);

static LAST: AtomicUsize = AtomicUsize::new(EMPTY);
static USED: [AtomicUsize; MAX] = [const { AtomicUsize::new(EMPTY) }; MAX];

/// Notes that work was launched on `handle` (a plain-call stream handle).
#[inline(always)]
pub fn note(handle: CUstream) {
    let key = handle as usize ^ TAG;
    if LAST.load(Relaxed) != key {
        note_new(key);
    }
}

#[cold]
fn note_new(key: usize) {
    LAST.store(key, Relaxed);
    for slot in &USED {
        match slot.compare_exchange(EMPTY, key, AcqRel, Acquire) {
            Ok(_) => return,
            Err(current) if current == key => return,
            Err(_) => {}
        }
    }
}

/// The stream launched on last in this lease, if any.
pub fn last() -> Option<CUstream> {
    match LAST.load(Relaxed) {
        EMPTY => None,
        key => Some((key ^ TAG) as CUstream),
    }
}

/// The streams noted since the last call, which starts a new set; returns how many.
pub fn take(out: &mut [CUstream; MAX]) -> usize {
    LAST.store(EMPTY, Relaxed);
    let mut n = 0;
    for slot in &USED {
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
        take(&mut out);
        let (a, b) = (0x1000 as CUstream, 0x2000 as CUstream);
        for s in [a, a, std::ptr::null_mut(), a, b, b, a] {
            note(s);
        }
        let n = take(&mut out);
        let mut got: Vec<usize> = out[..n].iter().map(|s| *s as usize).collect();
        got.sort();
        assert_eq!(got, [0, 0x1000, 0x2000]);
        assert_eq!(take(&mut out), 0);
        note(a);
        assert_eq!(take(&mut out), 1, "a new set notes the same stream again");
        for i in 1..=20 {
            note((i * 0x100) as CUstream);
        }
        assert_eq!(take(&mut out), MAX, "at most MAX are kept");
    }
}
