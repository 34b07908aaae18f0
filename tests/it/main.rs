//! One integration-test binary (so the 2-core machine links once), driving the real server:
//! in-process `serve` on 127.0.0.1:0 where a test only needs HTTP, the real `portaria`
//! binary where it needs a process (CLI, signals, SIGKILL).

// Test code: a failed unwrap is a failed test (production code denies both, Cargo.toml).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod alert_scripts;
mod alerts;
mod backup;
mod bodies;
mod browser;
mod canary;
mod check;
mod cli;
mod commit_order;
mod compression;
mod crowds;
mod disk_full;
mod event_fields;
mod fail_fast;
mod forwarding;
mod handover;
mod hostile;
mod init;
mod kill_storm;
mod layout;
mod locked;
mod log_lines;
mod observability;
mod ordering;
mod outbound;
mod partial_body;
mod pause;
mod pg_archive;
mod pg_intake;
mod pg_retention;
mod pg_signed;
mod pg_status;
mod pg_tls;
mod pg_worker;
mod pipe;
mod postgres;
mod process_secrets;
mod properties;
mod providers_asym;
mod providers_br;
mod providers_saas;
mod read_only;
mod realip;
mod receiver;
mod reload;
mod replay;
mod retention;
mod routes;
mod sd_notify;
mod secrets_everywhere;
mod shipped;
mod signed;
mod signed_dedup;
mod status;
mod status_lang;
mod store_suite;
mod support;
mod target_down;
mod task_panics;
mod tls;
mod upgrade;
