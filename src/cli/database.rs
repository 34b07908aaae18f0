//! How a command opens the configured store: [`Opened`], the [`Store`] and the runtime its
//! async calls block on. The one place a command picks the engine, as `server` does for the
//! server: SQLite's file (read-only for a command that only looks, [`Access::Read`], through
//! a writer thread like the server's for one that writes, [`Access::Write`]) or the
//! PostgreSQL database. Every command then
//! speaks to the same [`Store`] methods, whatever the engine.

use std::future::Future;
use std::pin::Pin;

use crate::config::{Config, DatabaseUrl};
use crate::store::Store;

/// What a command does to the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// It only looks (`events list/show`, `prune --dry-run`, `backup`): on SQLite a
    /// read-only connection, so it never takes the write lock next to a running server, and
    /// any user who can read the file can look.
    Read,
    /// It writes (`events replay`, `archive replay`, `prune`): on SQLite through a writer
    /// thread, as the server writes; an older schema is refused (only the server upgrades).
    Write,
}

/// The configured store, open for one command.
pub(super) struct Opened {
    pub(super) store: Store,
    runtime: tokio::runtime::Runtime,
}

impl Opened {
    /// Opens the store `config` names for `access`.
    pub(super) fn open(config: &Config, access: Access) -> Result<Opened, String> {
        let runtime = super::command_runtime()?;
        let store = match &config.storage.postgres {
            Some(url) => runtime.block_on(open_postgres(url))?,
            None => {
                let path = &config.storage.path;
                match access {
                    Access::Read => Store::open_read_only(path),
                    Access::Write => Store::open_for_command(path),
                }
                .map_err(|e| format!("cannot open the database: {e}"))?
            }
        };
        Ok(Opened { store, runtime })
    }

    /// Runs one of the store's calls to its end. The runtime's `block_on` is built once, for
    /// a boxed future ([`Opened::run`]), not once per command's future: 24 callers.
    pub(super) fn block_on<F: Future>(&self, call: F) -> F::Output {
        let mut out = None;
        self.run(Box::pin(async { out = Some(call.await) }));
        match out {
            Some(out) => out,
            // The runtime's block_on returns only once the future is done.
            None => unreachable!("block_on returned before its future ended"),
        }
    }

    fn run(&self, call: Pin<Box<dyn Future<Output = ()> + '_>>) {
        self.runtime.block_on(call)
    }

    /// Closes the store: SQLite's writer finishes and joins; PostgreSQL's tasks, inside the
    /// runtime, see the pool close and end.
    pub(super) fn close(self) {
        let _guard = self.runtime.enter();
        self.store.close();
    }
}

/// Opens the configured PostgreSQL database for a command.
pub(super) async fn open_postgres(url: &DatabaseUrl) -> Result<Store, String> {
    Store::open_postgres(url.settings(), url.tls_client())
        .await
        .map_err(|e| format!("cannot open the PostgreSQL database: {e}"))
}
