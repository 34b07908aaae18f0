//! What `serve` does to its own process before it starts anything, so that the programs it
//! runs (forward commands, pipe handlers, the alert command: code that parses what strangers
//! send) cannot read its secrets out of `/proc`:
//!
//! - [`not_dumpable`]: `prctl(PR_SET_DUMPABLE, 0)`. `/proc/PID/environ`, `mem`, `maps` and
//!   the like then belong to root, a process of the same user can neither read them nor
//!   ptrace portaria, and a crash writes no core file (which would hold every secret). Root,
//!   with `CAP_SYS_PTRACE`, still can.
//! - [`take_env`]: the variables the config read secrets from leave the environment, and
//!   their text is overwritten with zeros. `unsetenv` alone only unlinks an entry from
//!   `environ`: its bytes stay in the block the kernel shows as `/proc/PID/environ`.
//!
//! A leaf: it knows nothing of the config; `cli` hands it the names.

use std::ffi::{CStr, c_char};

/// Makes this process not dumpable: no core file, and its `/proc` files and memory closed to
/// every process without `CAP_SYS_PTRACE`, those of its own user included. Inherited by
/// threads, not by the programs it runs (`execve` decides theirs).
pub fn not_dumpable() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_DUMPABLE takes plain integers and touches no memory of ours.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Takes each of `names` out of this process's environment, its text overwritten with zeros
/// first; returns the values they had (the config was read from them; a reload reads them
/// again from these). A name that is not set, or not UTF-8, is left alone.
///
/// # Safety
///
/// No other thread may run: the environment is the process's, and `std::env`'s lock does not
/// cover a C library reading it (`getenv`) in another thread while an entry is overwritten and
/// removed. `serve` calls this before its first thread (logging's writer, the runtime).
pub unsafe fn take_env(names: &[String]) -> Vec<(String, String)> {
    let mut taken = Vec::new();
    for name in names {
        if name.is_empty() || name.contains(['=', '\0']) {
            continue;
        }
        let Ok(value) = std::env::var(name) else {
            continue;
        };
        // SAFETY: the caller promises a single thread; `zero_values` only writes within
        // the NUL-terminated strings `environ` points to.
        unsafe {
            zero_values(name);
            std::env::remove_var(name);
        }
        taken.push((name.clone(), value));
    }
    taken
}

unsafe extern "C" {
    /// The C library's environment: a null-terminated array of `NAME=value` strings.
    static mut environ: *mut *mut c_char;
}

/// Overwrites the value of every `name=...` entry of `environ` with zeros, leaving `name=`
/// (which `remove_var` then unlinks). The strings of the environment the kernel handed over
/// lie in the block `/proc/PID/environ` shows, so that shows zeros from now on.
///
/// # Safety
///
/// No other thread may read or change the environment meanwhile.
unsafe fn zero_values(name: &str) {
    // SAFETY: `environ` is valid (possibly null) while no thread changes it; each entry is a
    // NUL-terminated string in writable memory (the stack block from `execve`, or the heap
    // for a variable set later), and the writes stay before its NUL.
    unsafe {
        let mut entry = environ;
        if entry.is_null() {
            return;
        }
        while !(*entry).is_null() {
            let text = *entry;
            let bytes = CStr::from_ptr(text).to_bytes();
            let len = bytes.len();
            let ours =
                len > name.len() && bytes.starts_with(name.as_bytes()) && bytes[name.len()] == b'=';
            if ours {
                for at in name.len() + 1..len {
                    // Volatile: nothing in this program reads these bytes again, but the
                    // kernel shows them.
                    std::ptr::write_volatile(text.add(at), 0);
                }
            }
            entry = entry.add(1);
        }
    }
}
