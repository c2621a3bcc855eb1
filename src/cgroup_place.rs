//! Where a process sits in systemd's cgroup tree: the slices above it and the system unit it
//! runs in, read from `/proc/PID/cgroup` (the cgroup v2 line, or the `name=systemd` line of a
//! hybrid hierarchy).
//!
//! The unit is the first component below the slices, as `systemctl status PID` reports it: for
//! `/machine.slice/libpod-1f2e.scope/container` it is `libpod-1f2e.scope`, under slices
//! `machine.slice`. Components below the unit are left out: a unit with delegation (a user's
//! `user@1000.service`, a container's scope) lets its owner create cgroups with any names there,
//! while slices and system units are made only by the system manager, that is by root. A process
//! cannot put itself into another cgroup without write access to it, so what this reads is the
//! kernel's word, like SO_PEERCRED's uid.

use glob::Pattern;

/// The slices and system unit of a process.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CgroupPlace {
    /// Slices from the top: `user.slice`, `user-1000.slice`.
    pub slices: Vec<String>,
    /// The system unit (`*.scope` or `*.service`), if the process is in one.
    pub unit: Option<String>,
}

/// How closely a process is bound to a client by `units`/`slices`: a unit match is closer than
/// any slice match, and a deeper slice closer than the slices above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Binding {
    /// Matched by `slices`, at this depth (1 is a slice right under the root).
    Slice(usize),
    /// Matched by `units`.
    Unit,
}

impl CgroupPlace {
    /// Reads the place of the process `pid`; `None` when it cannot be read (the process is gone)
    /// or names no cgroup v2 or systemd hierarchy.
    pub fn of_pid(pid: u32) -> Option<CgroupPlace> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        CgroupPlace::from_proc(&text)
    }

    /// Parses the text of `/proc/PID/cgroup`.
    pub fn from_proc(text: &str) -> Option<CgroupPlace> {
        let path_of = |prefix: &str| {
            text.lines().find_map(|line| {
                let (_, rest) = line.split_once(':')?;
                rest.strip_prefix(prefix)
            })
        };
        path_of(":")
            .or_else(|| path_of("name=systemd:"))
            .map(CgroupPlace::from_path)
    }

    /// The place of a cgroup path such as `/user.slice/user-1000.slice/session-3.scope`.
    pub fn from_path(path: &str) -> CgroupPlace {
        let mut place = CgroupPlace::default();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            if part.ends_with(".slice") {
                place.slices.push(part.to_string());
                continue;
            }
            if part.ends_with(".scope") || part.ends_with(".service") {
                place.unit = Some(part.to_string());
            }
            break;
        }
        place
    }

    /// How the `units` and `slices` patterns of a client bind this place; `None`: not at all.
    pub fn binding(&self, units: &[Pattern], slices: &[Pattern]) -> Option<Binding> {
        if let Some(unit) = &self.unit {
            if units.iter().any(|p| p.matches(unit)) {
                return Some(Binding::Unit);
            }
        }
        self.slices
            .iter()
            .enumerate()
            .rev()
            .find(|(_, s)| slices.iter().any(|p| p.matches(s)))
            .map(|(i, _)| Binding::Slice(i + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patterns(list: &[&str]) -> Vec<Pattern> {
        list.iter().map(|p| Pattern::new(p).unwrap()).collect()
    }

    #[test]
    fn slices_and_the_system_unit_of_a_path() {
        let p = CgroupPlace::from_path("/user.slice/user-1000.slice/session-3.scope");
        assert_eq!(p.slices, vec!["user.slice", "user-1000.slice"]);
        assert_eq!(p.unit.as_deref(), Some("session-3.scope"));
        let p = CgroupPlace::from_path("/machine.slice/libpod-1f2e.scope/container");
        assert_eq!(p.slices, vec!["machine.slice"]);
        assert_eq!(p.unit.as_deref(), Some("libpod-1f2e.scope"));
        // a user's own units are below user@1000.service: the system unit is that
        let p = CgroupPlace::from_path(
            "/user.slice/user-1000.slice/user@1000.service/app.slice/docker-x.scope",
        );
        assert_eq!(p.unit.as_deref(), Some("user@1000.service"));
        assert_eq!(p.slices, vec!["user.slice", "user-1000.slice"]);
        assert_eq!(CgroupPlace::from_path("/"), CgroupPlace::default());
        // outside the reader's cgroup namespace
        assert_eq!(CgroupPlace::from_path("/.."), CgroupPlace::default());
        let p = CgroupPlace::from_path("/system.slice/not-a-unit/x.scope");
        assert_eq!((p.slices.len(), p.unit), (1, None));
    }

    #[test]
    fn the_v2_line_is_read_and_the_systemd_line_of_a_hybrid_tree_otherwise() {
        let hybrid =
            "9:name=systemd:/system.slice/a.service\n4:memory:/x\n0::/system.slice/b.service\n";
        assert_eq!(
            CgroupPlace::from_proc(hybrid).unwrap().unit.as_deref(),
            Some("b.service")
        );
        let v1 = "9:name=systemd:/system.slice/a.service\n4:memory:/x\n";
        assert_eq!(
            CgroupPlace::from_proc(v1).unwrap().unit.as_deref(),
            Some("a.service")
        );
        assert_eq!(CgroupPlace::from_proc("4:memory:/x\n"), None);
        assert_eq!(CgroupPlace::from_proc(""), None);
    }

    #[test]
    fn bindings_rank_units_over_slices_and_deep_slices_over_shallow() {
        let p = CgroupPlace::from_path("/machine.slice/lab.slice/docker-abc.scope");
        assert_eq!(
            p.binding(&patterns(&["docker-*.scope"]), &[]),
            Some(Binding::Unit)
        );
        assert_eq!(
            p.binding(&[], &patterns(&["machine.slice", "lab.slice"])),
            Some(Binding::Slice(2))
        );
        assert_eq!(
            p.binding(&[], &patterns(&["machine.slice"])),
            Some(Binding::Slice(1))
        );
        assert_eq!(
            p.binding(&patterns(&["libpod-*.scope"]), &patterns(&["user-*.slice"])),
            None
        );
        assert!(Binding::Unit > Binding::Slice(9));
        assert!(Binding::Slice(2) > Binding::Slice(1));
        // a slice pattern never matches the unit, nor a unit pattern a slice
        assert_eq!(p.binding(&patterns(&["*"]), &[]), Some(Binding::Unit));
        assert_eq!(p.binding(&[], &patterns(&["docker-*"])), None);
        assert_eq!(
            CgroupPlace::from_path("/machine.slice").binding(&patterns(&["*"]), &[]),
            None
        );
    }
}
