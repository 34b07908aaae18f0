//! `portaria backup FILE [--force]`: a consistent copy of the configured database, taken while
//! the server runs (the store's [`crate::store::Store::backup_to`] does the copy, the check
//! and the atomic rename); this file only finds the database, refuses what it must, and
//! reports.
//! On PostgreSQL it refuses, pointing to `pg_dump`: a copy of a PostgreSQL database is that
//! server's own tools' job (docs/postgres.md, "Backups").

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::database::{Access, Opened};
use crate::store::BackupError;

#[derive(Args, Debug)]
pub(super) struct BackupArgs {
    /// Where to write the copy (its directory must exist). It is written beside it first and
    /// renamed into place once complete, fsynced and checked.
    file: PathBuf,
    /// Replace FILE if it exists.
    #[arg(long)]
    force: bool,
}

pub(super) fn run(config: Option<&Path>, args: BackupArgs) -> Result<ExitCode, String> {
    let BackupArgs { file, force } = args;
    let config = super::existing_store(config)?;
    if config.storage.postgres.is_some() {
        return Err(format!(
            "{}: storage is PostgreSQL, and `portaria backup` copies a SQLite file; back the \
             database up with PostgreSQL's own tools, e.g. `pg_dump --format=custom \
             --file=portaria.dump \"$PORTARIA_DATABASE_URL\"`, a consistent snapshot while \
             the instances run (docs/postgres.md, \"Backups\")",
            config.source
        ));
    }
    // Said before any work: the store checks again just before the rename.
    if !force && file.symlink_metadata().is_ok() {
        return Err(exists(&file));
    }
    // Read-only: a backup never changes the database, nor upgrades its schema.
    let db = Opened::open(&config, Access::Read)?;
    let copied = db.block_on(db.store.backup_to(file.clone(), force));
    db.close();
    let copied = copied.map_err(|e| match e {
        BackupError::Exists(_) => exists(&file),
        e => format!("cannot back up to {}: {e}", file.display()),
    })?;
    println!(
        "backed up {} events ({:.1} MiB) to {}",
        copied.events,
        copied.bytes as f64 / (1024.0 * 1024.0),
        file.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn exists(file: &Path) -> String {
    format!(
        "{} exists already; pass --force to replace it",
        file.display()
    )
}
