//! Memory accounts: each session's reservations against its client's cap, and the managed
//! memory of oversubscribing clients against the pool.

use super::*;

impl State {
    /// Counts `bytes` against the session's client cap. `Reserve{0}` reports the current use.
    pub fn reserve(&mut self, session: SessionId, bytes: u64) -> Reply {
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
        let pool_ok = !s.managed
            || self
                .managed_used
                .checked_add(bytes)
                .is_some_and(|t| t <= self.managed_limit);
        match c.memory_used.checked_add(bytes) {
            Some(total) if total <= cap && pool_ok => {
                c.memory_used = total;
                s.reserved += bytes;
                if s.managed {
                    self.managed_used += bytes;
                }
                Reply::Reserved { used: total }
            }
            _ => Reply::OverCap {
                used: c.memory_used,
                cap,
            },
        }
    }

    /// Counts `bytes` the process of `session` already holds (it re-attached after a restart),
    /// whatever the cap: the memory is allocated, and refusing it would only hide it.
    pub(super) fn adopt(&mut self, session: SessionId, bytes: u64) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        s.reserved = s.reserved.saturating_add(bytes);
        if s.managed {
            self.managed_used = self.managed_used.saturating_add(bytes);
        }
        let Some(c) = self.clients.get_mut(&s.client) else {
            return;
        };
        c.memory_used = c.memory_used.saturating_add(bytes);
        let cap = c.spec.share.memory.unwrap_or(NO_CAP);
        if c.memory_used > cap {
            tracing::warn!(
                pid = s.pid,
                client = %s.client,
                used = c.memory_used,
                cap,
                "client {} is over its memory cap after process {} re-attached with {bytes} bytes: \
                 its allocations fail until it is back under the cap",
                s.client,
                s.pid
            );
        }
    }

    /// Gives back up to `bytes` of what `session` reserved (all of it with `u64::MAX`).
    pub fn unreserve(&mut self, session: SessionId, bytes: u64) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        let bytes = bytes.min(s.reserved);
        s.reserved -= bytes;
        if s.managed {
            self.managed_used = self.managed_used.saturating_sub(bytes);
        }
        if let Some(c) = self.clients.get_mut(&s.client) {
            c.memory_used = c.memory_used.saturating_sub(bytes);
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
