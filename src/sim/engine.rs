//! The discrete-event core: a clock, a binary heap of timestamped events, and a seeded RNG.
//!
//! The simulator must be fast (ten million events a second on one core) and repeatable (the same
//! seed gives the same figures to the last digit), so the core is deliberately small: events are
//! 24-byte values ordered by time and then by insertion number, which makes ties deterministic;
//! cancelled events are not removed but carry a generation number that the handler compares with
//! its target's current one (lazy deletion is cheaper than a decrease-key heap). The RNG is
//! xorshift64*: a few instructions, good enough for choosing among idle CPUs, and free of any
//! platform or crate-version dependence that would change a published prediction.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Simulated time in nanoseconds.
pub type Nanos = u64;

/// What happens when an event fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// The current activity of a physical CPU ends (a guest burst, an overhead, a poll window).
    PcpuDone,
    /// The hypervisor's time slice on a physical CPU ends.
    SliceEnd,
}

/// One timestamped event; `target` is a physical CPU, `epoch` its generation when scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub at: Nanos,
    seq: u64,
    pub what: What,
    pub target: u32,
    pub epoch: u32,
}

impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        // Earliest first (BinaryHeap is a max-heap), then first scheduled first.
        other
            .at
            .cmp(&self.at)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The pending events and the count of those handled.
#[derive(Debug, Default)]
pub struct Queue {
    heap: BinaryHeap<Event>,
    seq: u64,
    /// Events popped so far (the benchmark's numerator).
    pub popped: u64,
}

impl Queue {
    pub fn push(&mut self, at: Nanos, what: What, target: u32, epoch: u32) {
        self.seq += 1;
        self.heap.push(Event {
            at,
            seq: self.seq,
            what,
            target,
            epoch,
        });
    }

    /// The next event at or before `until`, if any.
    pub fn pop_until(&mut self, until: Nanos) -> Option<Event> {
        if self.heap.peek()?.at > until {
            return None;
        }
        self.popped += 1;
        self.heap.pop()
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// xorshift64* (Vigna, "An experimental exploration of Marsaglia's xorshift generators", 2016).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        // Zero is the one state xorshift never leaves; splitmix the seed away from it.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Self((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0); the tiny modulo bias is irrelevant at these n.
    pub fn below(&mut self, n: u32) -> u32 {
        ((self.next_u64() >> 32) % u64::from(n.max(1))) as u32
    }

    /// A uniformly chosen set bit of a non-zero mask.
    pub fn pick_bit(&mut self, mask: u64) -> Option<u32> {
        let n = mask.count_ones();
        if n == 0 {
            return None;
        }
        let mut k = self.below(n);
        let mut m = mask;
        loop {
            let bit = m.trailing_zeros();
            if k == 0 {
                return Some(bit);
            }
            k -= 1;
            m &= m - 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_in_time_order_and_ties_in_insertion_order() {
        let mut q = Queue::default();
        q.push(30, What::PcpuDone, 0, 0);
        q.push(10, What::SliceEnd, 1, 0);
        q.push(10, What::PcpuDone, 2, 0);
        q.push(20, What::PcpuDone, 3, 0);
        let order: Vec<u32> = std::iter::from_fn(|| q.pop_until(25))
            .map(|e| e.target)
            .collect();
        assert_eq!(order, vec![1, 2, 3]);
        assert_eq!(q.len(), 1);
        assert_eq!(q.popped, 3);
    }

    #[test]
    fn rng_is_repeatable_and_picks_only_set_bits() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..1000 {
            let m = a.next_u64() | 1;
            assert_eq!(m, b.next_u64() | 1);
            let bit = a.pick_bit(m).unwrap();
            assert_eq!(Some(bit), b.pick_bit(m));
            assert!(m & (1 << bit) != 0);
        }
        assert_eq!(Rng::new(1).pick_bit(0), None);
    }
}
