//! A secret's bytes, and the HMAC keys made from them. Keying an HMAC hashes the key's
//! inner and outer pad blocks (two compressions): done once per secret and algorithm, at its
//! first use, and every request after that starts from copies of the keyed states (issue 17). `Debug` prints `Secret([redacted])` and there is no
//! `Display`, so a secret cannot reach a log by accident; the keyed states are never printed.

use std::fmt;
use std::sync::OnceLock;

use super::hmac_scheme::Algorithm;
use crate::digest::MacKey;

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
