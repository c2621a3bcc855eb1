//! Users for the tests that drop privileges: the tests run as root and make system users.

use std::process::Command;

/// Makes a system user for the tests (idempotent) and returns its uid.
pub fn test_user(name: &str) -> u32 {
    let exists = Command::new("id").arg("-u").arg(name).output().unwrap();
    if !exists.status.success() {
        let st = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--user-group",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ])
            .status()
            .expect("useradd");
        assert!(st.success() || Command::new("id").arg(name).status().unwrap().success());
    }
    let out = Command::new("id").arg("-u").arg(name).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("uid")
}

pub fn require_root() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "these tests run as root (they create users and drop privileges)"
    );
}
