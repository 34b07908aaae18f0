//! What the fuzz targets share: a verifier for every provider (built once, with secrets and
//! settings as the unit tests build them), the header names those providers read, and the
//! structured pieces of a request that `arbitrary` builds from the fuzzer's bytes.

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use http::{HeaderMap, HeaderName, HeaderValue};
use portaria::verify::{self, HmacOptions, PROVIDERS, Settings, Verifier};

/// The clock of every fuzzed request, and the time the reference requests are signed at.
pub const NOW: i64 = 1_700_000_000;

/// The URL Twilio and Square sign.
pub const PUBLIC_URL: &str = "https://example.trycloudflare.com/webhooks/fuzz";

/// Discord's test key and a request signed with its private key (src/verify/discord.rs).
const DISCORD_KEY: &str = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8";
const DISCORD_BODY: &str = r#"{"id":"1000000000000000001","type":2,"application_id":"42"}"#;
const DISCORD_SIG: &str = "cdde7f095e9b9501ea3a1b425c99451b2be9666b7ff083911da6c209be977698\
                           6851af4b6986b330376ed68f0f5a7c18d044137f9db52c6b52ec064d0e29c507";

/// Pagar.me v5's test JWK and the RS256 signature of its body (src/verify/pagarme_v5.rs).
const PAGARME_N: &str = "qSK_Bdk-tSAuNavDtTDe4ufrmVfwwW3JoOCtQKTioGDD7h_6-uENDNiPUn1-tmh5L1ez_0T5OrGdEXSjX6Jltd2-\
    g61SVb9I7-XPXgcjN-C5pqsp3DcHJvTAteeYWzlHbHCkeSFpd3y83rPErlABadRvlrDMyC_b8mwisbm75TSya9lG\
    YKa0BTKiGANECDEa1YtVAonOtlB7k9b64LxB56_Lkfp68xYqm8XWBX3H66dWDMmUWIVsK758GqIPOsJS1SYDv7Jm\
    05rZoL5KYrzVBAlGT-o_bBEhpjcAsl47oXOD_z-NagDJOFwh_dLEVnpgPfVHSeZzlFR8l7XL4tCjeQ";
const PAGARME_SIG: &str = "JKycOtEc-OYbqv60W-mV5qCx9QH7B9G9iuF3WJFd6-YqAgpi6NT-vQzl4_xyKfMZa0uWm3fn1T0DYpx_NeeEngwL\
    OsSZNwoqknlEkEDcV4ETEpB_DJYA0UHbopVJMwRtGUmelbP9IIpNf8HnO68APvgprxDd3fFI9M1QhHVMeS1QY0R1\
    WKe_EWM5QpJrR2l9wr1X0o--zuJdQ92xq2J1i7Ur1O_qvl47Mm9wZlhCrUoDi8Ed7XGgM2_j_Mwhe93ehWxFhP2s\
    awbUiN1GTakjHIabb4nqTCa9Xe_u3VFdwrZ6fNwtncf_p6tITZwLITxN7y3LnB0N5JcLmr-OaqjfTQ";
const PAGARME_BODY: &str = r#"{"id":"hook_1","type":"charge.paid","data":{"id":"ch_1"}}"#;

/// A body every shared-secret preset's default dedup rule finds a key in.
const SHARED_BODY: &str = r#"{"id":"evt_1","event_id":"evt_1","type":"charge.paid","data":{"id":"ch_1"},"webhookTimestamp":1700000000000}"#;

/// Names every provider reads, plus a few any request has. The fuzzer picks from these.
const EXTRA_HEADERS: &[&str] = &[
    "authorization",
    "content-type",
    "content-length",
    "user-agent",
    "x-signature",
    "x-timestamp",
    "x-delivery",
    "x-shop-key",
    "x-shop-id",
    verify::discord::SIGNATURE,
    verify::discord::TIMESTAMP,
    verify::pagarme_v5::SIGNATURE,
    verify::twilio::SIGNATURE_SETTINGS,
    verify::twilio::IDEMPOTENCY_TOKEN,
    verify::woocommerce::TOPIC,
    verify::shopify::TOPIC,
    verify::mercadopago::REQUEST_ID,
    verify::adyen::SIGNATURE,
];

/// One provider's verifier, and a request it accepts (signed with its first secret, or the
/// provider's own test vector for a public-key scheme).
pub struct Case {
    pub provider: &'static str,
    pub verifier: Verifier,
    pub reference_body: Vec<u8>,
    /// The headers and query string the reference request carries.
    pub reference: verify::Signed,
}

