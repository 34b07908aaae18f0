//! The TOML config (operator input, which still must not panic): any text through
//! `Config::parse_with` without reading secrets, as the database commands load it. Ok or Err,
//! never a panic; an error has at least one problem and prints.

#![no_main]

use libfuzzer_sys::fuzz_target;
use portaria::config::{Config, Secrets, Source};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse_with(text, Source::Embedded, Secrets::Skip) {
        Ok(config) => {
            let _ = format!("{config:?}");
        }
        Err(e) => {
            assert!(!e.problems.is_empty(), "an error without a problem");
            let _ = e.to_string();
        }
    }
});
