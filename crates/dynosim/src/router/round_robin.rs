//! Round robin: each request goes to the next worker in id order; each worker keeps its own
//! cursor over its data-parallel ranks. With 2 workers x 2 ranks the scheduler order is
//! (w0,r0), (w1,r0), (w0,r1), (w1,r1), ... i.e. scheduler indices 0, 2, 1, 3.

#[derive(Clone, Debug)]
pub struct RoundRobin {
    dp_size: usize,
    next_worker: usize,
    next_rank: Vec<usize>,
}

impl RoundRobin {
    pub fn new(num_workers: usize, dp_size: usize) -> Self {
        assert!(num_workers > 0 && dp_size > 0, "validated by the config");
        Self {
            dp_size,
            next_worker: 0,
            next_rank: vec![0; num_workers],
        }
    }

    /// The scheduler index (worker * dp_size + rank) of the next request.
    pub fn next_scheduler(&mut self) -> usize {
        let worker = self.next_worker;
        self.next_worker = (worker + 1) % self.next_rank.len();
        let rank = self.next_rank[worker];
        self.next_rank[worker] = (rank + 1) % self.dp_size;
        worker * self.dp_size + rank
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
}
