//! `portaria verify`'s parser of a captured raw HTTP/1.1 request (request line, headers,
//! Content-Length or chunked body), then its diagnosis against every endpoint of
//! config.example.toml (placeholder secrets). A capture comes from the network: never a panic.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use portaria::cli::verify::{diagnose, parse};
use portaria::config::{Config, Secrets, Source};

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let text = include_str!("../../config.example.toml");
        Config::parse_with(text, Source::Embedded, Secrets::Skip)
            .unwrap_or_else(|e| panic!("config.example.toml: {e}"))
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, raw)) = data.split_first() else {
        return;
    };
    let Ok(capture) = parse(raw) else {
        return;
    };
    let endpoints = &config().endpoints;
    let endpoint = &endpoints[usize::from(pick) % endpoints.len()];
    let diagnosis = diagnose(endpoint, &capture, portaria_fuzz::NOW);
    assert!(!diagnosis.lines.is_empty());
});
