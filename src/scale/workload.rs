//! The two parallel workloads and the pinned thread pool they run on.
//!
//! `fib` is field notes E's program: recursive Fibonacci split with `rayon::join`, so idle
//! workers steal halves of the tree from busy ones. It is compute-bound and almost free of
//! memory traffic, so what slows it down is sharing a core or a module (decoder, FPU, L1/L2),
//! not bandwidth. Below a cutoff the recursion runs serially, so a leaf costs tens of
//! microseconds and stealing overhead stays small.
//!
//! `triad` is STREAM's triad, `a[i] = b[i] + s * c[i]`, over three arrays several times larger
//! than all last-level caches together, statically split one chunk per thread (rayon's
//! `broadcast` runs exactly once on each pinned worker). It is bound by memory bandwidth, so it
//! scales with memory channels and LLCs, which compact placement shares and scatter spreads.
//! Arrays are first touched by the thread that uses them, as STREAM does, so on NUMA machines
//! each chunk lives on its worker's node.

use crate::affinity;
use anyhow::{Context, Result};
use rayon::{ThreadPool, ThreadPoolBuilder};
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A pool of `n` workers; worker i pinned to `cpus[i]` when given. Pin failures are collected
/// (with the reason) rather than fatal: the run goes on and the report says so.
pub fn build_pool(
    n: usize,
    cpus: Option<Vec<u32>>,
) -> Result<(ThreadPool, Arc<Mutex<Vec<String>>>)> {
    let failures = Arc::new(Mutex::new(Vec::new()));
    let f = failures.clone();
    let mut b = ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("scale-{i}"));
    if let Some(cpus) = cpus {
        b = b.start_handler(move |i| {
            if let Some(&c) = cpus.get(i)
                && let Err(e) = affinity::pin_self(c)
                && let Ok(mut v) = f.lock()
            {
                v.push(format!("worker {i} on CPU {c}: {e:#}"));
            }
        });
    }
    let pool = b.build().context("cannot build the worker thread pool")?;
    Ok((pool, failures))
}

/// Fibonacci, serially and exponentially (the point is the call tree, not the number).
pub fn fib_seq(n: u32) -> u64 {
    if n < 2 {
        n as u64
    } else {
        fib_seq(n - 1) + fib_seq(n - 2)
    }
}

/// Fibonacci with each call above `cutoff` split in two by `rayon::join` (work stealing).
pub fn fib_par(n: u32, cutoff: u32) -> u64 {
    if n <= cutoff.max(1) {
        return fib_seq(black_box(n));
    }
    let (a, b) = rayon::join(|| fib_par(n - 1, cutoff), || fib_par(n - 2, cutoff));
    a + b
}

/// The smallest n whose serial fib takes at least `target` on this CPU, between 20 and 50.
pub fn calibrate_fib(target: Duration) -> u32 {
    let t0 = Instant::now();
    black_box(fib_seq(black_box(25)));
    let t25 = t0.elapsed().as_secs_f64().max(1e-7);
    // Each step of n multiplies the work by the golden ratio.
    let steps = (target.as_secs_f64() / t25).ln() / 1.618_033_988_f64.ln();
    (25.0 + steps.ceil()).clamp(20.0, 50.0) as u32
}

/// Calls made by `fib_seq(n)` (and by `fib_par(n, _)`, whose tree is the same): 2 F(n+1) - 1.
/// The work of a run, so runs of different arguments compare exactly.
pub fn fib_calls(n: u32) -> f64 {
    let (mut a, mut b) = (0u128, 1u128);
    for _ in 0..n {
        (a, b) = (b, a + b);
    }
    // b is F(n+1).
    (2 * b - 1) as f64
}

/// The argument for `threads` threads from the single thread's `n`: one step per golden-ratio
/// growth of the thread count, so the work grows about as the thread count (at most 60).
pub fn fib_for_threads(n: u32, threads: usize) -> u32 {
    let steps = (threads.max(1) as f64).ln() / 1.618_033_988_f64.ln();
    (n + steps.round() as u32).min(60.max(n))
}

/// One worker's chunk of each of the three arrays.
type ChunkTriple<'a> = (&'a mut [f64], &'a mut [f64], &'a mut [f64]);