impl Case {
    /// The headers and query a sender adds for `body` at `NOW` (the reference ones when the
    /// scheme cannot be signed with a shared secret).
    pub fn signed_for(&self, body: &[u8]) -> verify::Signed {
        self.verifier
            .sign_request(body, NOW, "dlv_fuzz_1")
            .unwrap_or_else(|| self.reference.clone())
    }
}

/// The custom-HMAC options the `hmac` case uses: every option set.
pub fn hmac_options() -> HmacOptions {
    HmacOptions {
        header: "X-Signature".to_string(),
        algorithm: Some("sha512".to_string()),
        encoding: Some("base64".to_string()),
        prefix: Some("v1=".to_string()),
        timestamp_header: Some("X-Timestamp".to_string()),
        template: Some("{header:x-timestamp}.{header:x-delivery}.{body}".to_string()),
    }
}

fn build(provider: &'static str) -> Case {
    let options = hmac_options();
    let names = ["X-Shop-Key".to_string(), "X-Shop-Id".to_string()];
    let jwks = serde_json::json!({"keys": [{"kty": "RSA", "key_ops": ["verify"], "n": PAGARME_N,
        "e": "AQAB", "kid": "k1", "use": "sig", "alg": "RS256"}]})
    .to_string();
    let mut settings = Settings::default();
    let secrets: Vec<String> = match provider {
        "hmac" => {
            settings.hmac = Some(&options);
            vec!["first-secret".into(), "second-secret".into()]
        }
        "twilio" | "square" => {
            settings.public_url = Some(PUBLIC_URL);
            vec!["first-secret".into(), "second-secret".into()]
        }
        "cielo" => {
            settings.credential_headers = Some(&names);
            vec!["key-abc".into(), "id-42".into()]
        }
        "discord" => {
            settings.public_key = Some(DISCORD_KEY);
            Vec::new()
        }
        "pagarme-v5" => {
            settings.jwks = Some(&jwks);
            Vec::new()
        }
        "adyen" => vec![
            "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056".into(),
            "00112233445566778899aabbccddeeff".into(),
        ],
        "standard-webhooks" | "svix" => vec![
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".into(),
        ],
        _ => vec!["first-secret".into(), "second-secret".into()],
    };
    let verifier = Verifier::with_settings(provider, &settings, &secrets, None)
        .unwrap_or_else(|e| panic!("the fuzz fixture for {provider} does not build: {e}"));
    let (reference_body, reference) = match provider {
        "discord" => (
            DISCORD_BODY.as_bytes().to_vec(),
            verify::Signed::from(vec![
                (
                    verify::discord::SIGNATURE.to_string(),
                    DISCORD_SIG.to_string(),
                ),
                (verify::discord::TIMESTAMP.to_string(), NOW.to_string()),
            ]),
        ),
        "pagarme-v5" => (
            PAGARME_BODY.as_bytes().to_vec(),
            verify::Signed::from(vec![(
                verify::pagarme_v5::SIGNATURE.to_string(),
                format!("alg=RS256; kid=k1; signature={PAGARME_SIG}"),
            )]),
        ),
        _ => {
            let body = SHARED_BODY.as_bytes().to_vec();
            let signed = verifier
                .sign_request(&body, NOW, "dlv_fuzz_1")
                .unwrap_or_else(|| panic!("{provider} signs with a shared secret"));
            (body, signed)
        }
    };
    Case {
        provider,
        verifier,
        reference_body,
        reference,
    }
}

/// A case for every provider in `verify::PROVIDERS`, built once.
pub fn cases() -> &'static [Case] {
    static CASES: OnceLock<Vec<Case>> = OnceLock::new();
    CASES.get_or_init(|| PROVIDERS.iter().map(|p| build(p)).collect())
}

/// Every header name the providers read (signature, timestamp, delivery id, event type,
/// credentials, dedup), plus a few generic ones.
pub fn header_names() -> &'static [HeaderName] {
    static NAMES: OnceLock<Vec<HeaderName>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names: Vec<HeaderName> = EXTRA_HEADERS
            .iter()
            .map(|n| HeaderName::from_static(n))
            .collect();
        for case in cases() {
            let v = &case.verifier;
            let signed = case.reference.headers.iter().map(|(n, _)| n.as_str());
            for name in signed.chain(v.event_type_header()) {
                if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
                    names.push(name);
                }
            }
            names.extend(v.credential_headers().iter().cloned());
            names.extend(v.default_dedup().headers().into_iter().cloned());
        }
        names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        names.dedup();
        names
    })
}

/// A header name: one a provider reads, or any bytes.
#[derive(Arbitrary, Debug)]
pub enum Name {
    Known(u8),
    Raw(Vec<u8>),
}

