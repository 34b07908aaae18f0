//! One integration-test binary (so the 2-core machine links once), driving the real server:
//! in-process `serve` on 127.0.0.1:0 where a test only needs HTTP, the real `portaria`
//! binary where it needs a process (CLI, signals, SIGKILL).

mod backup;
mod cli;
mod commit_order;
mod disk_full;
mod forwarding;
mod layout;
mod locked;
mod observability;
mod oracle;
mod providers_asym;
mod providers_br;
mod providers_saas;
mod realip;
mod receiver;
mod reload;
mod retention;
mod sd_notify;
mod support;
mod task_panics;
