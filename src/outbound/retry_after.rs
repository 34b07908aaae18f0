//! `Retry-After` (RFC 9110 §10.2.3): a number of seconds, or an HTTP date. The date is read
//! by `httpdate`, which hyper already links for its own `Date` header.

use std::time::{Duration, SystemTime};

/// How long from `now` the value asks to wait; None for a value that is neither form. A date
/// in the past is no wait at all.
pub fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // A number too large for u64 is a very long wait, not no wait.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_dates_are_read_and_anything_else_is_not() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            retry_after("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
        // RFC 9110's example date is 784111777; a minute later.
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:50:37 GMT", now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:48:37 GMT", now),
            Some(Duration::ZERO),
            "a date past is no wait"
        );
        for bad in ["", "-5", "1.5", "soon", "Sun, 06 Nov 1994"] {
            assert_eq!(retry_after(bad, now), None, "{bad:?}");
        }
    }
}
