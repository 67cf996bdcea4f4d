//! The fair-share model: what a CPU-bound thread should get when it shares CPUs with others.
//!
//! Field notes C: "each running vCPU gets an equal slice; share = physical cores / running
//! vCPUs. Idle VMs take nothing." Inside one kernel the same holds for threads of equal weight:
//! T workers and B always-busy burners on C usable CPUs each get `min(1, C / (T + B))` of a CPU.
//!
//! Burners that are busy only a fraction `d` of the time demand `B * d` CPUs. A thread that asks
//! for less than its equal slice keeps what it asks for and the rest is shared among the others:
//! max-min fairness, computed by water-filling (Bertsekas & Gallager, *Data Networks*, 6.5.2).
//! With `d = 1` it reduces to the formula above. `C` is the smaller of the allowed CPUs and the
//! cgroup quota (quota / period), since both bound what the group may run at once.
//!
//! What the model leaves out is exactly what makes measurement worth doing: a thread cannot be
//! in two places, so 1 worker beside 2 burners on 2 CPUs gets 2/3 only if the scheduler keeps
//! migrating it (field notes: measured 63.6% against 66.7%), and caches, SMT siblings and the
//! hypervisor's own neighbours take their cut.

/// Max-min fair allocation of `capacity` CPUs among threads demanding `demands` CPUs each
/// (each demand in 0..=1). Returns each thread's allocation, in the same order.
pub fn water_fill(capacity: f64, demands: &[f64]) -> Vec<f64> {
    let mut alloc = vec![0.0; demands.len()];
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by(|&a, &b| demands[a].total_cmp(&demands[b]));
    let mut left = capacity.max(0.0);
    let mut remaining = demands.len();
    for i in order {
        let level = left / remaining as f64;
        let give = demands[i].clamp(0.0, 1.0).min(level);
        alloc[i] = give;
        left -= give;
        remaining -= 1;
    }
    alloc
}

/// The CPU fraction one worker gets: `threads` workers (demand 1 each) beside `burners` burners
/// of duty `duty` (0..=1) on `capacity` usable CPUs.
pub fn worker_share(capacity: f64, threads: usize, burners: usize, duty: f64) -> f64 {
    if threads == 0 {
        return 0.0;
    }
    let mut demands = vec![1.0; threads];
    demands.extend(std::iter::repeat_n(duty, burners));
    let alloc = water_fill(capacity, &demands);
    alloc[0]
}

/// The model's prediction relative to the same workers running alone: the quantity a measured
/// "throughput relative to alone" should be compared with. When the workers alone already
/// oversubscribe the CPUs, alone is itself a fraction of a CPU.
pub fn relative_share(capacity: f64, threads: usize, burners: usize, duty: f64) -> f64 {
    let alone = worker_share(capacity, threads, 0, duty);
    if alone <= 0.0 {
        return 0.0;
    }
    worker_share(capacity, threads, burners, duty) / alone
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn equal_weights_match_the_field_notes() {
        // Field notes C: 4 vCPUs; 4 threads beside 3 and 4 busy; 1 thread beside 4 busy.
        assert!(close(worker_share(4.0, 4, 3, 1.0), 4.0 / 7.0));
        assert!(close(worker_share(4.0, 4, 4, 1.0), 0.5));
        assert!(close(worker_share(4.0, 1, 4, 1.0), 0.8));
        // This machine: 2 vCPUs, 2 stress-ng workers.
        assert!(close(worker_share(2.0, 2, 2, 1.0), 0.5));
        assert!(close(worker_share(2.0, 1, 2, 1.0), 2.0 / 3.0));
        assert!(close(worker_share(2.0, 1, 0, 1.0), 1.0));
    }

    #[test]
    fn light_burners_take_only_what_they_ask() {
        // 2 CPUs, 2 workers, 2 burners at 25%: burners take 0.5 CPU, workers share 1.5.
        assert!(close(worker_share(2.0, 2, 2, 0.25), 0.75));
        // Burners at 90% ask more than the equal slice of 0.5: everyone gets 0.5.
        assert!(close(worker_share(2.0, 2, 2, 0.9), 0.5));
        // Idle burners take nothing.
        assert!(close(worker_share(2.0, 2, 2, 0.0), 1.0));
    }

    #[test]
    fn allocations_never_exceed_capacity_or_demand() {
        for cap in [0.5, 1.0, 2.0, 3.0] {
            for t in 1..5 {
                for b in 0..5 {
                    for d in [0.1, 0.5, 1.0] {
                        let mut dem = vec![1.0; t];
                        dem.extend(std::iter::repeat_n(d, b));
                        let a = water_fill(cap, &dem);
                        assert!(a.iter().sum::<f64>() <= cap + 1e-9);
                        assert!(
                            a.iter()
                                .zip(&dem)
                                .all(|(x, y)| *x <= *y + 1e-12 && *x >= 0.0)
                        );
                        let r = relative_share(cap, t, b, d);
                        assert!((0.0..=1.0 + 1e-12).contains(&r));
                    }
                }
            }
        }
    }

    #[test]
    fn relative_to_an_oversubscribed_alone() {
        // 4 workers alone on 2 CPUs get 0.5 each; with 4 burners, 0.25: relative 0.5.
        assert!(close(relative_share(2.0, 4, 4, 1.0), 0.5));
        // A quota of half a CPU: one worker alone gets 0.5; one burner halves it.
        assert!(close(relative_share(0.5, 1, 1, 1.0), 0.5));
    }

    /// No workers, no capacity, demands outside 0..=1: the edges, worked by hand.
    #[test]
    fn edges_no_workers_no_capacity_and_out_of_range_demands() {
        // With no worker the first allocation would be a burner's (0.5 here): none is given.
        assert_eq!(worker_share(2.0, 0, 1, 0.5), 0.0);
        assert_eq!(relative_share(2.0, 0, 1, 0.5), 0.0);
        // No capacity: alone gets 0, and the ratio is 0, not 0 / 0.
        assert_eq!(relative_share(0.0, 1, 1, 1.0), 0.0);
        // A negative capacity is none.
        assert_eq!(water_fill(-1.0, &[1.0]), vec![0.0]);
        // Demands clamped to 0..=1, filled lowest first: -0.5 gets 0 (level 3/3), 0.5 gets 0.5
        // (level 3/2), 1.5 gets 1 (level 2.5/1); the result is in the demands' order.
        assert_eq!(water_fill(3.0, &[1.5, -0.5, 0.5]), vec![1.0, 0.0, 0.5]);
        // Three equal demands of 1 on 1.5 CPUs: 0.5 each, exactly.
        assert_eq!(water_fill(1.5, &[1.0, 1.0, 1.0]), vec![0.5, 0.5, 0.5]);
        // Relative: 2 workers alone on 3 CPUs get 1 each; beside 2 burners, 3 / 4 each.
        assert_eq!(relative_share(3.0, 2, 2, 1.0), 0.75);
    }
}
