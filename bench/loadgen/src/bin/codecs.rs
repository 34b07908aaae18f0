//! `codecs`: what deflating a webhook body costs and saves (bench/PROFILE.md, "Payload
//! compression"): for the load generator's bodies (the seeded `charge.paid` generator that
//! `bench/run.sh` sends) and for any files given as arguments (real gateway events), miniz's
//! deflate at levels 1, 3 and 6 (zlib framing, as portaria stores it): bytes stored, and
//! nanoseconds per KiB to compress and to decompress, the best of five timed loops (this
//! shared machine is noisy: compare the rows as ratios, not the absolute times).
//!
//!     cargo run --release -p loadgen --bin codecs -- [FILE...]

use std::hint::black_box;
use std::time::Instant;

use loadgen::payload::{Rng, charge_paid};

/// What portaria's `store::payload` keeps deflated: a body of 1-64 KiB ...
const SIZES: std::ops::RangeInclusive<usize> = 1024..=64 * 1024;
/// ... that deflate shrinks by at least this fraction (percent).
const MIN_SAVED_PERCENT: usize = 20;

fn main() {
    let mut sets: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
    let mut rng = Rng::new(7);
    let bench: Vec<Vec<u8>> = (0..200).map(|n| charge_paid(&mut rng, n).bytes).collect();
    sets.push(("bench/loadgen charge.paid (200 bodies)".into(), bench));
    for path in std::env::args().skip(1) {
        match std::fs::read(&path) {
            Ok(bytes) => sets.push((path, vec![bytes])),
            Err(e) => {
                eprintln!("codecs: {path}: {e}");
                std::process::exit(2);
            }
        }
    }
    println!(
        "{:<44} {:>5} {:>6} {:>7} {:>6} {:>9} {:>9} {:>5}",
        "bodies", "level", "bytes", "stored", "ratio", "ns/KiB in", "ns/KiB out", "kept"
    );
    for (name, bodies) in &sets {
        let raw: usize = bodies.iter().map(Vec::len).sum();
        for level in [1u8, 3, 6] {
            let packed: Vec<Vec<u8>> = bodies
                .iter()
                .map(|b| miniz_oxide::deflate::compress_to_vec_zlib(b, level))
                .collect();
            // As stored: a 4-byte length before the zlib stream.
            let stored: usize = packed.iter().map(|p| p.len() + 4).sum();
            let kept = bodies
                .iter()
                .zip(&packed)
                .filter(|(b, p)| {
                    let saved = b.len().saturating_sub(p.len() + 4);
                    SIZES.contains(&b.len()) && saved * 100 >= b.len() * MIN_SAVED_PERCENT
                })
                .count();
            let compress = best_ns(|| {
                for b in bodies {
                    black_box(miniz_oxide::deflate::compress_to_vec_zlib(
                        black_box(b),
                        level,
                    ));
                }
            });
            let decompress = best_ns(|| {
                for (b, p) in bodies.iter().zip(&packed) {
                    let out = miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(
                        black_box(p),
                        b.len(),
                    );
                    black_box(out.ok());
                }
            });
            let kib = raw as f64 / 1024.0;
            println!(
                "{:<44} {:>5} {:>6} {:>7} {:>6.2} {:>9.0} {:>9.0} {:>2}/{:<2}",
                truncate(name, 44),
                level,
                raw / bodies.len(),
                stored / bodies.len(),
                stored as f64 / raw as f64,
                compress / kib,
                decompress / kib,
                kept,
                bodies.len()
            );
        }
    }
}

/// The fastest of five runs of `work` (after one warm-up), in nanoseconds, each run repeated
/// until it has taken 50 ms, divided by the repeats.
fn best_ns(mut work: impl FnMut()) -> f64 {
    work();
    (0..5)
        .map(|_| {
            let start = Instant::now();
            let mut repeats = 0u32;
            while start.elapsed().as_millis() < 50 {
                work();
                repeats += 1;
            }
            start.elapsed().as_nanos() as f64 / f64::from(repeats)
        })
        .fold(f64::INFINITY, f64::min)
}

fn truncate(text: &str, width: usize) -> &str {
    let start = text.len().saturating_sub(width);
    let mut at = start;
    while !text.is_char_boundary(at) {
        at += 1;
    }
    &text[at..]
}
