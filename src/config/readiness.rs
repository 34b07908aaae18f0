//! What `serve` will need of this machine, looked at as the user running the check, and the
//! settings that work but put the owner at risk.
//!
//! `portaria check` ([`Machine::Require`]): the SQLite file's directory writable (the database,
//! its `-wal` and `-shm` are written there), each forward, pipe and alert program present and
//! executable. A config that passes the file's own rules but would fail at the first start or
//! the first delivery is not `ok`. `serve` ([`Machine::Warn`]) is told of a missing program in
//! its log (a program may be installed after the start; its deliveries fail until then); the
//! database commands ([`Machine::Ignore`]) look at none of it. The secrets, the status token,
//! the TLS files and `url_env` are read by the validation itself, so a check run as the
//! service's user (`check --user`) finds those it could not read too.
//!
//! A risk, not a problem: a webhook listener reachable beyond this machine over plain HTTP
//! with an endpoint whose credential is static (a header token every request carries in
//! clear) is a warning for both.

use std::path::Path;

use super::validate::{usable_dir, writable};
use super::validator::{Machine, Validator};
use super::{Endpoint, Server};

/// Where a program is looked for when there is no `PATH` (what `execvp` assumes).
const DEFAULT_PATH: &str = "/usr/bin:/bin";

impl Validator<'_> {
    /// The SQLite database's directory, and the files already in it, writable by this user.
    pub(super) fn storage_ready(&mut self, path: &Path) {
        if self.machine != Machine::Require {
            return;
        }
        let user = user_name();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && let Err(why) = usable_dir(dir)
        {
            self.problem(format!(
                "storage.path: {why} (checked as {user}); the database, its -wal and -shm \
                 files are written there"
            ));
            return;
        }
        for suffix in ["", "-wal", "-shm"] {
            let mut file = path.as_os_str().to_owned();
            file.push(suffix);
            let file = Path::new(&file);
            if file.exists() && !writable(file) {
                self.problem(format!(
                    "storage.path: {} is not writable (checked as {user})",
                    file.display()
                ));
            }
        }
    }

    /// A forward, pipe or alert program (`argv[0]`), where `serve` will start it: present and
    /// executable. `at` names the key, e.g. `endpoint[0] (line 2).forward.command`.
    pub(super) fn program_ready(&mut self, at: &str, argv: &[String]) {
        if self.machine == Machine::Ignore {
            return;
        }
        let Some(program) = argv.first().filter(|p| !p.is_empty()) else {
            return;
        };
        let Err(why) = find_program(program) else {
            return;
        };
        if self.machine == Machine::Require {
            let user = user_name();
            self.problem(format!("{at}: {why} (checked as {user})"));
        } else {
            self.warnings.push(format!(
                "{at}: {why}; its deliveries fail until it is there"
            ));
        }
    }

    /// A webhook listener reachable beyond this machine over plain HTTP, with an endpoint
    /// whose provider sends its secret itself in every request (a token, a password): anyone
    /// who sees one request on the way can forge the next. It works, so it is a warning.
    pub(super) fn warn_static_credentials_in_clear(
        &mut self,
        server: &Server,
        endpoints: &[Endpoint],
    ) {
        if server.tls.is_some() || server.listen.ip().is_loopback() {
            return;
        }
        let exposed: Vec<String> = endpoints
            .iter()
            .filter(|e| e.verifier.static_credential())
            .map(|e| format!("{} ({})", e.name, e.verifier.provider()))
            .collect();
        if exposed.is_empty() {
            return;
        }
        self.warnings.push(format!(
            "server.listen: {} takes plain HTTP from beyond this machine, and endpoint {} \
             authenticates with a static secret that every request carries in clear: anyone \
             who sees one request on the way can send forged ones. Keep listen on 127.0.0.1 \
             behind the tunnel (which speaks HTTPS), or set [server] tls",
            server.listen,
            exposed.join(", ")
        ));
    }
}

/// Finds `program` as `serve` will start it: a path as given (relative to the directory it
/// starts in), else the first executable file of that name in `PATH`.
fn find_program(program: &str) -> Result<(), String> {
    if program.contains('/') {
        return executable(Path::new(program)).map_err(|why| format!("`{program}` {why}"));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    if std::env::split_paths(&path).any(|dir| executable(&dir.join(program)).is_ok()) {
        return Ok(());
    }
    Err(format!(
        "`{program}` is in no directory of PATH ({}); give its full path",
        path.to_string_lossy()
    ))
}

/// Why `path` cannot be started by this user, if it cannot.
fn executable(path: &Path) -> Result<(), &'static str> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist",
        std::io::ErrorKind::PermissionDenied => {
            "cannot be reached: a directory on the way is closed to this user"
        }
        _ => "cannot be read",
    })?;
    if !meta.is_file() {
        return Err("is not a file");
    }
    if !access(path, libc::X_OK) {
        return Err("is not executable by this user (chmod +x it)");
    }
    Ok(())
}

