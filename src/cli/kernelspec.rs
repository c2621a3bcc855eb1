//! `gpushare kernelspec install|remove`: a Jupyter kernel whose Python runs under gpushare.
//!
//! The kernel's command line is `gpushare run [--name CLIENT] -- PYTHON -m ipykernel_launcher
//! -f {connection_file}`: the notebook server (a JupyterHub single-user server as well) starts
//! it as the notebook's user, and `gpushare run` preloads the hook, puts the Python start-up
//! code on PYTHONPATH and names the client, exactly as on a command line, then becomes the
//! kernel (signals, interrupts included, reach Python itself).

use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where the kernelspec goes, as `jupyter kernelspec install` names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// For everyone: /usr/local/share/jupyter/kernels.
    System,
    /// For the calling user: $JUPYTER_DATA_DIR, $XDG_DATA_HOME/jupyter or
    /// ~/.local/share/jupyter, then kernels.
    User,
    /// For the Python environment (a virtual environment): its sys.prefix/share/jupyter/kernels.
    SysPrefix,
    /// PREFIX/share/jupyter/kernels.
    Prefix(PathBuf),
}

/// The kernels directory of `location`; `env` reads the environment and `sys_prefix` asks
/// the kernel's Python for its prefix.
pub fn kernels_dir(
    location: &Location,
    env: impl Fn(&str) -> Option<String>,
    sys_prefix: impl FnOnce() -> Result<PathBuf, String>,
) -> Result<PathBuf, String> {
    let set = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let data = match location {
        Location::System => PathBuf::from("/usr/local/share/jupyter"),
        Location::User => match set("JUPYTER_DATA_DIR") {
            Some(d) => d,
            None => match set("XDG_DATA_HOME") {
                Some(d) => d.join("jupyter"),
                None => set("HOME")
                    .ok_or("--user: HOME is not set")?
                    .join(".local/share/jupyter"),
            },
        },
        Location::SysPrefix => sys_prefix()?.join("share/jupyter"),
        Location::Prefix(p) => p.join("share/jupyter"),
    };
    Ok(data.join("kernels"))
}

/// The kernel's name: letters, digits, '.', '_' and '-', as Jupyter accepts them.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "kernel name {name:?}: use letters, digits, '.', '_' and '-' only"
        ))
    }
}

/// The name a kernel gets when none is given.
pub fn default_name(client: Option<&str>) -> String {
    match client {
        Some(c) => format!("gpushare-{c}"),
        None => "gpushare".into(),
    }
}

/// kernel.json: `gpushare` runs `python`'s IPython kernel, attached as `client`.
pub fn kernel_json(gpushare: &Path, python: &Path, client: Option<&str>, display: &str) -> Value {
    let mut argv = vec![gpushare.display().to_string(), "run".into()];
    if let Some(c) = client {
        argv.extend(["--name".into(), c.to_owned()]);
    }
    argv.extend([
        "--".into(),
        python.display().to_string(),
        "-m".into(),
        "ipykernel_launcher".into(),
        "-f".into(),
        "{connection_file}".into(),
    ]);
    json!({
        "argv": argv,
        "display_name": display,
        "language": "python",
        "interrupt_mode": "signal",
        "metadata": { "gpushare": { "client": client } },
    })
}

/// The display name a kernel gets when none is given.
pub fn default_display_name(client: Option<&str>) -> String {
    match client {
        Some(c) => format!("Python 3 (gpushare, {c})"),
        None => "Python 3 (gpushare)".into(),
    }
}

