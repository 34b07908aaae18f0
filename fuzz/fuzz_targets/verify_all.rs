//! Every provider's verifier on fuzzer-built requests: headers drawn from the names the
//! providers read (any bytes, or a valid signer's value with an edit), a query string, a body
//! (any bytes, or the one the reference request signed) and a clock near the signed one or
//! anywhere. Verification, the handshakes, the default dedup key (from the verifier's signed
//! key where the preset takes one) and the description of a verified request must never
//! panic. The headers and query may be signed for the body sent or for the reference body (a
//! signed request whose unsigned parts were changed: Mercado Pago's body, Adyen's batch). Also
//! a custom `hmac` scheme from fuzzed options, Efí's mutual-TLS verifier, and requests
//! written as text (`#portaria PROVIDER`, then the raw request: the seeds).

#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use http::HeaderMap;
use libfuzzer_sys::fuzz_target;
use portaria::ingest::describe;
use portaria::verify::{HmacOptions, Request, Settings, Verifier, VerifyError};
use portaria_fuzz::{Case, Edit, Header, NOW, TextRequest, cases, header_map};

#[derive(Arbitrary, Debug)]
enum Body {
    Raw(Vec<u8>),
    /// The reference request's body, edited.
    Reference(Edit),
}

#[derive(Arbitrary, Debug)]
enum Query {
    None,
    Raw(String),
    /// What the signer adds (Twilio's, Square's, Efí's, Vindi's query), edited.
    Signed(Edit),
}

#[derive(Arbitrary, Debug)]
enum Clock {
    Near(i16),
    Any(i64),
}

#[derive(Arbitrary, Debug)]
struct Options {
    header: String,
    algorithm: Option<String>,
    encoding: Option<String>,
    prefix: Option<String>,
    timestamp_header: Option<String>,
    template: Option<String>,
    secrets: Vec<String>,
    tolerance_secs: Option<u64>,
}

#[derive(Arbitrary, Debug)]
enum Scheme {
    Provider(u8),
    Custom(Options),
    /// Efí's mutual-TLS mode: the connection's certificate is the credential.
    ClientCertificate,
}

#[derive(Arbitrary, Debug)]
struct Input {
    scheme: Scheme,
    headers: Vec<Header>,
    query: Query,
    body: Body,
    /// Sign the reference body, then send `body`: what is signed and what is sent differ.
    sign_reference: bool,
    clock: Clock,
}

fn structured(verifier: &Verifier, case: Option<&Case>, input: &Input) {
    let body = match (&input.body, case) {
        (Body::Raw(bytes), _) => bytes.clone(),
        (Body::Reference(edit), Some(case)) => edit.apply(&case.reference_body),
        (Body::Reference(edit), None) => edit.apply(b"{\"id\":\"evt_1\"}"),
    };
    let signed_body = match case {
        Some(case) if input.sign_reference => case.reference_body.clone(),
        _ => body.clone(),
    };
    let signed = match case {
        Some(case) => case.signed_for(&signed_body),
        None => verifier
            .sign_request(&signed_body, NOW, "dlv_fuzz_1")
            .unwrap_or_default(),
    };
    let headers = header_map(&input.headers, &signed.headers);
    let query = match &input.query {
        Query::None => None,
        Query::Raw(text) => Some(text.clone()),
        Query::Signed(edit) => {
            let original = signed.query.as_deref().unwrap_or_default();
            String::from_utf8(edit.apply(original.as_bytes())).ok()
        }
    };
    let now = match input.clock {
        Clock::Near(offset) => NOW + i64::from(offset),
        Clock::Any(now) => now,
    };
    check(verifier, &headers, query.as_deref(), &body, now);
}

fn check(verifier: &Verifier, headers: &HeaderMap, query: Option<&str>, body: &[u8], now: i64) {
    let request = Request::new(headers, body).with_query(query);
    match verifier.verify_request(&request, now) {
        Ok(proof) => {
            let _ = verifier.handshake(&proof, &request);
            let rule = verifier.default_dedup();
            if let Ok(key) = rule.extract_signed(proof.signed_key(), headers, body) {
                assert!(!key.is_empty() && key.len() <= portaria::dedup::MAX_KEY_BYTES);
            }
            let _ = proof.signed_id();
            let _ = describe(verifier.event_type_header(), headers, body);
        }
        Err(e) => {
            // Every error can be shown (it is logged and answered).
            let _ = e.to_string();
            if let VerifyError::StaleTimestamp { skew_secs } = e {
                assert!(skew_secs.unsigned_abs() > verifier.tolerance_secs());
            }
            let _ = verifier.unsigned_handshake(&request);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Some(text) = TextRequest::parse(data) {
        let provider = text.args.first().map_or("", String::as_str);
        if let Some(case) = cases().iter().find(|c| c.provider == provider) {
            let (headers, body) = (&text.headers, &text.body);
            check(&case.verifier, headers, text.query.as_deref(), body, NOW);
        }
        return;
    }
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    match &input.scheme {
        Scheme::Provider(i) => {
            let all = cases();
            let case = &all[usize::from(*i) % all.len()];
            structured(&case.verifier, Some(case), &input);
        }
        Scheme::Custom(o) => {
            let options = HmacOptions {
                header: o.header.clone(),
                algorithm: o.algorithm.clone(),
                encoding: o.encoding.clone(),
                prefix: o.prefix.clone(),
                timestamp_header: o.timestamp_header.clone(),
                template: o.template.clone(),
            };
            let secrets: Vec<String> = o.secrets.iter().take(3).cloned().collect();
            if let Ok(v) = Verifier::new("hmac", Some(&options), &secrets, o.tolerance_secs) {
                structured(&v, None, &input);
            }
        }
        Scheme::ClientCertificate => {
            if let Ok(v) = Verifier::by_client_certificate("efi", &Settings::default()) {
                structured(&v, None, &input);
            }
        }
    }
});
