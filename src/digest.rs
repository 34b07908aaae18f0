//! SHA-256 and HMAC for the request path, through `ring` (issue 17).
//!
//! Every accepted webhook is hashed two or three times (its signature's HMAC, the body's
//! SHA-256 when that is the provider's dedup key, the dedup hash), and hashing was the
//! largest share of its instructions. `ring` is in the binary already (rustls's crypto
//! provider) and hashes in assembly, chosen at run time: SHA-NI where the CPU has it, else
//! AVX or SSSE3 code on x86 (37 % fewer instructions than `sha2`'s portable Rust for a
//! 900-byte body under callgrind, bench/PROFILE.md), NEON on 32-bit ARM, scalar assembly on a
//! 64-bit ARM without the crypto extensions. The results are the same bytes: tests
//! check them against `sha2`/`hmac` and the providers' published vectors.
//!
//! Also SHA-384/512 for certificate hashes, and HMAC ([`MacKey`], keyed once, over a
//! [`MacHash`]: SHA-1, SHA-256 or SHA-512). `sha2`, `hmac` and `sha1` are the tests'
//! independent references only (dev-dependencies).
//!
//! A leaf: imports nothing of the crate.

use ring::{digest, hmac};

/// The SHA-256 of the concatenated `parts`.
pub fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut context = digest::Context::new(&digest::SHA256);
    for part in parts {
        context.update(part);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(context.finish().as_ref());
    out
}

/// The SHA-384 of `bytes` (a certificate's hash for channel binding).
pub fn sha384(bytes: &[u8]) -> Vec<u8> {
    digest::digest(&digest::SHA384, bytes).as_ref().to_vec()
}

/// The SHA-512 of `bytes` (a certificate's hash for channel binding).
pub fn sha512(bytes: &[u8]) -> Vec<u8> {
    digest::digest(&digest::SHA512, bytes).as_ref().to_vec()
}

/// The hash an HMAC is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacHash {
    /// Only where a provider signs with it (legacy Pagar.me, GitHub's old header, ...).
    Sha1,
    Sha256,
    Sha512,
}

/// An HMAC key, keyed once: making it hashes the key's inner and outer pad blocks, and each
/// [`MacKey::mac`] starts from copies of those states. `Debug` names the hash only.
#[derive(Clone)]
pub struct MacKey(hmac::Key);

impl MacKey {
    pub fn new(hash: MacHash, key: &[u8]) -> Self {
        let algorithm = match hash {
            MacHash::Sha1 => hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            MacHash::Sha256 => hmac::HMAC_SHA256,
            MacHash::Sha512 => hmac::HMAC_SHA512,
        };
        MacKey(hmac::Key::new(algorithm, key))
    }

    /// The HMAC of the concatenated `parts`; taking parts saves copying the body.
    pub fn mac(&self, parts: &[&[u8]]) -> Vec<u8> {
        let mut context = hmac::Context::with_key(&self.0);
        for part in parts {
            context.update(part);
        }
        context.sign().as_ref().to_vec()
    }
}

impl std::fmt::Debug for MacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MacKey({:?})", self.0.algorithm())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::hmac::{Hmac, KeyInit, Mac};
    use sha2::Digest;

    fn reference_mac<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        let mut mac = <M as KeyInit>::new_from_slice(key).expect("any key");
        for part in parts {
            Mac::update(&mut mac, part);
        }
        mac.finalize().into_bytes().to_vec()
    }

    #[test]
    fn sha256_matches_the_published_vectors_and_sha2() {
        // FIPS 180-2 examples.
        assert_eq!(
            hex::encode(sha256(&[b"abc"])),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex::encode(sha256(&[])),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let body: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        for len in [0, 1, 55, 56, 63, 64, 65, 900, 1024, 5000] {
            let (a, b) = body[..len].split_at(len / 3);
            assert_eq!(
                sha256(&[a, b]).to_vec(),
                sha2::Sha256::digest(&body[..len]).to_vec(),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn sha384_and_sha512_match_sha2() {
        for bytes in [&b""[..], b"abc", &[9u8; 300]] {
            assert_eq!(sha384(bytes), sha2::Sha384::digest(bytes).to_vec());
            assert_eq!(sha512(bytes), sha2::Sha512::digest(bytes).to_vec());
        }
    }

    #[test]
    fn the_mac_matches_rfc_4231_and_the_hmac_crate() {
        // RFC 4231, test case 2.
        let mac =
            MacKey::new(MacHash::Sha256, b"Jefe").mac(&[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        for key in [&b""[..], b"k", b"bench-pagarme-secret", &[7u8; 200]] {
            for parts in [&[&b"body"[..]][..], &[b"t=1", b".", b"{\"a\":1}"], &[]] {
                let keyed = |hash| MacKey::new(hash, key);
                assert_eq!(
                    keyed(MacHash::Sha1).mac(parts),
                    reference_mac::<Hmac<sha1::Sha1>>(key, parts)
                );
                assert_eq!(
                    keyed(MacHash::Sha256).mac(parts),
                    reference_mac::<Hmac<sha2::Sha256>>(key, parts)
                );
                assert_eq!(
                    keyed(MacHash::Sha512).mac(parts),
                    reference_mac::<Hmac<sha2::Sha512>>(key, parts)
                );
            }
        }
    }

    #[test]
    fn debug_names_the_hash_not_the_key() {
        let shown = format!("{:?}", MacKey::new(MacHash::Sha256, b"hunter2-very-secret"));
        assert!(shown.contains("SHA256"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
