//! portaria: a small, durable webhook receiver.
//!
//! Code map, in the order a webhook travels:
//!
//! - [`config`] reads one TOML file into a validated [`config::Config`].
//! - [`server`] owns the listener, connection limits and timeouts, graceful shutdown, and
//!   reloading the configuration (SIGHUP).
//! - [`ingest`] is the request pipeline: route, client address, limit, verify, dedup key,
//!   store, answer; [`client_ip`] tells the client's address behind a trusted tunnel.
//! - [`verify`] holds one file per provider's signature rules; [`dedup`] the dedup key rules.
//! - [`store`] is the only module that speaks SQL; a single writer thread commits in groups.
//! - [`forward`] is the background worker that delivers stored events to a command, URL or pipe handler.
//! - [`prune`] removes finished events past their retention window, after [`archive`] has
//!   written them to a daily compressed file when one is configured.
//! - [`cli`] parses the command line and runs `serve`, `check`, `events`, `prune`, `archive`,
//!   `send`, `verify`, `backup` and `init`; [`cli::send`] signs and fires test webhooks as a
//!   provider would.
//! - [`metrics`] counts requests and deliveries; [`admin`] serves `/healthz`, `/readyz` and
//!   `/metrics` on a second, loopback listener.
//! - [`alerts`] tells the owner (an `[alerts]` command or URL) when events go dead, an endpoint
//!   falls quiet, duplicates, storage errors or slow deliveries pile up.
//! - [`logwriter`] takes log output off the request path; [`logline`] writes the text line
//!   and [`logescape`] escapes control characters in every field of every format.
//! - [`suggest`] finds the known name closest to a mistyped one ("did you mean").
//! - [`time`] has the clock helpers; [`shutdown`] carries the one cancellation signal that
//!   every task listens to.
//! - [`hardening`] closes `serve`'s process to the programs it runs: not dumpable, the
//!   secrets' variables taken out of its environment.
//! - [`panics`] ends `serve` on any panic, naming the task, so systemd restarts it;
//!   [`fault`] holds the test-only fault hooks (debug builds only).
//! - [`outbound`] is the HTTPS client portaria calls out with; [`canary`] probes the public
//!   path through the tunnel with it, and [`public_path`] holds what the probes saw.
//! - [`notify`] speaks systemd's notify protocol; [`watchdog`] tells systemd the server is
//!   ready, how its queue stands, that it stops, and (`WatchdogSec=`) that it is alive.

pub mod admin;
pub mod alerts;
pub mod archive;
pub mod canary;
pub mod cli;
pub mod client_ip;
pub mod config;
pub mod dedup;
pub mod der;
pub mod digest;
pub mod fault;
pub mod forward;
pub mod hardening;
pub mod ingest;
pub mod logescape;
pub mod logline;
pub mod logwriter;
pub mod metrics;
pub mod notify;
pub mod outbound;
pub mod panics;
pub mod prune;
pub mod public_path;
pub mod server;
pub mod shutdown;
pub mod status;
pub mod store;
pub mod suggest;
pub mod time;
pub mod verify;
pub mod watchdog;

pub use server::serve;
