//! portaria's benchmark kit, shared by its two binaries.
//!
//! Code map:
//! - [`payload`] makes the realistic payment-event bodies, from a seeded generator so that
//!   two runs send the same bytes.
//! - [`sign`] signs a body the way a provider preset does (and spoils a signature on purpose).
//! - [`plan`] decides, before anything is sent, the order of originals, racing and late
//!   re-sends and bad signatures, so the sending loop does no thinking.
//! - [`report`] turns what came back into percentiles, counts, a table and JSON.
//!
//! The binaries: `loadgen` (the client, `src/main.rs`) and `bare-server` (the ceiling: a hyper
//! server that answers 200 without doing any work).

pub mod payload;
pub mod plan;
pub mod report;
pub mod sign;
