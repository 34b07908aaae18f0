//! Pagar.me v5: `X-Webhook-Asymmetric-Signature: alg=RS256; kid=<kid>; signature=<base64url>`,
//! an RS256 (RSASSA-PKCS1-v1_5 with SHA-256) signature of the raw body, made with Pagar.me's
//! private key. The header is read as Pagar.me's own modules read it: split on `;`, trim,
//! split each part on the first `=`; `alg`, `kid` and `signature` are required, and an `alg`
//! other than RS256 is refused.
//!
//! The public keys come from a JWKS (Pagar.me's is at
//! `https://hubapi.pagar.me/.well-known/jwks.json`), which the config reads from `jwks_file`
//! when it loads; this scheme never fetches anything. The key is the one whose `kid` is the
//! header's, with `kty` RSA, `use` absent or `sig`, `alg` absent or RS256, and at least 2048
//! bits; other keys (`use: enc`, EC keys) are left out when the JWKS loads. A `kid` the JWKS
//! does not hold fails verification: download the JWKS again after Pagar.me rotates.
//! There is no timestamp. Dedup on the body's `id`; the event type is the body's `type`.
//! Sources: pagarme/ecommerce-module-core `WebhookValidatorService.php`, signature-schemes.md
//! §2.4. The HMAC postbacks of v1-v4 are the `pagarme` preset.

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use ring::signature::RSA_PKCS1_2048_8192_SHA256;
use serde::Deserialize;

use super::preset::{Preset, Scheme, Signed, json_rule};
use super::rsa::{self, RsaKey};
use super::{Checked, Request, Secret, VerifyError, header};

pub const SIGNATURE: &str = "x-webhook-asymmetric-signature";

/// base64url, with or without padding (PHP's decoders take both).
const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Smallest modulus accepted, in bits.
const MIN_BITS: usize = 2048;

pub(super) fn preset(jwks: Option<&str>) -> Result<Preset, String> {
    let text = jwks.ok_or_else(|| {
        "provider `pagarme-v5` needs `jwks_file`, a copy of Pagar.me's JWKS \
         (https://hubapi.pagar.me/.well-known/jwks.json)"
            .to_string()
    })?;
    let keys = parse_jwks(text)?;
    Ok(Preset::new("pagarme-v5", PagarmeV5 { keys }, json_rule("/id")).without_secret("jwks_file"))
}

#[derive(Deserialize)]
struct Jwks {
    keys: Vec<serde_json::Value>,
}

/// The members of a JWK this scheme reads; any other is ignored.
#[derive(Deserialize)]
struct Jwk {
    kty: Option<String>,
    kid: Option<String>,
    #[serde(rename = "use")]
    usage: Option<String>,
    alg: Option<String>,
    n: Option<String>,
    e: Option<String>,
}

/// The RSA signing keys of a JWKS, by `kid`. A JWKS with none is refused, and so is a usable
/// key that is broken (its kid is named: a JWKS is public).
fn parse_jwks(text: &str) -> Result<Vec<(String, RsaKey)>, String> {
    let jwks: Jwks = serde_json::from_str(text)
        .map_err(|e| format!("jwks_file: not a JWKS (a JSON object with `keys`): {e}"))?;
    let mut keys: Vec<(String, RsaKey)> = Vec::new();
    for (i, value) in jwks.keys.into_iter().enumerate() {
        let jwk: Jwk =
            serde_json::from_value(value).map_err(|e| format!("jwks_file: key {}: {e}", i + 1))?;
        let usable = jwk.kty.as_deref() == Some("RSA")
            && jwk.usage.as_deref().is_none_or(|u| u == "sig")
            && jwk.alg.as_deref().is_none_or(|a| a == "RS256");
        let (true, Some(kid)) = (usable, jwk.kid) else {
            continue;
        };
        let key = rsa_key(jwk.n.as_deref(), jwk.e.as_deref())
            .map_err(|why| format!("jwks_file: key `{kid}`: {why}"))?;
        if keys.iter().any(|(k, _)| *k == kid) {
            return Err(format!(
                "jwks_file: two RSA signing keys have the kid `{kid}`"
            ));
        }
        keys.push((kid, key));
    }
    if keys.is_empty() {
        return Err(
            "jwks_file: no RSA signing key (`kty` RSA with a `kid`, `use` absent or \
                    sig, `alg` absent or RS256)"
                .to_string(),
        );
    }
    Ok(keys)
}

fn rsa_key(n: Option<&str>, e: Option<&str>) -> Result<RsaKey, String> {
    let number = |name: &str, value: Option<&str>| {
        let text = value.ok_or_else(|| format!("no `{name}`"))?;
        BASE64URL
            .decode(text)
            .map_err(|_| format!("`{name}` is not base64url"))
    };
    rsa::components(&number("n", n)?, &number("e", e)?, MIN_BITS)
}

