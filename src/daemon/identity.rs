//! Who a peer is: its uid, user name and groups, from the kernel's word (SO_PEERCRED, the bus
//! daemon's GetConnectionUnixUser) and the system's user database, and for a socket peer the
//! slices and unit its process runs in (/proc/PID/cgroup). Never from what a client says.

use crate::cgroup_place::{Binding, CgroupPlace};
use crate::config::Access;
use nix::unistd::{getgrouplist, Gid, Group, Uid, User};
use std::ffi::CString;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub user: String,
    /// Names of the user's groups (primary and supplementary); gids without a name as numbers.
    pub groups: Vec<String>,
    pub gids: Vec<u32>,
    /// The slices and system unit of the peer's process; `None` for D-Bus callers, and when
    /// they could not be read.
    pub place: Option<CgroupPlace>,
}

impl Identity {
    /// Looks up `uid` in the user database, with `peer_gid` (the kernel's word for a socket
    /// peer) among its groups. Blocking (NSS): call from a blocking context.
    pub fn lookup(uid: u32, peer_gid: Option<u32>) -> Identity {
        let user = User::from_uid(Uid::from_raw(uid)).ok().flatten();
        let name = user
            .as_ref()
            .map_or_else(|| uid.to_string(), |u| u.name.clone());
        let mut gids: Vec<u32> = peer_gid.into_iter().collect();
        if let Some(u) = &user {
            gids.push(u.gid.as_raw());
            if let Ok(cname) = CString::new(u.name.clone()) {
                if let Ok(list) = getgrouplist(&cname, u.gid) {
                    gids.extend(list.into_iter().map(Gid::as_raw));
                }
            }
        }
        gids.sort_unstable();
        gids.dedup();
        let groups = gids
            .iter()
            .map(|g| {
                Group::from_gid(Gid::from_raw(*g))
                    .ok()
                    .flatten()
                    .map_or_else(|| g.to_string(), |grp| grp.name)
            })
            .collect();
        Identity {
            uid,
            user: name,
            groups,
            gids,
            place: None,
        }
    }

    /// This identity with the place of its process (read with `CgroupPlace::of_pid` as soon as
    /// the peer is known, before its pid could be reused).
    pub fn with_place(mut self, place: Option<CgroupPlace>) -> Identity {
        self.place = place;
        self
    }

    /// How a client's `units`/`slices` bind this identity's process; `None`: not at all.
    pub fn binding(&self, access: &Access) -> Option<Binding> {
        self.place.as_ref()?.binding(&access.units, &access.slices)
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether this identity administers the daemon: root, or a member of one of `admin_groups`
    /// (`daemon.admin_groups`). Administrators may change clients and read every user's usage;
    /// everyone else reads only their own.
    pub fn is_admin(&self, admin_groups: &[String]) -> bool {
        self.is_root() || self.in_any_group(admin_groups)
    }

    pub fn in_any_group(&self, groups: &[String]) -> bool {
        groups.iter().any(|g| {
            self.groups.contains(g) || g.parse::<u32>().is_ok_and(|n| self.gids.contains(&n))
        })
    }

    /// Whether this identity may attach as a client with `access`. Root may attach as any client;
    /// `"*"` in users admits everyone; a process in a unit or under a slice that `units`/`slices`
    /// match is admitted whoever runs it; empty lists admit no one else.
    pub fn may_attach(&self, access: &Access) -> bool {
        self.is_root()
            || self.binding(access).is_some()
            || access.users.iter().any(|u| {
                u == "*" || *u == self.user || u.parse::<u32>().is_ok_and(|n| n == self.uid)
            })
            || self.in_any_group(&access.groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Identity {
        Identity {
            uid: 1000,
            user: "alice".into(),
            groups: vec!["alice".into(), "ml".into()],
            gids: vec![1000, 2000],
            place: None,
        }
    }

    fn access(users: &[&str], groups: &[&str]) -> Access {
        Access {
            users: users.iter().map(|s| s.to_string()).collect(),
            groups: groups.iter().map(|s| s.to_string()).collect(),
            ..Access::default()
        }
    }

    #[test]
    fn a_unit_or_slice_admits_whoever_runs_in_it() {
        let bound = Access {
            units: vec![glob::Pattern::new("libpod-*.scope").unwrap()],
            slices: vec![glob::Pattern::new("lab.slice").unwrap()],
            ..Access::default()
        };
        let at = |path: &str| alice().with_place(Some(CgroupPlace::from_path(path)));
        assert!(at("/machine.slice/libpod-12.scope").may_attach(&bound));
        assert!(at("/lab.slice/run-u7.scope").may_attach(&bound));
        assert!(!at("/user.slice/user-1000.slice/session-1.scope").may_attach(&bound));
        // a cgroup a user made below a unit with delegation names no unit of its own
        assert!(
            !at("/user.slice/user-1000.slice/user@1000.service/libpod-12.scope").may_attach(&bound)
        );
        assert!(!alice().may_attach(&bound), "no place, no binding");
        assert_eq!(
            at("/machine.slice/libpod-12.scope").binding(&bound),
            Some(Binding::Unit)
        );
    }

    #[test]
    fn attach_rules() {
        let a = alice();
        assert!(a.may_attach(&access(&["alice"], &[])));
        assert!(a.may_attach(&access(&["1000"], &[])));
        assert!(a.may_attach(&access(&[], &["ml"])));
        assert!(a.may_attach(&access(&[], &["2000"])));
        assert!(a.may_attach(&access(&["*"], &[])));
        assert!(!a.may_attach(&access(&["bob", "1001"], &["staff"])));
        assert!(!a.may_attach(&access(&[], &[])));
        let root = Identity {
            uid: 0,
            user: "root".into(),
            groups: vec![],
            gids: vec![],
            place: None,
        };
        assert!(root.may_attach(&access(&[], &[])));
    }

    #[test]
    fn admins_are_root_and_the_admin_groups() {
        let admins = vec!["ml".to_string()];
        assert!(alice().is_admin(&admins));
        assert!(alice().is_admin(&["2000".to_string()]));
        assert!(!alice().is_admin(&["staff".to_string()]));
        assert!(!alice().is_admin(&[]));
        let root = Identity {
            uid: 0,
            user: "root".into(),
            groups: vec![],
            gids: vec![],
            place: None,
        };
        assert!(root.is_admin(&[]));
    }

    #[test]
    fn lookup_of_root_finds_its_name_and_group() {
        let r = Identity::lookup(0, None);
        assert_eq!(r.user, "root");
        assert!(r.gids.contains(&0));
    }
}
