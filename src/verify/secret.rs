//! A secret's bytes, and the HMAC state keyed with them. Keying an HMAC hashes the key's
//! inner and outer pad blocks (two compressions, about 7,000 instructions with SHA-256's
//! portable code): done once per secret and algorithm, at its first use, and cloned for every
//! request after that (issue 17). `Debug` prints `Secret([redacted])` and there is no
//! `Display`, so a secret cannot reach a log by accident; the keyed states are never printed.

use std::fmt;
use std::sync::OnceLock;

use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;
use sha2::{Sha256, Sha512};

use super::hmac_scheme::Algorithm;

/// Secret bytes.
#[derive(Clone)]
pub struct Secret {
    bytes: Vec<u8>,
    keyed: Keyed,
}

/// The HMAC states keyed with the secret, one per algorithm, each made when first needed
/// (boxed: a `Secret` sits in config enums, and SHA-512's state is 400 bytes).
#[derive(Clone)]
struct Keyed {
    sha1: OnceLock<Box<Hmac<Sha1>>>,
    sha256: OnceLock<Box<Hmac<Sha256>>>,
    sha512: OnceLock<Box<Hmac<Sha512>>>,
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
        match algorithm {
            Algorithm::Sha1 => finish(keyed(&self.keyed.sha1, &self.bytes), parts),
            Algorithm::Sha256 => finish(keyed(&self.keyed.sha256, &self.bytes), parts),
            Algorithm::Sha512 => finish(keyed(&self.keyed.sha512, &self.bytes), parts),
        }
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

/// A copy of the state in `cell`, keyed with `key` the first time.
fn keyed<M: Mac + KeyInit + Clone>(cell: &OnceLock<Box<M>>, key: &[u8]) -> M {
    let state = cell.get_or_init(|| {
        // HMAC accepts keys of any length, so this cannot fail.
        #[allow(clippy::expect_used)]
        let mac = <M as KeyInit>::new_from_slice(key).expect("HMAC takes any key");
        Box::new(mac)
    });
    M::clone(state)
}

fn finish<M: Mac>(mut mac: M, parts: &[&[u8]]) -> Vec<u8> {
    for part in parts {
        Mac::update(&mut mac, part);
    }
    mac.finalize().into_bytes().to_vec()
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
