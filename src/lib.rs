//! gpushare: share NVIDIA GPUs fairly between processes and users.
//!
//! The wire protocol between the hook and the daemon is always built; everything else belongs to
//! the daemon and the CLI (feature `daemon`).

pub mod protocol;

#[cfg(feature = "daemon")]
pub mod api;
#[cfg(feature = "daemon")]
pub mod bus;
#[cfg(feature = "daemon")]
pub mod cgroup_place;
#[cfg(feature = "daemon")]
pub mod cli;
#[cfg(feature = "daemon")]
pub mod config;
#[cfg(feature = "daemon")]
pub mod daemon;
#[cfg(feature = "daemon")]
pub mod gpu;
#[cfg(feature = "daemon")]
pub mod logging;
#[cfg(feature = "daemon")]
pub mod manpages;
#[cfg(feature = "daemon")]
pub mod referee;
#[cfg(feature = "daemon")]
pub mod scheduler;
#[cfg(feature = "daemon")]
pub mod simulation;
#[cfg(feature = "daemon")]
pub mod units;
