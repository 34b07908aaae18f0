//! `portaria send`: a script that signs HMAC and fires POSTs, built in. It
//! signs a payload exactly as the endpoint's provider would (current timestamp, a fresh
//! delivery id where the scheme has one) and POSTs it to a running portaria, so the whole chain
//! can be tested locally without a gateway. `--repeat` resends the identical delivery, to watch
//! deduplication work.
//!
//! `prepare` and `fire` are the library part (public, for the integration tests); `run` is the
//! command itself.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::SendArgs;
use crate::config::{Config, Endpoint};
use crate::time::unix_secs;

/// One answer, as printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// The signed request `send` fires: the headers the provider would send, and the body.
#[derive(Debug, Clone)]
pub struct Signed {
    pub url: Uri,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

/// Builds the request for `endpoint`: where it goes (`url`, else the server's own listen
/// address and the endpoint's path, plus the query string the scheme signs, if any) and its
/// provider's signature headers. A provider that signs with its private key cannot be
/// imitated: that is an error.
pub fn prepare(
    config: &Config,
    endpoint: &Endpoint,
    body: Vec<u8>,
    url: Option<&str>,
) -> Result<Signed, String> {
    let url = match url {
        Some(url) => url.to_string(),
        None => {
            let mut addr = config.server.listen;
            if addr.ip().is_unspecified() {
                // Listening on every interface: reach it over loopback.
                addr.set_ip(if addr.is_ipv4() {
                    std::net::Ipv4Addr::LOCALHOST.into()
                } else {
                    std::net::Ipv6Addr::LOCALHOST.into()
                });
            }
            format!("http://{addr}{}", endpoint.path)
        }
    };
    let now = SystemTime::now();
    let verifier = &endpoint.verifier;
    let signed = verifier
        .sign_request(&body, unix_secs(now), &delivery_id(now))
        .ok_or_else(|| cannot_sign(verifier.provider()))?;
    let url = match &signed.query {
        Some(query) => with_query(&url, query)?,
        None => url,
    };
    let url: Uri = url
        .parse()
        .map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    if url.scheme_str() != Some("http") {
        return Err(format!(
            "`{url}`: only http:// URLs (portaria listens on plain HTTP behind its tunnel)"
        ));
    }
    let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
    headers.extend(signed.headers);
    Ok(Signed {
        url,
        headers,
        body: Bytes::from(body),
    })
}

/// Why `send` cannot sign for an asymmetric scheme (the config holds only a public key).
fn cannot_sign(provider: &str) -> String {
    format!(
        "cannot sign for provider {provider}: it verifies with the provider's public key, and \
         only the provider holds the private one"
    )
}

/// `url` with the signed `query` added to its query string (before any `#fragment`). A
/// parameter the URL already has with the same value is not added again (a provider that signs
/// `data.id` would see it twice, and refuse the request); with another value, the URL
/// contradicts what is signed, and that is an error.
fn with_query(url: &str, query: &str) -> Result<String, String> {
    let (base, fragment) = match url.find('#') {
        Some(at) => url.split_at(at),
        None => (url, ""),
    };
    let given: Vec<(String, String)> = base
        .split_once('?')
        .map(|(_, q)| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let mut added = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let Some((name, value)) = form_urlencoded::parse(pair.as_bytes()).next() else {
            continue;
        };
        match given.iter().find(|(n, _)| *n == name) {
            None => added.push(pair),
            Some((_, v)) if *v == value => {}
            Some(_) => {
                return Err(format!(
                    "`{url}` has a `{name}` other than the one the payload signs; leave it out \
                     of --url (send adds it)"
                ));
            }
        }
    }
    if added.is_empty() {
        return Ok(url.to_string());
    }
    let join = match base.find('?') {
        None => "?",
        Some(_) if base.ends_with('?') || base.ends_with('&') => "",
        Some(_) => "&",
    };
    Ok(format!("{base}{join}{}{fragment}", added.join("&")))
}

/// A delivery id that is new on every run: `dlv_` and the time in nanoseconds, in hex.
fn delivery_id(now: SystemTime) -> String {
    let nanos = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("dlv_{nanos:x}{:x}", std::process::id())
}

/// POSTs the same signed request `repeat` times, one after the other, calling `each` with
/// every answer as it comes.
pub async fn fire(
    signed: &Signed,
    repeat: usize,
    mut each: impl FnMut(usize, &Result<Answer, String>),
) -> Vec<Result<Answer, String>> {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut answers = Vec::with_capacity(repeat);
    for n in 0..repeat {
        let answer = post(&client, signed).await;
        each(n + 1, &answer);
        answers.push(answer);
    }
    answers
}

async fn post(
    client: &Client<HttpConnector, Full<Bytes>>,
    signed: &Signed,
) -> Result<Answer, String> {
    let mut request = Request::post(signed.url.clone());
    for (name, value) in &signed.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request
        .body(Full::new(signed.body.clone()))
        .map_err(|e| format!("cannot build the request: {e}"))?;
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| format!("cannot reach {}: {e}", signed.url))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("cannot read the answer: {e}"))?;
        Ok(Answer {
            status,
            body: String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        })
    };
    tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer from {} within 30 s", signed.url)))
}

