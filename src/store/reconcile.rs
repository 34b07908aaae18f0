//! What a reconcile run leaves in the store: per endpoint, its last run, kept in `meta` under
//! keys starting with `reconcile:` (no table of its own: the schema is not changed for it).
//! The store keeps the run's JSON as `reconcile` wrote it; [`LastRun`] is the one reading of
//! it the status page, `/metrics` and the alerts task share (a field the JSON lacks is read
//! as nothing, so a run kept by an older portaria still reads).

use serde_json::Value;

/// The prefix of every `meta` key a reconcile run owns: `reconcile:<endpoint>`.
pub const RUN_KEY_PREFIX: &str = "reconcile:";

/// One endpoint's last run, as its JSON says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LastRun {
    pub endpoint: String,
    pub provider: String,
    /// When it started (unix ms).
    pub at_ms: Option<i64>,
    /// Nothing left missing and no error.
    pub ok: bool,
    pub checked: u64,
    /// What the gateway gave up on that portaria had never stored (the gateway's ids).
    pub missing: Vec<String>,
    /// How many of them came back (resent, or stored from the gateway's API).
    pub recovered: u64,
    /// How they came back (`resent by the gateway`, `stored from the API`), if any did.
    pub recovered_by: Option<String>,
    /// Its first error, else its note.
    pub says: Option<String>,
    /// Where the run got to, for the next to resume from.
    pub cursor_ms: Option<i64>,
    /// A queue the gateway paused (Asaas), seen paused since then (the first run that saw
    /// it): the pause began at or before.
    pub paused_since_ms: Option<i64>,
}

impl LastRun {
    /// The run `endpoint` kept; None when the JSON is not an object.
    pub fn read(endpoint: &str, json: &str) -> Option<LastRun> {
        let v: Value = serde_json::from_str(json).ok().filter(Value::is_object)?;
        let strings = |key: &str| -> Vec<String> {
            let items = v[key].as_array().map(Vec::as_slice).unwrap_or_default();
            items
                .iter()
                .filter_map(|s| Some(s.as_str()?.to_string()))
                .collect()
        };
        let text = |key: &str| v[key].as_str().map(str::to_string);
        Some(LastRun {
            endpoint: endpoint.to_string(),
            provider: text("provider").unwrap_or_default(),
            at_ms: v["at_ms"].as_i64(),
            ok: v["ok"].as_bool().unwrap_or(false),
            checked: v["checked"].as_u64().unwrap_or(0),
            missing: strings("missing"),
            recovered: v["recovered"].as_array().map_or(0, |a| a.len() as u64),
            recovered_by: text("recovered_by"),
            says: strings("errors")
                .into_iter()
                .next()
                .or_else(|| text("note")),
            cursor_ms: v["cursor_ms"].as_i64(),
            paused_since_ms: v["paused_since_ms"].as_i64(),
        })
    }

    /// Every run of `runs` (endpoint, JSON) that reads.
    pub fn read_all(runs: &[(String, String)]) -> Vec<LastRun> {
        runs.iter()
            .filter_map(|(endpoint, json)| LastRun::read(endpoint, json))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_reads_field_by_field_and_a_missing_field_is_nothing() {
        let json = r#"{"provider":"asaas","at_ms":5,"ok":false,"checked":2,
            "missing":["wh_1",3],"recovered":[],"errors":[],"note":"paused",
            "paused_since_ms":4}"#;
        let run = LastRun::read("asaas", json).unwrap();
        assert_eq!(run.missing, vec!["wh_1".to_string()]);
        assert_eq!((run.at_ms, run.checked, run.recovered), (Some(5), 2, 0));
        assert_eq!(run.says.as_deref(), Some("paused"));
        assert_eq!(run.paused_since_ms, Some(4));
        assert_eq!(run.cursor_ms, None);
        let bare = LastRun::read("x", "{}").unwrap();
        assert!(!bare.ok && bare.missing.is_empty() && bare.at_ms.is_none());
        assert_eq!(LastRun::read("x", "[1]"), None);
        assert_eq!(LastRun::read("x", "not json"), None);
    }
}
