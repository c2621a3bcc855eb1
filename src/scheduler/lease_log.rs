//! When each session last held a lease: the GPU side checks activity that NVML sees against it
//! (a process that held no lease in a while has no business running work on the GPU).

use std::collections::BTreeMap;

use super::{Nanos, SessionId};

#[derive(Debug, Default)]
pub struct LeaseLog {
    /// When each session's last lease ended.
    ended: BTreeMap<SessionId, Nanos>,
}

impl LeaseLog {
    /// A lease of `session` ended at `now`.
    pub fn ended(&mut self, session: SessionId, now: Nanos) {
        let at = self.ended.entry(session).or_insert(now);
        *at = (*at).max(now);
    }

    /// When the last lease of `session` ended; `None` if it never had one.
    pub fn last_end(&self, session: SessionId) -> Option<Nanos> {
        self.ended.get(&session).copied()
    }

    pub fn forget(&mut self, session: SessionId) {
        self.ended.remove(&session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_end_until_forgotten() {
        let mut log = LeaseLog::default();
        assert_eq!(log.last_end(1), None);
        log.ended(1, 50);
        log.ended(1, 40);
        assert_eq!(log.last_end(1), Some(50));
        log.ended(1, 70);
        assert_eq!(log.last_end(1), Some(70));
        log.forget(1);
        assert_eq!(log.last_end(1), None);
    }
}