/// The three required parts of the header.
struct Parts<'a> {
    kid: &'a str,
    signature: Vec<u8>,
}

fn parse_header(value: &str) -> Result<Parts<'_>, VerifyError> {
    let bad = |why: &str| VerifyError::Malformed(format!("`{SIGNATURE}`: {why}"));
    let (mut alg, mut kid, mut signature) = (None, None, None);
    for part in value.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, text) = part
            .split_once('=')
            .ok_or_else(|| bad("a part is not `name=value`"))?;
        let slot = match name.trim() {
            "alg" => &mut alg,
            "kid" => &mut kid,
            "signature" => &mut signature,
            _ => continue,
        };
        if slot.replace(text.trim()).is_some() {
            return Err(bad(&format!("`{}` appears more than once", name.trim())));
        }
    }
    match alg {
        None => return Err(bad("no `alg`")),
        Some("RS256") => {}
        Some(_) => return Err(bad("`alg` is not RS256, the only one accepted")),
    }
    let kid = kid
        .filter(|k| !k.is_empty())
        .ok_or_else(|| bad("no `kid`"))?;
    let signature = signature.ok_or_else(|| bad("no `signature`"))?;
    let signature = BASE64URL
        .decode(signature)
        .map_err(|_| bad("`signature` is not base64url"))?;
    Ok(Parts { kid, signature })
}

struct PagarmeV5 {
    keys: Vec<(String, RsaKey)>,
}

impl std::fmt::Debug for PagarmeV5 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kids: Vec<&str> = self.keys.iter().map(|(kid, _)| kid.as_str()).collect();
        f.debug_struct("PagarmeV5").field("kids", &kids).finish()
    }
}

impl Scheme for PagarmeV5 {
    fn verify(
        &self,
        _keys: &[Secret],
        request: &Request<'_>,
        _now: i64,
        _tolerance_secs: u64,
    ) -> Result<Checked, VerifyError> {
        let parts = parse_header(header(request.headers, SIGNATURE)?)?;
        let (_, key) = self
            .keys
            .iter()
            .find(|(kid, _)| kid == parts.kid)
            .ok_or(VerifyError::UnknownKey)?;
        key.verify(&RSA_PKCS1_2048_8192_SHA256, request.body, &parts.signature)
            .map_err(|_| VerifyError::Mismatch)?;
        Ok(0.into())
    }

