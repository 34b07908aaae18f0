//! `portaria check`: everything wrong with the configuration in one run, and what `serve` will
//! need of this machine. The file's own problems (unknown keys with the closest known one,
//! refused values, unknown providers, missing or unreadable secrets, the status token, the TLS
//! files) come from the config's validation, which collects them all; `Config::load_for_check`
//! adds the machine (the database's directory writable, each program present and executable).
//! Warnings (risky settings) are shown with the problems, not instead of them. An endpoint
//! that answers on more paths than its `path` (Efí's, also at `/pix` below it) says so, and
//! one that verifies by fetching (`fetch = true`) names the API it fetches from.
//!
//! `--user NAME` checks as the user `serve` runs as (the packaged unit's `portaria`): run as
//! root, the command becomes that user before reading anything, so a file or directory that
//! user cannot reach is found now, not at the service's first start.

use std::ffi::{CStr, CString};
use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use crate::config::{Config, Source};

#[derive(Args, Debug)]
pub(super) struct CheckArgs {
    /// Check as this user, the one `serve` runs as (the packaged service's is `portaria`):
    /// needs root, which the command gives up before reading the config.
    #[arg(long, value_name = "NAME")]
    user: Option<String>,
}

pub(super) fn run(config: Option<&Path>, args: CheckArgs) -> Result<ExitCode, String> {
    if let Some(name) = &args.user {
        become_user(name)?;
    }
    match Config::load_for_check(config) {
        Ok(config) => {
            for warning in &config.warnings {
                eprintln!("{}: warning: {warning}", config.source);
            }
            match &config.source {
                Source::Embedded => {
                    println!("ok (no config file found; the embedded demo config would be used)")
                }
                Source::File(path) => println!("ok: {}", path.display()),
            }
            // An endpoint that answers on more than its `path`: said, so nobody is surprised.
            for endpoint in &config.endpoints {
                if let Some(suffix) = endpoint.verifier.appended_path() {
                    let (name, path) = (&endpoint.name, &endpoint.path);
                    let provider = endpoint.verifier.provider();
                    println!(
                        "endpoint `{name}` answers on {path} and on {path}{suffix}: {provider} \
                         appends `{suffix}` to the URL it was given"
                    );
                }
                if let Some(r) = endpoint.reconcile.as_ref().filter(|r| r.fetch) {
                    println!(
                        "endpoint `{}` verifies by fetching: the payment each event names is \
                         fetched from {} before it is forwarded",
                        endpoint.name, r.api_base
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            for warning in &e.warnings {
                eprintln!("{}: warning: {warning}", e.source);
            }
            let n = e.problems.len();
            eprintln!(
                "{n} {} in {}: `portaria serve` refuses this configuration until {} fixed",
                if n == 1 { "problem" } else { "problems" },
                e.source,
                if n == 1 { "it is" } else { "they are" }
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Becomes user `name` (its uid, its group, its supplementary groups) for the rest of the
/// process. Already being that user is fine; anyone else needs root.
fn become_user(name: &str) -> Result<(), String> {
    let (uid, gid, c_name) = lookup_user(name)?;
    // SAFETY: these calls take no pointers and cannot fail.
    let (euid, ruid) = unsafe { (libc::geteuid(), libc::getuid()) };
    if euid == uid && ruid == uid {
        return Ok(());
    }
    if euid != 0 {
        return Err(format!(
            "--user {name}: only root can check as another user (run it with sudo)"
        ));
    }
    // Groups first: once the uid is given up, they cannot be changed any more.
    // SAFETY: `c_name` is a valid NUL-terminated string; the ids come from the user database.
    let changed = unsafe {
        libc::initgroups(c_name.as_ptr(), gid) == 0
            && libc::setgid(gid) == 0
            && libc::setuid(uid) == 0
    };
    // SAFETY: these calls take no pointers and cannot fail.
    let now = unsafe { (libc::geteuid(), libc::getuid()) };
    if !changed || now != (uid, uid) {
        return Err(format!(
            "--user {name}: cannot become that user: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The uid and primary gid of user `name`, and the name as a C string.
fn lookup_user(name: &str) -> Result<(libc::uid_t, libc::gid_t, CString), String> {
    let no_such = || format!("--user {name}: no such user on this machine");
    let c_name = CString::new(name).map_err(|_| no_such())?;
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: an all-zero passwd is a valid value for getpwnam_r to fill.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, and `buf.len()` is the buffer's size.
    let rc = unsafe {
        libc::getpwnam_r(
            c_name.as_ptr(),
            &mut entry,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return Err(no_such());
    }
    // The name as the database spells it (the same bytes; kept for initgroups).
    // SAFETY: getpwnam_r succeeded, so `pw_name` points to a NUL-terminated string in `buf`.
    let spelled = unsafe { CStr::from_ptr(entry.pw_name) }.to_owned();
    Ok((entry.pw_uid, entry.pw_gid, spelled))
}
