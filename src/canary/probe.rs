//! The probe's proof, both ways: [`ProbeKey`], a random key of this process that never leaves
//! it (not stored, not logged, not in the config), signs each probe the canary sends and each
//! answer intake gives to one.
//!
//! A probe carries `Portaria-Canary: t=<unix ms>,n=<32 hex>,v1=<hex>`, the HMAC-SHA256 of
//! `probe.<t>.<n>`; a fresh random nonce each time, so no cache or replay can pass for a live
//! answer. Intake checks it (constant time, `t` within 5 minutes) and answers 200 with
//! `Portaria-Canary: v1=<hex>`, the HMAC of `answer.<t>.<n>`: only this process can make
//! that, so an answer carrying it went all the way to this portaria and back. Anything else
//! (the tunnel's error page, another portaria, which refuses a probe it cannot verify with
//! 401) lacks it.

use ring::rand::{SecureRandom, SystemRandom};
use subtle::ConstantTimeEq;

use crate::digest::{MacHash, MacKey};

/// The header of the probe and of its answer.
pub const HEADER: &str = "portaria-canary";

/// How far a probe's time may be from intake's clock: the canary and intake share one clock,
/// so only a probe held up on the way (or replayed) is off.
const TOLERANCE_MS: i64 = 5 * 60 * 1000;

/// This process's canary key.
pub struct ProbeKey {
    mac: MacKey,
    random: SystemRandom,
}

impl std::fmt::Debug for ProbeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProbeKey([redacted])")
    }
}

/// One probe: the header to send, and the answer's header that proves it reached us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub header: String,
    pub answer: String,
}

/// Why a request to the canary's path is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No header, or not in the probe's form.
    Malformed,
    /// Not signed with this process's key.
    Mismatch,
    /// Signed, but its time is more than 5 minutes from ours.
    Stale,
}

impl ProbeKey {
    /// A fresh key from the kernel's generator.
    pub fn random() -> Result<ProbeKey, String> {
        let random = SystemRandom::new();
        let mut key = [0u8; 32];
        random
            .fill(&mut key)
            .map_err(|_| "the kernel's random generator failed".to_string())?;
        Ok(ProbeKey {
            mac: MacKey::new(MacHash::Sha256, &key),
            random,
        })
    }

    /// A probe sent at `now_ms`, with a fresh nonce.
    pub fn probe(&self, now_ms: i64) -> Result<Probe, String> {
        let mut nonce = [0u8; 16];
        self.random
            .fill(&mut nonce)
            .map_err(|_| "the kernel's random generator failed".to_string())?;
        let (t, n) = (now_ms.to_string(), hex::encode(nonce));
        Ok(Probe {
            header: format!("t={t},n={n},v1={}", hex::encode(self.sign("probe", &t, &n))),
            answer: self.answer_header(&t, &n),
        })
    }

    /// Checks a probe's header at `now_ms`; Ok with the answer's header value.
    pub fn check(&self, header: Option<&str>, now_ms: i64) -> Result<String, Refusal> {
        let (mut t, mut n, mut v1) = (None, None, None);
        for pair in header.ok_or(Refusal::Malformed)?.split(',') {
            match pair.trim().split_once('=') {
                Some(("t", value)) => t = Some(value),
                Some(("n", value)) => n = Some(value),
                Some(("v1", value)) => v1 = Some(value),
                _ => {}
            }
        }
        let (Some(t), Some(n), Some(v1)) = (t, n, v1) else {
            return Err(Refusal::Malformed);
        };
        let at: i64 = t.parse().map_err(|_| Refusal::Malformed)?;
        let given = hex::decode(v1).map_err(|_| Refusal::Malformed)?;
        let expected = self.sign("probe", t, n);
        if !bool::from(given.as_slice().ct_eq(expected.as_slice())) {
            return Err(Refusal::Mismatch);
        }
        if (now_ms - at).abs() > TOLERANCE_MS {
            return Err(Refusal::Stale);
        }
        Ok(self.answer_header(t, n))
    }

    fn answer_header(&self, t: &str, n: &str) -> String {
        format!("v1={}", hex::encode(self.sign("answer", t, n)))
    }

    fn sign(&self, what: &str, t: &str, n: &str) -> Vec<u8> {
        self.mac
            .mac(&[what.as_bytes(), b".", t.as_bytes(), b".", n.as_bytes()])
    }
}

/// Whether `given` (an answer's header) is `expected`, in constant time.
pub fn same_answer(given: Option<&str>, expected: &str) -> bool {
    given.is_some_and(|g| bool::from(g.as_bytes().ct_eq(expected.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_passes_its_own_key_only_and_only_in_time() {
        let key = ProbeKey::random().unwrap();
        let probe = key.probe(1_000_000).unwrap();
        assert_eq!(
            key.check(Some(&probe.header), 1_000_000),
            Ok(probe.answer.clone())
        );
        assert_eq!(
            key.check(Some(&probe.header), 1_000_000 + TOLERANCE_MS),
            Ok(probe.answer.clone())
        );
        assert_eq!(
            key.check(Some(&probe.header), 1_000_000 + TOLERANCE_MS + 1),
            Err(Refusal::Stale)
        );
        let other = ProbeKey::random().unwrap();
        assert_eq!(
            other.check(Some(&probe.header), 1_000_000),
            Err(Refusal::Mismatch)
        );
        // The time is signed: moving it breaks the MAC, not the window.
        let moved = probe.header.replace("t=1000000", "t=1000001");
        assert_eq!(key.check(Some(&moved), 1_000_000), Err(Refusal::Mismatch));
        for bad in [
            None,
            Some(""),
            Some("t=1,n=2"),
            Some("t=x,n=2,v1=00"),
            Some("t=1,n=2,v1=zz"),
        ] {
            assert_eq!(key.check(bad, 0), Err(Refusal::Malformed), "{bad:?}");
        }
        let again = key.probe(1_000_000).unwrap();
        assert_ne!(again.answer, probe.answer, "a fresh nonce each probe");
        assert!(same_answer(Some(&probe.answer), &probe.answer));
        assert!(!same_answer(Some(&again.answer), &probe.answer));
        assert!(!same_answer(None, &probe.answer));
        assert_eq!(format!("{key:?}"), "ProbeKey([redacted])");
    }
}
