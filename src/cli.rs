//! The command line: parses arguments, sets up logging, and runs `serve`, `check` or
//! `events`. Errors go to stderr as `portaria: what was attempted: cause`, and `main` returns
//! an exit code (0 fine, 1 failed, 2 bad usage).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, Source};
use crate::store::{Db, EventDetail, EventSummary, ListFilter, Status};
use crate::time::{now_ms, rfc3339};

#[derive(Parser, Debug)]
#[command(
    name = "portaria",
    version,
    about = "A small, durable webhook receiver: verify, deduplicate, store, then forward."
)]
struct Cli {
    /// The config file (else $PORTARIA_CONFIG, ~/.config/portaria/portaria.toml,
    /// /etc/portaria/portaria.toml, then the embedded demo).
    #[arg(long, short = 'c', global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Receive webhooks until SIGTERM or SIGINT.
    Serve,
    /// Validate the configuration, print `ok` or every problem, and exit.
    Check,
    /// Look at stored events, and replay them.
    #[command(subcommand)]
    Events(EventsCommand),
}

#[derive(Subcommand, Debug)]
enum EventsCommand {
    /// List events, newest first.
    List(ListArgs),
    /// Show one event: its headers, raw body and delivery attempts.
    Show { id: i64 },
    /// Put events back into pending, with a fresh retry schedule.
    Replay(ReplayArgs),
}

#[derive(Args, Debug)]
struct ListArgs {
    #[arg(long)]
    endpoint: Option<String>,
    /// pending, delivering, delivered, dead or stored.
    #[arg(long)]
    status: Option<Status>,
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["id", "dead"]))]
struct ReplayArgs {
    /// The event to replay.
    id: Option<i64>,
    /// Replay every dead event (of --endpoint, if given).
    #[arg(long)]
    dead: bool,
    #[arg(long, requires = "dead")]
    endpoint: Option<String>,
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
    init_logging();
    let result = match cli.command {
        Command::Serve => serve(cli.config.as_deref()),
        Command::Check => check(cli.config.as_deref()),
        Command::Events(command) => events(cli.config.as_deref(), command),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("portaria: {message}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // Under systemd, journald stamps every line already.
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        builder.without_time().init();
    } else {
        builder.init();
    }
}

fn load(config: Option<&Path>) -> Result<Config, String> {
    Config::load(config).map_err(|e| format!("invalid configuration\n{e}"))
}

fn serve(config: Option<&Path>) -> Result<ExitCode, String> {
    let config = load(config)?;
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
        let addr = config.server.listen;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        crate::serve(config, listener, crate::shutdown::os_signal())
            .await
            .map_err(|e| format!("cannot serve: {e}"))
    })?;
    Ok(ExitCode::SUCCESS)
}

fn check(config: Option<&Path>) -> Result<ExitCode, String> {
    match Config::load(config) {
        Ok(config) => {
            if config.source == Source::Embedded {
                println!("ok (no config file found; the embedded demo config would be used)");
            } else {
                println!("ok");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn events(config: Option<&Path>, command: EventsCommand) -> Result<ExitCode, String> {
    let config = load(config)?;
    let path = &config.storage.path;
    if !path.exists() {
        return Err(format!(
            "no database at {}: has portaria served with this config yet?",
            path.display()
        ));
    }
    let mut db = Db::open(path).map_err(|e| format!("cannot open the database: {e}"))?;
    let out = std::io::stdout();
    let mut out = out.lock();
    let now = now_ms();
    let written = match command {
        EventsCommand::List(args) => {
            let filter = ListFilter {
                endpoint: args.endpoint,
                status: args.status,
                limit: args.limit,
            };
            let events = db
                .list(&filter)
                .map_err(|e| format!("cannot list events: {e}"))?;
            if args.json {
                write_json(&mut out, &events)
            } else {
                write_table(&mut out, &events)
            }
        }
        EventsCommand::Show { id } => match db
            .event(id)
            .map_err(|e| format!("cannot read event {id}: {e}"))?
        {
            Some(event) => write_detail(&mut out, &event),
            None => return Err(format!("no event {id}")),
        },
        EventsCommand::Replay(args) => {
            if let Some(id) = args.id {
                if !db
                    .replay(id, now)
                    .map_err(|e| format!("cannot replay event {id}: {e}"))?
                {
                    return Err(format!(
                        "cannot replay event {id}: no such event, it is being delivered right now, \
                         or its endpoint does not forward"
                    ));
                }
                writeln!(
                    out,
                    "event {id} is pending again; the running server delivers it within seconds"
                )
            } else {
                let n = db
                    .replay_dead(args.endpoint.as_deref(), now)
                    .map_err(|e| format!("cannot replay dead events: {e}"))?;
                writeln!(out, "{n} dead event(s) pending again")
            }
        }
    };
    written.map_err(|e| format!("cannot write the output: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

fn write_table(out: &mut impl Write, events: &[EventSummary]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:>7}  {:<24}  {:<14}  {:<10}  {:>3}  {:<24}  DEDUP KEY",
        "ID", "RECEIVED (UTC)", "ENDPOINT", "STATUS", "TRY", "TYPE"
    )?;
    for e in events {
        writeln!(
            out,
            "{:>7}  {:<24}  {:<14}  {:<10}  {:>3}  {:<24}  {}",
            e.id,
            rfc3339(e.received_at_ms),
            e.endpoint,
            e.status,
            e.attempts,
            e.event_type.as_deref().unwrap_or("-"),
            e.dedup_key
        )?;
    }
    Ok(())
}

fn summary_json(e: &EventSummary) -> serde_json::Value {
    serde_json::json!({
        "id": e.id,
        "endpoint": e.endpoint,
        "dedup_key": e.dedup_key,
        "event_type": e.event_type,
        "received_at": rfc3339(e.received_at_ms),
        "status": e.status.as_str(),
        "attempts": e.attempts,
        "next_attempt_at": e.next_attempt_at_ms.map(rfc3339),
        "last_error": e.last_error,
    })
}

fn write_json(out: &mut impl Write, events: &[EventSummary]) -> std::io::Result<()> {
    for e in events {
        writeln!(out, "{}", summary_json(e))?;
    }
    Ok(())
}

fn write_detail(out: &mut impl Write, event: &EventDetail) -> std::io::Result<()> {
    let e = &event.summary;
    writeln!(out, "id:          {}", e.id)?;
    writeln!(out, "endpoint:    {}", e.endpoint)?;
    writeln!(out, "dedup key:   {}", e.dedup_key)?;
    writeln!(
        out,
        "event type:  {}",
        e.event_type.as_deref().unwrap_or("-")
    )?;
    writeln!(out, "received at: {}", rfc3339(e.received_at_ms))?;
    writeln!(out, "status:      {}", e.status)?;
    writeln!(out, "attempts:    {}", e.attempts)?;
    if let Some(next) = e.next_attempt_at_ms.filter(|_| e.status == Status::Pending) {
        writeln!(out, "next try:    {}", rfc3339(next))?;
    }
    for a in &event.attempts {
        writeln!(
            out,
            "  attempt {} at {} ({} ms): {}{}",
            a.attempt,
            rfc3339(a.started_at_ms),
            a.duration_ms,
            a.outcome,
            a.error
                .as_deref()
                .map(|err| format!(": {err}"))
                .unwrap_or_default()
        )?;
    }
    writeln!(out, "\n--- headers ---")?;
    out.write_all(&event.headers)?;
    writeln!(out, "--- body ({} bytes) ---", event.body.len())?;
    out.write_all(&event.body)?;
    writeln!(out)
}
