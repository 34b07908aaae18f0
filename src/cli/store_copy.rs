//! `portaria store copy --from FILE`: a SQLite database moved into the configured PostgreSQL
//! database (`[storage] url`), which must be empty; the store's
//! [`crate::store::Store::copy_from`] does the copy in one transaction. Run it with the
//! servers on the SQLite file stopped, before the first start on PostgreSQL.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;

use crate::store::Store;

#[derive(Subcommand, Debug)]
pub(super) enum StoreCommand {
    /// Copy every event, payload, delivery and attempt of a SQLite database into the
    /// configured PostgreSQL database (which must be empty), keeping ids, statuses and dedup
    /// keys.
    Copy {
        /// The SQLite database file to copy from.
        #[arg(long, value_name = "FILE")]
        from: PathBuf,
    },
}

pub(super) fn run(config: Option<&Path>, command: StoreCommand) -> Result<ExitCode, String> {
    let StoreCommand::Copy { from } = command;
    let config = super::load_for_database(config)?;
    let Some(url) = &config.storage.postgres else {
        return Err(format!(
            "{}: [storage] is SQLite; `store copy` copies into the PostgreSQL database that \
             [storage] url, url_env or url_file names",
            config.source
        ));
    };
    if !from.exists() {
        return Err(format!("no database at {}", from.display()));
    }
    let source =
        Store::open_read_only(&from).map_err(|e| format!("cannot open {}: {e}", from.display()))?;
    let runtime = super::command_runtime()?;
    let report = runtime.block_on(async {
        let store = super::database::open_postgres(url).await?;
        let report = store
            .copy_from(&source)
            .await
            .map_err(|e| format!("cannot copy: {e}"));
        store.close();
        source.close();
        report
    })?;
    println!(
        "copied {} events, {} deliveries and {} attempts from {} to PostgreSQL",
        report.events,
        report.deliveries,
        report.attempts,
        from.display()
    );
    Ok(ExitCode::SUCCESS)
}
