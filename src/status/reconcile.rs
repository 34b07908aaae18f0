//! The reconcile panel of the overview: each endpoint's last `portaria reconcile` run (issue
//! 26), as the run kept it in the store (`Store::reconcile_runs`, the run's JSON): when it
//! ran, what it checked, what portaria had never received and what came back, and its first
//! error or note. A run that left something missing is marked as needing the owner. Shown
//! only once a run has been kept; the JSON is read field by field, a field it lacks shown as
//! nothing.

use maud::{Markup, html};
use serde_json::Value;

use super::pages::Chrome;
use super::text::when;

/// One endpoint's last run, as shown.
struct Run {
    endpoint: String,
    at_ms: Option<i64>,
    ok: bool,
    checked: u64,
    missing: Vec<String>,
    recovered: u64,
    /// Its first error, else its note.
    says: Option<String>,
}

fn run(endpoint: &str, json: &str) -> Option<Run> {
    let v: Value = serde_json::from_str(json).ok()?;
    let strings = |key: &str| -> Vec<String> {
        v[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let says = strings("errors")
        .into_iter()
        .next()
        .or_else(|| v["note"].as_str().map(str::to_string));
    Some(Run {
        endpoint: endpoint.to_string(),
        at_ms: v["at_ms"].as_i64(),
        ok: v["ok"].as_bool().unwrap_or(false),
        checked: v["checked"].as_u64().unwrap_or(0),
        missing: strings("missing"),
        recovered: v["recovered"].as_array().map_or(0, |a| a.len() as u64),
        says,
    })
}

/// The panel for `runs` (endpoint, the run's JSON); nothing when there is none.
pub fn panel(chrome: &Chrome, runs: &[(String, String)], now: i64) -> Markup {
    let t = chrome.lang;
    let runs: Vec<Run> = runs.iter().filter_map(|(e, j)| run(e, j)).collect();
    html! {
        @if !runs.is_empty() {
            h2 { t { "Reconcile" } }
            table.reconcile {
                @for r in &runs {
                    tr {
                        td { (r.endpoint) }
                        td { @if let Some(at) = r.at_ms { (when(at, now, t)) } }
                        td {
                            (r.checked) t { " checked, " } (r.missing.len())
                            t { " never received, " } (r.recovered) t { " got back" }
                            @if !r.missing.is_empty() {
                                " (" code { (super::pages::excerpt(&r.missing.join(", "), 200)) } ")"
                            }
                        }
                        @if r.ok {
                            td { t { "ok: nothing left missing" } }
                        } @else {
                            td.error {
                                strong { t { "Needs you: " } }
                                @if let Some(says) = &r.says { (super::pages::excerpt(says, 300)) }
                            }
                        }
                    }
                }
            }
            p.small { t { "The last run of each endpoint's reconcile (portaria reconcile, or its every)." } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_run_is_read_field_by_field() {
        let json = r#"{"ok":false,"at_ms":5,"checked":3,"missing":["a","b"],
            "recovered":["a"],"errors":["b: HTTP 500"],"note":"resend it"}"#;
        let r = run("stripe", json).unwrap();
        assert_eq!(
            (r.at_ms, r.ok, r.checked, r.recovered),
            (Some(5), false, 3, 1)
        );
        assert_eq!(r.missing, ["a", "b"]);
        assert_eq!(
            r.says.as_deref(),
            Some("b: HTTP 500"),
            "the error before the note"
        );
        let bare = run("x", "{}").unwrap();
        assert_eq!((bare.ok, bare.checked, bare.says), (false, 0, None));
        assert!(run("x", "not json").is_none());
    }
}
