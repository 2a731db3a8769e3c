//! The simulation's agenda: events ordered by virtual time, ties broken by the order they were
//! scheduled in, so that a run never depends on a hash order or a thread.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

/// Events are boxed: the heap moves its entries on every push and pop, and an event (a request
/// or watch delivery) is large, so each step would copy a few hundred bytes per level.
struct Entry<E> {
    at: Duration,
    seq: u64,
    event: Box<E>,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    /// Reversed, so that the max-heap pops the earliest event.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Events by time; first in, first out among events of the same time.
pub(crate) struct Agenda<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
}

impl<E> Agenda<E> {
    pub(crate) fn new() -> Self {
        Agenda {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }

    pub(crate) fn push(&mut self, at: Duration, event: E) {
        self.seq += 1;
        self.heap.push(Entry {
            at,
            seq: self.seq,
            event: Box::new(event),
        });
    }

    /// The earliest event, if it is due by `until`.
    pub(crate) fn pop_until(&mut self, until: Duration) -> Option<(Duration, E)> {
        if self.heap.peek()?.at > until {
            return None;
        }
        self.heap.pop().map(|e| (e.at, *e.event))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_in_scheduling_order() {
        let mut agenda = Agenda::new();
        let ms = Duration::from_millis;
        agenda.push(ms(5), "late");
        agenda.push(ms(1), "first");
        agenda.push(ms(1), "second");
        assert_eq!(agenda.pop_until(ms(10)), Some((ms(1), "first")));
        assert_eq!(agenda.pop_until(ms(10)), Some((ms(1), "second")));
        assert_eq!(agenda.pop_until(ms(4)), None);
        assert_eq!(agenda.len(), 1);
    }
}
