//! `portaria route pause/resume`: holds a route's deliveries back (a target in maintenance, a
//! handler being fixed) and lets them go again, in order. Intake goes on: a paused route's
//! events are accepted and stored. The pause is a row in the store ([`RoutePause`]), so it
//! holds across restarts and for every instance on a shared database; the running server's
//! worker sees it within a couple of seconds ([`crate::forward::EXTERNAL_CHECK`]).

use std::path::Path;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::database::{Access, Opened};
use super::existing_store;
use crate::config::Config;
use crate::store::RoutePause;
use crate::time::{now_ms, rfc3339};

#[derive(Subcommand, Debug)]
pub(super) enum RouteCommand {
    /// Hold a route's deliveries back; its events are still accepted and stored.
    Pause(PauseArgs),
    /// Deliver a paused route's waiting events again, in order.
    Resume(RouteName),
}

#[derive(Args, Debug)]
pub(super) struct RouteName {
    /// The endpoint's name, as in the config.
    #[arg(long)]
    endpoint: String,
    /// The route's name (`default` for an endpoint's one `forward`).
    #[arg(long, default_value = "default")]
    route: String,
}

#[derive(Args, Debug)]
pub(super) struct PauseArgs {
    #[command(flatten)]
    name: RouteName,
    /// Resume by itself after this long (`30m`, `2h`, `1d`); without it, until `route resume`.
    #[arg(long = "for", value_name = "DURATION")]
    for_: Option<String>,
    /// Why, shown with the pause (logs, `events list`).
    #[arg(long)]
    reason: Option<String>,
}

/// Runs `route pause` or `route resume`.
pub(super) fn run(config: Option<&Path>, command: RouteCommand) -> Result<ExitCode, String> {
    let config = existing_store(config)?;
    let name = match &command {
        RouteCommand::Pause(args) => &args.name,
        RouteCommand::Resume(name) => name,
    };
    known_route(&config, name)?;
    let db = Opened::open(&config, Access::Write)?;
    let result = run_on(&db, command);
    db.close();
    result
}

fn run_on(db: &Opened, command: RouteCommand) -> Result<ExitCode, String> {
    let now = now_ms();
    match command {
        RouteCommand::Pause(args) => {
            let until_ms = match args.for_.as_deref() {
                None => None,
                Some(text) => {
                    let d = crate::config::parse_duration(text)
                        .map_err(|e| format!("--for {text}: {e}"))?;
                    Some(now + d.as_millis() as i64)
                }
            };
            let RouteName { endpoint, route } = args.name;
            let pause = RoutePause {
                endpoint: endpoint.clone(),
                route: route.clone(),
                paused_at_ms: now,
                until_ms,
                reason: args.reason,
            };
            db.block_on(db.store.pause_route(pause))
                .map_err(|e| format!("cannot pause {endpoint}/{route}: {e}"))?;
            match until_ms {
                Some(until) => println!(
                    "paused {endpoint}/{route} until {}: its events are stored and wait",
                    rfc3339(until)
                ),
                None => println!(
                    "paused {endpoint}/{route}: its events are stored and wait until \
                     `portaria route resume --endpoint {endpoint} --route {route}`"
                ),
            }
        }
        RouteCommand::Resume(RouteName { endpoint, route }) => {
            let was = db
                .block_on(db.store.resume_route(&endpoint, &route, now))
                .map_err(|e| format!("cannot resume {endpoint}/{route}: {e}"))?;
            if was {
                println!("resumed {endpoint}/{route}: its waiting events go out in order");
            } else {
                println!("{endpoint}/{route} was not paused");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The route must be in the config: a pause of a misspelt name would hold nothing back.
fn known_route(config: &Config, name: &RouteName) -> Result<(), String> {
    let endpoint = config
        .endpoint(&name.endpoint)
        .ok_or_else(|| super::no_such_endpoint(config, &name.endpoint))?;
    if endpoint.routes.iter().any(|r| r.name == name.route) {
        return Ok(());
    }
    let names = || endpoint.routes.iter().map(|r| r.name.as_str());
    Err(format!(
        "endpoint `{}` has no route named `{}` (its routes: {}){}",
        name.endpoint,
        name.route,
        crate::suggest::list(names()),
        crate::suggest::hint(&name.route, names())
    ))
}
