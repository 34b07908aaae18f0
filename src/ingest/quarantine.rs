//! Rejected requests kept (issue 27): a request refused after its body was read (a bad
//! signature or credential, a stale timestamp, a body that contradicts what is signed, no
//! dedup key) or refused for its size (`too_large`: its headers, and no body) is handed to
//! the store (`Store::quarantine`) with its headers redacted as an event's are
//! (`headers_blob`), its body as read (never more than `max_body_bytes`), the status page's
//! word for why (the outcome's label, as the log line says it) and what verification said.
//!
//! Off the answer's path: the store call runs in a task of its own, so the 401/400/413 goes
//! out at once, and a failure to keep it is a log line, never another answer. At most
//! [`IN_FLIGHT`] wait for the store at once; a rejection past that is not kept (a flood of
//! forged requests then costs the writer at most that many bookkeeping rows at a time, and
//! the newest `quarantine_keep` still show what the flood looked like).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::{HeaderMap, header};

use super::Outcome;
use super::headers::{header_text, headers_blob};
use crate::config::Endpoint;
use crate::store::{QuarantineKeep, Store, ToQuarantine};

/// How many rejected requests may wait for the store at once.
pub(super) const IN_FLIGHT: usize = 8;

/// The rejected requests on their way to the store.
#[derive(Default)]
pub(super) struct Keeper {
    waiting: Arc<AtomicUsize>,
}

impl Keeper {
    /// Keeps this rejection, if its endpoint keeps any and it is of a kind kept; `detail` is
    /// what verification or the dedup rule said (never a secret), `body` what was read of it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn keep(
        &self,
        store: &Store,
        endpoint: &Endpoint,
        outcome: &Outcome,
        detail: String,
        headers: &HeaderMap,
        body: &[u8],
        at_ms: i64,
    ) {
        let wanted = endpoint.quarantine;
        let truncated = match outcome {
            Outcome::BadSignature(_) | Outcome::StaleTimestamp | Outcome::BadRequest(_) => false,
            Outcome::TooLarge => true,
            _ => return,
        };
        if wanted.keep == 0 {
            return;
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= IN_FLIGHT {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!(endpoint = %endpoint.name, "rejected request not kept: too many waiting");
            return;
        }
        let request = ToQuarantine {
            endpoint: endpoint.name.clone(),
            received_at_ms: at_ms,
            reason: outcome.label().to_string(),
            detail,
            content_type: header_text(headers, header::CONTENT_TYPE.as_str()),
            headers: headers_blob(headers, endpoint.verifier.credential_headers()),
            body: body.to_vec(),
            truncated,
        };
        let keep = QuarantineKeep {
            keep: wanted.keep,
            for_ms: i64::try_from(wanted.keep_for.as_millis()).unwrap_or(i64::MAX),
        };
        let (store, waiting) = (store.clone(), self.waiting.clone());
        tokio::spawn(async move {
            let endpoint = request.endpoint.clone();
            if let Err(e) = store.quarantine(request, keep).await {
                tracing::warn!(endpoint, error = %e, "a rejected request was not kept");
            }
            waiting.fetch_sub(1, Ordering::AcqRel);
        });
    }
}
