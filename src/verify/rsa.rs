//! RSA public keys for the schemes that verify RSASSA-PKCS1-v1_5 signatures (Pagar.me v5's
//! JWKS, Woovi's PEM), through `ring`, rustls's provider, already linked: its RSA verification
//! costs the binary nothing more (the `rsa` crate it replaced cost about 80 KiB).
//!
//! A key is checked when it loads the way `ring` checks it at each verification (a modulus of
//! at least the scheme's minimum and at most 8192 bits, odd; an odd exponent from 3 to
//! 2^33 - 1), so a broken key is refused at start, not at the first webhook. A PEM file's
//! `SubjectPublicKeyInfo` is unwrapped here (`der`): `ring` takes the bare `RSAPublicKey`.

use ring::signature::RsaPublicKeyComponents;
use rustls_pki_types::SubjectPublicKeyInfoDer;
use rustls_pki_types::pem::PemObject;

use crate::der;

/// An RSA public key that passed the checks above.
pub(super) type RsaKey = RsaPublicKeyComponents<Vec<u8>>;

/// Largest modulus `ring`'s verification takes, in bits.
const MAX_BITS: usize = 8192;

/// The DER of the rsaEncryption OID, 1.2.840.113549.1.1.1.
const RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];

/// The key of modulus `n` and exponent `e` (big-endian, leading zero bytes allowed).
pub(super) fn components(n: &[u8], e: &[u8], min_bits: usize) -> Result<RsaKey, String> {
    let unpadded = |x: &[u8]| x[x.iter().position(|&b| b != 0).unwrap_or(x.len())..].to_vec();
    let (n, e) = (unpadded(n), unpadded(e));
    let bits = match n.first() {
        Some(&top) => n.len() * 8 - top.leading_zeros() as usize,
        None => 0,
    };
    if bits < min_bits {
        return Err(format!("{bits} bits; at least {min_bits} are required"));
    }
    if bits > MAX_BITS {
        return Err(format!("{bits} bits; at most {MAX_BITS} are supported"));
    }
    let odd = |x: &[u8]| x.last().is_some_and(|b| b & 1 == 1);
    let exponent = (e.len() <= 5).then(|| e.iter().fold(0u64, |acc, &b| acc << 8 | u64::from(b)));
    let usable = odd(&n) && odd(&e) && exponent.is_some_and(|e| (3..1 << 33).contains(&e));
    if !usable {
        return Err(
            "not a usable RSA public key (an even modulus, or an exponent that is \
                    even or outside 3..2^33)"
                .to_string(),
        );
    }
    Ok(RsaPublicKeyComponents { n, e })
}

/// Every `-----BEGIN PUBLIC KEY-----` block of `pem`, each an RSA key of at least `min_bits`;
/// none, or one that is not such a key, is an error (its position named: a key is public).
pub(super) fn from_pem(pem: &str, min_bits: usize) -> Result<Vec<RsaKey>, String> {
    let mut keys = Vec::new();
    for (i, spki) in SubjectPublicKeyInfoDer::pem_slice_iter(pem.as_bytes()).enumerate() {
        let spki = spki.map_err(|e| format!("key {}: not PEM: {e}", i + 1))?;
        let key = from_spki(&spki).and_then(|(n, e)| components(n, e, min_bits));
        keys.push(key.map_err(|why| format!("key {}: {why}", i + 1))?);
    }
    if keys.is_empty() {
        return Err("no `-----BEGIN PUBLIC KEY-----` block".to_string());
    }
    Ok(keys)
}

/// The modulus and exponent of an rsaEncryption `SubjectPublicKeyInfo`.
fn from_spki(spki: &[u8]) -> Result<(&[u8], &[u8]), String> {
    let bad = || "not an RSA public key (rsaEncryption)".to_string();
    let (info, _) = der::element(spki, 0x30).ok_or_else(bad)?;
    let (algorithm, rest) = der::element(info, 0x30).ok_or_else(bad)?;
    let (oid, _) = der::element(algorithm, 0x06).ok_or_else(bad)?;
    let (bits, _) = der::element(rest, 0x03).ok_or_else(bad)?;
    let (Some((0, key)), true) = (bits.split_first(), oid == RSA_ENCRYPTION) else {
        return Err(bad());
    };
    let (numbers, _) = der::element(key, 0x30).ok_or_else(bad)?;
    let (n, rest) = der::element(numbers, 0x02).ok_or_else(bad)?;
    let (e, _) = der::element(rest, 0x02).ok_or_else(bad)?;
    Ok((n, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Woovi's production key (1024 bits), as its docs publish it.
    const WOOVI: &str = include_str!("../../tests/fixtures/woovi/public-key.pem");

    #[test]
    fn a_pem_file_gives_its_rsa_keys_checked() {
        let keys = from_pem(WOOVI, 1024).unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].n.len() * 8, 1024);
        assert_eq!(keys[0].e, [1, 0, 1]);
        let two = from_pem(&format!("{WOOVI}\n{WOOVI}"), 1024).unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(
            from_pem(WOOVI, 2048).unwrap_err(),
            "key 1: 1024 bits; at least 2048 are required"
        );
        assert_eq!(
            from_pem("", 1024).unwrap_err(),
            "no `-----BEGIN PUBLIC KEY-----` block"
        );
        // An EC key (P-256) is not RSA.
        let ec = "-----BEGIN PUBLIC KEY-----\n\
                  MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAENUqQ+ocPwTs2SOixeXOoWPhAw7BI\n\
                  LtnT5o71ax05zUuHl9DdEXB2Qj7iszoNJ9XdOEWoX+Ss2Qv/LPskE91xQQ==\n\
                  -----END PUBLIC KEY-----\n";
        assert_eq!(
            from_pem(ec, 1024).unwrap_err(),
            "key 1: not an RSA public key (rsaEncryption)"
        );
    }

    #[test]
    fn the_checks_ring_makes_are_made_at_load() {
        let odd_n = |bytes: usize| {
            let mut n = vec![0xff; bytes];
            n[bytes - 1] = 0xfd;
            n
        };
        assert!(components(&odd_n(256), &[1, 0, 1], 2048).is_ok());
        assert!(components(&[&[0, 0][..], &odd_n(256)].concat(), &[0, 1, 0, 1], 2048).is_ok());
        assert!(
            components(&odd_n(1025), &[1, 0, 1], 2048)
                .unwrap_err()
                .contains("at most")
        );
        let mut even = odd_n(256);
        even[255] = 0xfe;
        assert!(components(&even, &[1, 0, 1], 2048).is_err());
        assert!(components(&odd_n(256), &[2], 2048).is_err());
        assert!(components(&odd_n(256), &[1], 2048).is_err());
        assert!(components(&odd_n(256), &[2, 0, 0, 0, 1], 2048).is_err());
    }
}
