//! `portaria events rejected` and `portaria verify --rejected ID`: the rejected requests an
//! endpoint kept (`quarantine_keep`, `store/quarantine.rs`), listed newest first with why, and
//! one of them explained by `verify`'s own diagnosis, on its stored headers (credentials
//! redacted) and body, at the time it was received unless `--at` says otherwise. A rejected
//! request is never an event: it is not in `events list`, and nothing here replays it.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use super::database::{Access, Opened};
use super::existing_store;
use crate::config::Config;
use crate::store::{Quarantined, rejected_json};
use crate::time::rfc3339;

/// `events rejected [--endpoint NAME] [--limit N] [--json]`.
pub(super) fn list(
    config: &Config,
    db: &Opened,
    endpoint: Option<&str>,
    limit: usize,
    json: bool,
) -> Result<ExitCode, String> {
    if let Some(name) = endpoint
        && config.endpoint(name).is_none()
    {
        return Err(super::no_such_endpoint(config, name));
    }
    let rows = db
        .block_on(db.store.rejected_list(endpoint, limit))
        .map_err(|e| format!("cannot list rejected requests: {e}"))?;
    let out = std::io::stdout();
    let mut out = out.lock();
    let written = if json {
        rows.iter()
            .try_for_each(|r| writeln!(out, "{}", rejected_json(&r.into())))
    } else {
        write_table(&mut out, &rows)
    };
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("stdout: {e}")),
        _ => Ok(ExitCode::SUCCESS),
    }
}

fn write_table(out: &mut impl Write, rows: &[Quarantined]) -> std::io::Result<()> {
    if rows.is_empty() {
        return writeln!(out, "no rejected requests kept");
    }
    writeln!(
        out,
        "{:<8} {:<24} {:<16} {:<16} {:>8}  DETAIL",
        "ID", "RECEIVED", "ENDPOINT", "REASON", "BYTES"
    )?;
    for r in rows {
        let bytes = format!("{}{}", r.body.len(), if r.truncated { "+" } else { "" });
        writeln!(
            out,
            "{:<8} {:<24} {:<16} {:<16} {:>8}  {}",
            r.id,
            rfc3339(r.received_at_ms),
            r.endpoint,
            r.reason,
            bytes,
            r.detail.escape_debug()
        )?;
    }
    Ok(())
}

/// `verify --rejected ID [--at UNIX]`: exit 0 if the server would take it now (say, after a
/// secret was put right), 1 with the reason if not.
pub(super) fn verify(config: Option<&Path>, id: i64, at: Option<i64>) -> Result<ExitCode, String> {
    let stored = existing_store(config)?;
    let db = Opened::open(&stored, Access::Read)?;
    let row = db.block_on(db.store.rejected_get(id));
    db.close();
    let row = row
        .map_err(|e| format!("cannot read rejected request {id}: {e}"))?
        .ok_or_else(|| format!("no rejected request {id} is kept (`portaria events rejected`)"))?;
    // Only this endpoint's secrets, as `verify --request`.
    let config = crate::config::Config::load_for_endpoint(config, &row.endpoint)
        .map_err(|e| format!("invalid configuration\n{e}"))?;
    let endpoint = super::find_endpoint(&config, &row.endpoint)?;
    println!(
        "rejected request {id}: endpoint {}, received {}, answered {}: {}",
        row.endpoint,
        rfc3339(row.received_at_ms),
        row.reason,
        row.detail.escape_debug()
    );
    if row.truncated {
        println!(
            "note: its body was larger than max_body_bytes and was not kept whole ({} bytes kept)",
            row.body.len()
        );
    }
    let capture = super::verify::Capture::stored(
        &endpoint.path,
        crate::config::headers_from_blob(&row.headers),
        row.body,
    );
    let at = at.unwrap_or(row.received_at_ms.div_euclid(1000));
    let diagnosis = super::verify::diagnose(endpoint, &capture, at);
    for line in &diagnosis.lines {
        println!("{line}");
    }
    Ok(if diagnosis.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
