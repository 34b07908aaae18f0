//! What the status page's overview shows: each endpoint "now" ([`EndpointNow`]) and the
//! chart's clock hours ([`HourCounts`]), with what both engines share to make them: the
//! endpoints shown ([`shown`]), one endpoint's figures shaped from what an engine read
//! ([`Counts::shape`]), the chart's statement ([`chart_sql`]) and its empty hours ([`Chart`]).
//! Each engine reads its figures in its `dashboard.rs`.

use super::QueueStats;
use super::counters::COLUMNS;
pub(super) use super::counters::HOUR_MS;

/// Rejected requests, by reason (the counters' columns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Rejected {
    pub bad_signature: u64,
    pub stale_timestamp: u64,
    pub too_large: u64,
    pub bad_request: u64,
    pub storage_error: u64,
}

impl Rejected {
    pub fn total(&self) -> u64 {
        self.bad_signature
            + self.stale_timestamp
            + self.too_large
            + self.bad_request
            + self.storage_error
    }
}

/// One endpoint now.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct EndpointNow {
    pub endpoint: String,
    /// Events stored in the last 60 minutes and 24 hours (from `events`: exact).
    pub received_last_hour: u64,
    pub received_last_day: u64,
    /// Duplicates and rejected requests in the last 24 clock hours (from `hourly`).
    pub duplicates_last_day: u64,
    pub rejected_last_day: Rejected,
    /// Waiting for delivery, including those being delivered.
    pub pending: u64,
    pub dead: u64,
    pub oldest_pending_ms: Option<i64>,
    pub last_received_ms: Option<i64>,
}

/// One clock hour of the chart, every endpoint together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HourCounts {
    /// The hour's start, unix milliseconds.
    pub hour_ms: i64,
    pub received: u64,
    pub duplicate: u64,
    pub rejected: u64,
    pub delivered: u64,
    pub failed: u64,
}

/// The overview page's figures.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Overview {
    pub endpoints: Vec<EndpointNow>,
    /// The last `hours` clock hours, oldest first, the current one last; hours without a row
    /// are zeros.
    pub hours: Vec<HourCounts>,
}

/// The first hour of the overview's day (the last 24 clock hours, the current one included)
/// and the current hour, for a page asked at `now_ms`.
pub(super) fn day_hours(now_ms: i64) -> (i64, i64) {
    let this_hour = now_ms.div_euclid(HOUR_MS) * HOUR_MS;
    (this_hour - 23 * HOUR_MS, this_hour)
}

/// The endpoints the overview shows: `names` (the configured ones, in their order), then any
/// other with deliveries waiting or dead (`queue`) or counted since the day's first hour
/// (`counted`): an endpoint taken out of the config still shows while it has any.
pub(super) fn shown(
    mut names: Vec<String>,
    queue: &[QueueStats],
    counted: impl IntoIterator<Item = String>,
) -> Vec<String> {
    for name in queue.iter().map(|q| q.endpoint.clone()).chain(counted) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// What an engine reads of one endpoint for the overview.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counts {
    /// Events stored in the last 60 minutes and 24 hours.
    pub(super) received_last_hour: u64,
    pub(super) received_last_day: u64,
    pub(super) last_received_ms: Option<i64>,
    /// `hourly`'s duplicates and rejections since the day's first hour: [`COUNTED_SINCE`]'s
    /// columns, in its order.
    pub(super) counted: [u64; 6],
}

/// One endpoint's duplicates and rejections since an hour (the endpoint is the first
/// parameter, the hour the second; `param` their mark, `?` or `$`), each sum followed by
/// `cast` (PostgreSQL's `::bigint`): the columns of [`Counts::counted`].
pub(super) fn counted_since_sql(param: &str, cast: &str) -> String {
    let sums: Vec<String> = COLUMNS[1..7]
        .iter()
        .map(|c| format!("sum({c}){cast}"))
        .collect();
    format!(
        "SELECT {} FROM hourly WHERE endpoint = {param}1 AND hour >= {param}2",
        sums.join(", ")
    )
}

