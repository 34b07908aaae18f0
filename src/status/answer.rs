//! The shape of every answer of the status page: the headers each carries ([`secure`]), a
//! page said in the visitor's language ([`html`]), a plain body ([`respond`]), and the
//! redirect after a POST ([`redirect`]).

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::Full;

use super::text::{self, Lang};

/// What every handler of the status page answers.
pub(super) type Answer = Response<Full<Bytes>>;

/// Headers every answer of the page carries: nothing from elsewhere may run, frame or load.
pub(super) fn secure(headers: &mut HeaderMap) {
    let set = |headers: &mut HeaderMap, name: &'static str, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(
        headers,
        "content-security-policy",
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'",
    );
    set(headers, "x-content-type-options", "nosniff");
    set(headers, "x-frame-options", "DENY");
    // Not `no-referrer`: with it, a browser sends `Origin: null` on the page's own forms,
    // which the CSRF check refuses.
    set(headers, "referrer-policy", "same-origin");
    set(headers, "cache-control", "no-store");
}

pub(super) fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Answer {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// A page, said in `lang` (`Accept-Language`'s choice): caches keep one per language.
pub(super) fn html(status: StatusCode, markup: maud::Markup, lang: Lang) -> Answer {
    vary(respond(
        status,
        "text/html; charset=utf-8",
        text::localize(&markup.into_string(), lang),
    ))
}

pub(super) fn vary(mut answer: Answer) -> Answer {
    answer
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static("accept-language"));
    answer
}

/// 303 See Other: after a POST, the browser GETs the page (a reload never repeats it).
pub(super) fn redirect(to: &str) -> Answer {
    let mut r = respond(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "");
    if let Ok(location) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, location);
    }
    r
}
