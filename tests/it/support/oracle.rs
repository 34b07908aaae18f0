//! Running the providers' own libraries (`tests/oracle/`) as oracles.

#![allow(dead_code)] // until the first provider test calls it

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Exit status of an oracle script whose library is not installed.
const MISSING_LIBRARY: i32 = 77;

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/oracle")
        .join(name)
}

/// Runs `tests/oracle/NAME` (`.py` with python3, `.mjs`/`.js` with node) with `input` on
/// stdin and returns its JSON answer. None (with a note on stderr) when its library is missing,
/// unless `PORTARIA_REQUIRE_ORACLES` is set (CI), where that fails the test.
pub fn run(name: &str, input: &serde_json::Value) -> Option<serde_json::Value> {
    let path = script(name);
    let program = if name.ends_with(".py") {
        "python3"
    } else {
        "node"
    };
    let mut child = Command::new(program)
        .arg(&path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program} {}: {e}", path.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(MISSING_LIBRARY) {
        assert!(
            std::env::var_os("PORTARIA_REQUIRE_ORACLES").is_none(),
            "oracle {name}: library missing: {stderr}"
        );
        eprintln!("skipped: oracle {name} has no library here ({stderr})");
        return None;
    }
    assert!(out.status.success(), "oracle {name} failed: {stderr}");
    Some(serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "oracle {name}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    }))
}
