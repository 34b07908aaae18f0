//! Writes the embedded default config (`config::EXAMPLE`, what `portaria serve` runs without a
//! config file) into `OUT_DIR`: `config.example.toml` without its comment lines and blank
//! lines. The binary parses it and never shows it, so its 10 KB of explanations for people
//! reading the file are left out of the Pi's 6 MiB budget; the TOML it parses is the same,
//! line for line (a test parses both and compares).

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=config.example.toml");
    println!("cargo:rerun-if-changed=build.rs");
    let text = std::fs::read_to_string("config.example.toml")
        .unwrap_or_else(|e| panic!("cannot read config.example.toml: {e}"));
    let kept: String = text
        .lines()
        .filter(|line| {
            let line = line.trim_start();
            !line.is_empty() && !line.starts_with('#')
        })
        .flat_map(|line| [line, "\n"])
        .collect();
    let out = std::env::var("OUT_DIR").unwrap_or_else(|e| panic!("OUT_DIR: {e}"));
    std::fs::write(Path::new(&out).join("example.toml"), kept)
        .unwrap_or_else(|e| panic!("cannot write the embedded config: {e}"));
}
