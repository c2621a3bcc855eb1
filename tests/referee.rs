//! `gpushare-referee` judges windows read as JSON lines: each client's due share, whether it got
//! it, and the exit status that says whether a judged window broke the promise.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn referee(input: &str) -> (Output, Vec<Value>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpushare-referee"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (out, lines)
}

/// Two launch-bound loops of demand 0.4: gpushare got 0.04 / 0.38 done, time-slicing 0.66 in
/// all. Over the whole GPU the first is due 0.4; over what the mix could use, 0.26.
const WINDOW: &str = r#"{"seed":1,"t0":5,"t1":10,"since_change":5,"clients":[
{"name":"a","request":0.06,"demand":0.4,"got":0.04,"used":0.05},
{"name":"b","request":0.47,"limit":1.0,"demand":0.4,"got":0.38,"used":0.37}]SLICED}"#;

fn window(sliced: &str) -> String {
    WINDOW.replace('\n', "").replace("SLICED", sliced) + "\n"
}

#[test]
fn a_window_that_broke_the_promise_is_named_and_fails_the_run() {
    let (out, v) = referee(&window(""));
    assert_eq!(out.status.code(), Some(1), "{v:?}");
    assert_eq!(v[0]["capacity"], 1.0);
    assert_eq!(v[0]["judged"], true);
    let a = &v[0]["clients"][0];
    assert_eq!(a["name"], "a");
    assert!((a["due"].as_f64().unwrap() - 0.4).abs() < 1e-9, "{a}");
    assert_eq!(a["kept"], false);
    assert_eq!(v[0]["clients"][1]["kept"], true);
}

#[test]
fn with_time_slicing_beside_it_a_window_divides_what_the_mix_could_use() {
    let (out, v) = referee(&window(r#","sliced":0.66"#));
    assert_eq!(out.status.code(), Some(1), "a still got 0.04 of 0.26");
    assert!((v[0]["capacity"].as_f64().unwrap() - 0.66).abs() < 1e-9);
    let a = &v[0]["clients"][0];
    assert!((a["due"].as_f64().unwrap() - 0.26).abs() < 1e-9, "{a}");

    let kept = window(r#","sliced":0.66"#)
        .replace(r#""got":0.04,"used":0.05"#, r#""got":0.25,"used":0.26"#);
    let (out, v) = referee(&kept);
    assert_eq!(out.status.code(), Some(0), "{v:?}");
}

#[test]
fn windows_right_after_a_change_are_written_but_not_judged() {
    let (out, v) = referee(&window("").replace(r#""since_change":5"#, r#""since_change":0.5"#));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(v[0]["judged"], false);
}

#[test]
fn input_it_cannot_read_is_an_error_with_its_line() {
    let (out, _) = referee(&format!("{}{{\"clients\":[{{\"got\":1}}]}}\n", window("")));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2") && err.contains("request"), "{err}");
    let (out, _) = referee(&window(r#","sliced":"all""#));
    assert_eq!(out.status.code(), Some(2));
}
