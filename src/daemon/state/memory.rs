//! Memory accounts: each session's reservations against its client's cap, per GPU (the cap
//! applies on each GPU separately), and the managed memory of oversubscribing clients against
//! the pool (host memory, one pool for all GPUs).

use super::*;

/// Adds `bytes` to the figure of `device` in `map`.
fn add(map: &mut BTreeMap<DeviceId, u64>, device: DeviceId, bytes: u64) {
    if bytes > 0 {
        let e = map.entry(device).or_default();
        *e = e.saturating_add(bytes);
    }
}

/// Takes `bytes` off the figure of `device` in `map`, forgetting a figure that reaches 0.
fn sub(map: &mut BTreeMap<DeviceId, u64>, device: DeviceId, bytes: u64) {
    if let Some(e) = map.get_mut(&device) {
        *e = e.saturating_sub(bytes);
        if *e == 0 {
            map.remove(&device);
        }
    }
}

impl State {
    /// Counts `bytes` on `device` against the session's client cap there. `Reserve{0}` reports
    /// the current use on the device.
    pub fn reserve(&mut self, session: SessionId, device: DeviceId, bytes: u64) -> Reply {
        let Some(s) = self.sessions.get_mut(&session) else {
            return Reply::Error {
                code: ErrorCode::BadMessage,
                message: "not attached".into(),
            };
        };
        let Some(c) = self.clients.get_mut(&s.client) else {
            return Reply::Error {
                code: ErrorCode::UnknownClient,
                message: "client is gone".into(),
            };
        };
        let cap = c.spec.share.memory.unwrap_or(NO_CAP);
        let used = c.memory_used.get(&device).copied().unwrap_or(0);
        let pool_ok = !s.managed
            || self
                .managed_used
                .checked_add(bytes)
                .is_some_and(|t| t <= self.managed_limit);
        match used.checked_add(bytes) {
            Some(total) if total <= cap && pool_ok => {
                add(&mut c.memory_used, device, bytes);
                add(&mut s.reserved, device, bytes);
                if s.managed {
                    self.managed_used += bytes;
                }
                Reply::Reserved { used: total }
            }
            _ => Reply::OverCap { used, cap },
        }
    }

    /// Counts `bytes` on `device` that the process of `session` already holds (it re-attached
    /// after a restart), whatever the cap: the memory is allocated, and refusing it would only
    /// hide it.
    pub(super) fn adopt(&mut self, session: SessionId, device: DeviceId, bytes: u64) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        add(&mut s.reserved, device, bytes);
        if s.managed {
            self.managed_used = self.managed_used.saturating_add(bytes);
        }
        let Some(c) = self.clients.get_mut(&s.client) else {
            return;
        };
        add(&mut c.memory_used, device, bytes);
        let used = c.memory_used.get(&device).copied().unwrap_or(0);
        let cap = c.spec.share.memory.unwrap_or(NO_CAP);
        if used > cap {
            tracing::warn!(
                pid = s.pid,
                client = %s.client,
                %device,
                used,
                cap,
                "client {} is over its memory cap on {device} after process {} re-attached with \
                 {bytes} bytes there: its allocations on that GPU fail until it is back under \
                 the cap",
                s.client,
                s.pid
            );
        }
    }

    /// Gives back up to `bytes` of what `session` reserved on `device`.
    pub fn unreserve(&mut self, session: SessionId, device: DeviceId, bytes: u64) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        let bytes = bytes.min(s.reserved.get(&device).copied().unwrap_or(0));
        sub(&mut s.reserved, device, bytes);
        if s.managed {
            self.managed_used = self.managed_used.saturating_sub(bytes);
        }
        if let Some(c) = self.clients.get_mut(&s.client) {
            sub(&mut c.memory_used, device, bytes);
        }
    }

    /// Gives back all that `session` reserved, on every GPU.
    pub(super) fn unreserve_all(&mut self, session: SessionId) {
        let devices: Vec<DeviceId> = self
            .sessions
            .get(&session)
            .map(|s| s.reserved.keys().copied().collect())
            .unwrap_or_default();
        for device in devices {
            self.unreserve(session, device, u64::MAX);
        }
    }

    /// Managed memory held by oversubscribing processes, and the most they may hold.
    pub fn managed_memory(&self) -> (u64, u64) {
        (self.managed_used, self.managed_limit)
    }
}

/// The most managed memory oversubscribing clients may hold together: the configured amount,
/// or three quarters of the host memory available now (all of it may have to live there).
pub(super) fn managed_limit(config: &Config) -> u64 {
    config
        .gpu
        .managed_memory
        .unwrap_or_else(|| host_available_memory().unwrap_or(0) / 4 * 3)
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn host_available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

pub(super) fn memory_flags(m: &MemoryMode) -> u32 {
    let mut flags = 0;
    if m.oversubscribe {
        flags |= MEMORY_OVERSUBSCRIBE;
    }
    if m.release_cache {
        flags |= MEMORY_RELEASE_CACHE;
    }
    flags
}
