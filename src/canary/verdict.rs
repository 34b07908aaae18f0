//! What one probe's outcome means: through to this portaria and back, or a failure with its
//! cause, one word of [`CAUSES`] (a metrics label, the alert's `cause`) and a sentence.
//!
//! - `dns`, `connect`, `tls`, `timeout`, `http`: the outbound client's phases (the name, the
//!   TCP connection, the certificate, a deadline, a connection that broke or spoke no HTTP).
//! - `status`: portaria answered (its `{"error": ...}` shape) with an error status, 503 say.
//! - `not_portaria`: an answer without this process's proof: the tunnel's own error page (a
//!   502 with its HTML), a 200 from something else, or another portaria (which refuses a probe
//!   it cannot verify, 401, or has no canary path, 404).

use std::time::Duration;

use crate::outbound::{self, Answer};

use super::probe::{HEADER, same_answer};

/// Every cause of a failed probe.
pub const CAUSES: [&str; 7] = [
    "dns",
    "connect",
    "tls",
    "timeout",
    "http",
    "status",
    "not_portaria",
];

/// A failed probe: its cause and what it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub cause: &'static str,
    pub detail: String,
}

/// The round trip of a probe that came back as this portaria's, or why it did not.
pub fn judge(sent: Result<Answer, outbound::Error>, expected: &str) -> Result<Duration, Failure> {
    let answer = match sent {
        Ok(answer) => answer,
        Err(e) => {
            let cause = match e.cause() {
                "dns" => "dns",
                "tls" => "tls",
                "timeout" => "timeout",
                "http" => "http",
                "too_large" => "not_portaria",
                // `url`: a name that resolved off this machine for plain http.
                _ => "connect",
            };
            return Err(Failure {
                cause,
                detail: e.to_string(),
            });
        }
    };
    let code = answer.status.as_u16();
    if same_answer(answer.header(HEADER), expected) {
        return if answer.status.is_success() {
            Ok(answer.elapsed)
        } else {
            Err(Failure {
                cause: "status",
                detail: format!("portaria answered HTTP {code}"),
            })
        };
    }
    let error = serde_json::from_slice::<serde_json::Value>(&answer.body)
        .ok()
        .and_then(|v| Some(v.get("error")?.as_str()?.to_string()));
    let (cause, detail) = match (code, error) {
        (401, Some(error)) => (
            "not_portaria",
            format!(
                "HTTP 401 ({error}): another portaria answers at public_url, one that cannot \
                 verify this one's probe"
            ),
        ),
        (404, Some(error)) => (
            "not_portaria",
            format!("HTTP 404 ({error}): a server without the canary's path answers at public_url"),
        ),
        (_, Some(error)) if !answer.status.is_success() => {
            ("status", format!("portaria answered HTTP {code} ({error})"))
        }
        _ => (
            "not_portaria",
            format!(
                "HTTP {code} without portaria's proof (the tunnel's own page?): {}",
                excerpt(&answer.body)
            ),
        ),
    };
    Err(Failure { cause, detail })
}

/// The first 120 characters of a body, one line of printable text.
fn excerpt(body: &[u8]) -> String {
    let text: String = String::from_utf8_lossy(body)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(120)
        .collect();
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() {
        "an empty body".to_string()
    } else {
        format!("\"{text}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue, StatusCode};

    fn answer(code: u16, proof: Option<&str>, body: &str) -> Result<Answer, outbound::Error> {
        let mut headers = HeaderMap::new();
        if let Some(proof) = proof {
            headers.insert(HEADER, HeaderValue::from_str(proof).unwrap());
        }
        Ok(Answer {
            status: StatusCode::from_u16(code).unwrap(),
            headers,
            body: body.to_string().into(),
            elapsed: Duration::from_millis(7),
        })
    }

    fn cause(sent: Result<Answer, outbound::Error>) -> &'static str {
        judge(sent, "v1=ab").unwrap_err().cause
    }

    #[test]
    fn only_an_answer_with_the_proof_is_a_success() {
        assert_eq!(
            judge(answer(200, Some("v1=ab"), "{}"), "v1=ab"),
            Ok(Duration::from_millis(7))
        );
        assert_eq!(cause(answer(200, Some("v1=cd"), "{}")), "not_portaria");
        assert_eq!(cause(answer(200, None, "ok")), "not_portaria");
        let page = judge(
            answer(502, None, "<html>\n<b>Bad gateway</b>\n</html>"),
            "v1=ab",
        )
        .unwrap_err();
        assert_eq!(page.cause, "not_portaria");
        assert!(
            page.detail.contains("HTTP 502 without portaria's proof"),
            "{}",
            page.detail
        );
        assert!(
            page.detail
                .contains("\"<html> <b>Bad gateway</b> </html>\""),
            "{}",
            page.detail
        );
        let other = judge(
            answer(401, None, r#"{"error":"invalid signature"}"#),
            "v1=ab",
        )
        .unwrap_err();
        assert_eq!(other.cause, "not_portaria");
        assert!(
            other.detail.contains("another portaria"),
            "{}",
            other.detail
        );
        assert_eq!(
            cause(answer(404, None, r#"{"error":"no endpoint at this path"}"#)),
            "not_portaria"
        );
        let busy = judge(
            answer(503, None, r#"{"error":"too many bodies in memory"}"#),
            "v1=ab",
        )
        .unwrap_err();
        assert_eq!(
            (busy.cause, busy.detail.as_str()),
            (
                "status",
                "portaria answered HTTP 503 (too many bodies in memory)"
            )
        );
        let dns = Err(outbound::Error::Dns {
            host: "h".into(),
            why: "no such host".into(),
        });
        assert_eq!(cause(dns), "dns");
        for c in [
            "dns",
            "connect",
            "tls",
            "timeout",
            "http",
            "status",
            "not_portaria",
        ] {
            assert!(CAUSES.contains(&c));
        }
    }
}
