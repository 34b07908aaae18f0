//! portaria: a small, durable webhook receiver. The map, its invariants and its dependency
//! rules: ARCHITECTURE.md; each module's own doc says what it owns.
//!
//! The modules, in the order a webhook travels:
//!
//! - [`config`]: one TOML file into a validated [`config::Config`].
//! - [`server`]: the composition root: listeners, connection cap, TLS, reload, graceful stop.
//! - [`ingest`]: one request's pipeline: route, client, body, verify, dedup key, store, answer.
//! - [`client_ip`]: the client's address behind a trusted tunnel; the verified certificate.
//! - [`verify`]: one file per provider's signature rules, and the proof [`verify::Verified`].
//! - [`dedup`]: the dedup key rules and their extraction.
//! - [`store`]: the only module that speaks SQL: one handle, SQLite or PostgreSQL.
//! - [`forward`]: the worker that delivers stored events to a command, URL or pipe handler.
//! - [`prune`]: removes finished events past their retention window.
//! - [`archive`]: the daily compressed files pruned events are written to first.
//! - [`cli`]: the command line: `serve`, `check`, `init`, `events`, `send`, `backup`, ...
//! - [`metrics`]: counts requests and deliveries, for `/metrics` and the alerts.
//! - [`admin`]: `/healthz`, `/readyz` and `/metrics` on a second, loopback listener.
//! - [`status`]: the status page on the admin listener: what came in, what failed, replay.
//! - [`alerts`]: tells the owner when events go dead or something else needs them.
//! - [`canary`]: probes the public path through the tunnel, signed, every `canary_every`.
//! - [`outbound`]: the HTTPS client portaria calls out with (the canary's).
//! - [`public_path`]: what the canary's probes saw, for the alerts and the status page.
//! - [`reconcile`]: asks the gateways' APIs what never arrived, and gets it back.
//! - [`shutdown`]: the one cancellation signal every task listens to.
//! - [`hardening`]: `serve`'s process closed to the programs it runs.
//! - [`panics`]: any panic ends `serve`, naming the task, for systemd to restart it.
//! - [`watchdog`]: tells systemd the server is ready, how it stands, and that it is alive.
//! - [`notify`]: systemd's notify protocol.
//! - [`logwriter`]: log output off the request path.
//! - [`logline`]: the plain-text log line, written fast.
//! - [`logescape`]: control characters escaped in every field of every log format.
//! - [`suggest`]: "did you mean": the known name closest to a mistyped one.
//! - [`time`]: unix time and RFC 3339 without a date crate.
//! - [`digest`]: SHA-2 and HMAC through `ring`.
//! - [`der`]: DER's tag-length-value elements, for certificates.
//! - [`fault`]: test-only fault hooks (debug builds only).

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
pub mod reconcile;
pub mod server;
pub mod shutdown;
pub mod status;
pub mod store;
pub mod suggest;
pub mod time;
pub mod verify;
pub mod watchdog;

pub use server::serve;
