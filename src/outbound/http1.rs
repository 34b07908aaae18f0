//! HTTP/1.1 for one request over one connection (RFC 9112): the request written whole, the
//! answer's head parsed by `httparse` (hyper's own parser, already in the binary), its body
//! framed by `Content-Length`, `chunked` (chunk sizes parsed by `httparse` too) or the
//! connection's end, never more than the limit.
//!
//! Framing follows RFC 9112 §6.3 and is strict where a lenient reader would guess: a
//! `Transfer-Encoding` wins over `Content-Length` (chunked when it is the last coding, else
//! the body runs to the connection's end); a `Content-Length` is digits only, and several must
//! agree; a chunk size line starts with a hex digit. One request per connection
//! (`Connection: close`) leaves no next answer to confuse, but a body read wrong would still
//! be a wrong body.
//!
//! Why not hyper's client, which the forward target uses: its connection code is generic over
//! the stream, and another copy of it for these streams is bytes the Pi's 6 MiB binary budget
//! does not have: this file in its place made the stripped release binary 16,000 bytes smaller
//! (6,360,688 to 6,344,688, `cargo build --release`, x86_64). With `Connection: close`, no
//! pipelining, no upgrades and no request body streamed, what is left of HTTP/1.1 is this
//! file.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Io;

/// The answer's head may not be larger than this, nor have more headers.
const MAX_HEAD: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;

/// How a read went wrong: broke (with why) or grew past the limit.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Broke {
    Http(String),
    TooLarge,
}

/// The request's bytes: head and body.
pub(super) fn request_bytes(
    method: &http::Method,
    target: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    // Names and values are valid by construction (`http`'s types refuse CR, LF and NUL).
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// Sends `request` (from [`request_bytes`]) and reads the whole answer, its body at most `max`
/// bytes. `head_only`: the request was a HEAD, whose answer has no body.
pub(super) async fn exchange(
    io: &mut dyn Io,
    request: &[u8],
    head_only: bool,
    max: usize,
) -> Result<(StatusCode, HeaderMap, Bytes), Broke> {
    let broke = |what: &str, e: std::io::Error| Broke::Http(format!("{what}: {e}"));
    io.write_all(request)
        .await
        .map_err(|e| broke("sending the request", e))?;
    io.flush()
        .await
        .map_err(|e| broke("sending the request", e))?;
    let mut buf = Vec::with_capacity(8 * 1024);
    let (status, headers) = loop {
        match head(&buf)? {
            Some((used, status, headers)) => {
                buf.drain(..used);
                // Nothing here asks to switch protocols: a 101 is not an answer to read on.
                if status == StatusCode::SWITCHING_PROTOCOLS {
                    return Err(Broke::Http("a protocol switch nobody asked for".into()));
                }
                // An interim answer (100 Continue, 103 Early Hints): the real one follows.
                if status.is_informational() {
                    continue;
                }
                break (status, headers);
            }
            None if buf.len() > MAX_HEAD => {
                return Err(Broke::Http("the answer's head is too large".into()));
            }
            None => {
                if read_more(io, &mut buf).await? == 0 {
                    return Err(Broke::Http("the connection closed before an answer".into()));
                }
            }
        }
    };
    let body =
        if head_only || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
            Bytes::new()
        } else if headers.contains_key(http::header::TRANSFER_ENCODING) {
            // It wins over any Content-Length; not chunked last, only the end frames it.
            if chunked(&headers) {
                chunks(io, buf, max).await?
            } else {
                to_the_end(io, buf, max).await?
            }
        } else if let Some(length) = content_length(&headers)? {
            if length > max {
                return Err(Broke::TooLarge);
            }
            while buf.len() < length {
                if read_more(io, &mut buf).await? == 0 {
                    return Err(Broke::Http("the answer broke off".into()));
                }
            }
            buf.truncate(length);
            Bytes::from(buf)
        } else {
            // Neither: the body ends with the connection.
            to_the_end(io, buf, max).await?
        };
    Ok((status, headers, body))
}

/// A body that ends with the connection, `buf` holding what was read past the head.
async fn to_the_end(io: &mut dyn Io, mut buf: Vec<u8>, max: usize) -> Result<Bytes, Broke> {
    loop {
        // Checked before each read: what came with the head may be past the limit already.
        if buf.len() > max {
            return Err(Broke::TooLarge);
        }
        if read_more(io, &mut buf).await? == 0 {
            return Ok(Bytes::from(buf));
        }
    }
}

