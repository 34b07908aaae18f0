//! [`DuplicateWindow`]: the pure 15-minute window behind each endpoint's duplicate ratio and
//! its warning (README, "Observability").

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
