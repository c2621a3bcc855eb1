//! What the daemon tells the GPU side about the processes attached through the hook, asked for
//! on every scan.

use std::sync::Arc;
use std::time::Instant;

/// One attached process, over all its sessions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AttachedProcess {
    pub pid: u32,
    pub uid: u32,
    /// The client it attached as.
    pub client: String,
    /// Device memory its hook reserved and holds now, in bytes.
    pub reserved: u64,
    /// The last moment it held a lease (the moment of asking while it holds one); `None`: never.
    pub last_held: Option<Instant>,
}

impl AttachedProcess {
    /// A process known only by its pid (it reserved nothing and never held a lease).
    pub fn pid(pid: u32) -> AttachedProcess {
        AttachedProcess {
            pid,
            ..Default::default()
        }
    }
}

/// The attached processes now.
pub type AttachedProcesses = Arc<dyn Fn() -> Vec<AttachedProcess> + Send + Sync>;
