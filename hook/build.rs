//! Links GCC's unwinder into the hook statically (libgcc_eh.a) instead of needing
//! libgcc_s.so.1: preloaded into every program of a server, the hook must load nothing beyond
//! itself. Rust's standard library asks for `-lgcc_s`; a linker script of that name, found
//! first on the library path, hands the linker the static archive instead. The unwinder stays
//! private to the hook (its version script exports only the hook's own symbols) and only ever
//! unwinds the hook's frames, up to the `catch_unwind` of each entry point.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    if !target.ends_with("-linux-gnu") {
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let dir = out.join("static-unwinder");
    std::fs::create_dir_all(&dir).expect("create the unwinder directory");
    std::fs::write(dir.join("libgcc_s.so"), "INPUT(-lgcc_eh)\n").expect("write libgcc_s.so");
    println!("cargo:rustc-link-search=native={}", dir.display());
}