    /// Only Pagar.me holds the private key.
    fn sign(&self, _key: &Secret, _body: &[u8], _now: i64, _id: &str) -> Option<Signed> {
        None
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use serde_json::json;

    use super::super::tests::headers;
    use super::super::{Settings, Verifier, VerifyError};

    // An RSA-2048 key made with cryptography 50.0.2, its JWK written by PyJWT 2.15.1, and the
    // RS256 signature of BODY by PyJWT (tests/oracle/pagarme_v5.py); not Pagar.me-issued.
    const N: &str = "qSK_Bdk-tSAuNavDtTDe4ufrmVfwwW3JoOCtQKTioGDD7h_6-uENDNiPUn1-tmh5L1ez_0T5OrGdEXSjX6Jltd2-\
        g61SVb9I7-XPXgcjN-C5pqsp3DcHJvTAteeYWzlHbHCkeSFpd3y83rPErlABadRvlrDMyC_b8mwisbm75TSya9lG\
        YKa0BTKiGANECDEa1YtVAonOtlB7k9b64LxB56_Lkfp68xYqm8XWBX3H66dWDMmUWIVsK758GqIPOsJS1SYDv7Jm\
        05rZoL5KYrzVBAlGT-o_bBEhpjcAsl47oXOD_z-NagDJOFwh_dLEVnpgPfVHSeZzlFR8l7XL4tCjeQ";
    const SIG: &str = "JKycOtEc-OYbqv60W-mV5qCx9QH7B9G9iuF3WJFd6-YqAgpi6NT-vQzl4_xyKfMZa0uWm3fn1T0DYpx_NeeEngwL\
        OsSZNwoqknlEkEDcV4ETEpB_DJYA0UHbopVJMwRtGUmelbP9IIpNf8HnO68APvgprxDd3fFI9M1QhHVMeS1QY0R1\
        WKe_EWM5QpJrR2l9wr1X0o--zuJdQ92xq2J1i7Ur1O_qvl47Mm9wZlhCrUoDi8Ed7XGgM2_j_Mwhe93ehWxFhP2s\
        awbUiN1GTakjHIabb4nqTCa9Xe_u3VFdwrZ6fNwtncf_p6tITZwLITxN7y3LnB0N5JcLmr-OaqjfTQ";
    const BODY: &str = r#"{"id":"hook_1","type":"charge.paid","data":{"id":"ch_1"}}"#;

    fn jwk(kid: &str) -> serde_json::Value {
        json!({"kty": "RSA", "key_ops": ["verify"], "n": N, "e": "AQAB", "kid": kid,
               "use": "sig", "alg": "RS256"})
    }

    fn load(keys: serde_json::Value) -> Result<Verifier, String> {
        let text = json!({ "keys": keys }).to_string();
        let settings = Settings {
            jwks: Some(&text),
            ..Settings::default()
        };
        Verifier::with_settings("pagarme-v5", &settings, &[], None)
    }

    fn check(v: &Verifier, header: &str, body: &str) -> Result<usize, VerifyError> {
        let h = headers(&[("X-Webhook-Asymmetric-Signature", header)]);
        v.verify(&h, body.as_bytes(), 0).map(|p| p.secret_index())
    }

    fn signed(kid: &str) -> String {
        format!("alg=RS256; kid={kid}; signature={SIG}")
    }

    #[test]
    fn verifies_what_pyjwt_signed() {
        let v = load(json!([jwk("k1")])).unwrap();
        assert_eq!(check(&v, &signed("k1"), BODY), Ok(0));
        // The parts in any order, spaced or not, the signature padded or not.
        let reordered = format!("signature={SIG}==;kid=k1 ;  alg=RS256");
        assert_eq!(check(&v, &reordered, BODY), Ok(0));
    }

    #[test]
    fn a_changed_byte_or_another_key_is_a_mismatch() {
        let v = load(json!([jwk("k1")])).unwrap();
        let body = BODY.replace("ch_1", "ch_2");
        assert_eq!(check(&v, &signed("k1"), &body), Err(VerifyError::Mismatch));
        let mut sig = URL_SAFE_NO_PAD.decode(SIG).unwrap();
        sig[100] ^= 1;
        let header = format!(
            "alg=RS256; kid=k1; signature={}",
            URL_SAFE_NO_PAD.encode(&sig)
        );
        assert_eq!(check(&v, &header, BODY), Err(VerifyError::Mismatch));
        let short = format!("alg=RS256; kid=k1; signature={}", &SIG[..40]);
        assert_eq!(check(&v, &short, BODY), Err(VerifyError::Mismatch));
    }

    #[test]
    fn the_kid_picks_the_key() {
        let v = load(json!([jwk("k1")])).unwrap();
        assert_eq!(check(&v, &signed("k2"), BODY), Err(VerifyError::UnknownKey));
        // A second key under another kid is not tried.
        let mut other = jwk("k0");
        other["n"] = json!(format!("r{}", &N[1..]));
        let v = load(json!([other, jwk("k1")])).unwrap();
        assert_eq!(check(&v, &signed("k1"), BODY), Ok(0));
        assert_eq!(check(&v, &signed("k0"), BODY), Err(VerifyError::Mismatch));
    }

    #[test]
    fn only_rs256_signing_keys_are_used() {
        let mut enc = jwk("k1");
        enc["use"] = json!("enc");
        let v = load(json!([enc, jwk("k2")])).unwrap();
        assert_eq!(check(&v, &signed("k1"), BODY), Err(VerifyError::UnknownKey));
        let mut no_use = jwk("k1");
        no_use.as_object_mut().unwrap().remove("use");
        no_use.as_object_mut().unwrap().remove("alg");
        let v = load(json!([no_use])).unwrap();
        assert_eq!(check(&v, &signed("k1"), BODY), Ok(0));
        for (member, value) in [("use", "enc"), ("alg", "RS512"), ("kty", "EC")] {
            let mut key = jwk("k1");
            key[member] = json!(value);
            let err = load(json!([key])).unwrap_err();
            assert!(err.contains("no RSA signing key"), "{member}: {err}");
        }
    }

    #[test]
    fn other_algorithms_and_broken_headers_are_malformed() {
        let v = load(json!([jwk("k1")])).unwrap();
        for bad in [
            format!("alg=HS256; kid=k1; signature={SIG}"),
            format!("alg=none; kid=k1; signature={SIG}"),
            format!("kid=k1; signature={SIG}"),
            format!("alg=RS256; signature={SIG}"),
            format!("alg=RS256; kid=; signature={SIG}"),
            "alg=RS256; kid=k1".to_string(),
            "alg=RS256; kid=k1; signature=!!".to_string(),
            format!("alg=RS256; alg=RS256; kid=k1; signature={SIG}"),
            format!("alg=RS256; kid=k1; signature={SIG}; junk"),
        ] {
            assert!(
                matches!(check(&v, &bad, BODY), Err(VerifyError::Malformed(_))),
                "{bad}"
            );
        }
        let err = check(&v, &format!("alg=HS256; kid=k1; signature={SIG}"), BODY);
        assert_eq!(
            err.unwrap_err().to_string(),
            "malformed signature header: `x-webhook-asymmetric-signature`: `alg` is not RS256, \
             the only one accepted"
        );
        let h = headers(&[("X-Hub-Signature", "sha256=00")]);
        assert_eq!(
            v.verify(&h, BODY.as_bytes(), 0).unwrap_err(),
            VerifyError::MissingHeader("x-webhook-asymmetric-signature".into())
        );
    }

    #[test]
    fn a_bad_jwks_does_not_load_and_says_why() {
        let err = |keys: serde_json::Value| load(keys).unwrap_err();
        let mut small = jwk("k1");
        small["n"] = json!(URL_SAFE_NO_PAD.encode([0xffu8; 128]));
        assert_eq!(
            err(json!([small])),
            "jwks_file: key `k1`: 1024 bits; at least 2048 are required"
        );
        let mut bad_n = jwk("k1");
        bad_n["n"] = json!("not base64!");
        assert_eq!(
            err(json!([bad_n])),
            "jwks_file: key `k1`: `n` is not base64url"
        );
        assert_eq!(
            err(json!([jwk("k1"), jwk("k1")])),
            "jwks_file: two RSA signing keys have the kid `k1`"
        );
        assert!(err(json!([])).contains("no RSA signing key"));
        // What ring's verification would refuse at every webhook is refused at load.
        let mut even = jwk("k1");
        let mut n = URL_SAFE_NO_PAD.decode(even["n"].as_str().unwrap()).unwrap();
        *n.last_mut().unwrap() &= 0xfe;
        even["n"] = json!(URL_SAFE_NO_PAD.encode(&n));
        let mut huge = jwk("k1");
        huge["n"] = json!(URL_SAFE_NO_PAD.encode([0xffu8; 1025]));
        assert_eq!(
            err(json!([huge])),
            "jwks_file: key `k1`: 8200 bits; at most 8192 are supported"
        );
        for e in [&[1u8][..], &[2], &[1, 0, 0, 0, 0, 1]] {
            let mut bad_e = jwk("k1");
            bad_e["e"] = json!(URL_SAFE_NO_PAD.encode(e));
            assert!(
                err(json!([bad_e])).contains("not a usable RSA public key"),
                "{e:?}"
            );
        }
        assert!(err(json!([even])).contains("not a usable RSA public key"));
        // Leading zero bytes are not bits.
        let mut padded = jwk("k1");
        let n = URL_SAFE_NO_PAD
            .decode(padded["n"].as_str().unwrap())
            .unwrap();
        padded["n"] = json!(URL_SAFE_NO_PAD.encode([&[0u8, 0][..], &n].concat()));
        let v = load(json!([padded])).unwrap();
        assert_eq!(check(&v, &signed("k1"), BODY), Ok(0));
        let settings = Settings {
            jwks: Some("{\"keys\": 3"),
            ..Settings::default()
        };
        let not_json = Verifier::with_settings("pagarme-v5", &settings, &[], None).unwrap_err();
        assert!(not_json.starts_with("jwks_file: not a JWKS"), "{not_json}");
    }

    #[test]
    fn the_jwks_is_the_credential() {
        let err = Verifier::new("pagarme-v5", None, &[], None).unwrap_err();
        assert!(err.contains("needs `jwks_file`"), "{err}");
        let text = json!({ "keys": [jwk("k1")] }).to_string();
        let settings = Settings {
            jwks: Some(&text),
            ..Settings::default()
        };
        let secret = ["ak_test".to_string()];
        assert_eq!(
            Verifier::with_settings("pagarme-v5", &settings, &secret, None).unwrap_err(),
            "provider `pagarme-v5` verifies with a public key (`jwks_file`), not a shared \
             secret: remove the secret"
        );
        assert_eq!(
            Verifier::with_settings("pagarme", &settings, &secret, None).unwrap_err(),
            "`jwks_file` is only for provider `pagarme-v5`, not `pagarme`"
        );
        let v = load(json!([jwk("k1")])).unwrap();
        assert_eq!(v.sign_request(BODY.as_bytes(), 0, "d"), None);
        assert_eq!(v.default_dedup().to_string(), "json:/id");
        assert!(!v.signs_timestamp());
        assert!(format!("{v:?}").contains("kids: [\"k1\"]"));
    }
}
