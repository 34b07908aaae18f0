//! Intake's side of the canary: a POST to [`CANARY_PATH`] carrying a probe signed with this
//! process's [`ProbeKey`] is answered 200 with the answer's proof; anything else there is
//! refused like a request to an endpoint (405 for another method, 401 for a missing or wrong
//! signature, the same bodies). Nothing is read of the body, stored, forwarded, or counted in
//! an endpoint's series: the canary's own metrics count its probes on the sending side.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use http_body_util::Full;

use super::{Intake, Outcome};
use crate::canary::{HEADER, ProbeKey, Refusal};
pub use crate::config::CANARY_PATH;
use crate::time::now_ms;

/// What the flood-limited log counts refused probes under: not a name an endpoint can have
/// (no parentheses in those), so never summed with one's.
pub const LOG_NAME: &str = "(canary)";

impl Intake {
    /// Answers the canary's probes, signed with `key`, at `/webhooks/_canary`.
    pub fn with_canary(mut self, key: Arc<ProbeKey>) -> Intake {
        self.canary = Some(key);
        self
    }

    /// The answer to `req` when it is for the canary's path and the canary runs (a refusal
    /// logged, flood-limited like an endpoint's); None for every other request.
    pub(super) fn canary_probe<B>(
        &self,
        req: &http::Request<B>,
        max_body_bytes: usize,
        client: IpAddr,
    ) -> Option<Response<Full<Bytes>>> {
        let key = self.canary.as_ref()?;
        if req.uri().path() != CANARY_PATH {
            return None;
        }
        let (response, refused) = answer(key, req.method(), req.headers(), max_body_bytes);
        if let Some(outcome) = refused
            && self.rejections.first(LOG_NAME, outcome.label())
        {
            log_refused(&outcome, client);
        }
        Some(response)
    }
}

/// The answer to one request to the canary's path, and the outcome it was if refused.
pub fn answer(
    key: &ProbeKey,
    method: &Method,
    headers: &HeaderMap,
    max_body_bytes: usize,
) -> (Response<Full<Bytes>>, Option<Outcome>) {
    if method != Method::POST {
        let outcome = Outcome::MethodNotAllowed;
        return (outcome.response(max_body_bytes, None), Some(outcome));
    }
    let probe = headers.get(HEADER).and_then(|v| v.to_str().ok());
    match key.check(probe, now_ms()) {
        Ok(proof) => {
            let mut response = Response::new(Full::new(Bytes::from_static(br#"{"canary":"ok"}"#)));
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            if let Ok(value) = HeaderValue::from_str(&proof) {
                headers.insert(HEADER, value);
            }
            *response.status_mut() = StatusCode::OK;
            (response, None)
        }
        Err(refusal) => {
            let outcome = match refusal {
                Refusal::Stale => Outcome::StaleTimestamp,
                Refusal::Malformed | Refusal::Mismatch => {
                    Outcome::BadSignature("not a probe of this process's canary".into())
                }
            };
            (outcome.response(max_body_bytes, None), Some(outcome))
        }
    }
}

/// The log line of a refused probe (the caller limits how often).
pub fn log_refused(outcome: &Outcome, client: IpAddr) {
    tracing::warn!(
        endpoint = LOG_NAME,
        outcome = outcome.label(),
        %client,
        status = outcome.status().as_u16(),
        "canary probe refused (not signed by this process: a forgery or another portaria)"
    );
}
