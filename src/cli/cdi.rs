//! `gpushare cdi`: a Container Device Interface spec that puts a container's CUDA processes under
//! gpushare. `podman run --device gpushare.io/gpu=all` (or docker with CDI enabled) then mounts
//! the daemon's socket directory, the hook and the Python start-up code into the container and
//! preloads the hook there.
//!
//! The spec carries no device nodes: the GPU itself comes from the NVIDIA Container Toolkit's
//! spec (`--device nvidia.com/gpu=all`). The daemon knows a container's processes by the uid the
//! kernel reports for them on its socket, as it knows any other process.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Where the spec is written by default: a directory every CDI-aware runtime reads.
pub const DEFAULT_OUTPUT: &str = "/etc/cdi/gpushare.yaml";
/// The CDI kind of the spec: devices are named `gpushare.io/gpu=NAME`.
pub const KIND: &str = "gpushare.io/gpu";
/// The oldest CDI version with everything the spec uses (mounts, env), read by every runtime
/// that reads CDI.
pub const CDI_VERSION: &str = "0.3.0";
/// Where the hook and the Python start-up code are mounted inside the container.
pub const CONTAINER_HOOK: &str = "/usr/lib/gpushare/libgpushare.so";
pub const CONTAINER_PYTHON: &str = "/usr/lib/gpushare/python";

/// What the spec mounts, from the host.
pub struct Sources {
    /// The daemon's socket; its directory is mounted (it also holds the MPS pipes).
    pub socket: PathBuf,
    pub hook: PathBuf,
    /// Mounted when it exists.
    pub python: PathBuf,
}

