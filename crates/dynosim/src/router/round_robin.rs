//! Round robin: each request goes to the next active worker in id order; each worker keeps
//! its own cursor over its data-parallel ranks. With 2 workers x 2 ranks the scheduler order
//! is (w0,r0), (w1,r0), (w0,r1), (w1,r1), ... i.e. scheduler indices 0, 2, 1, 3.
//!
//! When workers join or leave (a planner), the cursor is a position, not a worker: the next
//! request goes to position `cursor % active` of the active workers in id order, and the
//! cursor moves one past it. New workers receive only new requests.

#[derive(Clone, Debug)]
pub struct RoundRobin {
    dp_size: usize,
    /// One past the position of the last worker chosen.
    cursor: usize,
    /// Active worker ids, ascending.
    active: Vec<usize>,
    /// Next rank per worker id.
    next_rank: Vec<usize>,
}

impl RoundRobin {
    pub fn new(num_workers: usize, dp_size: usize) -> Self {
        assert!(num_workers > 0 && dp_size > 0, "validated by the config");
        Self {
            dp_size,
            cursor: 0,
            active: (0..num_workers).collect(),
            next_rank: vec![0; num_workers],
        }
    }

    /// The scheduler index (worker * dp_size + rank) of the next request.
    pub fn next_scheduler(&mut self) -> usize {
        // A planner never leaves a round-robin pool without an active worker: a budget that
        // would is refused before the run, a policy's target of 0 when it asks for it.
        let index = self.cursor % self.active.len();
        self.cursor = index + 1;
        let worker = self.active[index];
        let rank = self.next_rank[worker];
        self.next_rank[worker] = (rank + 1) % self.dp_size;
        worker * self.dp_size + rank
    }

    /// `worker` (a new id, or one that was away) receives requests from now on.
    pub fn worker_ready(&mut self, worker: usize) {
        if worker >= self.next_rank.len() {
            self.next_rank.resize(worker + 1, 0);
        }
        if let Err(position) = self.active.binary_search(&worker) {
            self.active.insert(position, worker);
        }
    }

    /// `worker` receives no more requests.
    pub fn worker_leaving(&mut self, worker: usize) {
        if let Ok(position) = self.active.binary_search(&worker) {
            self.active.remove(position);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_workers_then_ranks() {
        let mut rr = RoundRobin::new(2, 2);
        let order: Vec<_> = (0..8).map(|_| rr.next_scheduler()).collect();
        assert_eq!(order, vec![0, 2, 1, 3, 0, 2, 1, 3]);
        let mut rr = RoundRobin::new(4, 1);
        let order: Vec<_> = (0..5).map(|_| rr.next_scheduler()).collect();
        assert_eq!(order, vec![0, 1, 2, 3, 0]);
    }

    #[test]
    fn the_cursor_is_a_position_among_active_workers() {
        let mut rr = RoundRobin::new(3, 1);
        let order: Vec<_> = (0..4).map(|_| rr.next_scheduler()).collect();
        assert_eq!(order, vec![0, 1, 2, 0]);
        rr.worker_leaving(2);
        // Position 1 of [0, 1].
        assert_eq!(rr.next_scheduler(), 1);
        rr.worker_ready(5);
        // Position 2 of [0, 1, 5].
        assert_eq!(rr.next_scheduler(), 5);
        assert_eq!(rr.next_scheduler(), 0);
    }
}
