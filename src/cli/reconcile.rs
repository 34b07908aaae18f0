//! `portaria reconcile`: one run of each endpoint's `[endpoint.reconcile]` (or `--endpoint`'s
//! alone), a summary line per endpoint (one JSON object per endpoint with `--json`), exit 0
//! when nothing was missing or everything missing came back, 1 otherwise (`reconcile`).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::database::{Access, Opened};
use crate::config::parse_duration;

#[derive(Args, Debug)]
pub(super) struct ReconcileArgs {
    /// Only this endpoint (a name from the config); else every endpoint with a reconcile.
    #[arg(long)]
    endpoint: Option<String>,
    /// Look back this far (like `3d`, `12h`) instead of the endpoint's `window`.
    #[arg(long, value_name = "DURATION", value_parser = since)]
    since: Option<Duration>,
    /// List and compare, but ask the gateway to resend nothing and store nothing.
    #[arg(long)]
    dry_run: bool,
    /// One JSON object per endpoint, one a line.
    #[arg(long)]
    json: bool,
}

fn since(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d < Duration::from_secs(60) => Err("must be at least 1m".into()),
        d => Ok(d),
    }
}

pub(super) fn run(config: Option<&Path>, args: ReconcileArgs) -> Result<ExitCode, String> {
    let config = super::existing_store_of(super::load(config)?)?;
    let endpoints: Vec<_> = match &args.endpoint {
        Some(name) => {
            let endpoint = super::find_endpoint(&config, name)?;
            if endpoint.reconcile.is_none() {
                return Err(format!(
                    "endpoint `{name}` has no [endpoint.reconcile] table (docs/reconcile.md)"
                ));
            }
            vec![endpoint]
        }
        None => config
            .endpoints
            .iter()
            .filter(|e| e.reconcile.is_some())
            .collect(),
    };
    if endpoints.is_empty() {
        return Err(format!(
            "no endpoint in {} has an [endpoint.reconcile] table (docs/reconcile.md)",
            config.source
        ));
    }
    // A dry run only reads. Any other keeps its result in the store (the next run's cursor,
    // the status page's view), and what a gateway resends arrives through intake; what a run
    // takes from the gateway's API (Stripe, Mercado Pago) it stores itself.
    let access = match args.dry_run {
        true => Access::Read,
        false => Access::Write,
    };
    let opened = Opened::open(&config, access)?;
    let mut ok = true;
    for endpoint in endpoints {
        let Some(reconcile) = &endpoint.reconcile else {
            continue;
        };
        let report = opened.block_on(crate::reconcile::run(
            endpoint,
            reconcile,
            &opened.store,
            args.since,
            args.dry_run,
            None,
        ));
        ok &= report.ok();
        if args.json {
            println!("{}", report.json());
        } else {
            println!("{}", report.line());
        }
    }
    opened.close();
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
