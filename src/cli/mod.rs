//! The command line: parses arguments (the clap types, with clap's suggestions for a mistyped
//! subcommand or flag), sets up logging, and runs the subcommands `serve`, `check`, `events
//! list/show/replay/export`, `prune`, `archive replay`, `send`, `verify`, `init`, `backup`,
//! `store copy` and `reconcile`. The small ones live here (`serve`, `prune`, and the endpoint
//! lookup, whose error names the configured endpoints and the closest); `check`, `init` (its
//! next steps in `init/next`, its sentences in `init/text`), `events` (its filters in
//! `filters`, its export in `export`), `archive`, [`send`], `verify`, `backup`, `store_copy`
//! and `reconcile` have their own files, and `database` is the one place a command opens the
//! configured store and so picks the engine.
//! Errors go to stderr as `portaria: what was attempted: cause`, and `main` returns an exit
//! code (0 fine, 1 failed, 2 bad usage).

mod archive;
mod backup;
mod check;
mod database;
mod events;
mod export;
mod filters;
mod init;
mod reconcile;
mod rejected;
mod route;
pub mod send;
mod store_copy;
pub mod verify;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, Endpoint, Source};
use crate::time::now_ms;

#[derive(Parser, Debug)]
#[command(
    name = "portaria",
    version,
    about = "A small, durable webhook receiver: verify, deduplicate, store, then forward."
)]
struct Cli {
    /// The config file (else $PORTARIA_CONFIG, ./portaria.toml,
    /// ~/.config/portaria/portaria.toml, /etc/portaria/portaria.toml, then the embedded demo).
    #[arg(long, short = 'c', global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Log lines for people (`text`, the default) or for machines (`json`).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Receive webhooks until SIGTERM or SIGINT.
    Serve,
    /// Validate the configuration and what `serve` will need of this machine, print `ok` or
    /// every problem, and exit.
    Check(check::CheckArgs),
    /// Look at stored events, and replay them.
    #[command(subcommand)]
    Events(EventsCommand),
    /// Remove delivered, stored and dead events past their retention window now (a running
    /// server also does this hourly), archiving them first if `[storage] archive_dir` is set.
    Prune {
        /// Print what would be removed, and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Work with archived (pruned) events.
    #[command(subcommand)]
    Archive(archive::ArchiveCommand),
    /// Sign a payload as the endpoint's provider would and POST it to a running portaria.
    Send(SendArgs),
    /// Check a captured request against an endpoint's secrets as the server would, and say
    /// why it would be refused.
    Verify(VerifyArgs),
    /// Write a first config from a few questions (or flags), where `check` and `serve` find
    /// it, and print the next three commands.
    Init(init::InitArgs),
    /// Write a consistent copy of the database to FILE, safe while the server runs.
    Backup(backup::BackupArgs),
    /// Pause a route's deliveries (its events are still stored), or resume them.
    #[command(subcommand)]
    Route(route::RouteCommand),
    /// Move between store backends: `store copy --from FILE` (SQLite into PostgreSQL).
    #[command(subcommand)]
    Store(store_copy::StoreCommand),
    /// Ask the gateways' APIs what never reached portaria, and get it back (the endpoints
    /// with an [endpoint.reconcile] table; docs/reconcile.md).
    Reconcile(reconcile::ReconcileArgs),
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("payload").required(true).args(["data", "file"]))]
struct SendArgs {
    /// The endpoint's name, as in the config.
    #[arg(long)]
    endpoint: String,
    /// The payload, inline.
    #[arg(long)]
    data: Option<String>,
    /// The payload, from a file (`-` for stdin).
    #[arg(long)]
    file: Option<PathBuf>,
    /// Send the identical delivery this many times (watch deduplication work).
    // An i64, as the ids: one integer parser in the binary, not one per type.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i64).range(1..=1000))]
    repeat: i64,
    /// Where to POST (default: the config's listen address and the endpoint's path).
    #[arg(long)]
    url: Option<String>,
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("what").required(true).args(["request", "rejected"]))]
struct VerifyArgs {
    /// The endpoint's name, as in the config (with --request).
    #[arg(long, requires = "request")]
    endpoint: Option<String>,
    /// A captured raw HTTP/1.1 request: request line, headers, blank line, body (`-` for
    /// stdin), e.g. from `portaria events show --raw ID`.
    #[arg(long, value_name = "FILE", requires = "endpoint")]
    request: Option<PathBuf>,
    /// A rejected request kept (its id in `portaria events rejected`), checked on its stored
    /// headers and body, at the time it was received unless --at says otherwise.
    #[arg(long, value_name = "ID", conflicts_with_all = ["request", "endpoint"])]
    rejected: Option<i64>,
    /// Check at this unix time (seconds) instead of now, to replay an old capture within its
    /// window.
    #[arg(long, value_name = "UNIX")]
    at: Option<i64>,
}