/// The answer's head, if `buf` holds all of it: its length, status and headers.
fn head(buf: &[u8]) -> Result<Option<(usize, StatusCode, HeaderMap)>, Broke> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut answer = httparse::Response::new(&mut slots);
    let used = match answer.parse(buf) {
        // However it arrived (a read brings up to 8 KiB), a head is held to its bound.
        Ok(httparse::Status::Complete(used)) if used > MAX_HEAD => {
            return Err(Broke::Http("the answer's head is too large".into()));
        }
        Ok(httparse::Status::Complete(used)) => used,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(Broke::Http(format!("not an HTTP answer: {e}"))),
    };
    let status = answer
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or_else(|| Broke::Http("not an HTTP status".into()))?;
    let mut headers = HeaderMap::with_capacity(answer.headers.len());
    for h in answer.headers.iter() {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_bytes(h.value),
        ) else {
            return Err(Broke::Http("a header that is not valid".into()));
        };
        headers.append(name, value);
    }
    Ok(Some((used, status, headers)))
}

fn chunked(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .last()
        .is_some_and(|coding| coding.trim().eq_ignore_ascii_case("chunked"))
}

/// `Content-Length`, if given; several that disagree, or one that is not digits only (`+5`,
/// `5, 5`, `-1`: Rust's `parse` alone takes the first), is an error.
fn content_length(headers: &HeaderMap) -> Result<Option<usize>, Broke> {
    let mut length = None;
    for value in headers.get_all(http::header::CONTENT_LENGTH) {
        let digits = value.as_bytes().trim_ascii();
        let n: usize = (!digits.is_empty() && digits.iter().all(u8::is_ascii_digit))
            .then(|| std::str::from_utf8(digits).ok()?.parse().ok())
            .flatten()
            .ok_or_else(|| Broke::Http("a Content-Length that is not a number".into()))?;
        if length.is_some_and(|l| l != n) {
            return Err(Broke::Http("two different Content-Lengths".into()));
        }
        length = Some(n);
    }
    Ok(length)
}

/// A chunked body, `buf` holding what was read past the head. Trailers are not read: the
/// connection closes after this answer anyway.
async fn chunks(io: &mut dyn Io, mut buf: Vec<u8>, max: usize) -> Result<Bytes, Broke> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        match httparse::parse_chunk_size(&buf[at..]) {
            // httparse reads a line without digits (`\r\n`, `;x\r\n`) as size 0: the end.
            Ok(httparse::Status::Complete(_)) if !buf[at].is_ascii_hexdigit() => {
                return Err(Broke::Http("a chunk size that is not one".into()));
            }
            Ok(httparse::Status::Complete((used, size))) => {
                at += used;
                if size == 0 {
                    return Ok(Bytes::from(body));
                }
                let size = usize::try_from(size).map_err(|_| Broke::TooLarge)?;
                if body.len().saturating_add(size) > max {
                    return Err(Broke::TooLarge);
                }
                while buf.len() < at + size + 2 {
                    if read_more(io, &mut buf).await? == 0 {
                        return Err(Broke::Http("the answer broke off in a chunk".into()));
                    }
                }
                body.extend_from_slice(&buf[at..at + size]);
                if &buf[at + size..at + size + 2] != b"\r\n" {
                    return Err(Broke::Http("a chunk that does not end as one".into()));
                }
                at += size + 2;
                // Keep the buffer to what is not yet read.
                buf.drain(..at);
                at = 0;
            }
            Ok(httparse::Status::Partial) if buf.len() - at > 1024 => {
                return Err(Broke::Http("a chunk size line that never ends".into()));
            }
            Ok(httparse::Status::Partial) => {
                if read_more(io, &mut buf).await? == 0 {
                    return Err(Broke::Http("the answer broke off between chunks".into()));
                }
            }
            Err(_) => return Err(Broke::Http("a chunk size that is not one".into())),
        }
    }
}

