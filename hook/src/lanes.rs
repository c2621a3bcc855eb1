//! Lanes: a process holds each GPU's lease on its own, and what the hook keeps about a lease
//! (its gate, the queue's pacing, the streams it used, a launch being timed) is kept per GPU, in
//! the lane of the device's ordinal. A process that drives several GPUs at once (a thread per
//! GPU, or one thread launching asynchronously on each in turn) then runs on all of them at once,
//! and each GPU's scheduler weighs it there as it weighs any other process.
//!
//! There are [`MAX`] lanes; ordinals that far apart share one, and a launch on the other GPU of a
//! lane ends the lease held there first (the gate's switch).

use std::ops::Index;

/// How many lanes there are (a power of two).
pub const MAX: usize = 16;

/// The lane of a GPU: an index below [`MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane(u8);

impl Lane {
    /// The lane of ordinal 0.
    pub const FIRST: Lane = Lane(0);

    /// The lane of device ordinal `ordinal` (a negative one: the first lane).
    #[inline(always)]
    pub fn of(ordinal: i32) -> Lane {
        Lane((ordinal.max(0) as usize & (MAX - 1)) as u8)
    }

    #[inline(always)]
    pub fn index(self) -> usize {
        self.0 as usize & (MAX - 1)
    }

    /// Every lane, in order.
    pub fn all() -> impl Iterator<Item = Lane> {
        (0..MAX as u8).map(Lane)
    }
}

/// One `T` per lane.
pub struct PerLane<T>(pub [T; MAX]);

impl<T> Index<Lane> for PerLane<T> {
    type Output = T;

    #[inline(always)]
    fn index(&self, lane: Lane) -> &T {
        &self.0[lane.index()]
    }
}

impl<T> PerLane<T> {
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_map_to_lanes_and_wrap() {
        assert_eq!(Lane::of(0).index(), 0);
        assert_eq!(Lane::of(3).index(), 3);
        assert_eq!(Lane::of(-1), Lane::of(0));
        assert_eq!(Lane::of(MAX as i32 + 2), Lane::of(2));
        assert_eq!(Lane::all().count(), MAX);
    }
}
