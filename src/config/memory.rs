//! How much memory portaria may use, and the defaults of the two settings that bound what
//! clients can make it hold: `[server] max_connections` and `body_budget_bytes`.
//!
//! The memory is the smallest cgroup limit over portaria's own cgroup and its ancestors
//! (systemd's `MemoryMax=` on the unit or its slice, a container's limit; cgroup v2's
//! `memory.max`, v1's `memory.limit_in_bytes`), else the machine's physical memory. A limit
//! counts everything in the cgroup, forward commands included, so the defaults take a share of
//! it, never all of it ([`Limits::derive`]; the rule is in docs/guarantees/input.md).

use std::fmt;
use std::path::Path;

/// The most connections served at once by default, however much memory there is.
pub const MAX_DEFAULT_CONNECTIONS: usize = 1024;
/// The fewest by default, however little: below this, making room at the cap has too few
/// connections to choose from. The body budget still bounds what they can buffer.
pub const MIN_DEFAULT_CONNECTIONS: usize = 16;
/// What is assumed when neither a cgroup limit nor the physical memory can be read.
const UNKNOWN_MEMORY: u64 = 1 << 30;

/// The memory portaria may use, and where that figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    pub bytes: u64,
    pub source: MemorySource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemorySource {
    /// A cgroup's memory limit (systemd's `MemoryMax=`, a container's).
    Cgroup,
    /// The machine's physical memory: no cgroup limits portaria.
    Physical,
    /// Neither could be read: [`UNKNOWN_MEMORY`] assumed.
    Unknown,
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match self.source {
            MemorySource::Cgroup => "the cgroup's memory limit",
            MemorySource::Physical => "physical memory",
            MemorySource::Unknown => "assumed: no limit or physical memory readable",
        };
        write!(f, "{} MiB ({source})", self.bytes >> 20)
    }
}

impl Memory {
    /// Reads the limits of this process's cgroups and the physical memory.
    pub fn probe() -> Memory {
        let physical = physical_memory();
        let cgroup = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|text| cgroup_limit(&text, |path| std::fs::read_to_string(path).ok()));
        match (cgroup, physical) {
            (Some(limit), Some(physical)) if limit < physical => Memory {
                bytes: limit,
                source: MemorySource::Cgroup,
            },
            (Some(limit), None) => Memory {
                bytes: limit,
                source: MemorySource::Cgroup,
            },
            (_, Some(physical)) => Memory {
                bytes: physical,
                source: MemorySource::Physical,
            },
            (None, None) => Memory {
                bytes: UNKNOWN_MEMORY,
                source: MemorySource::Unknown,
            },
        }
    }
}

fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf reads a system constant; it has no memory effects.
    let (pages, page_size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let bytes = u64::try_from(pages)
        .ok()?
        .checked_mul(u64::try_from(page_size).ok()?)?;
    (bytes > 0).then_some(bytes)
}

/// The smallest memory limit of the cgroups in `proc_cgroup` (the text of `/proc/self/cgroup`)
/// and their ancestors, each file read with `read`. None: no cgroup has one.
fn cgroup_limit(proc_cgroup: &str, read: impl Fn(&Path) -> Option<String>) -> Option<u64> {
    let mut smallest: Option<u64> = None;
    for line in proc_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (root, file) = if controllers.is_empty() {
            ("/sys/fs/cgroup", "memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes")
        } else {
            continue;
        };
        // The cgroup itself, then each ancestor up to the root of the hierarchy.
        let mut dir = Some(Path::new(path));
        while let Some(at) = dir {
            let relative = at.strip_prefix("/").unwrap_or(at);
            let limit = read(&Path::new(root).join(relative).join(file))
                .and_then(|text| parse_limit(&text));
            if let Some(limit) = limit {
                smallest = Some(smallest.map_or(limit, |s| s.min(limit)));
            }
            dir = at.parent();
        }
    }
    smallest
}

/// A limit file's value: `max` (v2) and v1's "no limit" (a page-rounded `i64::MAX`) are none.
fn parse_limit(text: &str) -> Option<u64> {
    let bytes: u64 = text.trim().parse().ok()?;
    (bytes > 0 && bytes < 1 << 62).then_some(bytes)
}

/// The defaults that bound memory, for a given memory and `max_body_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    pub body_budget_bytes: usize,
}