#[derive(Subcommand, Debug)]
enum EventsCommand {
    /// List events, newest first.
    List(ListArgs),
    /// Show one event: its headers, raw body and delivery attempts.
    Show {
        /// The event's id (the first column of `events list`).
        id: i64,
        /// Print only the stored request, as a raw HTTP/1.1 request (for `portaria verify
        /// --request -`): `POST <endpoint path>`, the headers as stored (credentials
        /// redacted; no query string, which is not stored), a blank line, the body.
        #[arg(long)]
        raw: bool,
        /// One JSON object: the shape of the status page's `/api/events/ID`.
        #[arg(long, conflicts_with = "raw")]
        json: bool,
    },
    /// Put events back into pending, with a fresh retry schedule.
    Replay(ReplayArgs),
    /// Write the events the filters pick, oldest first, as CSV or JSON lines: id, received
    /// time (UTC and local), endpoint, type, object id, status, dedup key, `export_fields`.
    Export(export::ExportArgs),
    /// The rejected requests kept (`quarantine_keep`), newest first, with why: never events.
    Rejected {
        /// Only this endpoint's.
        #[arg(long)]
        endpoint: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
struct ListArgs {
    #[command(flatten)]
    filters: filters::Filters,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("which").required(true).multiple(true)
    .args(["id", "dead", "endpoint", "route", "status", "event_type", "since", "until"]))]
struct ReplayArgs {
    /// The event to replay (every route it went to, or --route's only).
    #[arg(conflicts_with_all = ["dead", "endpoint", "status", "event_type", "since", "until"])]
    id: Option<i64>,
    /// Replay every dead delivery (of the events the filters pick): `--status dead`.
    #[arg(long, conflicts_with = "status")]
    dead: bool,
    /// Replay more than 10 events without asking.
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    filters: filters::Filters,
}

/// The binary's entry point.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let format = cli.log_format;
    let result = match cli.command {
        Command::Serve => serve(cli.config.as_deref(), format),
        Command::Send(args) => {
            let _log = init_logging(format, "warn");
            send::run(cli.config.as_deref(), args)
        }
        Command::Verify(args) => {
            let _log = init_logging(format, "warn");
            match args.rejected {
                Some(id) => rejected::verify(cli.config.as_deref(), id, args.at),
                None => verify::run(cli.config.as_deref(), args),
            }
        }
        Command::Init(args) => init::run(cli.config.as_deref(), args),
        Command::Check(args) => {
            let _log = init_logging(format, "warn");
            check::run(cli.config.as_deref(), args)
        }
        Command::Events(command) => {
            let _log = init_logging(format, "warn");
            events::run(cli.config.as_deref(), command)
        }
        Command::Prune { dry_run } => {
            let _log = init_logging(format, "warn");
            prune(cli.config.as_deref(), dry_run)
        }
        Command::Archive(command) => {
            let _log = init_logging(format, "warn");
            archive::run(cli.config.as_deref(), command)
        }
        Command::Backup(args) => {
            let _log = init_logging(format, "warn");
            backup::run(cli.config.as_deref(), args)
        }
        Command::Route(command) => {
            let _log = init_logging(format, "warn");
            route::run(cli.config.as_deref(), command)
        }
        Command::Store(command) => {
            let _log = init_logging(format, "warn");
            store_copy::run(cli.config.as_deref(), command)
        }
        Command::Reconcile(args) => {
            let _log = init_logging(format, "warn");
            reconcile::run(cli.config.as_deref(), args)
        }
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("portaria: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Logging to stderr. `RUST_LOG` wins over `level` (the config's `[log] level`, or a
/// command's quiet default).
/// Returns the guard that writes out the last buffered lines; keep it until the command ends.
fn init_logging(format: LogFormat, level: &str) -> crate::logwriter::FlushOnDrop {
    init_reloadable_logging(format, level).0
}

/// [`init_logging`], plus what sets the level again when `serve` reloads its config (unless
/// `RUST_LOG` decides it).
fn init_reloadable_logging(
    format: LogFormat,
    level: &str,
) -> (crate::logwriter::FlushOnDrop, crate::server::SetLogLevel) {
    use tracing_subscriber::filter::Targets;
    // `Targets` takes `warn,portaria=debug`-style directives: all we need, without the regex
    // engine that a full `EnvFilter` brings into the binary.
    let from_env = std::env::var("RUST_LOG").ok().and_then(|env| {
        let parsed = env.parse::<Targets>();
        if parsed.is_err() {
            // Logging is not up yet: say it on stderr directly.
            eprintln!("portaria: RUST_LOG={env:?} is not a log filter (e.g. `info,portaria=debug`); ignoring it");
        }
        parsed.ok()
    });
    let env_wins = from_env.is_some();
    let filter = from_env
        .or_else(|| level.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(tracing::Level::INFO));
    let (writer, guard) = crate::logwriter::Buffered::start(Box::new(std::io::stderr()));
    // The fmt subscriber caps itself at INFO unless told otherwise; `filter` decides.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(writer)
        .with_ansi(ansi);
    // Under systemd, journald stamps every line already.
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    // Every format escapes control characters in what it writes of a field (`logescape`): a
    // request's text never splits a line or reaches a terminal as a command.
    let fields = crate::logescape::EscapedFields;
    let reload = match (format, ansi) {
        (LogFormat::Json, _) => install(
            builder
                .json()
                .flatten_event(true)
                .map_event_format(crate::logescape::JsonLine)
                .finish(),
            filter,
        ),
        // Not a terminal (journald, a pipe, a file): the same line, written without
        // `core::fmt` (`logline`).
        (LogFormat::Text, false) => install(
            builder
                .fmt_fields(fields)
                .event_format(crate::logline::PlainLine::new(!journald))
                .finish(),
            filter,
        ),
        (LogFormat::Text, true) if journald => {
            install(builder.fmt_fields(fields).without_time().finish(), filter)
        }
        (LogFormat::Text, true) => install(builder.fmt_fields(fields).finish(), filter),
    };
    let set_level: crate::server::SetLogLevel = Box::new(move |level: &str| {
        if env_wins {
            tracing::info!("RUST_LOG is set and decides the log level; [log] level is not applied");
            return Ok(());
        }
        let filter = level
            .parse::<Targets>()
            .map_err(|e| format!("`{level}` is not a log filter: {e}"))?;
        reload(filter)?;
        tracing::info!(level, "log level changed");
        Ok(())
    });
    (guard, set_level)
}

/// Installs `subscriber` filtered by `filter` as the global default, the filter behind a
/// reload layer; returns what swaps the filter.
fn install<S>(subscriber: S, filter: tracing_subscriber::filter::Targets) -> ReloadFilter
where
    S: tracing::Subscriber + Send + Sync + 'static,
{
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    subscriber.with(filter).init();
    Box::new(move |filter| handle.reload(filter).map_err(|e| e.to_string()))
}

/// Swaps the log filter of the installed subscriber.
type ReloadFilter =
    Box<dyn Fn(tracing_subscriber::filter::Targets) -> Result<(), String> + Send + Sync>;

fn load(config: Option<&Path>) -> Result<Config, String> {
    Config::load(config).map_err(|e| format!("invalid configuration\n{e}"))
}

/// The endpoint called `name`, or an error naming the configured ones and the closest.
fn find_endpoint<'a>(config: &'a Config, name: &str) -> Result<&'a Endpoint, String> {
    config
        .endpoint(name)
        .ok_or_else(|| no_such_endpoint(config, name))
}

/// `no endpoint named `mercadopag` in FILE (configured: ...); did you mean `mercadopago`?`
fn no_such_endpoint(config: &Config, name: &str) -> String {
    let names = || config.endpoints.iter().map(|e| e.name.as_str());
    format!(
        "no endpoint named `{name}` in {} (configured: {}){}",
        config.source,
        crate::suggest::list(names()),
        crate::suggest::hint(name, names())
    )
}

/// For commands that only work on the database: the secrets are not read, so an operator can
/// run them without the gateways' secrets in the environment.
fn load_for_database(config: Option<&Path>) -> Result<Config, String> {
    Config::load_with(config, crate::config::Secrets::Skip)
        .map_err(|e| format!("invalid configuration\n{e}"))
}

fn serve(config: Option<&Path>, format: LogFormat) -> Result<ExitCode, String> {
    // Before a secret is read: no core file, and no process of this user (a forward command)
    // reads this one's memory or /proc files.
    let dumpable = crate::hardening::not_dumpable();
    let config = load(config)?;
    // SAFETY: no thread runs yet: logging's writer and the runtime start below.
    let taken = unsafe { crate::hardening::take_env(&config.secret_variables) };
    let env_at_start = crate::config::EnvAtStart::new(taken);
    let (log, set_log_level) = init_reloadable_logging(format, &config.log.level);
    if let Err(e) = dumpable {
        tracing::warn!(error = %e, "cannot make the process non-dumpable: programs it runs as the same user can read its memory");
    }
    // Any panic, in a background task above all, ends the process for systemd to restart.
    crate::panics::exit_on_panic(log.flusher());
    for warning in &config.warnings {
        tracing::warn!("{}: {warning}", config.source);
    }
    if config.source == Source::Embedded {
        tracing::warn!(
            "NO CONFIG FILE FOUND: running the embedded DEMO config with EXAMPLE SECRETS. \
             Do not expose this to the internet. Write /etc/portaria/portaria.toml or pass --config."
        );
    }
    tracing::info!(
        config = %config.source,
        database = %config.storage.path.display(),
        endpoints = config.endpoints.len(),
        "starting"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async {
        // Both listeners before anything is opened: a busy port stops the start cleanly.
        let listeners = crate::server::Listeners::bind(&config.server)
            .await
            .map_err(|e| e.to_string())?;
        // SIGHUP reloads from here on (its default action would end the process).
        let (trigger, reload) = crate::server::reload_channel();
        let hangups = forward_hangups(trigger)?;
        let options = crate::server::Options {
            reload: Some(reload),
            set_log_level: Some(set_log_level),
            env_at_start,
        };
        let served =
            crate::server::serve_with(config, listeners, crate::shutdown::os_signal(), options)
                .await;
        hangups.abort();
        served.map_err(|e| format!("cannot serve: {e}"))
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Turns each SIGHUP into a reload request (`systemctl reload`, `kill -HUP`).
fn forward_hangups(
    trigger: crate::server::ReloadTrigger,
) -> Result<tokio::task::JoinHandle<()>, String> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangup =
            signal(SignalKind::hangup()).map_err(|e| format!("cannot listen for SIGHUP: {e}"))?;
        Ok(tokio::spawn(async move {
            while hangup.recv().await.is_some() {
                tracing::info!("SIGHUP received, reloading the configuration");
                trigger.request();
            }
        }))
    }
    #[cfg(not(unix))]
    {
        // No SIGHUP: the trigger is dropped, and the server serves without reloads.
        drop(trigger);
        Ok(tokio::spawn(async {}))
    }
}

/// The config of a command that works on a database which must already exist (`events`,
/// `prune`, `archive`, `backup`): on SQLite, the file must be there.
fn existing_store(config: Option<&Path>) -> Result<Config, String> {
    existing_store_of(load_for_database(config)?)
}

/// [`existing_store`] of a config already loaded.
fn existing_store_of(config: Config) -> Result<Config, String> {
    if config.storage.postgres.is_none() && !config.storage.path.exists() {
        return Err(format!(
            "no database at {}: has portaria served with this config yet?",
            config.storage.path.display()
        ));
    }
    Ok(config)
}

/// The runtime a command blocks on for the store's async calls (one thread: a command does one
/// thing at a time).
pub(crate) fn command_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

fn prune(config: Option<&Path>, dry_run: bool) -> Result<ExitCode, String> {
    let config = existing_store(config)?;
    let access = if dry_run {
        database::Access::Read
    } else {
        database::Access::Write
    };
    let opened = database::Opened::open(&config, access)?;
    let report = opened.block_on(async {
        if dry_run {
            crate::prune::dry_run(&opened.store, &config.storage, now_ms()).await
        } else {
            crate::prune::prune_once(&opened.store, &config.storage, now_ms()).await
        }
    });
    opened.close();
    let report = report.map_err(|e| format!("cannot prune: {e}"))?;
    report
        .write(&mut std::io::stdout().lock(), dry_run, &config.storage)
        .map_err(|e| format!("cannot write the output: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every subcommand and every argument of every subcommand, as `--help` shows them.
    fn undescribed(command: &clap::Command, path: &str, out: &mut Vec<String>) {
        let path = format!("{path}{}", command.get_name());
        if command.get_about().is_none() {
            out.push(path.clone());
        }
        for arg in command.get_arguments() {
            let builtin = matches!(arg.get_id().as_str(), "help" | "version");
            if !builtin && arg.get_help().is_none() && arg.get_long_help().is_none() {
                out.push(format!("{path}: {}", arg.get_id()));
            }
        }
        for sub in command.get_subcommands() {
            undescribed(sub, &format!("{path} "), out);
        }
    }

    #[test]
    fn every_command_and_option_has_a_description() {
        let mut missing = Vec::new();
        undescribed(&Cli::command(), "", &mut missing);
        assert!(missing.is_empty(), "no description in --help: {missing:#?}");
    }

    #[test]
    fn a_mistyped_subcommand_gets_a_suggestion() {
        let e = Cli::try_parse_from(["portaria", "chek"]).unwrap_err();
        assert!(
            e.to_string().contains("similar subcommand exists: 'check'"),
            "{e}"
        );
        let e = Cli::try_parse_from(["portaria", "events", "replay", "--dead", "--endpont", "x"])
            .unwrap_err();
        assert!(e.to_string().contains("'--endpoint'"), "{e}");
    }
}
