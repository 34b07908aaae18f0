//! Routing of the request target: the bytes a client puts between the method and `HTTP/1.1`,
//! through httparse and `http::Uri` as hyper reads them, then `ingest::route` against the
//! endpoints of config.example.toml. Never a panic, and a request is routed only to the
//! endpoint whose path is exactly the target's path (no decoding, no `..`, no query).

#![no_main]

use std::collections::HashMap;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use portaria::config::{Config, Secrets, Source};
use portaria::ingest::route;

fn endpoints() -> &'static HashMap<String, String> {
    static ENDPOINTS: OnceLock<HashMap<String, String>> = OnceLock::new();
    ENDPOINTS.get_or_init(|| {
        let text = include_str!("../../config.example.toml");
        let config = Config::parse_with(text, Source::Embedded, Secrets::Skip)
            .unwrap_or_else(|e| panic!("config.example.toml: {e}"));
        config
            .endpoints
            .iter()
            .map(|e| (e.path.clone(), e.name.clone()))
            .collect()
    })
}

fn check(uri: &http::Uri) {
    if let Some(name) = route(endpoints(), uri) {
        let path = uri.path();
        assert!(endpoints().get(path) == Some(name), "{uri}");
        assert!(path.starts_with('/') && !path.contains('?') && !path.contains('#'));
        assert!(!path.split('/').any(|s| s == ".." || s == "."), "{uri}");
        assert!(!path.contains('%'), "{uri}");
    }
}

fuzz_target!(|target: &[u8]| {
    // As hyper does: httparse finds the request target, then `Uri` parses those bytes.
    let mut raw = b"POST ".to_vec();
    raw.extend_from_slice(target);
    raw.extend_from_slice(b" HTTP/1.1\r\nhost: example\r\n\r\n");
    let mut slots = [httparse::EMPTY_HEADER; 4];
    let mut request = httparse::Request::new(&mut slots);
    if let Ok(httparse::Status::Complete(_)) = request.parse(&raw)
        && let Some(path) = request.path
        && let Ok(uri) =
            http::Uri::from_maybe_shared(bytes::Bytes::copy_from_slice(path.as_bytes()))
    {
        check(&uri);
    }
    // And the bytes as a whole, whatever a front end hands on.
    if let Ok(uri) = http::Uri::try_from(target) {
        check(&uri);
    }
});
