//! What a reconcile run leaves in the store: per endpoint, its last run, kept in `meta` under
//! keys starting with `reconcile:` (no table of its own: the schema is not changed for it).
//! The store keeps the run's JSON as `reconcile` wrote it and reads nothing in it; the
//! status page and the alerts task read it back.

/// The prefix of every `meta` key a reconcile run owns: `reconcile:<endpoint>`.
pub const RUN_KEY_PREFIX: &str = "reconcile:";
