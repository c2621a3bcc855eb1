//! The hook's modules form layers: each uses only modules listed before it in the layer list of
//! `src/lib.rs`. Every `crate::MODULE` path of every source file is checked against that order,
//! which also keeps the module graph free of cycles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The modules in the order of the numbered layer list of lib.rs's documentation.
fn declared_order(lib: &str) -> Vec<String> {
    let mut order = Vec::new();
    let mut in_list = false;
    for line in lib.lines() {
        let Some(doc) = line.strip_prefix("//!") else {
            continue;
        };
        let doc = doc.trim();
        if doc.starts_with(|c: char| c.is_ascii_digit()) && doc.contains(". ") {
            in_list = true;
        } else if doc.is_empty() || !line.starts_with("//!    ") {
            in_list = false;
        }
        if !in_list {
            continue;
        }
        let mut rest = doc;
        while let Some(i) = rest.find("[`") {
            rest = &rest[i + 2..];
            let end = rest.find("`]").expect("unclosed link");
            order.push(rest[..end].to_string());
            rest = &rest[end + 2..];
        }
    }
    order
}

/// The modules lib.rs declares.
fn declared_modules(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect()
}

/// The modules named by `crate::` paths in `text` (`crate::a::b`, `crate::{a, b::c}`).
fn crate_refs(text: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(is_ident) {
            continue; // e.g. `my_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').expect("unclosed use group");
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|&c| is_ident(c)).collect();
                if !name.is_empty() {
                    refs.insert(name);
                }
            }
        } else {
            let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            refs.insert(name);
        }
    }
    refs
}

/// Each top-level module and the modules it uses (a directory module with its files).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(src())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for path in files {
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        let texts: Vec<String> = if path.is_dir() {
            let mut inner: Vec<PathBuf> = std::fs::read_dir(&path)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "rs"))
                .collect();
            inner.sort();
            inner
                .iter()
                .map(|p| std::fs::read_to_string(p).unwrap())
                .collect()
        } else if path.extension().is_some_and(|e| e == "rs") && name != "lib" {
            vec![std::fs::read_to_string(&path).unwrap()]
        } else {
            continue;
        };
        let uses = graph.entry(name.clone()).or_default();
        for text in texts {
            uses.extend(crate_refs(&text).into_iter().filter(|m| *m != name));
        }
    }
    graph
}

#[test]
fn the_layer_list_names_every_module_once() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let order = declared_order(&lib);
    let listed: BTreeSet<String> = order.iter().cloned().collect();
    assert_eq!(
        listed.len(),
        order.len(),
        "a module listed twice: {order:?}"
    );
    assert_eq!(listed, declared_modules(&lib), "layer list vs. `mod` items");
    let files: BTreeSet<String> = graph().keys().cloned().collect();
    assert_eq!(listed, files, "layer list vs. files in src/");
}

#[test]
fn no_module_uses_one_above_it() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let order = declared_order(&lib);
    let rank = |m: &str| order.iter().position(|o| o == m);
    let mut upward = Vec::new();
    for (module, uses) in graph() {
        let Some(r) = rank(&module) else { continue };
        for used in uses {
            match rank(&used) {
                Some(u) if u < r => {}
                _ => upward.push(format!("{module} -> {used}")),
            }
        }
    }
    assert!(
        upward.is_empty(),
        "modules using one above them (or not in the layer list of lib.rs): {upward:?}"
    );
}

#[test]
fn the_module_graph_has_no_cycle() {
    // Independent of the declared order: repeatedly remove modules that use no remaining one.
    let mut left = graph();
    while !left.is_empty() {
        let leaves: Vec<String> = left
            .iter()
            .filter(|(_, uses)| uses.iter().all(|u| !left.contains_key(u)))
            .map(|(m, _)| m.clone())
            .collect();
        assert!(!leaves.is_empty(), "cycle among {:?}", left);
        for m in leaves {
            left.remove(&m);
        }
    }
}

#[test]
fn references_are_parsed() {
    let refs = crate_refs("use crate::a::b;\nuse crate::{c, d::e};\n// my_crate::x\n[`crate::f`]");
    let want: BTreeSet<String> = ["a", "c", "d", "f"].iter().map(|s| s.to_string()).collect();
    assert_eq!(refs, want);
}
