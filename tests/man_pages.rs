//! The shipped gpushare(1) and gpushared(8) are what the command-line definitions generate, and
//! every page renders without warnings.

use std::path::Path;
use std::process::Command;

const MAN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/man");

fn check(page: &str, generated: String) {
    let path = Path::new(MAN).join(page);
    if std::env::var_os("UPDATE_MAN").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let shipped = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        shipped == generated,
        "man/{page} is out of date with the command line; regenerate with UPDATE_MAN=1 cargo test --test man_pages"
    );
}

fn extra(name: &str) -> String {
    std::fs::read_to_string(Path::new(MAN).join(name)).unwrap_or_else(|e| panic!("man/{name}: {e}"))
}

#[test]
fn generated_pages_are_current() {
    check(
        "gpushare.1",
        gpushare::manpages::gpushare_1(&extra("gpushare.1.extra")).unwrap(),
    );
    check(
        "gpushared.8",
        gpushare::manpages::gpushared_8(&extra("gpushared.8.extra")).unwrap(),
    );
}

#[test]
fn every_page_renders_without_warnings() {
    if Command::new("man").arg("--version").output().is_err() {
        eprintln!("man is not installed; skipping the render check");
        return;
    }
    for entry in std::fs::read_dir(MAN).unwrap() {
        let path = entry.unwrap().path();
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if !matches!(ext, "1" | "5" | "7" | "8") {
            continue;
        }
        let out = Command::new("man")
            .args(["--warnings", "-l"])
            .arg(&path)
            .env("MANWIDTH", "80")
            .env("MAN_KEEP_FORMATTING", "0")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let warnings = String::from_utf8_lossy(&out.stderr);
        assert!(
            warnings.trim().is_empty(),
            "{} renders with warnings:\n{warnings}",
            path.display()
        );
        assert!(
            out.stdout.len() > 200,
            "{} rendered almost nothing",
            path.display()
        );
    }
}

#[test]
fn the_configuration_examples_are_valid_configurations() {
    let page = extra("gpushare.toml.5");
    let mut examples = Vec::new();
    let mut lines = page.lines();
    while lines.any(|l| l == ".EX") {
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != ".EE").collect();
        examples.push(body.join("\n").replace("\\-", "-"));
    }
    assert!(examples.len() >= 2, "gpushare.toml(5) lost its examples");
    for example in &examples {
        if let Err(e) = gpushare::config::Config::parse(example) {
            panic!("an example in gpushare.toml(5) is refused: {e}\n{example}");
        }
    }
}
