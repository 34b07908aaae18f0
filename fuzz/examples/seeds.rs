//! Writes the seed corpora of the request targets from the fixtures: for every provider, the
//! request its signer sends (the test vector for a public-key scheme), as text. Run from
//! `fuzz/`: `cargo run --example seeds` (a normal build, no nightly flags); the files are
//! committed, so this is needed only when a provider or a fixture changes.

use std::path::Path;

use portaria::verify::Request;
use portaria_fuzz::{NOW, TextRequest, cases, raw_request};

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new("corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let path = dir.join(format!("seed-{name}"));
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn main() {
    for (i, case) in cases().iter().enumerate() {
        let path = format!("/webhooks/{}", case.provider);
        let (signed, body) = (&case.reference, &case.reference_body);
        let text = TextRequest::write(&[case.provider], &path, signed, body);
        // A seed is a request that verifies: the fuzzer starts from the deep end.
        let back = TextRequest::parse(&text).expect("a seed parses");
        let request = Request::new(&back.headers, &back.body).with_query(back.query.as_deref());
        if let Err(e) = case.verifier.verify_request(&request, NOW) {
            panic!("the {} seed does not verify: {e}", case.provider);
        }
        write("verify_all", case.provider, &text);
        let preset = format!("preset:{}", case.provider);
        write(
            "dedup_extract",
            case.provider,
            &TextRequest::write(&[&preset], &path, signed, body),
        );
        let event_header = case.verifier.event_type_header().unwrap_or("x-event-type");
        write(
            "describe",
            case.provider,
            &TextRequest::write(&[event_header], &path, signed, body),
        );
        // `verify_capture`: the first byte picks the endpoint of config.example.toml.
        let mut capture = vec![u8::try_from(i).unwrap_or(0)];
        capture.extend_from_slice(&raw_request(&path, signed, body));
        write("verify_capture", case.provider, &capture);
    }
}
