//! The request's headers as intake reads and stores them: one header's text, and the blob
//! stored with the event, `name: value\r\n` each, every credential redacted (`Authorization`
//! always, and a provider's credential headers): what is stored reaches `events show`,
//! forwards and archives.

use http::{HeaderMap, HeaderName, header};

/// One header's value, trimmed; None when absent, empty or not visible ASCII.
pub(super) fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(String::from)
}

/// The headers as stored, `name: value\r\n` each, except that a credential's value (the
/// provider's `credentials`, and `Authorization` always) is replaced by [`REDACTED`]: what is
/// stored reaches `events show`, forwards and archives.
pub(super) fn headers_blob(headers: &HeaderMap, credentials: &[HeaderName]) -> Vec<u8> {
    let mut out = Vec::with_capacity(headers.len() * 32);
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        let secret = name == header::AUTHORIZATION
            || name == header::PROXY_AUTHORIZATION
            || credentials.contains(name);
        out.extend_from_slice(if secret {
            REDACTED.as_bytes()
        } else {
            value.as_bytes()
        });
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// What a stored credential header holds instead of its value.
pub const REDACTED: &str = "[redacted]";
