//! `libgpushare.so`: the preload library that puts a CUDA process under `gpushared`.
//!
//! Loaded with `LD_PRELOAD`, it interposes `dlsym`, `cuGetProcAddress`/`cuGetProcAddress_v2`
//! and exports the driver entry points it manages, so that every kernel launch and device
//! allocation passes through it however the program found the driver function:
//!
//! - launches wait for the GPU token ([`gate`]): a cheap clock compare on each launch, a round
//!   trip to the daemon only when the lease has run out;
//! - allocations are counted against the client's memory cap ([`memory`], [`ledger`]), and the
//!   memory-size queries report the cap;
//! - an oversubscribing client's device allocations are managed memory, moved out and back in
//!   bulk at token hand-overs ([`residency`]);
//! - without a daemon the process runs unmanaged and says so once on stderr.
//!
//! Nothing runs at load time; the library attaches to the daemon on the first CUDA call.

mod clock;
mod cuda;
mod daemon_link;
mod driver;
mod exports;
mod fork_safe;
mod gate;
mod guard;
mod interpose;
mod launch;
mod ledger;
mod memory;
mod memory_info;
mod residency;
mod session;
mod streams;