impl Counts {
    /// `endpoint` now: these counts and its queue figures (none in `queue`: nothing waits).
    pub(super) fn shape(self, endpoint: String, queue: &[QueueStats]) -> EndpointNow {
        let [
            duplicates,
            bad_signature,
            stale_timestamp,
            too_large,
            bad_request,
            storage_error,
        ] = self.counted;
        let q = queue.iter().find(|q| q.endpoint == endpoint);
        EndpointNow {
            received_last_hour: self.received_last_hour,
            received_last_day: self.received_last_day,
            duplicates_last_day: duplicates,
            rejected_last_day: Rejected {
                bad_signature,
                stale_timestamp,
                too_large,
                bad_request,
                storage_error,
            },
            pending: q.map_or(0, |q| q.pending),
            dead: q.map_or(0, |q| q.dead),
            oldest_pending_ms: q.and_then(|q| q.oldest_pending_ms),
            last_received_ms: self.last_received_ms,
            endpoint,
        }
    }
}

/// Every endpoint's hours since an hour (the first parameter, `param` its mark: `?` or `$`),
/// summed per hour, each sum followed by `cast` (PostgreSQL's `::bigint`); the rejected are
/// [`COLUMNS`]' rejection counts together, on both backends.
pub(super) fn chart_sql(param: &str, cast: &str) -> String {
    let sum = |c: &str| format!("sum({c}){cast}");
    let rejected = sum(&COLUMNS[2..7].join(" + "));
    format!(
        "SELECT hour, {}, {}, {rejected}, {}, {} FROM hourly WHERE hour >= {param}1 \
         GROUP BY hour ORDER BY hour",
        sum("received"),
        sum("duplicate"),
        sum("delivered"),
        sum("failed")
    )
}

/// The chart's last clock hours up to the current one, each empty until a row of `hourly`
/// fills it in (both backends read their rows into one).
pub(super) struct Chart {
    first_ms: i64,
    hours: Vec<HourCounts>,
}

impl Chart {
    pub(super) fn new(this_hour_ms: i64, hours: usize) -> Chart {
        let first_ms = this_hour_ms - (hours.saturating_sub(1) as i64) * HOUR_MS;
        Chart {
            first_ms,
            hours: (0..hours as i64)
                .map(|i| HourCounts {
                    hour_ms: first_ms + i * HOUR_MS,
                    ..HourCounts::default()
                })
                .collect(),
        }
    }

    /// The first hour shown: rows from it on are wanted.
    pub(super) fn first_ms(&self) -> i64 {
        self.first_ms
    }

    /// Puts an hour's row in its place (a row outside the chart is left out).
    pub(super) fn put(&mut self, row: HourCounts) {
        let slot = (row.hour_ms - self.first_ms).div_euclid(HOUR_MS);
        if let Some(hour) = usize::try_from(slot)
            .ok()
            .and_then(|i| self.hours.get_mut(i))
        {
            *hour = row;
        }
    }

    pub(super) fn into_hours(self) -> Vec<HourCounts> {
        self.hours
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rejections_are_counted_in_the_columns_order_the_shape_reads() {
        assert_eq!(
            counted_since_sql("?", ""),
            "SELECT sum(duplicate), sum(bad_signature), sum(stale_timestamp), sum(too_large), \
             sum(bad_request), sum(storage_error) FROM hourly WHERE endpoint = ?1 AND hour >= ?2"
        );
        let now = Counts {
            counted: [1, 2, 3, 4, 5, 6],
            ..Counts::default()
        }
        .shape("a".into(), &[]);
        assert_eq!(now.duplicates_last_day, 1);
        assert_eq!(
            now.rejected_last_day,
            Rejected {
                bad_signature: 2,
                stale_timestamp: 3,
                too_large: 4,
                bad_request: 5,
                storage_error: 6,
            }
        );
    }

    #[test]
    fn the_configured_endpoints_come_first_then_the_others_once() {
        let queued = QueueStats {
            endpoint: "gone".into(),
            pending: 1,
            oldest_pending_ms: None,
            dead: 0,
        };
        assert_eq!(
            shown(
                vec!["b".into(), "a".into()],
                &[queued],
                ["a".to_string(), "old".to_string(), "gone".to_string()]
            ),
            ["b", "a", "gone", "old"]
        );
    }
}