/// The Python that runs the kernel: `python` as given if it names a file, else found on PATH;
/// it must be able to import ipykernel.
pub fn resolve_python(python: &str) -> Result<PathBuf, String> {
    let path = if python.contains('/') {
        PathBuf::from(python)
    } else {
        std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .map(|d| d.join(python))
            .find(|p| p.is_file())
            .ok_or_else(|| format!("{python} is not on PATH; give --python PATH"))?
    };
    let path = std::path::absolute(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let out = std::process::Command::new(&path)
        .args(["-c", "import ipykernel"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} cannot import ipykernel (install python3-ipykernel, or pip install ipykernel \
             in its environment, or give another --python): {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
                .trim()
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    Ok(path)
}

/// `python`'s sys.prefix.
pub fn sys_prefix(python: &Path) -> Result<PathBuf, String> {
    let out = std::process::Command::new(python)
        .args(["-c", "import sys; print(sys.prefix)"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let prefix = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || prefix.is_empty() {
        return Err(format!("{} did not tell its sys.prefix", python.display()));
    }
    Ok(PathBuf::from(prefix))
}

/// Writes `spec` as `dir/kernel.json` (in one rename); replaces an earlier gpushare kernel of
/// the same name, never someone else's.
pub fn install(dir: &Path, spec: &Value) -> Result<(), String> {
    let file = dir.join("kernel.json");
    if file.exists() {
        ours(&file)?;
    }
    let fail = |e: std::io::Error| {
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
            " (run as root, or install with --user)"
        } else {
            ""
        };
        format!("cannot write {}: {e}{hint}", file.display())
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    let mut text = serde_json::to_string_pretty(spec).map_err(|e| e.to_string())?;
    text.push('\n');
    let mut tmp = tempfile::Builder::new()
        .prefix(".kernel.json.")
        .tempfile_in(dir)
        .map_err(fail)?;
    tmp.write_all(text.as_bytes()).map_err(fail)?;
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))
        .map_err(fail)?;
    tmp.persist(&file).map_err(|e| fail(e.error))?;
    Ok(())
}

/// Removes the gpushare kernel in `dir`.
pub fn remove(dir: &Path) -> Result<(), String> {
    let file = dir.join("kernel.json");
    if !file.exists() {
        return Err(format!("no kernel at {}", dir.display()));
    }
    ours(&file)?;
    std::fs::remove_file(&file).map_err(|e| format!("cannot remove {}: {e}", file.display()))?;
    std::fs::remove_dir(dir).map_err(|e| {
        format!(
            "removed {}, but {} holds other files: {e}",
            file.display(),
            dir.display()
        )
    })
}

/// `file` is a kernel.json written by `gpushare kernelspec install`.
fn ours(file: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let spec: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if spec.pointer("/metadata/gpushare").is_some() {
        Ok(())
    } else {
        Err(format!(
            "{} is not a gpushare kernel; leaving it alone (choose another --name)",
            file.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    fn no_prefix() -> Result<PathBuf, String> {
        panic!("sys.prefix asked for")
    }

    #[test]
    fn user_dir_follows_jupyter_then_xdg_then_home() {
        let dir = |vars| kernels_dir(&Location::User, env(vars), no_prefix).unwrap();
        assert_eq!(
            dir(&[("HOME", "/home/bob")]),
            Path::new("/home/bob/.local/share/jupyter/kernels")
        );
        assert_eq!(
            dir(&[("HOME", "/home/bob"), ("XDG_DATA_HOME", "/x")]),
            Path::new("/x/jupyter/kernels")
        );
        assert_eq!(
            dir(&[("XDG_DATA_HOME", "/x"), ("JUPYTER_DATA_DIR", "/j")]),
            Path::new("/j/kernels")
        );
        assert!(kernels_dir(&Location::User, env(&[]), no_prefix).is_err());
    }

    #[test]
    fn system_prefix_and_sys_prefix_dirs() {
        assert_eq!(
            kernels_dir(&Location::System, env(&[]), no_prefix).unwrap(),
            Path::new("/usr/local/share/jupyter/kernels")
        );
        assert_eq!(
            kernels_dir(&Location::Prefix("/opt/p".into()), env(&[]), no_prefix).unwrap(),
            Path::new("/opt/p/share/jupyter/kernels")
        );
        assert_eq!(
            kernels_dir(&Location::SysPrefix, env(&[]), || Ok("/venv".into())).unwrap(),
            Path::new("/venv/share/jupyter/kernels")
        );
    }

    #[test]
    fn kernel_runs_python_under_gpushare_run_with_the_client() {
        let spec = kernel_json(
            Path::new("/usr/bin/gpushare"),
            Path::new("/usr/bin/python3"),
            Some("train"),
            "Python 3 (gpushare, train)",
        );
        assert_eq!(
            spec["argv"],
            json!([
                "/usr/bin/gpushare",
                "run",
                "--name",
                "train",
                "--",
                "/usr/bin/python3",
                "-m",
                "ipykernel_launcher",
                "-f",
                "{connection_file}"
            ])
        );
        assert_eq!(spec["language"], "python");
        assert_eq!(spec["metadata"]["gpushare"]["client"], "train");
        let plain = kernel_json(
            Path::new("/g"),
            Path::new("/p"),
            None,
            &default_display_name(None),
        );
        assert_eq!(plain["argv"][2], "--", "no --name without a client");
        assert_eq!(plain["display_name"], "Python 3 (gpushare)");
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name(&default_name(Some("train-1.a_b"))).is_ok());
        for bad in ["", "a/b", "..x/y", "a b", "é"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn install_replaces_its_own_and_refuses_a_foreign_kernel() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("kernels/gpushare");
        let spec = kernel_json(Path::new("/g"), Path::new("/p"), None, "x");
        install(&dir, &spec).unwrap();
        install(&dir, &spec).unwrap();
        let back: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("kernel.json")).unwrap())
                .unwrap();
        assert_eq!(back, spec);

        let foreign = tmp.path().join("kernels/python3");
        std::fs::create_dir_all(&foreign).unwrap();
        let theirs = r#"{"argv": ["python3"], "display_name": "Python 3", "language": "python"}"#;
        std::fs::write(foreign.join("kernel.json"), theirs).unwrap();
        let err = install(&foreign, &spec).unwrap_err();
        assert!(err.contains("not a gpushare kernel"), "{err}");
        assert!(remove(&foreign).is_err());
        assert_eq!(
            std::fs::read_to_string(foreign.join("kernel.json")).unwrap(),
            theirs
        );

        remove(&dir).unwrap();
        assert!(!dir.exists());
        assert!(remove(&dir).unwrap_err().contains("no kernel"));
    }
}
