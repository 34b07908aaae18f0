//! `portaria verify`: checks a captured raw HTTP/1.1 request against an endpoint's secrets, as
//! the server would, and says in one sentence why it would be refused: which header is
//! missing, what is malformed, how far the timestamp is outside the window, or how many
//! secrets were tried. It also says whether the request would be answered as a handshake.
//!
//! The capture is a request line, headers, a blank line and the body (CRLF or LF line ends),
//! e.g. from `portaria events show --raw ID`. The body is every byte after the blank line,
//! bounded by `Content-Length` when there is one; a chunked body is decoded. Nothing of a
//! header's value is printed, only names: a capture can hold a credential.

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;
use std::time::SystemTime;

use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri, header};

use super::VerifyArgs;
use crate::config::Endpoint;
use crate::ingest::REDACTED;
use crate::time::unix_secs;
use crate::verify::{Request, VerifyError};

/// At most this many headers in a capture; real deliveries carry a few dozen.
const MAX_HEADERS: usize = 256;

/// A captured request, parsed.
#[derive(Debug)]
pub struct Capture {
    method: Method,
    path: String,
    query: Option<String>,
    headers: HeaderMap,
    body: Vec<u8>,
    /// Neither `Content-Length` nor chunked encoding: the body is every byte to the end.
    unbounded: bool,
}

impl Capture {
    /// A request as stored (a rejected one kept): a POST to `path`, no query string (none is
    /// stored), its body whole.
    pub fn stored(path: &str, headers: HeaderMap, body: Vec<u8>) -> Capture {
        Capture {
            method: Method::POST,
            path: path.to_string(),
            query: None,
            headers,
            body,
            unbounded: false,
        }
    }
}

/// Parses a raw HTTP/1.1 request.
pub fn parse(raw: &[u8]) -> Result<Capture, String> {
    if raw.starts_with(b"id:") && raw.windows(15).any(|w| w == b"--- headers ---") {
        return Err(
            "this is the output of `events show`; `events show --raw ID` prints the request \
             itself"
                .into(),
        );
    }
    let mut slots = vec![httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut slots);
    let head_len = match request.parse(raw) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            return Err(
                "the request ends before the blank line that closes its headers".to_string(),
            );
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Err(format!("more than {MAX_HEADERS} headers"));
        }
        Err(e) => {
            return Err(format!(
                "not an HTTP/1.1 request (a request line such as `POST /webhooks/x HTTP/1.1`, \
                 headers, a blank line, the body): {e}"
            ));
        }
    };
    let method = request
        .method
        .and_then(|m| Method::from_bytes(m.as_bytes()).ok())
        .ok_or("the request line has no valid method")?;
    let target = request.path.unwrap_or_default();
    let uri: Uri = target
        .parse()
        .map_err(|_| format!("the request target `{target}` is not a path"))?;
    let mut headers = HeaderMap::new();
    for h in request.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| format!("`{}` is not a header name", h.name))?;
        let value = HeaderValue::from_bytes(h.value)
            .map_err(|_| format!("header `{name}` has a value that cannot be sent"))?;
        headers.append(name, value);
    }
    let rest = &raw[head_len..];
    let (body, unbounded) = if is_chunked(&headers) {
        (dechunk(rest)?, false)
    } else if let Some(length) = headers.get(header::CONTENT_LENGTH) {
        let length: usize = length
            .to_str()
            .ok()
            .and_then(|l| l.trim().parse().ok())
            .ok_or("`content-length` is not a number")?;
        let body = rest.get(..length).ok_or_else(|| {
            format!(
                "the body is {} bytes, shorter than its `content-length: {length}` (a \
                 truncated capture?)",
                rest.len()
            )
        })?;
        (body.to_vec(), false)
    } else {
        (rest.to_vec(), true)
    };
    Ok(Capture {
        method,
        path: uri.path().to_string(),
        query: uri.query().map(str::to_string),
        headers,
        body,
        unbounded,
    })
}

fn is_chunked(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .next_back()
        .is_some_and(|coding| coding.trim().eq_ignore_ascii_case("chunked"))
}

