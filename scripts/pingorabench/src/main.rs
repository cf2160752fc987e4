//! Times pingora-limits' count-min sketch over the keys of the Go benchmark
//! BenchmarkEstimatorIncrementAt (node/estimator_test.go): 10^6 keys of
//! 16 bytes, "key:%012d", walked in order, with sketches of
//! 4 × 65 536 and 4 × 1 024 slots. Prints one line per case in the Go
//! benchmark format, so benchstat reads it:
//!
//!   Estimator/incr/4x65536  N  T ns/op
//!
//! Cases: the bare `Estimator::incr`, and `Rate::observe` followed by
//! `Rate::rate` (what an estimator namespace's IncrementAt does: count in
//! the current window, read the previous one).

use pingora_limits::estimator::Estimator;
use pingora_limits::rate::Rate;
use std::hint::black_box;
use std::time::{Duration, Instant};

const KEYS: usize = 1_000_000;

/// The keys, in the Go benchmark's order.
fn keys() -> Vec<String> {
    (0..KEYS).map(|i| format!("key:{:012}", i)).collect()
}

/// Runs op over the keys for at least `min` and returns (ops, ns/op).
fn time<F: FnMut(&str)>(keys: &[String], min: Duration, mut op: F) -> (u64, f64) {
    // One warm-up pass: the sketch and the keys' memory are touched once.
    for k in keys {
        op(k);
    }
    let mut n: u64 = 0;
    let start = Instant::now();
    loop {
        for k in keys {
            op(k);
        }
        n += keys.len() as u64;
        let el = start.elapsed();
        if el >= min {
            return (n, el.as_nanos() as f64 / n as f64);
        }
    }
}

/// Usage: pingorabench [SECONDS]: each case runs at least SECONDS (1).
fn main() {
    let secs: f64 = std::env::args().nth(1).map_or(1.0, |s| s.parse().expect("SECONDS"));
    let min = Duration::from_secs_f64(secs);
    let keys = keys();
    for slots in [65_536usize, 1_024] {
        let e = Estimator::new(4, slots);
        let (n, ns) = time(&keys, min, |k| {
            black_box(e.incr(k, 1));
        });
        println!("BenchmarkEstimator/incr/4x{slots}\t{n}\t{ns:.2} ns/op");

        // An interval far longer than the run: no reset is timed.
        let r = Rate::new_with_estimator_config(Duration::from_secs(3600), 4, slots);
        let (n, ns) = time(&keys, min, |k| {
            black_box(r.observe(&k, 1));
            black_box(r.rate(&k));
        });
        println!("BenchmarkEstimator/observe+rate/4x{slots}\t{n}\t{ns:.2} ns/op");
    }
}