/// `access(2)`: whether this process's real user may use `path` for `mode`.
fn access(path: &Path, mode: libc::c_int) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::access(path.as_ptr(), mode) == 0 }
}

/// The name of the user this process runs as (for messages), else its uid.
fn user_name() -> String {
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: an all-zero passwd is a valid value for getpwuid_r to fill.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, and `buf.len()` is the buffer's size.
    let rc = unsafe { libc::getpwuid_r(uid, &mut entry, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || entry.pw_name.is_null() {
        return format!("uid {uid}");
    }
    // SAFETY: getpwuid_r succeeded, so `pw_name` points to a NUL-terminated string in `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(entry.pw_name) };
    format!("user {}", name.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::MINIMAL;
    use crate::config::{Config, Source};
    use std::os::unix::fs::PermissionsExt;

    fn check(text: &str, dir: &Path) -> Result<Config, String> {
        Config::parse_for_check(text, Source::File(dir.join("p.toml"))).map_err(|e| e.to_string())
    }

    #[test]
    fn programs_are_found_as_serve_starts_them() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(find_program("sh"), Ok(()));
        assert_eq!(find_program("/bin/sh"), Ok(()));
        let missing = find_program("/nonexistent/on-payment").unwrap_err();
        assert!(missing.contains("does not exist"), "{missing}");
        let nowhere = find_program("portaria-surely-not-installed").unwrap_err();
        assert!(nowhere.contains("in no directory of PATH"), "{nowhere}");
        let script = dir.path().join("script");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
        let plain = find_program(script.to_str().unwrap()).unwrap_err();
        assert!(plain.contains("is not executable"), "{plain}");
        let not_file = find_program(dir.path().to_str().unwrap()).unwrap_err();
        assert!(not_file.contains("is not a file"), "{not_file}");
    }

    #[test]
    fn check_requires_what_serve_only_warns_about() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[storage]\npath = \"db/p.db\"\n{MINIMAL}forward = {{ command = [\"/nonexistent/on-payment\"] }}\n"
        );
        let msg = check(&text, dir.path()).unwrap_err();
        assert!(
            msg.contains(".forward.command: `/nonexistent/on-payment` does not exist (checked as"),
            "{msg}"
        );
        // serve starts, and says so in its log.
        let config = Config::parse(&text, Source::File(dir.path().join("p.toml"))).unwrap();
        assert!(
            config
                .warnings
                .iter()
                .any(|w| w.contains("does not exist; its deliveries fail until it is there")),
            "{:?}",
            config.warnings
        );
        // The database commands do not look.
        let quiet = Config::parse_with(
            &text,
            Source::File(dir.path().join("p.toml")),
            crate::config::Secrets::Skip,
        )
        .unwrap();
        assert!(quiet.warnings.is_empty(), "{:?}", quiet.warnings);
        // An alert command too.
        let alerts = format!("[alerts]\ncommand = [\"no-such-alert-program\"]\n{MINIMAL}");
        let msg = check(&alerts, dir.path()).unwrap_err();
        assert!(
            msg.contains("alerts.command: `no-such-alert-program`"),
            "{msg}"
        );
        assert!(check(MINIMAL, dir.path()).is_ok());
    }

    #[test]
    fn a_static_credential_over_plain_http_beyond_loopback_is_a_warning() {
        let asaas =
            "[[endpoint]]\npath = \"/a\"\nprovider = \"asaas\"\nsecret = \"a-long-enough-token\"\n";
        let warned = |text: &str| {
            Config::parse(text, Source::File("/srv/p.toml".into()))
                .unwrap()
                .warnings
                .iter()
                .any(|w| w.contains("static secret that every request carries in clear"))
        };
        assert!(warned(&format!(
            "[server]\nlisten = \"0.0.0.0:8080\"\n{asaas}"
        )));
        assert!(!warned(&format!(
            "[server]\nlisten = \"127.0.0.1:8080\"\n{asaas}"
        )));
        assert!(!warned(&format!(
            "[server]\nlisten = \"0.0.0.0:8080\"\n{MINIMAL}"
        )));
    }
}