/// Decodes a chunked body (trailers, if any, are dropped).
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let bad = || {
        "the body is not chunked, though `transfer-encoding: chunked` says so (remove that \
         header if the body in the capture is already decoded)"
            .to_string()
    };
    let mut body = Vec::new();
    loop {
        let Ok(httparse::Status::Complete((start, size))) = httparse::parse_chunk_size(rest) else {
            return Err(bad());
        };
        let size = usize::try_from(size).map_err(|_| bad())?;
        rest = &rest[start..];
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(rest.get(..size).ok_or_else(bad)?);
        rest = &rest[size..];
        rest = rest
            .strip_prefix(b"\r\n")
            .or_else(|| rest.strip_prefix(b"\n"))
            .ok_or_else(bad)?;
    }
}

/// What `verify` concludes: the lines to print, and whether the server would take it.
#[derive(Debug)]
pub struct Diagnosis {
    pub lines: Vec<String>,
    pub ok: bool,
}

/// Checks `capture` as the server would for `endpoint` at unix time `at`.
pub fn diagnose(endpoint: &Endpoint, capture: &Capture, at: i64) -> Diagnosis {
    let verifier = &endpoint.verifier;
    let provider = verifier.provider();
    let mut lines = Vec::new();
    if capture.path != endpoint.path {
        lines.push(format!(
            "note: the request went to `{}`, not to this endpoint's path `{}`",
            capture.path, endpoint.path
        ));
    }
    if capture.method != Method::POST {
        lines.push(format!(
            "failed: portaria accepts only POST, and answers this {} with 405",
            capture.method
        ));
        return Diagnosis { lines, ok: false };
    }
    let request =
        Request::new(&capture.headers, &capture.body).with_query(capture.query.as_deref());
    let proof = match verifier.verify_request(&request, at) {
        Ok(proof) => proof,
        Err(e) => {
            if let Some(reply) = verifier.unsigned_handshake(&request) {
                lines.push(format!(
                    "ok: answered as {provider}'s unsigned set-up request (200, {}, {} bytes), \
                     neither stored nor forwarded",
                    reply.content_type,
                    reply.body.len()
                ));
                lines.push(format!("note: it did not verify: {e}"));
                return Diagnosis { lines, ok: true };
            }
            lines.push(format!("failed: {}", failure(endpoint, capture, &e, at)));
            lines.extend(hints(endpoint, capture, &e));
            return Diagnosis { lines, ok: false };
        }
    };
    lines.push(format!(
        "ok: verified with secret {} of {} (provider {provider})",
        proof.secret_index() + 1,
        verifier.secret_count()
    ));
    if let Some(reply) = verifier.handshake(&proof, &request) {
        lines.push(format!(
            "handshake: yes, portaria answers it itself (200, {}, {} bytes), and neither stores \
             nor forwards it",
            reply.content_type,
            reply.body.len()
        ));
        return Diagnosis { lines, ok: true };
    }
    lines.push(format!(
        "handshake: no, an event: portaria stores it{}",
        if endpoint.forwards() {
            " and forwards it"
        } else {
            ""
        }
    ));
    match endpoint
        .dedup
        .extract_signed(proof.signed_key(), &capture.headers, &capture.body)
    {
        Ok(key) => {
            lines.push(format!("dedup key: {key} ({})", endpoint.dedup));
            Diagnosis { lines, ok: true }
        }
        Err(e) => {
            lines.push(format!(
                "failed: verified, but portaria answers 400: no dedup key ({}): {e}",
                endpoint.dedup
            ));
            Diagnosis { lines, ok: false }
        }
    }
}

