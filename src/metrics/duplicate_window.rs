//! [`DuplicateWindow`]: the pure 15-minute window behind the duplicate ratio, its warning and
//! the duplicates alert.

use super::{DUPLICATE_MIN_SAMPLE, DUPLICATE_WARN_PERCENT, DUPLICATE_WINDOW};

/// Duplicates among verified webhooks over the last 15 minutes, in one-minute buckets, and
/// when the last warning was given. Pure: the caller passes the time (seconds on any
/// monotonic clock), so tests need no clock.
#[derive(Debug, Default)]
pub struct DuplicateWindow {
    /// Minute `m` lives in slot `m % 15`; a slot still holding an older minute is reset when
    /// its minute comes round again, and ignored when counting.
    slots: [Slot; WINDOW_MINUTES as usize],
    last_warning: Option<u64>,
}

const WINDOW_MINUTES: u64 = DUPLICATE_WINDOW.as_secs() / 60;

#[derive(Debug, Default, Clone, Copy)]
struct Slot {
    minute: u64,
    received: u64,
    duplicates: u64,
}

/// What the warning says: the counts over the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DuplicateAlert {
    pub duplicates: u64,
    pub received: u64,
}

impl DuplicateWindow {
    /// Records one verified webhook at `now_secs`. Returns an alert when duplicates are now
    /// above 5 % of a window of at least [`DUPLICATE_MIN_SAMPLE`] webhooks and no alert was
    /// given in the 15 minutes before.
    pub fn record(&mut self, now_secs: u64, duplicate: bool) -> Option<DuplicateAlert> {
        let minute = now_secs / 60;
        let slot = &mut self.slots[(minute % WINDOW_MINUTES) as usize];
        if slot.minute != minute {
            *slot = Slot {
                minute,
                ..Slot::default()
            };
        }
        slot.received += 1;
        slot.duplicates += u64::from(duplicate);

        let (duplicates, received) = self.counts(now_secs);
        let above = received >= DUPLICATE_MIN_SAMPLE
            && duplicates * 100 > received * DUPLICATE_WARN_PERCENT;
        let quiet = self
            .last_warning
            .is_none_or(|at| now_secs >= at + DUPLICATE_WINDOW.as_secs());
        if above && quiet {
            self.last_warning = Some(now_secs);
            return Some(DuplicateAlert {
                duplicates,
                received,
            });
        }
        None
    }

    /// (duplicates, received) over the 15 minutes up to `now_secs`.
    pub fn counts(&self, now_secs: u64) -> (u64, u64) {
        let minute = now_secs / 60;
        self.slots
            .iter()
            .filter(|s| s.minute <= minute && minute - s.minute < WINDOW_MINUTES)
            .fold((0, 0), |(d, r), s| (d + s.duplicates, r + s.received))
    }

    /// Duplicates over received in the window; 0 when nothing was received.
    pub fn ratio(&self, now_secs: u64) -> f64 {
        match self.counts(now_secs) {
            (_, 0) => 0.0,
            (duplicates, received) => duplicates as f64 / received as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60;

    fn feed(
        w: &mut DuplicateWindow,
        at: u64,
        received: u64,
        duplicates: u64,
    ) -> Vec<DuplicateAlert> {
        (0..received)
            .filter_map(|i| w.record(at, i < duplicates))
            .collect()
    }

    #[test]
    fn exactly_five_percent_is_not_above_it() {
        let mut w = DuplicateWindow::default();
        // The 5 duplicates come first, so the ratio passes 5 % on the way; record them last.
        assert!(feed(&mut w, 0, 95, 0).is_empty());
        assert!(feed(&mut w, 10, 5, 5).is_empty());
        assert_eq!(w.counts(10), (5, 100));
        assert_eq!(w.ratio(10), 0.05);
        let alerts = feed(&mut w, 20, 1, 1);
        assert_eq!(
            alerts,
            vec![DuplicateAlert {
                duplicates: 6,
                received: 101
            }]
        );
    }

    #[test]
    fn a_handful_of_webhooks_never_warns() {
        let mut w = DuplicateWindow::default();
        assert!(
            feed(&mut w, 0, 19, 10).is_empty(),
            "19 webhooks are too few to judge"
        );
        assert_eq!(feed(&mut w, 1, 1, 1).len(), 1, "the 20th makes a sample");
    }

    #[test]
    fn at_most_one_warning_per_window() {
        let mut w = DuplicateWindow::default();
        assert_eq!(
            feed(&mut w, 100, 20, 5).len(),
            1,
            "warns once, not for every duplicate"
        );
        assert!(feed(&mut w, 100 + 5 * MIN, 10, 5).is_empty());
        assert!(feed(&mut w, 100 + 15 * MIN - 1, 10, 5).is_empty());
        let again = feed(&mut w, 100 + 15 * MIN, 20, 5);
        assert_eq!(again.len(), 1, "a new window may warn again");
    }

    #[test]
    fn old_minutes_leave_the_window() {
        let mut w = DuplicateWindow::default();
        feed(&mut w, 0, 10, 10);
        assert_eq!(w.counts(14 * MIN + 59), (10, 10));
        assert_eq!(w.counts(15 * MIN), (0, 0), "15 minutes later they are gone");
        assert_eq!(w.ratio(15 * MIN), 0.0);
        // A slot reused by a later minute does not add the old minute's counts.
        feed(&mut w, 15 * MIN, 20, 0);
        assert_eq!(w.counts(15 * MIN), (0, 20));
        assert!(feed(&mut w, 16 * MIN, 1, 0).is_empty(), "no duplicates now");
    }

    #[test]
    fn a_burst_after_a_quiet_hour_warns() {
        let mut w = DuplicateWindow::default();
        feed(&mut w, 0, 100, 0);
        assert_eq!(feed(&mut w, 60 * MIN, 20, 2).len(), 1);
        assert_eq!(w.counts(60 * MIN), (2, 20));
    }
}
