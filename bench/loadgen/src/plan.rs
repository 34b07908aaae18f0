//! The run's script, fixed before the first request: which event each slot sends, whether it
//! is the original, a re-send, or a spoiled signature, and in what order.
//!
//! A slot is what one worker does in one step. Most slots are one request. A racing slot is
//! two: the original on the worker's connection and an exact copy on its second connection,
//! written at the same instant, which is how a gateway's retry races its first try after a
//! timeout. Late copies come well after their original (at least twice the concurrency in
//! slots later, so almost always after its answer), as a gateway retrying minutes later.
//! Bad signatures use bodies of their own, so "stored zero times" can be checked by key.

use crate::payload::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The first send of a unique event.
    Original,
    /// An exact re-send of an event sent earlier in the run.
    LateCopy,
    /// A body of its own with a spoiled signature.
    BadSignature,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Original => "original",
            Kind::LateCopy => "late_copy",
            Kind::BadSignature => "bad_signature",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Slot {
    /// Index into the run's bodies: good events first, then the bad-signature ones.
    pub event: usize,
    pub kind: Kind,
    /// An exact copy goes out on a second connection at the same instant.
    pub race: bool,
}

impl Slot {
    pub fn requests(&self) -> usize {
        if self.race { 2 } else { 1 }
    }
}

#[derive(Debug, Clone)]
pub struct Plan {
    /// Good events; each is sent once as an original.
    pub unique: usize,
    /// Events sent only with a spoiled signature (indices `unique..unique + bad`).
    pub bad: usize,
    pub racing: usize,
    pub late: usize,
    pub slots: Vec<Slot>,
}

impl Plan {
    /// Splits `requests` by the ratios: `round(requests * dup_ratio)` exact re-sends (half
    /// racing, rounded up), `round(requests * bad_ratio)` bad signatures, the rest originals.
    pub fn new(
        requests: usize,
        dup_ratio: f64,
        bad_ratio: f64,
        concurrency: usize,
        rng: &mut Rng,
    ) -> Result<Plan, String> {
        if !(0.0..1.0).contains(&dup_ratio) || !(0.0..1.0).contains(&bad_ratio) {
            return Err("the ratios must be at least 0 and below 1".into());
        }
        let dups = (requests as f64 * dup_ratio).round() as usize;
        let bad = (requests as f64 * bad_ratio).round() as usize;
        let unique = requests.saturating_sub(dups + bad);
        // Each re-sent event is re-sent once, so there must be an original for each copy.
        if dups > unique {
            return Err(format!(
                "{dups} re-sends need at least as many originals, but only {unique} are left; \
                 lower --dup-ratio or --bad-sig-ratio"
            ));
        }
        let racing = dups.div_ceil(2);
        let late = dups - racing;

        let mut chosen: Vec<usize> = (0..unique).collect();
        rng.shuffle(&mut chosen);
        let mut race = vec![false; unique];
        for &event in &chosen[..racing] {
            race[event] = true;
        }

        // Sort keys: original k at 4k; a late copy at 4(k + lag) + 1, after its original;
        // bad signatures scattered at 4r + 2.
        let mut keyed: Vec<(u64, Slot)> = Vec::with_capacity(unique + late + bad);
        for (event, &race) in race.iter().enumerate() {
            let slot = Slot {
                event,
                kind: Kind::Original,
                race,
            };
            keyed.push((4 * event as u64, slot));
        }
        let min_lag = 2 * concurrency.max(1) as u64;
        let spread = (unique as u64 / 4).max(1);
        for &event in &chosen[racing..racing + late] {
            let lag = min_lag + rng.range(0, spread);
            let slot = Slot {
                event,
                kind: Kind::LateCopy,
                race: false,
            };
            keyed.push((4 * (event as u64 + lag) + 1, slot));
        }
        for i in 0..bad {
            let at = rng.range(0, unique.max(1) as u64 - 1);
            let slot = Slot {
                event: unique + i,
                kind: Kind::BadSignature,
                race: false,
            };
            keyed.push((4 * at + 2, slot));
        }
        keyed.sort_by_key(|(key, _)| *key);
        Ok(Plan {
            unique,
            bad,
            racing,
            late,
            slots: keyed.into_iter().map(|(_, slot)| slot).collect(),
        })
    }

    pub fn requests(&self) -> usize {
        self.slots.iter().map(Slot::requests).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_follows_the_ratios_and_copies_follow_their_originals() {
        let plan = Plan::new(20_000, 0.2, 0.01, 32, &mut Rng::new(1)).expect("valid plan");
        assert_eq!(plan.requests(), 20_000);
        assert_eq!((plan.unique, plan.bad), (15_800, 200));
        assert_eq!((plan.racing, plan.late), (2_000, 2_000));
        let position: std::collections::HashMap<usize, usize> = plan
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.kind == Kind::Original)
            .map(|(i, s)| (s.event, i))
            .collect();
        assert_eq!(position.len(), plan.unique);
        for (i, slot) in plan.slots.iter().enumerate() {
            if slot.kind == Kind::LateCopy {
                assert!(i > position[&slot.event] + 32, "late copy too early");
            }
        }
    }

    #[test]
    fn too_many_duplicates_are_refused() {
        assert!(Plan::new(100, 0.6, 0.0, 4, &mut Rng::new(1)).is_err());
    }
}
