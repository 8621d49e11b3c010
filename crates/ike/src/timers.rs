//! Each IKE SA's next deadline, kept in order: the endpoint finds the earliest one and the
//! due ones without visiting every SA. A gateway holding many thousands of tunnels asks for
//! its next timeout on every turn of its loop; a walk over all of them there made each
//! datagram cost more the more tunnels were held.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// Deadlines by SA (the endpoint's `u64` key), ordered by time.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    order: BTreeSet<(Instant, u64)>,
    at: HashMap<u64, Instant>,
}

impl Timers {
    /// Records `id`'s next deadline, or that it has none (also when it is gone).
    pub(crate) fn set(&mut self, id: u64, when: Option<Instant>) {
        let old = match when {
            Some(t) => self.at.insert(id, t),
            None => self.at.remove(&id),
        };
        if old == when {
            return;
        }
        if let Some(old) = old {
            self.order.remove(&(old, id));
        }
        if let Some(t) = when {
            self.order.insert((t, id));
        }
    }

    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.order.first().map(|&(t, _)| t)
    }

    /// The SAs whose deadline is `now` or earlier, earliest first.
    pub(crate) fn due(&self, now: Instant) -> Vec<u64> {
        self.order.iter().take_while(|&&(t, _)| t <= now).map(|&(_, id)| id).collect()
    }

    /// How many SAs have a deadline.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        debug_assert_eq!(self.at.len(), self.order.len());
        self.at.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn keeps_one_deadline_per_sa_in_order() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut timers = Timers::default();
        assert_eq!(timers.next(), None);
        timers.set(1, Some(t0 + s(30)));
        timers.set(2, Some(t0 + s(10)));
        timers.set(3, Some(t0 + s(20)));
        assert_eq!(timers.next(), Some(t0 + s(10)));
        // Moving a deadline replaces the old one.
        timers.set(2, Some(t0 + s(40)));
        assert_eq!(timers.len(), 3);
        assert_eq!(timers.next(), Some(t0 + s(20)));
        assert_eq!(timers.due(t0 + s(30)), vec![3, 1]);
        assert_eq!(timers.due(t0 + s(19)), Vec::<u64>::new());
        // The same deadline twice, and two SAs sharing an instant.
        timers.set(3, Some(t0 + s(20)));
        timers.set(4, Some(t0 + s(20)));
        assert_eq!(timers.len(), 4);
        assert_eq!(timers.due(t0 + s(20)), vec![3, 4]);
        // None forgets the SA, also one never seen.
        timers.set(3, None);
        timers.set(4, None);
        timers.set(9, None);
        assert_eq!(timers.len(), 2);
        assert_eq!(timers.due(t0 + s(100)), vec![1, 2]);
        timers.set(1, None);
        timers.set(2, None);
        assert_eq!(timers.next(), None);
        assert_eq!(timers.len(), 0);
    }
}
