//! Square: `x-square-hmacsha256-signature: <base64>`, the HMAC-SHA256 of the notification URL
//! followed by the raw body, keyed by the subscription's signature key as UTF-8 (`squareup`'s
//! `square.utils.webhooks_helper.verify_signature`). The URL is `public_url` (required: it must
//! be the subscription's URL exactly, which behind a tunnel is not the local one), followed by
//! `?<query>` when the request has one (see `public_url.rs`). An empty body is refused, as in the
//! SDK. No timestamp is signed; the legacy SHA-1 `x-square-signature` is ignored.
//!
//! Dedup: the body's `event_id`, the same on every retry.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::hmac_scheme::{Algorithm, Encoding};
use super::preset::{Preset, Scheme, Signed, json_rule};
use super::public_url::{self, PublicUrl};
use super::{Checked, Request, Secret, Settings, VerifyError, find_secret, header};

pub const SIGNATURE: &str = "x-square-hmacsha256-signature";

pub(super) fn preset(settings: &Settings<'_>) -> Result<Preset, String> {
    let url = public_url::required(settings.public_url, "square", "its notification URL")?;
    Ok(Preset::new("square", Square { url }, json_rule("/event_id")).signs_public_url())
}

#[derive(Debug)]
struct Square {
    url: PublicUrl,
}

impl Scheme for Square {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        _now: i64,
        _tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        let value = header(request.headers, SIGNATURE)?;
        let received = Encoding::Base64.read(SIGNATURE, value)?;
        Algorithm::Sha256.expect_len(SIGNATURE, &received)?;
        if request.body.is_empty() {
            return Err(VerifyError::Malformed(
                "the body is empty, and Square signs a non-empty body".to_string(),
            ));
        }
        let url = self.url.with_query(request.query);
        find_secret(keys, &[received], |key| {
            key.mac(Algorithm::Sha256, &[url.as_bytes(), request.body])
        })
        .map(Checked::from)
    }

    fn sign(&self, key: &Secret, body: &[u8], _now: i64, _delivery_id: &str) -> Option<Signed> {
        let url = self.url.with_query(None);
        let mac = key.mac(Algorithm::Sha256, &[url.as_bytes(), body]);
        Some(vec![(SIGNATURE.to_string(), STANDARD.encode(mac))].into())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Request, Settings, Verifier, VerifyError};

    // Official vector: square-python-sdk `tests/utilities/test_webhooks_helper.py`
    // (signature-schemes.md §7.1), with its negatives.
    const KEY: &str = "Ibxx_5AKakO-3qeNVR61Dw";
    const URL: &str = "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9";
    const BODY: &str = r#"{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}"#;
    const SIG: &str = "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4=";

    fn square(url: &str, key: &str) -> Verifier {
        let settings = Settings {
            public_url: Some(url),
            ..Settings::default()
        };
        Verifier::with_settings("square", &settings, &[key.to_string()], None).unwrap()
    }

    fn verify(v: &Verifier, body: &str, query: Option<&str>) -> Result<usize, VerifyError> {
        let h = headers(&[("x-square-hmacsha256-signature", SIG)]);
        let request = Request::new(&h, body.as_bytes()).with_query(query);
        v.verify_request(&request, 0).map(|v| v.secret_index())
    }

    #[test]
    fn verifies_the_official_vector_and_refuses_its_negatives() {
        assert_eq!(verify(&square(URL, KEY), BODY, None), Ok(0));
        let other_url = URL.replace("679a4f3a", "79a4f3a");
        assert_eq!(
            verify(&square(&other_url, KEY), BODY, None),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&square(URL, "MCmhFRxGX82xMwg5FsaoQA"), BODY, None),
            Err(VerifyError::Mismatch)
        );
        let other_date = BODY.replace("2022-07-13", "2022-06-13");
        assert_eq!(
            verify(&square(URL, KEY), &other_date, None),
            Err(VerifyError::Mismatch)
        );
        let pretty = BODY.replace(",\"", ", \"");
        assert_eq!(
            verify(&square(URL, KEY), &pretty, None),
            Err(VerifyError::Mismatch)
        );
        // The query is part of the URL Square called.
        assert_eq!(
            verify(&square(URL, KEY), BODY, Some("a=1")),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn an_empty_body_is_malformed_and_sign_gives_the_vector() {
        let v = square(URL, KEY);
        assert!(matches!(
            verify(&v, "", None),
            Err(VerifyError::Malformed(_))
        ));
        assert_eq!(
            v.sign(BODY.as_bytes(), 0, ""),
            [("x-square-hmacsha256-signature".to_string(), SIG.to_string())]
        );
        assert_eq!(v.default_dedup().to_string(), "json:/event_id");
        assert!(v.signs_public_url());
        let err = Verifier::new("square", None, &[KEY.to_string()], None).unwrap_err();
        assert!(
            err.contains("provider `square` signs its notification URL"),
            "{err}"
        );
    }
}
