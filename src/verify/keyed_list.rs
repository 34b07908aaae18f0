//! The generic timestamped list header: one header holding `key=value` items, one of them a
//! unix timestamp and one or more of them hex HMAC-SHA256 signatures of
//! `<timestamp><joiner><raw body>`. Paddle (`ts=..;h1=..`, joined by `:`) and Calendly
//! (`t=..,v1=..`, joined by `.`) are presets of it.
//!
//! Every signature item may match (a provider rolling its secret sends one per secret); a
//! signature item that is not hex can never match and is skipped; items with other keys are
//! ignored. The timestamp is checked against the window both ways, after the MAC (see the
//! module `verify` for the order of errors).

use http::HeaderName;

use super::hmac_scheme::Algorithm;
use super::preset::{Scheme, Signed};
use super::{
    Checked, Request, Secret, VerifyError, check_window, find_secret, header, parse_timestamp,
};

#[derive(Debug, Clone)]
pub struct KeyedList {
    header: HeaderName,
    /// Between items: `;` (Paddle) or `,` (Calendly).
    separator: char,
    timestamp_key: &'static str,
    signature_key: &'static str,
    /// Between the timestamp and the body in the signed content.
    joiner: &'static str,
}

impl KeyedList {
    pub fn new(
        header: HeaderName,
        separator: char,
        timestamp_key: &'static str,
        signature_key: &'static str,
        joiner: &'static str,
    ) -> Self {
        KeyedList {
            header,
            separator,
            timestamp_key,
            signature_key,
            joiner,
        }
    }

    fn mac(&self, key: &Secret, timestamp: &str, body: &[u8]) -> Vec<u8> {
        key.mac(
            Algorithm::Sha256,
            &[timestamp.as_bytes(), self.joiner.as_bytes(), body],
        )
    }
}

impl Scheme for KeyedList {
    fn verify(
        &self,
        keys: &[Secret],
        request: &Request<'_>,
        now: i64,
        tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        let name = self.header.as_str();
        let malformed = |why: String| VerifyError::Malformed(format!("header `{name}` {why}"));
        let value = header(request.headers, name)?;
        let (ts_key, sig_key) = (self.timestamp_key, self.signature_key);
        let mut timestamp_text = None;
        let mut signature_items = 0;
        let mut received = Vec::new();
        for item in value.split(self.separator) {
            let (key, value) = item.trim().split_once('=').ok_or_else(|| {
                malformed(format!(
                    "is not a list of `key=value` items separated by `{}`",
                    self.separator
                ))
            })?;
            if key == ts_key {
                if timestamp_text.is_some() {
                    return Err(malformed(format!("has more than one `{ts_key}=`")));
                }
                timestamp_text = Some(value);
            } else if key == sig_key {
                signature_items += 1;
                if let Ok(mac) = hex::decode(value) {
                    received.push(mac);
                }
            }
        }
        let timestamp_text =
            timestamp_text.ok_or_else(|| malformed(format!("has no `{ts_key}=`")))?;
        let timestamp = parse_timestamp(timestamp_text, ts_key)?;
        if signature_items == 0 {
            return Err(malformed(format!("has no `{sig_key}=` signature")));
        }
        let index = find_secret(keys, &received, |key| {
            self.mac(key, timestamp_text, request.body)
        })?;
        check_window(timestamp, now, tolerance_secs)?;
        Ok(index.into())
    }

    fn sign(&self, key: &Secret, body: &[u8], now: i64, _delivery_id: &str) -> Option<Signed> {
        let timestamp = now.to_string();
        let mac = hex::encode(self.mac(key, &timestamp, body));
        let value = format!(
            "{}={timestamp}{}{}={mac}",
            self.timestamp_key, self.separator, self.signature_key
        );
        Some(vec![(self.header.to_string(), value)].into())
    }

    fn signs_timestamp(&self) -> bool {
        true
    }
}