/// Reads what comes next onto the end of `buf`; 0 at the connection's end.
async fn read_more(io: &mut dyn Io, buf: &mut Vec<u8>) -> Result<usize, Broke> {
    let start = buf.len();
    buf.resize(start + 8 * 1024, 0);
    let read = io.read(&mut buf[start..]).await;
    let n = *read.as_ref().unwrap_or(&0);
    buf.truncate(start + n);
    read.map_err(|e| Broke::Http(format!("reading the answer: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    type Read = Result<(StatusCode, HeaderMap, Bytes), Broke>;

    /// The answer to a GET from a peer that sends `answer` in pieces of `piece` bytes, then
    /// closes; the body at most `max` bytes.
    async fn exchange_with(answer: &[u8], piece: usize, max: usize) -> Read {
        let request = request_bytes(&http::Method::GET, "/x?y=1", &HeaderMap::new(), b"");
        let (got, sent) = talk(&request, answer, piece, false, max).await;
        assert_eq!(sent, b"GET /x?y=1 HTTP/1.1\r\n\r\n");
        got
    }

    /// What [`exchange`] made of `answer`, and the bytes the peer received.
    async fn talk(
        request: &[u8],
        answer: &[u8],
        piece: usize,
        head_only: bool,
        max: usize,
    ) -> (Read, Vec<u8>) {
        let (mut ours, mut theirs) = tokio::io::duplex(64 * 1024);
        let answer = answer.to_vec();
        let peer = tokio::spawn(async move {
            let mut request = vec![0u8; 4096];
            let n = theirs.read(&mut request).await.unwrap();
            request.truncate(n);
            for part in answer.chunks(piece) {
                // Our side may have given up already (too large, broken): it has stopped
                // reading, which is no failure of the peer's.
                if theirs.write_all(part).await.is_err() {
                    break;
                }
                tokio::task::yield_now().await;
            }
            request
        });
        let got = exchange(&mut ours, request, head_only, max).await;
        drop(ours);
        (got, peer.await.unwrap())
    }

    fn body(got: Read) -> Vec<u8> {
        got.unwrap().2.to_vec()
    }

    #[test]
    fn the_request_is_its_head_then_its_body() {
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("api.example"));
        headers.insert("content-length", HeaderValue::from(2));
        let bytes = request_bytes(&http::Method::POST, "/v1/x?a=b", &headers, b"{}");
        assert_eq!(
            bytes,
            b"POST /v1/x?a=b HTTP/1.1\r\nhost: api.example\r\ncontent-length: 2\r\n\r\n{}"
        );
    }

    #[tokio::test]
    async fn a_content_length_frames_the_body_in_any_pieces() {
        let length = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello";
        for piece in [1, 3, 1000] {
            let (status, headers, body) = exchange_with(length, piece, 100).await.unwrap();
            assert_eq!((status.as_u16(), &body[..]), (200, &b"hello"[..]));
            assert_eq!(headers["x-a"], "b");
        }
        // Bytes past the length are not the body (and the connection closes anyway).
        let more = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhello";
        assert_eq!(body(exchange_with(more, 1000, 100).await), b"he");
        // Several that agree are one; blanks around it are not part of it.
        let twice = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length:  2 \r\n\r\nhi";
        assert_eq!(body(exchange_with(twice, 1000, 100).await), b"hi");
        let none = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(body(exchange_with(none, 1000, 100).await), b"");
    }

    #[tokio::test]
    async fn chunks_frame_the_body_and_win_over_a_content_length() {
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\n\r\n";
        for piece in [1, 4, 1000] {
            assert_eq!(
                body(exchange_with(chunked, piece, 100).await),
                b"hello, world"
            );
        }
        let both = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: gzip, Chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n";
        assert_eq!(body(exchange_with(both, 1000, 100).await), b"0123456789");
    }

    #[tokio::test]
    async fn without_either_or_with_another_coding_last_the_end_frames_the_body() {
        let to_end = b"HTTP/1.1 502 Bad Gateway\r\n\r\n<html>down</html>";
        let (status, _, body) = exchange_with(to_end, 2, 100).await.unwrap();
        assert_eq!(
            (status.as_u16(), &body[..]),
            (502, &b"<html>down</html>"[..])
        );
        let old = b"HTTP/1.0 200 OK\r\n\r\nall of it";
        assert_eq!(
            self::body(exchange_with(old, 1000, 100).await),
            b"all of it"
        );
        // Not chunked last: the Content-Length is not the frame, the end is.
        let coded = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\nContent-Length: 2\r\n\r\n2\r\nab\r\n0\r\n\r\n";
        assert_eq!(
            self::body(exchange_with(coded, 1000, 100).await),
            b"2\r\nab\r\n0\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn some_answers_have_no_body_whatever_their_head_says() {
        let interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\nContent-Length: 4\r\n\r\n";
        for piece in [1, 1000] {
            let (status, _, body) = exchange_with(interim, piece, 100).await.unwrap();
            assert_eq!((status.as_u16(), body.len()), (204, 0));
        }
        let unchanged = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 4\r\n\r\n";
        assert_eq!(body(exchange_with(unchanged, 1000, 100).await), b"");
        let head = request_bytes(&http::Method::HEAD, "/", &HeaderMap::new(), b"");
        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 4000\r\n\r\n";
        let (got, sent) = talk(&head, answer, 1000, true, 100).await;
        assert_eq!(sent, b"HEAD / HTTP/1.1\r\n\r\n");
        let (status, headers, body) = got.unwrap();
        assert_eq!((status.as_u16(), body.len()), (200, 0));
        assert_eq!(headers["content-length"], "4000");
    }

    #[tokio::test]
    async fn a_body_past_the_limit_is_too_large_however_it_is_framed() {
        let declared = b"HTTP/1.1 200 OK\r\nContent-Length: 101\r\n\r\n";
        assert_eq!(
            exchange_with(declared, 1000, 100).await.unwrap_err(),
            Broke::TooLarge
        );
        let chunk = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n";
        assert_eq!(
            exchange_with(chunk, 1000, 63).await.unwrap_err(),
            Broke::TooLarge
        );
        // Chunks each under the limit, their sum over it.
        let sum = [
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            b"20\r\n",
            &[b'x'; 32],
            b"\r\n20\r\n",
            &[b'x'; 32],
            b"\r\n0\r\n\r\n",
        ]
        .concat();
        assert_eq!(
            exchange_with(&sum, 1000, 63).await.unwrap_err(),
            Broke::TooLarge
        );
        assert_eq!(body(exchange_with(&sum, 1000, 64).await).len(), 64);
        let huge = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffff\r\n";
        assert_eq!(
            exchange_with(huge, 1000, 100).await.unwrap_err(),
            Broke::TooLarge
        );
        // To the end: in pieces, and all at once with the head (one read, then the end).
        let to_end = [&b"HTTP/1.1 200 OK\r\n\r\n"[..], &[b'x'; 200]].concat();
        for piece in [7, 1000] {
            assert_eq!(
                exchange_with(&to_end, piece, 100).await.unwrap_err(),
                Broke::TooLarge
            );
        }
        assert_eq!(body(exchange_with(&to_end, 1000, 200).await).len(), 200);
    }

    #[tokio::test]
    async fn a_head_off_the_grammar_or_past_its_bounds_is_broken() {
        let many = format!(
            "HTTP/1.1 200 OK\r\n{}\r\n",
            "X-A: b\r\n".repeat(MAX_HEADERS + 1)
        );
        let long = format!("HTTP/1.1 200 OK\r\nX-A: {}\r\n\r\n", "b".repeat(MAX_HEAD));
        let endless = format!("HTTP/1.1 200 OK\r\nX-A: {}", "b".repeat(MAX_HEAD * 2));
        for bad in [
            &b""[..],
            b"HTTP/1.1 200 OK\r\nX-A: b\r\n",
            b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
            b"HTTP/2 200\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"HTTP/1.1 099 Low\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX A: b\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-A: b\0c\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-A: b\r\n folded\r\n\r\n",
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            many.as_bytes(),
            long.as_bytes(),
            endless.as_bytes(),
        ] {
            let e = exchange_with(bad, 1000, 100).await.unwrap_err();
            assert!(matches!(e, Broke::Http(_)), "{bad:?}: {e:?}");
        }
    }

    #[tokio::test]
    async fn a_frame_off_the_grammar_or_broken_off_is_broken() {
        for bad in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n;x\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n 2\r\nab\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\nab\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n",
        ] {
            let e = exchange_with(bad, 1000, 100).await.unwrap_err();
            assert!(matches!(e, Broke::Http(_)), "{bad:?}: {e:?}");
        }
        let endless = [
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;"[..],
            &[b'x'; 2000],
        ]
        .concat();
        let e = exchange_with(&endless, 1000, 100).await.unwrap_err();
        assert_eq!(e, Broke::Http("a chunk size line that never ends".into()));
    }
}
