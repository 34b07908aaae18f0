//! Asaas: no signature. The "Token de autenticação" set on the webhook is sent verbatim in the
//! `asaas-access-token` header (docs.asaas.com, "Criar novo Webhook pela aplicação web";
//! signature-schemes.md §3). Several configured secrets are alternatives (rotation). The header
//! is a credential: redacted before the headers are stored.
//!
//! Delivery is at least once and the docs say to dedup on the event's body `id` (`evt_...`).
//!
//! Patience: 15 consecutive failed deliveries pause the webhook's queue, on the schedule of
//! [`RETRY_OFFSETS`] (about 12 h 50 min from the first), and a paused queue's events are
//! deleted 14 days later (docs.asaas.com "Penalização de filas", "Fila pausada"; reconcile.md
//! §4 and §9).

use http::HeaderName;

use super::credential::Credential;
use super::patience::Rule;
use super::preset::{Carried, Preset, json_rule};

/// When Asaas tries a failing queue's head again, in seconds after the first failure: 0 s,
/// then gaps of 30 s, 1 min, 3.5 min, 5 min, 15 min, 25 min, 1 h five times, 2 h twice and
/// 3 h; the 15th failure pauses the queue (docs.asaas.com "Penalização de filas").
pub const RETRY_OFFSETS: &[u32] = &[
    0, 30, 90, 300, 600, 1500, 3000, 6600, 10_200, 13_800, 17_400, 21_000, 28_200, 35_400, 46_200,
];

pub const TOKEN: &str = "asaas-access-token";

/// A payment event (`PAYMENT_...`) carries its payment, with its id, in `payment` (docs.asaas.com,
/// "Eventos para cobranças"); transfers, invoices and the rest carry objects of their own.
/// One without it is `drift`.
pub const CARRIES: &[Carried] = &[Carried {
    pointer: "/payment/id",
    name: "payment.id",
    types: Some("PAYMENT_"),
    except: &[],
}];

pub(super) fn preset() -> Preset {
    let header = HeaderName::from_static(TOKEN);
    Preset::new(
        "asaas",
        Credential::header(header.clone()),
        json_rule("/id"),
    )
    .credential_headers(vec![header])
    .carries(CARRIES)
    .patience(
        "Asaas",
        Rule::Queue {
            offsets: RETRY_OFFSETS,
            deleted_after_days: 14,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::super::tests::headers;
    use super::super::{Verifier, VerifyError};

    const BODY: &[u8] =
        br#"{"id":"evt_05b708f961d739ea7eba7e4db318f621","event":"PAYMENT_RECEIVED"}"#;

    fn verifier(secrets: &[&str]) -> Verifier {
        let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        Verifier::new("asaas", None, &secrets, None).unwrap()
    }

    #[test]
    fn the_token_header_is_the_credential() {
        let v = verifier(&["tok_old", "tok_new"]);
        let h = headers(&[("asaas-access-token", "tok_new")]);
        assert_eq!(v.verify(&h, BODY, 0).map(|p| p.secret_index()), Ok(1));
        let h = headers(&[("asaas-access-token", "tok_other")]);
        assert_eq!(v.verify(&h, BODY, 0).unwrap_err(), VerifyError::Mismatch);
        assert_eq!(
            v.verify(&headers(&[("x-token", "tok_new")]), BODY, 0)
                .unwrap_err(),
            VerifyError::MissingHeader("asaas-access-token".to_string())
        );
    }

    #[test]
    fn the_header_is_redacted_and_dedup_is_the_event_id() {
        let v = verifier(&["tok"]);
        assert_eq!(v.credential_headers(), ["asaas-access-token"]);
        assert_eq!(v.default_dedup().to_string(), "json:/id");
        assert!(!v.signs_timestamp());
        let signed = v.sign(BODY, 0, "");
        assert_eq!(
            signed,
            [("asaas-access-token".to_string(), "tok".to_string())]
        );
        assert!(v.verify(&headers(&signed), BODY, 0).is_ok());
    }
}
