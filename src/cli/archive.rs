//! `portaria archive replay FILE [--endpoint NAME]`: the events of an archive file back in
//! the queue, on either backend. [`crate::archive::replay`] reads the file and decides what
//! goes back; this file opens the store for writing and hands each batch to
//! [`crate::store::Store::restore`] (a running SQLite server notices within seconds; on
//! PostgreSQL every running instance is woken by `NOTIFY`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;

use super::database::{Access, Opened};
use crate::time::now_ms;

#[derive(Subcommand, Debug)]
pub(super) enum ArchiveCommand {
    /// Put the events of an archive file back into the queue, to be delivered again.
    Replay {
        /// A `YYYY-MM-DD.jsonl.gz` file from `[storage] archive_dir`.
        file: PathBuf,
        /// Only this endpoint's events.
        #[arg(long)]
        endpoint: Option<String>,
    },
}

pub(super) fn run(config: Option<&Path>, command: ArchiveCommand) -> Result<ExitCode, String> {
    let ArchiveCommand::Replay { file, endpoint } = command;
    // Like the other database commands: a wrong config must not make a fresh file that no
    // server reads, and report the events as replayed.
    let config = super::existing_store(config)?;
    if let Some(name) = &endpoint
        && config.endpoint(name).is_none()
    {
        return Err(super::no_such_endpoint(&config, name));
    }
    let now = now_ms();
    let only = endpoint.as_deref();
    let opened = Opened::open(&config, Access::Write)?;
    let replayed = crate::archive::replay(&file, &config, only, |batch, routes| {
        opened.block_on(opened.store.restore(batch, routes, now))
    });
    opened.close();
    let replayed = replayed.map_err(|e| format!("cannot replay the archive: {e}"))?;
    replayed
        .write(&mut std::io::stdout().lock())
        .map_err(|e| format!("cannot write the output: {e}"))?;
    Ok(ExitCode::SUCCESS)
}