/// One sentence for why the signature check failed. Never a secret or a header's value:
/// `VerifyError`'s texts name headers and parts only.
fn failure(endpoint: &Endpoint, capture: &Capture, error: &VerifyError, at: i64) -> String {
    let verifier = &endpoint.verifier;
    let provider = verifier.provider();
    match error {
        VerifyError::Mismatch if capture.query.is_none() => {
            match signed_query(capture, endpoint, at) {
                Some(names) => format!(
                    "cannot be checked from this capture: {provider} signs {names} from the \
                     query string of the URL it calls, and this request line has none. portaria \
                     does not store the query string, so a stored event (`events show --raw`) \
                     cannot be verified again (it was when it arrived, or it would not be \
                     stored); to check a delivery, capture it with its whole request line"
                ),
                None => mismatch(endpoint),
            }
        }
        VerifyError::MissingHeader(name) => format!(
            "no `{name}` header: {provider} sends it with every delivery, and portaria answers \
             401 without it (is this a capture of a {provider} delivery, for this endpoint?)"
        ),
        VerifyError::MissingQuery(name) => format!(
            "no `{name}` query parameter: {provider} carries its credential there, and \
             portaria answers 401 without it (the request line of the capture must keep the \
             query string the provider called)"
        ),
        VerifyError::Malformed(what) => {
            format!("malformed signature: {what}; portaria answers 401")
        }
        VerifyError::Contradicts(what) => format!(
            "the signature matches, but the body contradicts what {provider} signed: {what}; \
             portaria answers 400 and stores nothing"
        ),
        VerifyError::UnknownKey => format!(
            "the signature names a key that is not in the endpoint's key set: {provider} \
             rotated its keys, or this capture is not from it; download its current keys again \
             (see docs/providers.md) and restart; portaria answers 401"
        ),
        VerifyError::Mismatch => mismatch(endpoint),
        VerifyError::StaleTimestamp { skew_secs } => {
            let window = verifier.tolerance_secs();
            if *skew_secs >= 0 {
                format!(
                    "the signature matches, but its timestamp is {skew_secs} s{} in the past, \
                     outside the {window} s window (portaria answers 401); to check an old \
                     capture, pass `--at {}`, its own time",
                    roughly(skew_secs.unsigned_abs()),
                    at.saturating_sub(*skew_secs)
                )
            } else {
                format!(
                    "the signature matches, but its timestamp is {} s{} in the future, outside \
                     the {window} s window (portaria answers 401): the sender's clock, or this \
                     machine's, is off",
                    skew_secs.unsigned_abs(),
                    roughly(skew_secs.unsigned_abs())
                )
            }
        }
    }
}

/// No secret matched: a changed byte, or another secret.
fn mismatch(endpoint: &Endpoint) -> String {
    let verifier = &endpoint.verifier;
    let provider = verifier.provider();
    let tried = match verifier.secret_count() {
        1 => "tried 1 secret".to_string(),
        n => format!("tried {n} secrets"),
    };
    if verifier.credential_headers().is_empty() {
        format!(
            "the signature does not match: {tried}, and none of them signed this request; \
             either a byte changed on the way (of the body, or of a signed header), or \
             the configured secret is not the one {provider} signs with"
        )
    } else {
        format!(
            "the credential does not match: {tried}, and none of them is the one this \
             request carries"
        )
    }
}

/// The query parameters the endpoint's scheme signs for this body (`` `data.id` `` for
/// Mercado Pago), found by signing the body as the provider would; None when it signs none.
fn signed_query(capture: &Capture, endpoint: &Endpoint, at: i64) -> Option<String> {
    let signed = endpoint.verifier.sign_request(&capture.body, at, "-")?;
    let query = signed.query?;
    let names: Vec<String> = form_urlencoded::parse(query.as_bytes())
        .map(|(name, _)| format!("`{name}`"))
        .collect();
    (!names.is_empty()).then(|| names.join(", "))
}

/// ` (about 3 h)` for a skew long enough that seconds say little; else nothing.
fn roughly(secs: u64) -> String {
    match secs {
        0..120 => String::new(),
        120..7200 => format!(" (about {} min)", secs / 60),
        7200..172_800 => format!(" (about {} h)", secs / 3600),
        _ => format!(" (about {} days)", secs / 86_400),
    }
}

/// Notes on a failure that the capture itself explains.
fn hints(endpoint: &Endpoint, capture: &Capture, error: &VerifyError) -> Vec<String> {
    let mut notes = Vec::new();
    let redacted: Vec<&str> = capture
        .headers
        .iter()
        .filter(|(_, value)| value.as_bytes() == REDACTED.as_bytes())
        .map(|(name, _)| name.as_str())
        .collect();
    if !redacted.is_empty() {
        notes.push(format!(
            "note: {} holds `{REDACTED}`: portaria stores no credential, so a request taken from \
             `events show --raw` cannot be verified again by a provider that authenticates with \
             one ({} does {})",
            redacted
                .iter()
                .map(|name| format!("`{name}`"))
                .collect::<Vec<_>>()
                .join(", "),
            endpoint.verifier.provider(),
            if endpoint.verifier.credential_headers().is_empty() {
                "not, as far as portaria knows"
            } else {
                "so"
            }
        ));
    }
    if *error == VerifyError::Mismatch && capture.unbounded && capture.body.ends_with(b"\n") {
        notes.push(
            "note: with no `content-length`, the body is every byte after the blank line, and \
             this one ends with a line break: an editor may have added it"
                .to_string(),
        );
    }
    notes
}