/// A string as a YAML double-quoted scalar (JSON's quoting is valid YAML).
fn quoted(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// The text of the spec for `sources`, after checking that they exist.
pub fn spec(sources: &Sources) -> Result<String, String> {
    let hook = sources.hook.canonicalize().map_err(|e| {
        format!(
            "the hook library {}: {e}; install gpushare's library or point --hook/GPUSHARE_HOOK at it",
            sources.hook.display()
        )
    })?;
    let socket_dir = sources
        .socket
        .parent()
        .filter(|d| d.is_absolute())
        .ok_or_else(|| {
            format!(
                "--socket {}: give the absolute path of the daemon's socket",
                sources.socket.display()
            )
        })?;
    let container_socket_dir = Path::new(crate::protocol::DEFAULT_SOCKET_DIR);
    let container_socket = container_socket_dir.join(crate::protocol::SOCKET_NAME);
    let mut env = vec![
        format!("LD_PRELOAD={CONTAINER_HOOK}"),
        format!("GPUSHARE_SOCKET={}", container_socket.display()),
    ];
    // (host, container, options)
    let mut mounts = vec![
        (
            socket_dir.display().to_string(),
            container_socket_dir.display().to_string(),
            "[\"bind\", \"nosuid\", \"nodev\", \"noexec\"]",
        ),
        (
            hook.display().to_string(),
            CONTAINER_HOOK.to_string(),
            "[\"ro\", \"bind\", \"nosuid\", \"nodev\"]",
        ),
    ];
    if sources.python.is_dir() {
        let python = sources
            .python
            .canonicalize()
            .map_err(|e| format!("{}: {e}", sources.python.display()))?;
        mounts.push((
            python.display().to_string(),
            CONTAINER_PYTHON.to_string(),
            "[\"ro\", \"bind\", \"nosuid\", \"nodev\", \"noexec\"]",
        ));
        env.push(format!("PYTHONPATH={CONTAINER_PYTHON}"));
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Container Device Interface spec of gpushare, written by `gpushare cdi`.\n\
         # `podman run --device {KIND}=all` (or docker with CDI enabled) preloads gpushare's hook\n\
         # in the container and connects it to gpushared's socket; add the GPU itself with\n\
         # `--device nvidia.com/gpu=all` (NVIDIA Container Toolkit). See gpushare(1).\n\
         cdiVersion: {}\nkind: {}\ndevices:\n  - name: \"all\"\n    containerEdits:\n      env:",
        quoted(CDI_VERSION),
        quoted(KIND)
    );
    for e in &env {
        let _ = writeln!(out, "        - {}", quoted(e));
    }
    out.push_str("      mounts:\n");
    for (host, container, options) in &mounts {
        let _ = writeln!(
            out,
            "        - hostPath: {}\n          containerPath: {}\n          options: {options}",
            quoted(host),
            quoted(container)
        );
    }
    Ok(out)
}

/// Writes `text` to `output` (`-`: standard output), through a new file renamed into place so
/// that a runtime never reads half a spec.
pub fn write(output: &Path, text: &str) -> Result<(), String> {
    if output == Path::new("-") {
        print!("{text}");
        return Ok(());
    }
    let fail = |e: std::io::Error| format!("{}: {e}", output.display());
    if let Some(dir) = output.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let name = output
        .file_name()
        .ok_or_else(|| format!("{}: not a file name", output.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".new");
    let tmp = output.with_file_name(tmp_name);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))?;
        std::fs::rename(&tmp, output)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(dir: &Path) -> Sources {
        std::fs::write(dir.join("libgpushare.so"), b"").unwrap();
        std::fs::create_dir(dir.join("python")).unwrap();
        Sources {
            socket: "/srv/gpushare/gpushare.sock".into(),
            hook: dir.join("libgpushare.so"),
            python: dir.join("python"),
        }
    }

    #[test]
    fn the_spec_mounts_the_socket_directory_hook_and_python_code_and_preloads_the_hook() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().canonicalize().unwrap();
        let text = spec(&sources(&dir)).unwrap();
        let want = format!(
            "cdiVersion: \"0.3.0\"\nkind: \"gpushare.io/gpu\"\ndevices:\n  - name: \"all\"\n    containerEdits:\n      env:\n        - \"LD_PRELOAD=/usr/lib/gpushare/libgpushare.so\"\n        - \"GPUSHARE_SOCKET=/run/gpushare/gpushare.sock\"\n        - \"PYTHONPATH=/usr/lib/gpushare/python\"\n      mounts:\n        - hostPath: \"/srv/gpushare\"\n          containerPath: \"/run/gpushare\"\n          options: [\"bind\", \"nosuid\", \"nodev\", \"noexec\"]\n        - hostPath: \"{0}/libgpushare.so\"\n          containerPath: \"/usr/lib/gpushare/libgpushare.so\"\n          options: [\"ro\", \"bind\", \"nosuid\", \"nodev\"]\n        - hostPath: \"{0}/python\"\n          containerPath: \"/usr/lib/gpushare/python\"\n          options: [\"ro\", \"bind\", \"nosuid\", \"nodev\", \"noexec\"]\n",
            dir.display()
        );
        assert!(text.ends_with(&want), "{text}");
        assert!(text.lines().filter(|l| !l.starts_with('#')).count() > 10);
    }

    #[test]
    fn without_python_code_there_is_no_pythonpath_and_a_missing_hook_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sources(dir.path());
        s.python = dir.path().join("none");
        let text = spec(&s).unwrap();
        assert!(
            !text.contains("PYTHONPATH") && !text.contains("/none"),
            "{text}"
        );
        s.hook = dir.path().join("missing.so");
        let e = spec(&s).unwrap_err();
        assert!(e.contains("missing.so") && e.contains("--hook"), "{e}");
        s.hook = dir.path().join("libgpushare.so");
        s.socket = "gpushare.sock".into();
        assert!(spec(&s).unwrap_err().contains("absolute"));
    }

    #[test]
    fn write_replaces_the_file_whole_and_makes_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("cdi/gpushare.yaml");
        write(&out, "one\n").unwrap();
        write(&out, "two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "two\n");
        let left: Vec<_> = std::fs::read_dir(dir.path().join("cdi"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("gpushare.yaml")]);
        let e = write(&dir.path().join("cdi/gpushare.yaml/x"), "").unwrap_err();
        assert!(e.contains("gpushare.yaml"), "{e}");
    }
}