impl Name {
    pub fn resolve(&self) -> Option<HeaderName> {
        match self {
            Name::Known(i) => {
                let names = header_names();
                names.get(usize::from(*i) % names.len()).cloned()
            }
            Name::Raw(bytes) => HeaderName::from_bytes(bytes).ok(),
        }
    }
}

/// A header value: any bytes, or the value a signer gives this header, edited.
#[derive(Arbitrary, Debug)]
pub enum Value {
    Raw(Vec<u8>),
    Signed(Edit),
}

/// An edit of a valid value: `cut` bytes from `at` replaced by `insert` (nothing: unchanged).
#[derive(Arbitrary, Debug, Clone)]
pub struct Edit {
    pub at: u16,
    pub cut: u8,
    pub insert: Vec<u8>,
}

impl Edit {
    pub fn apply(&self, original: &[u8]) -> Vec<u8> {
        let at = usize::from(self.at) % (original.len() + 1);
        let end = (at + usize::from(self.cut % 8)).min(original.len());
        let mut out = original[..at].to_vec();
        out.extend_from_slice(&self.insert);
        out.extend_from_slice(&original[end..]);
        out
    }
}

#[derive(Arbitrary, Debug)]
pub struct Header {
    pub name: Name,
    pub value: Value,
}

/// Builds the header map: `signed` holds what the signer would send, for `Value::Signed`.
/// Names or values that HTTP cannot carry are left out (hyper would have refused them).
pub fn header_map(headers: &[Header], signed: &[(String, String)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for header in headers.iter().take(12) {
        let Some(name) = header.name.resolve() else {
            continue;
        };
        let bytes = match &header.value {
            Value::Raw(bytes) => bytes.clone(),
            Value::Signed(edit) => {
                let original = signed
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name.as_str()))
                    .map(|(_, v)| v.as_bytes())
                    .unwrap_or_default();
                edit.apply(original)
            }
        };
        if let Ok(value) = HeaderValue::from_bytes(&bytes) {
            map.append(name, value);
        }
    }
    map
}

/// A request written as text, the form of the seed corpora: a line `#portaria ARG...` (the
/// target's arguments: a provider, dedup rules, an event-type header), then a raw HTTP/1.1
/// request whose body is every byte after the blank line.
pub struct TextRequest {
    pub args: Vec<String>,
    pub headers: HeaderMap,
    pub query: Option<String>,
    pub body: Vec<u8>,
}

/// The marker of a [`TextRequest`]; any other input is read with `arbitrary`.
pub const TEXT_MARKER: &[u8] = b"#portaria";

impl TextRequest {
    pub fn parse(data: &[u8]) -> Option<TextRequest> {
        let rest = data.strip_prefix(TEXT_MARKER)?;
        let end = rest.iter().position(|&b| b == b'\n')?;
        let args = std::str::from_utf8(&rest[..end]).ok()?;
        let args = args.split_whitespace().map(String::from).collect();
        let raw = &rest[end + 1..];
        let mut slots = [httparse::EMPTY_HEADER; 64];
        let mut request = httparse::Request::new(&mut slots);
        let httparse::Status::Complete(head) = request.parse(raw).ok()? else {
            return None;
        };
        let uri = http::Uri::try_from(request.path?).ok()?;
        let mut headers = HeaderMap::new();
        for h in request.headers.iter() {
            let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
            headers.append(name, HeaderValue::from_bytes(h.value).ok()?);
        }
        Some(TextRequest {
            args,
            headers,
            query: uri.query().map(String::from),
            body: raw[head..].to_vec(),
        })
    }

    /// The text form of a request to `path` (the seeds' writer).
    pub fn write(args: &[&str], path: &str, signed: &verify::Signed, body: &[u8]) -> Vec<u8> {
        let mut out = TEXT_MARKER.to_vec();
        for arg in args {
            out.push(b' ');
            out.extend_from_slice(arg.as_bytes());
        }
        out.push(b'\n');
        out.extend_from_slice(&raw_request(path, signed, body));
        out
    }
}

/// A raw HTTP/1.1 POST of `body` to `path` with the signer's headers and query string.
pub fn raw_request(path: &str, signed: &verify::Signed, body: &[u8]) -> Vec<u8> {
    let target = match &signed.query {
        Some(query) => format!("{path}?{query}"),
        None => path.to_string(),
    };
    let mut out = format!("POST {target} HTTP/1.1\r\nhost: example.trycloudflare.com\r\n");
    out.push_str("content-type: application/json\r\n");
    for (name, value) in &signed.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}