/// The `send` command: reads the payload, signs it, fires it `--repeat` times and prints
/// every answer; exit 0 only if every answer was a 2xx.
pub(super) fn run(config: Option<&Path>, args: SendArgs) -> Result<ExitCode, String> {
    // Only this endpoint's secrets: testing one gateway needs no other gateway's secret.
    let config = crate::config::Config::load_for_endpoint(config, &args.endpoint)
        .map_err(|e| format!("invalid configuration\n{e}"))?;
    let endpoint = super::find_endpoint(&config, &args.endpoint)?;
    let body = match (&args.data, &args.file) {
        (Some(data), _) => data.clone().into_bytes(),
        (None, Some(path)) if path.as_os_str() == "-" => {
            let mut body = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut body)
                .map_err(|e| format!("cannot read the payload from stdin: {e}"))?;
            body
        }
        (None, Some(path)) => {
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?
        }
        (None, None) => return Err("give the payload with --data or --file".into()),
    };
    let signed = prepare(&config, endpoint, body, args.url.as_deref())?;
    let runtime = super::command_runtime()?;
    // 1..=1000, by its parser.
    let repeat = usize::try_from(args.repeat).unwrap_or(1);
    println!(
        "POST {} ({} bytes, signed as {})",
        signed.url,
        signed.body.len(),
        endpoint.verifier.provider()
    );
    let answers = runtime.block_on(fire(&signed, repeat, |n, answer| match answer {
        Ok(a) => println!("{n}/{repeat}: {} {}", a.status, a.body.trim()),
        Err(e) => println!("{n}/{repeat}: failed: {e}"),
    }));
    let all_ok = answers
        .iter()
        .all(|a| a.as_ref().is_ok_and(|a| (200..300).contains(&a.status)));
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_query_joins_the_url_with_the_right_separator() {
        let with_query = |url: &str, q: &str| super::with_query(url, q).unwrap();
        let q = "signature=ab%2Bc&ts=1";
        assert_eq!(
            with_query("http://h/w/x", q),
            "http://h/w/x?signature=ab%2Bc&ts=1"
        );
        assert_eq!(
            with_query("http://h/w/x?data.id=1", q),
            "http://h/w/x?data.id=1&signature=ab%2Bc&ts=1"
        );
        assert_eq!(
            with_query("http://h/w/x?", q),
            "http://h/w/x?signature=ab%2Bc&ts=1"
        );
        assert_eq!(
            with_query("http://h/w/x?a=1&", q),
            "http://h/w/x?a=1&signature=ab%2Bc&ts=1"
        );
        assert_eq!(
            with_query("http://h/w/x#top", q),
            "http://h/w/x?signature=ab%2Bc&ts=1#top"
        );
    }

    #[test]
    fn a_parameter_the_url_already_has_is_not_added_twice() {
        assert_eq!(
            with_query("http://h/w/mp?data.id=43", "data.id=43"),
            Ok("http://h/w/mp?data.id=43".to_string())
        );
        assert_eq!(
            with_query("http://h/w/mp?type=payment&data.id=43", "data.id=43&ts=1"),
            Ok("http://h/w/mp?type=payment&data.id=43&ts=1".to_string())
        );
        assert_eq!(
            with_query("http://h/w/mp?data.id=43#x", "data.id=43"),
            Ok("http://h/w/mp?data.id=43#x".to_string())
        );
        let contradicts = with_query("http://h/w/mp?data.id=44", "data.id=43").unwrap_err();
        assert!(
            contradicts.contains("has a `data.id` other than"),
            "{contradicts}"
        );
    }

    #[test]
    fn the_refusal_to_sign_says_who_holds_the_key() {
        assert_eq!(
            format!("portaria: {}", cannot_sign("x")),
            "portaria: cannot sign for provider x: it verifies with the provider's public key, \
             and only the provider holds the private one"
        );
    }
}