/// Three arrays for the triad, split into one chunk per worker.
pub struct TriadArrays {
    a: Vec<f64>,
    b: Vec<f64>,
    c: Vec<f64>,
    chunk: usize,
}

impl TriadArrays {
    /// Allocates `len` elements per array (untouched) and first-touches each chunk on the
    /// pool worker that will use it.
    pub fn new(pool: &ThreadPool, len: usize) -> Self {
        let n = pool.current_num_threads().max(1);
        let mut t = Self {
            a: vec![0.0; len],
            b: vec![0.0; len],
            c: vec![0.0; len],
            chunk: len.div_ceil(n).max(1),
        };
        let parts: Vec<Mutex<ChunkTriple>> =
            t.a.chunks_mut(t.chunk)
                .zip(t.b.chunks_mut(t.chunk))
                .zip(t.c.chunks_mut(t.chunk))
                .map(|((a, b), c)| Mutex::new((a, b, c)))
                .collect();
        pool.broadcast(|ctx| {
            if let Some(Ok(mut g)) = parts.get(ctx.index()).map(|m| m.lock()) {
                let (a, b, c) = &mut *g;
                a.fill(1.0);
                b.fill(2.0);
                c.fill(0.5);
            }
        });
        drop(parts);
        t
    }

    /// Bytes one pass moves by STREAM's convention: two arrays read, one written.
    pub fn bytes_per_pass(&self) -> u64 {
        3 * 8 * self.a.len() as u64
    }

    /// One triad pass, each worker over its own chunk.
    pub fn pass(&mut self, pool: &ThreadPool, scalar: f64) {
        let (b, c) = (&self.b, &self.c);
        let parts: Vec<Mutex<&mut [f64]>> = self.a.chunks_mut(self.chunk).map(Mutex::new).collect();
        let chunk = self.chunk;
        pool.broadcast(|ctx| {
            let i = ctx.index();
            if let Some(Ok(mut a)) = parts.get(i).map(|m| m.lock()) {
                let start = i * chunk;
                let (b, c) = (&b[start..start + a.len()], &c[start..start + a.len()]);
                for ((x, y), z) in a.iter_mut().zip(b).zip(c) {
                    *x = y + scalar * z;
                }
            }
        });
        black_box(&mut self.a);
    }

    /// A value depending on every element written, so passes cannot be optimised away.
    pub fn checksum(&self) -> f64 {
        self.a.iter().step_by(4096).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_fib_is_fib() {
        let (pool, fails) = build_pool(2, None).unwrap();
        assert_eq!(pool.install(|| fib_par(20, 10)), 6765);
        assert_eq!(fib_seq(10), 55);
        assert!(fails.lock().unwrap().is_empty());
    }

    #[test]
    fn triad_computes_the_triad() {
        let (pool, _) = build_pool(2, None).unwrap();
        let mut t = TriadArrays::new(&pool, 10_001);
        t.pass(&pool, 3.0);
        assert!(t.a.iter().all(|&x| x == 2.0 + 3.0 * 0.5));
        assert_eq!(t.bytes_per_pass(), 3 * 8 * 10_001);
    }

    #[test]
    fn calibration_stays_in_range() {
        let n = calibrate_fib(Duration::from_millis(1));
        assert!((20..=50).contains(&n));
    }

    fn calls_of(n: u32) -> u64 {
        if n < 2 {
            1
        } else {
            1 + calls_of(n - 1) + calls_of(n - 2)
        }
    }

    #[test]
    fn fib_calls_counts_the_call_tree() {
        for n in 0..20 {
            assert_eq!(fib_calls(n), calls_of(n) as f64, "fib({n})");
        }
        // Each step multiplies the work by about the golden ratio.
        assert!((fib_calls(41) / fib_calls(40) - 1.618_034).abs() < 1e-6);
    }

    #[test]
    fn the_argument_grows_with_log_phi_of_the_threads() {
        assert_eq!(fib_for_threads(41, 1), 41);
        assert_eq!(fib_for_threads(41, 2), 42);
        assert_eq!(fib_for_threads(41, 16), 47);
        // The work at 16 threads is within a factor sqrt(phi) of 16 single-thread runs.
        let w = fib_calls(47) / fib_calls(41);
        assert!((16.0 / 1.28..=16.0 * 1.28).contains(&w), "{w}");
        assert_eq!(fib_for_threads(58, 1024), 60, "capped at 60");
    }
}
