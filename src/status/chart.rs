//! The 48-hour chart: an inline SVG drawn here from the hourly counters (no script, no
//! external file), one line per series, a legend, and the same numbers as a table for
//! screen readers and for anyone who prefers figures. The phrases in `t { }` are said in the
//! visitor's language (`text.rs`).

use maud::{Markup, html};

use crate::store::HourCounts;
use crate::time::rfc3339;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 240.0;
const LEFT: f64 = 4.0;
const RIGHT: f64 = 4.0;
const TOP: f64 = 6.0;
const BOTTOM: f64 = 4.0;

/// A series: its class (colour, in `style.css`), legend name and value.
type Series = (&'static str, &'static str, fn(&HourCounts) -> u64);

const SERIES: [Series; 5] = [
    ("received", "received", |h| h.received),
    ("duplicate", "duplicate", |h| h.duplicate),
    ("rejected", "rejected", |h| h.rejected),
    ("delivered", "delivered", |h| h.delivered),
    ("failed", "failed attempts", |h| h.failed),
];

pub fn svg(hours: &[HourCounts]) -> Markup {
    let max = hours
        .iter()
        .flat_map(|h| SERIES.iter().map(move |(_, _, value)| value(h)))
        .max()
        .unwrap_or(0)
        .max(1);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let step = plot_w / (hours.len().max(2) - 1) as f64;
    let x = |i: usize| LEFT + i as f64 * step;
    let y = |v: u64| TOP + plot_h - (v as f64 / max as f64) * plot_h;
    let totals: Vec<(&str, u64)> = SERIES
        .iter()
        .map(|(_, name, value)| (*name, hours.iter().map(value).sum()))
        .collect();
    html! {
        figure.chart {
            // Stretched to the box's width and height (lines keep their width: CSS
            // `vector-effect`), so the labels are HTML around it, never distorted text.
            div.plot {
                span.ymax aria-hidden="true" { (max) }
                svg viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img" aria-labelledby="chart-t chart-d"
                    preserveAspectRatio="none" {
                    title #chart-t { t { "Requests and deliveries per hour, last " } (hours.len()) t { " hours" } }
                    desc #chart-d {
                        t { "Totals: " }
                        @for (i, (name, n)) in totals.iter().enumerate() {
                            @if i > 0 { ", " }
                            t { (name) } " " (n)
                        }
                        t { ". The highest hour: " } (max) "."
                    }
                    line.grid x1="0" y1=(TOP) x2=(WIDTH) y2=(TOP) {}
                    line.axis x1="0" y1=(TOP + plot_h) x2=(WIDTH) y2=(TOP + plot_h) {}
                    @for (class, _, value) in SERIES {
                        polyline class=(format!("series {class}")) fill="none" points=(
                            hours.iter().enumerate()
                                .map(|(i, h)| format!("{:.1},{:.1}", x(i), y(value(h))))
                                .collect::<Vec<_>>().join(" ")
                        ) {}
                    }
                }
                div.hours aria-hidden="true" {
                    @for (i, h) in hours.iter().enumerate() {
                        @if i % 12 == 0 || i + 1 == hours.len() {
                            span { (rfc3339(h.hour_ms).get(11..16).unwrap_or("")) }
                        }
                    }
                }
            }
            figcaption {
                ul.legend {
                    @for ((class, _, _), (name, total)) in SERIES.iter().zip(&totals) {
                        li { span class=(format!("swatch {class}")) aria-hidden="true" {} t { (name) } ": " (total) }
                    }
                }
                span.small { t { "Hours in UTC." } }
            }
            details {
                summary { t { "The same as a table" } }
                div.scroll {
                    table {
                        thead { tr {
                            th scope="col" { t { "Hour (UTC)" } }
                            @for (_, name, _) in SERIES { th scope="col" { t { (name) } } }
                        } }
                        tbody {
                            @for h in hours.iter().rev() {
                                tr {
                                    th scope="row" { (rfc3339(h.hour_ms).get(..16).unwrap_or("").replace('T', " ")) }
                                    @for (_, _, value) in SERIES { td { (value(h)) } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::text::{Lang, localize};
    use super::*;

    #[test]
    fn every_series_is_a_line_through_every_hour() {
        let hours: Vec<HourCounts> = (0..48)
            .map(|i| HourCounts {
                hour_ms: i * 3_600_000,
                received: i as u64,
                failed: 2,
                ..HourCounts::default()
            })
            .collect();
        let text = localize(&svg(&hours).into_string(), Lang::En);
        assert_eq!(text.matches("<polyline").count(), 5);
        let received = text.split("series received").nth(1).unwrap();
        let points = received
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert_eq!(points.split(' ').count(), 48);
        assert!(
            points.ends_with(&format!("{:.1},{:.1}", WIDTH - RIGHT, TOP)),
            "the max at the top: {points}"
        );
        assert!(text.contains("received: 1128") && text.contains("failed attempts: 96"));
        assert!(text.contains(
            "Totals: received 1128, duplicate 0, rejected 0, delivered 0, failed attempts 96."
        ));
    }
}
