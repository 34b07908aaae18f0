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

use std::process::ExitCode;

/// Runs a binary's async `main` on a multi-threaded runtime; errors go to stderr, prefixed with
/// the binary's `name`, and make the exit status a failure.
pub fn block_on_main(
    name: &str,
    main: impl std::future::Future<Output = Result<(), String>>,
) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("{name}: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(main) {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("{name}: {why}");
            ExitCode::FAILURE
        }
    }
}