impl Limits {
    /// `max_connections`: as many as fit half of `memory` with a body of `max_body_bytes` each,
    /// between [`MIN_DEFAULT_CONNECTIONS`] and [`MAX_DEFAULT_CONNECTIONS`] (`configured`, if
    /// set, instead). `body_budget_bytes`: a quarter of `memory`, no more than those
    /// connections could buffer, and never less than one body of `max_body_bytes`.
    pub fn derive(memory: u64, max_body_bytes: usize, configured: Option<usize>) -> Limits {
        let memory = usize::try_from(memory).unwrap_or(usize::MAX);
        let body = max_body_bytes.max(1);
        let max_connections = configured.unwrap_or_else(|| {
            (memory / 2 / body).clamp(MIN_DEFAULT_CONNECTIONS, MAX_DEFAULT_CONNECTIONS)
        });
        let body_budget_bytes = (memory / 4)
            .min(max_connections.saturating_mul(body))
            .max(body);
        Limits {
            max_connections,
            body_budget_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::PathBuf;

    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_smallest_limit_of_the_cgroup_and_its_ancestors_counts() {
        let files: HashMap<PathBuf, &str> = [
            (
                "/sys/fs/cgroup/system.slice/portaria.service/memory.max",
                "268435456\n",
            ),
            ("/sys/fs/cgroup/system.slice/memory.max", "max\n"),
        ]
        .into_iter()
        .map(|(p, v)| (PathBuf::from(p), v))
        .collect();
        let read = |p: &Path| files.get(p).map(|v| v.to_string());
        assert_eq!(
            cgroup_limit("0::/system.slice/portaria.service\n", read),
            Some(256 * MIB)
        );
        // A slice's limit below the unit's wins.
        let mut slice = files.clone();
        slice.insert("/sys/fs/cgroup/system.slice/memory.max".into(), "104857600");
        let read = |p: &Path| slice.get(p).map(|v| v.to_string());
        assert_eq!(
            cgroup_limit("0::/system.slice/portaria.service\n", read),
            Some(100 * MIB)
        );
        // No limit anywhere ("max"), or no file: none.
        let read = |p: &Path| files.get(p).map(|v| v.to_string());
        assert_eq!(cgroup_limit("0::/user.slice/x.scope\n", read), None);
    }

    #[test]
    fn cgroup_v1_reads_the_memory_controllers_limit_and_ignores_its_no_limit_value() {
        let text = "9:name=systemd:/\n5:cpu,cpuacct:/a\n4:memory:/process_api/abc\n0::/\n";
        let files: HashMap<PathBuf, &str> = [
            (
                "/sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes",
                "536870912",
            ),
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712",
            ),
        ]
        .into_iter()
        .map(|(p, v)| (PathBuf::from(p), v))
        .collect();
        assert_eq!(
            cgroup_limit(text, |p| files.get(p).map(|v| v.to_string())),
            Some(512 * MIB)
        );
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("max"), None);
        assert_eq!(parse_limit("0"), None);
    }

    #[test]
    fn the_defaults_fit_half_the_memory_with_connections_and_a_quarter_with_bodies() {
        let mib = 1 << 20;
        // A Pi Zero 2 W under the unit's MemoryMax=50%: 256 MiB.
        let zero = Limits::derive(256 * MIB, mib, None);
        assert_eq!(zero.max_connections, 128);
        assert_eq!(zero.body_budget_bytes, 64 * mib);
        assert!(zero.max_connections * mib <= 128 * mib);
        // A Pi 4 with 1 GiB under MemoryMax=50%: 512 MiB.
        let pi4 = Limits::derive(512 * MIB, mib, None);
        assert_eq!(
            (pi4.max_connections, pi4.body_budget_bytes),
            (256, 128 * mib)
        );
        // A large machine: the cap of 1024, and no budget beyond what they can buffer.
        let big = Limits::derive(24 << 30, mib, None);
        assert_eq!(
            (big.max_connections, big.body_budget_bytes),
            (1024, 1024 * mib)
        );
        // Tiny memory or huge bodies: at least 16 connections, and room for one body.
        let tiny = Limits::derive(64 * MIB, 16 * mib, None);
        assert_eq!(
            (tiny.max_connections, tiny.body_budget_bytes),
            (16, 16 * mib)
        );
        // A configured cap is kept, and bounds the budget.
        let set = Limits::derive(512 * MIB, mib, Some(10));
        assert_eq!((set.max_connections, set.body_budget_bytes), (10, 10 * mib));
    }

    #[test]
    fn this_machine_has_some_memory() {
        let memory = Memory::probe();
        assert!(memory.bytes >= 16 * MIB, "{memory}");
    }
}
