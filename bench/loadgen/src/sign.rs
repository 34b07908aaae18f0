//! Signing a body the way each provider preset expects, computed here independently of
//! portaria's own code (so a bug shared by signer and verifier cannot hide), and the dedup key
//! portaria's default rule for that preset derives, so the run can be checked row by row.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// The presets the load generator can sign for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Provider {
    /// `X-Hub-Signature: sha256=<hex HMAC-SHA256 of the body>`; dedup on the body's SHA-256.
    Pagarme,
    /// `X-Webhook-Signature: <hex HMAC-SHA256 of the body>`; dedup on the body's SHA-256.
    Plowf,
    /// `Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "t.body">`; dedup on the body's `id`.
    Stripe,
}

impl Provider {
    pub fn name(self) -> &'static str {
        match self {
            Provider::Pagarme => "pagarme",
            Provider::Plowf => "plowf",
            Provider::Stripe => "stripe",
        }
    }

    /// The signature header for `body`, as (name, value). `now` is the unix time a timestamped
    /// scheme puts in; the others ignore it.
    pub fn sign(self, secret: &[u8], body: &[u8], now: i64) -> (&'static str, String) {
        match self {
            Provider::Pagarme => (
                "x-hub-signature",
                format!("sha256={}", hmac_hex(secret, &[body])),
            ),
            Provider::Plowf => ("x-webhook-signature", hmac_hex(secret, &[body])),
            Provider::Stripe => {
                let t = now.to_string();
                let mac = hmac_hex(secret, &[t.as_bytes(), b".", body]);
                ("stripe-signature", format!("t={t},v1={mac}"))
            }
        }
    }

    /// The key portaria's default dedup rule for this preset derives from `body`.
    pub fn dedup_key(self, body: &[u8], body_id: &str) -> String {
        match self {
            Provider::Pagarme | Provider::Plowf => hex::encode(Sha256::digest(body)),
            Provider::Stripe => body_id.to_string(),
        }
    }
}

/// Lowercase hex HMAC-SHA256 of the concatenated `parts`.
pub fn hmac_hex(secret: &[u8], parts: &[&[u8]]) -> String {
    // HMAC takes a key of any length, so this cannot fail; an empty MAC would only make every
    // request a bad signature, which the run reports.
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(secret) else {
        return String::new();
    };
    for part in parts {
        mac.update(part);
    }
    hex::encode(mac.finalize().into_bytes())
}

/// The same header with its last hex digit changed: well-formed, same length, wrong MAC, so
/// the receiver must compute and compare the MAC to refuse it.
pub fn spoil(value: &str) -> String {
    let mut text = value.to_string();
    if let Some(last) = text.pop() {
        text.push(if last == '0' { '1' } else { '0' });
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    // The pagarme vector from portaria's own tests (computed with Python's hmac).
    #[test]
    fn pagarme_matches_a_known_vector() {
        let body = b"id=194330&event=transaction_status_changed&current_status=paid";
        let (name, value) = Provider::Pagarme.sign(b"ak_test_key", body, 0);
        assert_eq!(name, "x-hub-signature");
        assert_eq!(
            value,
            "sha256=b31b7d9e36683e98252f0137789db869537adb4db47e1241d25770be7396f170"
        );
    }

    #[test]
    fn a_spoiled_signature_keeps_its_shape() {
        let (_, value) = Provider::Stripe.sign(b"whsec_x", b"{}", 1_700_000_000);
        let bad = spoil(&value);
        assert_ne!(bad, value);
        assert_eq!(bad.len(), value.len());
        assert!(bad.starts_with("t=1700000000,v1="));
    }
}