/// The `verify` command: exit 0 if the server would take the request, 1 (with the reason) if
/// not.
pub(super) fn run(config: Option<&Path>, args: VerifyArgs) -> Result<ExitCode, String> {
    // Only this endpoint's secrets, as `send`.
    let (Some(name), Some(file)) = (args.endpoint, args.request) else {
        return Err("--request FILE needs --endpoint NAME".into());
    };
    let config = crate::config::Config::load_for_endpoint(config, &name)
        .map_err(|e| format!("invalid configuration\n{e}"))?;
    let endpoint = super::find_endpoint(&config, &name)?;
    let raw = if file.as_os_str() == "-" {
        let mut raw = Vec::new();
        std::io::stdin()
            .read_to_end(&mut raw)
            .map_err(|e| format!("cannot read the request from stdin: {e}"))?;
        raw
    } else {
        std::fs::read(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?
    };
    let capture = parse(&raw).map_err(|e| format!("cannot read the captured request: {e}"))?;
    let at = args.at.unwrap_or_else(|| unix_secs(SystemTime::now()));
    let diagnosis = diagnose(endpoint, &capture, at);
    for line in &diagnosis.lines {
        println!("{line}");
    }
    Ok(if diagnosis.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crlf_and_lf_captures_give_the_same_request() {
        let crlf = b"POST /webhooks/x?data.id=1&b=%20 HTTP/1.1\r\nHost: h\r\nX-Sig: abc\r\nX-Sig: def\r\n\r\n{\"a\":1}\r\n";
        let lf = b"POST /webhooks/x?data.id=1&b=%20 HTTP/1.1\nHost: h\nX-Sig: abc\nX-Sig: def\n\n{\"a\":1}\r\n";
        for raw in [&crlf[..], &lf[..]] {
            let c = parse(raw).unwrap();
            assert_eq!(c.method, Method::POST);
            assert_eq!(c.path, "/webhooks/x");
            assert_eq!(c.query.as_deref(), Some("data.id=1&b=%20"));
            let sigs: Vec<_> = c.headers.get_all("x-sig").iter().collect();
            assert_eq!(sigs, ["abc", "def"]);
            assert_eq!(c.body, b"{\"a\":1}\r\n", "byte-exact, line break included");
            assert!(c.unbounded);
        }
    }

    #[test]
    fn content_length_bounds_the_body_and_a_short_one_is_refused() {
        let c = parse(b"POST / HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc\n").unwrap();
        assert_eq!(c.body, b"abc");
        assert!(!c.unbounded);
        assert_eq!(c.query, None);
        let err = parse(b"POST / HTTP/1.1\r\ncontent-length: 9\r\n\r\nabc").unwrap_err();
        assert!(
            err.contains("shorter than its `content-length: 9`"),
            "{err}"
        );
        let err = parse(b"POST / HTTP/1.1\r\ncontent-length: x\r\n\r\nabc").unwrap_err();
        assert!(err.contains("not a number"), "{err}");
    }

    #[test]
    fn an_empty_body_is_empty() {
        let c = parse(b"POST / HTTP/1.1\r\nhost: h\r\n\r\n").unwrap();
        assert!(c.body.is_empty());
    }

    #[test]
    fn a_chunked_body_is_decoded() {
        let c = parse(
            b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n4\r\nabcd\r\n2\r\nef\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(c.body, b"abcdef");
        let err = parse(b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n{}").unwrap_err();
        assert!(err.contains("not chunked"), "{err}");
    }

    #[test]
    fn a_long_skew_is_also_said_roughly() {
        assert_eq!(roughly(119), "");
        assert_eq!(roughly(120), " (about 2 min)");
        assert_eq!(roughly(3 * 3600 + 59), " (about 3 h)");
        assert_eq!(roughly(366 * 86_400), " (about 366 days)");
    }

    #[test]
    fn what_is_not_a_request_is_named() {
        let err = parse(b"POST / HTTP/1.1\r\nhost: h\r\n").unwrap_err();
        assert!(err.contains("ends before the blank line"), "{err}");
        let err = parse(b"hello world\r\n\r\n").unwrap_err();
        assert!(err.contains("not an HTTP/1.1 request"), "{err}");
        let err = parse(b"id:          1\nendpoint:    x\n\n--- headers ---\n").unwrap_err();
        assert!(err.contains("events show --raw"), "{err}");
    }
}
