//! Links GCC's unwinder into the hook statically (libgcc_eh.a) instead of needing
//! libgcc_s.so.1: preloaded into every program of a server (`gpushare preload enable`), the hook
//! must load nothing beyond itself. Rust's standard library asks for `-lgcc_s`; a linker script
//! of that name, found first on the library path, hands the linker the static archive instead.
//! The unwinder stays private to the hook (its version script exports only the hook's own
//! symbols) and only ever unwinds the hook's frames, up to the `catch_unwind` of each entry
//! point.
//!
//! Only with the default linker (`cc`, GCC) and where GCC has the archive; with a linker of
//! one's own (cargo-zigbuild for an older glibc, which brings its own unwinder) nothing changes.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let target = std::env::var("TARGET").unwrap_or_default();
    if !target.ends_with("-linux-gnu") || std::env::var_os("RUSTC_LINKER").is_some() {
        return;
    }
    let Some(archive) = Command::new("cc")
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|p| p.is_absolute() && p.is_file())
    else {
        println!("cargo:warning=libgcc_eh.a not found: the hook needs libgcc_s.so.1");
        return;
    };
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let dir = out.join("static-unwinder");
    std::fs::create_dir_all(&dir).expect("create the unwinder directory");
    std::fs::write(
        dir.join("libgcc_s.so"),
        format!("INPUT({})\n", archive.display()),
    )
    .expect("write libgcc_s.so");
    println!("cargo:rustc-link-search=native={}", dir.display());
}
