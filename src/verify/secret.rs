//! A secret's bytes, and the HMAC keys made from them. Keying an HMAC hashes the key's
//! inner and outer pad blocks (two compressions): done once per secret and algorithm, at its
//! first use, and every request after that starts from copies of the keyed states (issue 17). `Debug` prints `Secret([redacted])` and there is no
//! `Display`, so a secret cannot reach a log by accident; the keyed states are never printed.

use std::fmt;
use std::sync::OnceLock;

use base64::Engine as _;
use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, NO_PAD};

use super::VerifyError;
use crate::digest::{MacHash, MacKey};

/// Secret bytes.
#[derive(Clone)]
pub struct Secret {
    bytes: Vec<u8>,
    keyed: Keyed,
}

/// The HMAC keys made from the secret, one per algorithm, each made when first needed
/// (boxed: a `Secret` sits in config enums).
#[derive(Clone)]
struct Keyed {
    sha1: OnceLock<Box<MacKey>>,
    sha256: OnceLock<Box<MacKey>>,
    sha512: OnceLock<Box<MacKey>>,
}

impl Secret {
    pub fn new(bytes: Vec<u8>) -> Self {
        Secret {
            bytes,
            keyed: Keyed::new(),
        }
    }

    /// The empty secret (for a `static`).
    pub const fn empty() -> Self {
        Secret {
            bytes: Vec::new(),
            keyed: Keyed::new(),
        }
    }

    pub fn expose(&self) -> &[u8] {
        &self.bytes
    }

    /// The HMAC of the concatenated `parts` keyed with this secret: what
    /// `algorithm.mac(self.expose(), parts)` computes, without keying it again.
    pub fn mac(&self, algorithm: Algorithm, parts: &[&[u8]]) -> Vec<u8> {
        let cell = match algorithm {
            Algorithm::Sha1 => &self.keyed.sha1,
            Algorithm::Sha256 => &self.keyed.sha256,
            Algorithm::Sha512 => &self.keyed.sha512,
        };
        cell.get_or_init(|| Box::new(MacKey::new(algorithm.hash(), &self.bytes)))
            .mac(parts)
    }
}

impl Keyed {
    const fn new() -> Self {
        Keyed {
            sha1: OnceLock::new(),
            sha256: OnceLock::new(),
            sha512: OnceLock::new(),
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// The hash an HMAC is made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Sha1,
    Sha256,
    Sha512,
}

impl Algorithm {
    pub(super) fn parse(name: &str) -> Result<Self, String> {
        match name.to_ascii_lowercase().as_str() {
            "sha256" => Ok(Algorithm::Sha256),
            "sha512" => Ok(Algorithm::Sha512),
            "sha1" => Ok(Algorithm::Sha1),
            _ => Err(format!(
                "unknown algorithm `{name}` (known: sha256, sha512, sha1)"
            )),
        }
    }

    /// Refuses a received MAC of the wrong length, naming the header it came in.
    pub(super) fn expect_len(self, header: &str, mac: &[u8]) -> Result<(), VerifyError> {
        if mac.len() != self.output_len() {
            return Err(VerifyError::Malformed(format!(
                "header `{header}` holds {} bytes, expected {}",
                mac.len(),
                self.output_len()
            )));
        }
        Ok(())
    }

    pub(super) fn output_len(self) -> usize {
        match self {
            Algorithm::Sha1 => 20,
            Algorithm::Sha256 => 32,
            Algorithm::Sha512 => 64,
        }
    }

    /// The HMAC of the concatenated `parts`, keyed for this one call (a [`Secret`] keeps
    /// its keyed state instead); taking parts saves copying the body.
    pub fn mac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        MacKey::new(self.hash(), key).mac(parts)
    }

    /// The hash this HMAC is built on.
    pub(super) fn hash(self) -> MacHash {
        match self {
            Algorithm::Sha1 => MacHash::Sha1,
            Algorithm::Sha256 => MacHash::Sha256,
            Algorithm::Sha512 => MacHash::Sha512,
        }
    }
}

/// Standard base64 that takes its padding or leaves it out (base64 0.23 names this engine;
/// 0.22, which tokio-postgres links anyway, spells it out).
pub(crate) const STANDARD_PAD_INDIFFERENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// Decodes secrets as leniently as Python's `b64decode`: unpadded, and with non-zero bits
/// after the last full byte (the spec's own unpadded test secret has them).
const SECRET_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    NO_PAD.with_decode_allow_trailing_bits(true),
);

/// Decodes a `whsec_<base64>` secret into its key bytes. Padding is optional, as in the
/// reference Python library.
pub fn decode_secret(secret: &str) -> Result<Vec<u8>, String> {
    let encoded = secret
        .strip_prefix("whsec_")
        .ok_or_else(|| "a Standard Webhooks secret starts with `whsec_`".to_string())?;
    let trimmed = encoded.trim_end_matches('=');
    let key = SECRET_BASE64
        .decode(trimmed)
        .map_err(|_| "the part after `whsec_` is not valid base64".to_string())?;
    if key.is_empty() {
        return Err("the secret after `whsec_` is empty".to_string());
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_state_gives_the_mac_of_a_fresh_key() {
        for key in [&b""[..], b"k", b"bench-pagarme-secret", &[7u8; 200]] {
            let secret = Secret::new(key.to_vec());
            for algorithm in [Algorithm::Sha1, Algorithm::Sha256, Algorithm::Sha512] {
                for parts in [&[&b"body"[..]][..], &[b"t=1", b".", b"{\"a\":1}"], &[]] {
                    // Twice: the first keys the state, the second reuses it.
                    for _ in 0..2 {
                        assert_eq!(secret.mac(algorithm, parts), algorithm.mac(key, parts));
                    }
                }
            }
        }
        // A second secret keys its own states.
        let (a, b) = (Secret::new(b"a".to_vec()), Secret::new(b"b".to_vec()));
        assert_ne!(
            a.mac(Algorithm::Sha256, &[b"x"]),
            b.mac(Algorithm::Sha256, &[b"x"])
        );
        // A clone made after use keeps giving the same MAC.
        let clone = a.clone();
        assert_eq!(
            clone.mac(Algorithm::Sha256, &[b"x"]),
            Algorithm::Sha256.mac(b"a", &[b"x"])
        );
    }

    #[test]
    fn debug_shows_no_key_material() {
        let secret = Secret::new(b"hunter2-very-secret".to_vec());
        let _ = secret.mac(Algorithm::Sha256, &[b"x"]);
        let _ = secret.mac(Algorithm::Sha1, &[b"x"]);
        assert_eq!(format!("{secret:?}"), "Secret([redacted])");
    }
}
