//! The reconcile panel of the overview: each endpoint's last `portaria reconcile` run (issue
//! 26), as the run kept it in the store (`Store::reconcile_runs`, read by `store::LastRun`):
//! when it ran, what it checked, what portaria had never received and what came back, and its
//! first error or note. A run that left something missing is marked as needing the owner.
//! Shown only once a run has been kept.

use maud::{Markup, html};

use super::pages::Chrome;
use super::text::when;
use crate::store::LastRun;

/// The panel for `runs` (endpoint, the run's JSON); nothing when there is none.
pub fn panel(chrome: &Chrome, runs: &[(String, String)], now: i64) -> Markup {
    let t = chrome.lang;
    let runs = LastRun::read_all(runs);
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
