//! `libgpushare.so`: the preload library that puts a CUDA process under `gpushared`.
//!
//! Loaded with `LD_PRELOAD`, it interposes `dlsym`, `cuGetProcAddress`/`cuGetProcAddress_v2`
//! and exports the driver entry points it manages, so that every kernel launch and device
//! allocation passes through it however the program found the driver function:
//!
//! - launches wait for the GPU token ([`gate`]): a cheap clock compare on each launch, a round
//!   trip to the daemon only when the lease has run out or was revoked ([`revocation`]); a
//!   holder keeps a bounded amount of work queued on the GPU ([`pacing`]); a process on several
//!   GPUs holds each GPU's lease on its own ([`lanes`]);
//! - allocations are counted against the client's memory cap ([`memory`], [`ledger`]), and the
//!   memory-size queries report the cap;
//! - an oversubscribing client's device allocations are managed memory, moved out and back in
//!   bulk at token hand-overs ([`residency`]);
//! - without a daemon the process runs unmanaged and says so once on stderr.
//!
//! Nothing runs at load time; the library attaches to the daemon on the first CUDA call. A
//! program that never calls CUDA only pays for loading it (which is what makes preloading it
//! into every program of a server, `/etc/ld.so.preload`, affordable), and set-user-ID programs
//! never read its environment variables ([`env`]).
//!
//! # Layers
//!
//! The modules form layers, bottom to top. A module uses only modules listed before it in this
//! list (a test, `hook/tests/layers.rs`, reads the order from here and checks every `crate::`
//! path against it):
//!
//! 1. primitives: [`env`], [`cuda`], [`clock`], [`guard`], [`stats`], [`fork_safe`], [`ledger`],
//!    [`lanes`], [`streams`], and at the side the daemon's wire link, [`daemon_link`];
//! 2. the interposition table: [`driver`] (the real functions' slots, symbol resolution and the
//!    table of wrapped symbols), [`interpose`] (the `dlsym` and `cuGetProcAddress` decisions)
//!    and [`devices`] (which GPU a call is about);
//! 3. the lease state and its pacing: [`kernel_timer`], [`pacing`], [`lease`], how long the
//!    process stays away once it pauses, [`pauses`], and how a thread waits for a grant,
//!    [`grant_wait`];
//! 4. the policies: [`revocation`], [`residency`], [`session`], [`memory`], [`memory_info`],
//!    [`gate`], [`launch`], and the program's waits for the GPU, [`waits`];
//! 5. the exported `extern "C"` entry points: [`exports`].
//!
//! A lower module never calls up: what the upper layers need to share lives in a lower module
//! (the lease's state in [`lease`], the allocation record in [`ledger`], the current context in
//! [`driver`]), and the table of wrapped symbols is handed down to the interposers as a value.

mod clock;
mod cuda;
mod daemon_link;
mod devices;
mod driver;
mod env;
mod exports;
mod fork_safe;
mod gate;
mod grant_wait;
mod guard;
mod interpose;
mod kernel_timer;
mod lanes;
mod launch;
mod lease;
mod ledger;
mod memory;
mod memory_info;
mod pacing;
mod pauses;
mod residency;
mod revocation;
mod session;
mod stats;
mod streams;
mod waits;
