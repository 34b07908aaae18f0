//! Command targets that record their calls: `/bin/sh` scripts (`$D` in them is their
//! directory) that append one line per call to `$D/calls`, and what they recorded.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// A recorded line: `<event id> <attempt>` (read back with [`event_attempts`]).
pub const EVENT_ATTEMPT: &str = "$PORTARIA_EVENT_ID $PORTARIA_ATTEMPT";

/// A recorded line: `<event id> <route> <attempt>` (read back with [`route_attempts`]).
pub const EVENT_ROUTE_ATTEMPT: &str = "$PORTARIA_EVENT_ID $PORTARIA_ROUTE $PORTARIA_ATTEMPT";

/// Writes `text` to `path` as an executable (mode 0755): the forward commands the tests run.
pub fn write_executable(path: &Path, text: impl AsRef<[u8]>) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Writes an executable /bin/sh script `dir/name`; `$D` in `body` is `dir`.
pub fn shell_script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    write_executable(&path, format!("#!/bin/sh\nD='{}'\n{body}\n", dir.display()));
    path
}

/// A command target `dir/name` that runs `before` (its stdin is the event's body: keep it, or
/// read it away), appends `line` to `$D/calls` (shell words, expanded inside double quotes:
/// [`EVENT_ATTEMPT`], say), then runs `then`.
pub fn record_calls(dir: &Path, name: &str, before: &str, line: &str, then: &str) -> PathBuf {
    shell_script(
        dir,
        name,
        &format!("{before}\nprintf '%s\\n' \"{line}\" >> \"$D/calls\"\n{then}"),
    )
}

/// The lines of `dir/file`, in order; none while it does not exist.
pub fn lines(dir: &Path, file: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The lines a recorder in `dir` appended, in the order of the calls.
pub fn calls(dir: &Path) -> Vec<String> {
    lines(dir, "calls")
}

/// The same, sorted: for calls that may come in any order.
pub fn calls_sorted(dir: &Path) -> Vec<String> {
    let mut calls = calls(dir);
    calls.sort();
    calls
}

/// The calls of a recorder of [`EVENT_ATTEMPT`]: (event id, attempt).
pub fn event_attempts(dir: &Path) -> Vec<(i64, u32)> {
    calls(dir)
        .iter()
        .map(|l| {
            let mut parts = l.split_whitespace();
            (
                parts.next().unwrap().parse().unwrap(),
                parts.next().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

/// The calls of a recorder of [`EVENT_ROUTE_ATTEMPT`]: (event id, route, attempt).
pub fn route_attempts(dir: &Path) -> Vec<(i64, String, u32)> {
    calls(dir)
        .iter()
        .map(|l| {
            let mut parts = l.split_whitespace();
            (
                parts.next().unwrap().parse().unwrap(),
                parts.next().unwrap().to_string(),
                parts.next().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

/// An alert command in `dir` that appends its stdin to `dir/alerts.jsonl` and its
/// environment to `dir/alert-env`; while `dir/fail` exists it says why on stderr and exits 3.
pub fn alert_command(dir: &Path) -> PathBuf {
    let path = dir.join("alert.sh");
    write_executable(
        &path,
        format!(
            "#!/bin/sh\nD='{}'\n\
             if [ -e \"$D/fail\" ]; then echo 'the alert service said no' >&2; exit 3; fi\n\
             cat >> \"$D/alerts.jsonl\"\nenv > \"$D/alert-env\"\n",
            dir.display()
        ),
    );
    path
}

/// The alerts the alert command recorded, in order.
pub fn alerts(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("alerts.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each alert is one JSON line"))
        .collect()
}

/// Those of `kind`.
pub fn of_kind(dir: &Path, kind: &str) -> Vec<Value> {
    alerts(dir)
        .into_iter()
        .filter(|a| a["kind"] == kind)
        .collect()
}
