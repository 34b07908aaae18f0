//! One gateway API as a run calls it: the base URL, the key in the `Authorization` header
//! ([`Auth`]: HTTP Basic with the key as the user, which Pagar.me and Stripe take, or a
//! Bearer token, Paddle's), or in Asaas's own `access_token` header (Cielo's `MerchantKey`
//! in its own, beside the `MerchantId`), and what an answer's
//! status means. A 429 or a 5xx is tried again after the `Retry-After` the API sent
//! (else 1 s, then 2 s), up to [`TRIES`] times and never waiting more than [`MAX_WAIT`] at
//! once: a run is bounded, and an API that asks for longer is told about, not waited for.
//! A failure is said in the owner's words ([`ApiError`]), never with the key, a header or the
//! answer's body.

use std::time::{Duration, SystemTime};

use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderName, HeaderValue, StatusCode, Uri};

use crate::config::Reconcile;
use crate::outbound::{Answer, Client, Error, Limits, Request, Roots};

/// Tries of one call, the first included.
const TRIES: u32 = 3;
/// The longest a run waits for one `Retry-After`.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Why a call got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("the API key was refused (HTTP 401): check api_key_env or api_key_file")]
    KeyRefused,
    #[error(
        "the API key may not do this (HTTP 403): give it the permission docs/reconcile.md names"
    )]
    Forbidden,
    #[error("{0} answered 404: is api_base right?")]
    NotFound(String),
    #[error("rate limited (HTTP 429) {0}")]
    RateLimited(String),
    #[error("the API failed (HTTP {status}) {after}")]
    Failing { status: u16, after: String },
    #[error("the API answered HTTP {0}")]
    Status(u16),
    #[error("{0}")]
    Unreachable(String),
    #[error("the answer is not what the API documents: {0}")]
    Shape(String),
}

/// How the key goes (`outbound::KeyAuth`).
pub use crate::outbound::KeyAuth as Auth;

/// A gateway's API, for one run.
pub struct Api {
    client: Client,
    base: String,
    auth: Vec<(HeaderName, HeaderValue)>,
}

impl Api {
    /// The API `reconcile` names, trusting the system's roots and its `ca_file`, the key sent
    /// as `scheme` says.
    pub fn new(reconcile: &Reconcile, scheme: Auth) -> Result<Api, ApiError> {
        let roots = Roots::system().with(&reconcile.extra_roots);
        let client = Client::new(&roots, Limits::default())
            .map_err(|e| ApiError::Unreachable(e.to_string()))?;
        let key = reconcile.api_key.expose();
        let auth = scheme
            .headers(key, reconcile.merchant_id.as_deref())
            .ok_or_else(|| {
                ApiError::Unreachable("the API key cannot be sent in a header".into())
            })?;
        Ok(Api {
            client,
            base: reconcile.api_base.clone(),
            auth,
        })
    }

    /// GETs `path_and_query` (below the base URL), answered 2xx.
    pub async fn get(&self, path_and_query: &str) -> Result<Answer, ApiError> {
        self.call(http::Method::GET, path_and_query).await
    }

    /// POSTs nothing to `path`, answered 2xx.
    pub async fn post(&self, path: &str) -> Result<Answer, ApiError> {
        self.call(http::Method::POST, path).await
    }

    /// PUTs `body` as JSON to `path`, answered 2xx.
    pub async fn put_json(&self, path: &str, body: &serde_json::Value) -> Result<Answer, ApiError> {
        self.call_with(http::Method::PUT, path, Some(body)).await
    }

    async fn call(&self, method: http::Method, path: &str) -> Result<Answer, ApiError> {
        self.call_with(method, path, None).await
    }

    async fn call_with(
        &self,
        method: http::Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Answer, ApiError> {
        let url: Uri = format!("{}{path}", self.base)
            .parse()
            .map_err(|_| ApiError::Shape(format!("cannot make a URL of an id in {path:?}")))?;
        let mut tried = 0;
        loop {
            tried += 1;
            let mut request = Request::new(method.clone(), url.clone())
                .header(ACCEPT, HeaderValue::from_static("application/json"));
            for (name, value) in &self.auth {
                request = request.header(name.clone(), value.clone());
            }
            if let Some(body) = body {
                request = request
                    .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                    .body(body.to_string());
            }
            let answer = match self.client.send(request).await {
                Ok(answer) => answer,
                // A DNS, connect or TLS failure, a timeout: the network's, tried again.
                Err(e) if tried < TRIES => {
                    tracing::debug!(error = %e, tried, "reconcile: API call failed, trying again");
                    tokio::time::sleep(backoff(tried)).await;
                    continue;
                }
                Err(e) => return Err(unreached(e, tried)),
            };
            let status = answer.status;
            if status.is_success() {
                return Ok(answer);
            }
            if status != StatusCode::TOO_MANY_REQUESTS && !status.is_server_error() {
                return Err(refused(status, &self.base));
            }
            let wait = answer
                .retry_after(SystemTime::now())
                .unwrap_or(backoff(tried));
            let after = if wait > MAX_WAIT {
                format!(
                    "and asked to wait {}s, longer than a run waits",
                    wait.as_secs()
                )
            } else if tried >= TRIES {
                format!("{tried} times")
            } else {
                tracing::debug!(
                    status = status.as_u16(),
                    ?wait,
                    "reconcile: API busy, waiting"
                );
                tokio::time::sleep(wait).await;
                continue;
            };
            return Err(match status {
                StatusCode::TOO_MANY_REQUESTS => ApiError::RateLimited(after),
                _ => ApiError::Failing {
                    status: status.as_u16(),
                    after,
                },
            });
        }
    }
}

/// The wait before try `tried + 1` when the API named none: 1 s, 2 s, ...
fn backoff(tried: u32) -> Duration {
    Duration::from_secs(1 << tried.saturating_sub(1).min(5))
}

fn unreached(e: Error, tried: u32) -> ApiError {
    ApiError::Unreachable(format!("{e} ({tried} tries)"))
}

/// A 4xx but 429: said, not tried again.
fn refused(status: StatusCode, base: &str) -> ApiError {
    match status {
        StatusCode::UNAUTHORIZED => ApiError::KeyRefused,
        StatusCode::FORBIDDEN => ApiError::Forbidden,
        StatusCode::NOT_FOUND => ApiError::NotFound(base.to_string()),
        other => ApiError::Status(other.as_u16()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_and_stays_bounded() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(40), Duration::from_secs(32));
    }

    #[test]
    fn refusals_say_what_to_fix() {
        let base = "https://api.example";
        assert!(
            refused(StatusCode::UNAUTHORIZED, base)
                .to_string()
                .contains("API key was refused")
        );
        assert!(
            refused(StatusCode::NOT_FOUND, base)
                .to_string()
                .contains("api_base")
        );
        assert_eq!(refused(StatusCode::CONFLICT, base), ApiError::Status(409));
    }
}
