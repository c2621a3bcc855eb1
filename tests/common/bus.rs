//! A private dbus-daemon for the tests that use the D-Bus API.

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{open_tempdir, wait_for};

/// A private dbus-daemon with a policy that lets every user connect, like the system bus.
pub struct TestBus {
    child: Child,
    pub address: String,
    _dir: tempfile::TempDir,
}

impl TestBus {
    pub fn start() -> TestBus {
        let dir = open_tempdir();
        let socket = dir.path().join("bus");
        let conf = dir.path().join("bus.conf");
        std::fs::write(
            &conf,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
                socket.display()
            ),
        )
        .unwrap();
        let child = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", conf.display()))
            .arg("--nofork")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon must be installed (apt-get install dbus)");
        wait_for("the bus socket", Duration::from_secs(10), || {
            socket.exists()
        });
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o777)).unwrap();
        TestBus {
            child,
            address: format!("unix:path={}", socket.display()),
            _dir: dir,
        }
    }
}

impl Drop for TestBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
