//! What checks a history (its indexes and counts against its records,
//! for `check_invariants`) and compares two, whatever their layers.

use super::*;

impl History {
    /// Checks the layers' indexes and the counts against the records.
    pub(in crate::state) fn check(&self) -> Result<(), String> {
        let mut counted = Counts::default();
        for (id, found) in self.event_rows((Bound::Unbounded, Bound::Unbounded), false) {
            let event: Event = decode(found.bytes()).map_err(|e| format!("history event {id}: {e}"))?;
            counted.events += 1;
            counted.bytes += found.bytes().len() as u64;
            if let Some(missing) = event.deliveries.iter().find(|d| self.found_delivery(d).is_none()) {
                return Err(format!("history event {id} lacks its delivery {missing}"));
            }
        }
        for (id, found) in self.delivery_rows((Bound::Unbounded, Bound::Unbounded), false) {
            let delivery: Delivery = decode(found.bytes()).map_err(|e| format!("history delivery {id}: {e}"))?;
            counted.deliveries += 1;
            counted.bytes += found.bytes().len() as u64;
            if let Some(endpoint) = dead_of(&delivery) {
                *counted.dead.entry(endpoint).or_default() += 1;
                if !self.dead_of(&endpoint, (Bound::Included(id), Bound::Included(id)), false).any(|d| d == id) {
                    return Err(format!("history delivery {id} is dead but not in the dead index"));
                }
            }
        }
        if counted != self.counts {
            return Err(format!("the history counts {:?}, its records {counted:?}", self.counts));
        }
        let held = self.layers().map(Self::layer_bytes).sum::<u64>();
        if held != self.held {
            return Err(format!("the history says it holds {} bytes in memory, its layers {held}", self.held));
        }
        let dead_listed: usize =
            counted.dead.keys().map(|e| self.dead_of(e, (Bound::Unbounded, Bound::Unbounded), false).count()).sum();
        if dead_listed as u64 != counted.dead.values().sum::<u64>() {
            return Err("the history's dead index lists deliveries that are not dead".into());
        }
        let timed = self.received_before(u64::MAX).count();
        if timed as u64 != counted.events {
            return Err(format!("the history's time index lists {timed} events, it holds {}", counted.events));
        }
        Ok(())
    }
}

/// Compares what two histories hold, whatever their layers.
impl PartialEq for History {
    fn eq(&self, other: &Self) -> bool {
        let all = (Bound::Unbounded, Bound::Unbounded);
        let every = (Bound::Unbounded, Bound::Unbounded);
        self.counts == other.counts
            && self
                .event_rows(all, false)
                .map(|(id, f)| (id, f.bytes().to_vec()))
                .eq(other.event_rows(all, false).map(|(id, f)| (id, f.bytes().to_vec())))
            && self
                .delivery_rows(every, false)
                .map(|(id, f)| (id, f.bytes().to_vec()))
                .eq(other.delivery_rows(every, false).map(|(id, f)| (id, f.bytes().to_vec())))
    }
}

impl fmt::Debug for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "History {{ {} events, {} deliveries, {} bytes }}",
            self.counts.events, self.counts.deliveries, self.counts.bytes
        )
    }
}
