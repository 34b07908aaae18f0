//! `loadgen`: sends a planned mix of signed payment webhooks to one URL over keep-alive HTTP/1
//! connections and reports throughput, latency and answers.
//!
//! Everything that costs CPU on the client side (bodies, signatures, the plan) is done before
//! the clock starts, and every connection is opened before it too, so the measured time is
//! spent sending and waiting. Each of the `--concurrency` workers owns one connection and sends
//! one request at a time on it; a racing copy goes out on the worker's second connection at
//! the same instant as its original (so up to twice the concurrency is briefly in flight).
//!
//! Two ways to pace:
//! - closed loop (default): each worker sends its next request as soon as the previous answer
//!   is in; this finds the throughput.
//! - open loop (`--rate R`): request k is due at k/R seconds. A worker that is still busy when
//!   a request falls due counts its latency from the due time, not from when it got around to
//!   sending, so a slow server cannot hide its queueing (no coordinated omission).
//!
//! `https://` URLs (portaria with `[server] tls`) take `--ca FILE`, the PEM the server's
//! certificate chains to; each connection does its TLS handshake once, before the clock starts
//! (or when it is reopened after an error), and then carries keep-alive requests.
//!
//! Output: a table on stderr, one JSON object on stdout (and in `--json-out`), the dedup keys
//! of every unique event that earned a 2xx in `--acked-out`, and the keys of the bad-signature
//! events in `--bad-out`, for the caller to check against the database.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use clap::Parser;
use http::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use loadgen::payload::{self, Rng};
use loadgen::plan::{Kind, Plan};
use loadgen::report::{self, Percentiles, Sample};
use loadgen::sign::{self, Provider};
use tokio::net::TcpStream;

#[derive(Debug, Parser)]
#[command(
    name = "loadgen",
    about = "Send signed payment webhooks at a receiver and measure it"
)]
struct Args {
    /// Where to POST, e.g. http://127.0.0.1:8080/webhooks/pagarme, or https:// with `--ca`.
    #[arg(long)]
    url: String,
    /// For an https:// URL: the CA certificate (PEM) the server's certificate chains to.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// Which preset's signature to send.
    #[arg(long, value_enum, default_value = "pagarme")]
    provider: Provider,
    /// The endpoint's secret (Stripe: the whole `whsec_...` string).
    #[arg(long)]
    secret: String,
    /// Total requests, re-sends and bad signatures included.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Workers, each with its own keep-alive connection.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Share of requests that are exact re-sends of an event (half racing, half later).
    #[arg(long, default_value_t = 0.2)]
    dup_ratio: f64,
    /// Share of requests with a spoiled signature.
    #[arg(long, default_value_t = 0.01)]
    bad_sig_ratio: f64,
    /// Stop starting requests after this many seconds.
    #[arg(long, default_value_t = 120.0)]
    max_secs: f64,
    /// Open-loop pacing in requests per second; without it, as fast as answers come.
    #[arg(long)]
    rate: Option<f64>,
    /// Give up on one request after this many seconds (counted as `error`).
    #[arg(long, default_value_t = 30.0)]
    timeout_secs: f64,
    /// Seed for the bodies and the plan: the same seed sends the same bytes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write the JSON report here.
    #[arg(long)]
    json_out: Option<PathBuf>,
    /// Write the dedup key of every unique event that got a 2xx here, one per line.
    #[arg(long)]
    acked_out: Option<PathBuf>,
    /// Write the dedup key of every bad-signature event sent here, one per line.
    #[arg(long)]
    bad_out: Option<PathBuf>,
    /// A name for this run in the report.
    #[arg(long, default_value = "run")]
    label: String,
}

/// Where requests go, parsed once.
struct Target {
    /// `host:port` to connect to.
    addr: String,
    /// The `Host` header.
    host: HeaderValue,
    path: String,
    /// https://: the TLS client and the name the certificate must carry.
    tls: Option<(
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    )>,
}

/// One event's request, ready to send many times.
struct Prepared {
    body: Bytes,
    signature: (HeaderName, HeaderValue),
    /// The body's top-level id, for the dedup key of a `json:/id` preset.
    id: String,
}

/// What the workers share. Read-only but for the slot counter.
struct Shared {
    target: Target,
    prepared: Vec<Prepared>,
    plan: Plan,
    /// The next slot to take.
    next: AtomicUsize,
    start: Instant,
    /// No slot starts after this.
    deadline: Instant,
    /// With `--rate`: when each slot falls due, from `start`.
    due: Option<Vec<Duration>>,
    timeout: Duration,
}

/// What one worker saw.
#[derive(Default)]
struct Tally {
    samples: Vec<Sample>,
    /// Good events that earned at least one 2xx (may repeat).
    acked: Vec<usize>,
    /// Bad-signature events that were sent.
    bad_sent: Vec<usize>,
    /// Bad-signature requests that were answered 2xx: a verification miss.
    bad_accepted: u64,
    originals_sent: u64,
    errors: Vec<String>,
    connections: u64,
}

/// A keep-alive HTTP/1 connection that reopens itself after an error.
struct Conn {
    sender: Option<SendRequest<Full<Bytes>>>,
    opened: u64,
}

impl Conn {
    async fn open(target: &Target) -> Result<Conn, String> {
        let mut conn = Conn {
            sender: None,
            opened: 0,
        };
        conn.connect(target).await?;
        Ok(conn)
    }

    async fn connect(&mut self, target: &Target) -> Result<&mut SendRequest<Full<Bytes>>, String> {
        let stream = TcpStream::connect(&target.addr)
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", target.addr))?;
        // Requests are small and written whole; Nagle would only add delay.
        let _ = stream.set_nodelay(true);
        let failed = |e: hyper::Error| format!("HTTP handshake with {} failed: {e}", target.addr);
        let sender = match &target.tls {
            None => {
                let (sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .map_err(failed)?;
                // The connection task ends when the sender is dropped or the peer closes.
                tokio::spawn(connection);
                sender
            }
            Some((connector, name)) => {
                let stream = connector
                    .connect(name.clone(), stream)
                    .await
                    .map_err(|e| format!("TLS handshake with {} failed: {e}", target.addr))?;
                let (sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .map_err(failed)?;
                tokio::spawn(connection);
                sender
            }
        };
        self.opened += 1;
        Ok(self.sender.insert(sender))
    }

    /// Sends one request; the status, or 0 and why when no answer came.
    async fn send(&mut self, shared: &Shared, p: &Prepared) -> (u16, Instant, Option<String>) {
        let result = tokio::time::timeout(shared.timeout, self.try_send(&shared.target, p)).await;
        let done = Instant::now();
        let failure = match result {
            Ok(Ok(status)) => return (status, done, None),
            Ok(Err(why)) => why,
            Err(_) => format!("no answer within {:?}", shared.timeout),
        };
        // The connection's state is unknown now; start the next request on a fresh one.
        self.sender = None;
        (0, done, Some(failure))
    }

    async fn try_send(&mut self, target: &Target, p: &Prepared) -> Result<u16, String> {
        let sender = match self.sender.take() {
            Some(sender) if !sender.is_closed() => self.sender.insert(sender),
            _ => self.connect(target).await?,
        };
        sender
            .ready()
            .await
            .map_err(|e| format!("connection not ready: {e}"))?;
        let request = http::Request::post(target.path.as_str())
            .header(HOST, target.host.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(p.signature.0.clone(), p.signature.1.clone())
            .body(Full::new(p.body.clone()))
            .map_err(|e| format!("cannot build the request: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = response.status().as_u16();
        response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the answer failed: {e}"))?;
        Ok(status)
    }
}

fn parse_target(url: &str, ca: Option<&Path>) -> Result<Target, String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    let host = uri.host().ok_or_else(|| format!("`{url}` has no host"))?;
    let (tls, default_port) = match (uri.scheme_str(), ca) {
        (Some("http"), None) => (None, 80),
        (Some("https"), Some(ca)) => (Some(tls_client(ca, host)?), 443),
        (Some("https"), None) => return Err(format!("`{url}` is https: give --ca FILE")),
        _ => return Err(format!("`{url}` must be http://, or https:// with --ca")),
    };
    let port = uri.port_u16().unwrap_or(default_port);
    let authority = format!("{host}:{port}");
    Ok(Target {
        host: HeaderValue::from_str(&authority)
            .map_err(|e| format!("`{authority}` is not a Host header: {e}"))?,
        addr: authority,
        path: uri
            .path_and_query()
            .map_or("/".to_string(), |p| p.as_str().to_string()),
        tls,
    })
}

/// A TLS client (TLS 1.2 and 1.3, the ring provider, as portaria's server) trusting `ca`.
fn tls_client(
    ca: &Path,
    host: &str,
) -> Result<
    (
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    ),
    String,
> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca)
        .map_err(|e| format!("cannot read {}: {e}", ca.display()))?
    {
        let cert = cert.map_err(|e| format!("cannot read {}: {e}", ca.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: not a CA certificate: {e}", ca.display()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| format!("`{host}` is not a server name: {e}"))?;
    Ok((tokio_rustls::TlsConnector::from(Arc::new(config)), name))
}

/// Bodies and headers for every event of the plan: good ones first, then the spoiled ones.
fn prepare(args: &Args, plan: &Plan, rng: &mut Rng) -> Result<Vec<Prepared>, String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    (0..plan.unique + plan.bad)
        .map(|n| {
            let body = payload::charge_paid(rng, n as u64);
            let (name, mut value) = args.provider.sign(args.secret.as_bytes(), &body.bytes, now);
            if n >= plan.unique {
                value = sign::spoil(&value);
            }
            Ok(Prepared {
                signature: (
                    HeaderName::from_static(name),
                    HeaderValue::from_str(&value)
                        .map_err(|e| format!("signature is not a header value: {e}"))?,
                ),
                body: Bytes::from(body.bytes),
                id: body.id,
            })
        })
        .collect()
}

async fn worker(shared: Arc<Shared>, mut main: Conn, mut side: Conn) -> Tally {
    let mut tally = Tally::default();
    loop {
        let i = shared.next.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = shared.plan.slots.get(i).copied() else {
            break;
        };
        let taken = Instant::now();
        // When this request's latency starts: when it fell due, if this worker was still busy
        // then; otherwise when it is written.
        let mut overdue = None;
        if let Some(due) = shared.due.as_ref().and_then(|due| due.get(i)) {
            let due = shared.start + *due;
            if due >= shared.deadline {
                break;
            }
            if due > taken {
                tokio::time::sleep_until(due.into()).await;
            } else {
                overdue = Some(due);
            }
        } else if taken >= shared.deadline {
            break;
        }
        let Some(p) = shared.prepared.get(slot.event) else {
            break;
        };
        let from = overdue.unwrap_or_else(Instant::now);
        let mut answers = Vec::with_capacity(2);
        if slot.race {
            let (first, copy) = tokio::join!(main.send(&shared, p), side.send(&shared, p));
            answers.push((first, Kind::Original.label()));
            answers.push((copy, "racing_copy"));
        } else {
            answers.push((main.send(&shared, p).await, slot.kind.label()));
        }
        if slot.kind == Kind::Original {
            tally.originals_sent += 1;
        }
        if slot.kind == Kind::BadSignature {
            tally.bad_sent.push(slot.event);
        }
        for ((status, done, failure), kind) in answers {
            tally.samples.push(Sample {
                latency: done.saturating_duration_since(from),
                status,
                kind,
            });
            let ok = (200..300).contains(&status);
            match slot.kind {
                Kind::BadSignature if ok => tally.bad_accepted += 1,
                Kind::BadSignature => {}
                _ if ok => tally.acked.push(slot.event),
                _ => {}
            }
            if let Some(why) = failure
                && tally.errors.len() < 5
            {
                tally.errors.push(why);
            }
        }
    }
    tally.connections = main.opened + side.opened;
    tally
}

fn write_lines(path: &Path, lines: &BTreeSet<String>) -> Result<(), String> {
    let mut text = String::with_capacity(lines.len() * 65);
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

async fn run(args: Args) -> Result<(), String> {
    if args.concurrency == 0 {
        return Err("--concurrency must be at least 1".into());
    }
    let positive = |x: f64| x > 0.0 && x.is_finite();
    if args.rate.is_some_and(|r| !positive(r)) {
        return Err("--rate must be a positive number".into());
    }
    if !positive(args.timeout_secs) || !positive(args.max_secs) {
        return Err("--timeout-secs and --max-secs must be positive".into());
    }
    let target = parse_target(&args.url, args.ca.as_deref())?;
    let mut rng = Rng::new(args.seed);
    let plan = Plan::new(
        args.requests,
        args.dup_ratio,
        args.bad_sig_ratio,
        args.concurrency,
        &mut rng,
    )?;
    let prepared = prepare(&args, &plan, &mut rng)?;
    let sizes: Vec<usize> = prepared.iter().map(|p| p.body.len()).collect();

    let due = args.rate.map(|rate| {
        let mut before = 0usize;
        plan.slots
            .iter()
            .map(|slot| {
                let at = Duration::from_secs_f64(before as f64 / rate);
                before += slot.requests();
                at
            })
            .collect()
    });

    // Every connection is open before the clock starts.
    let mut pairs = Vec::with_capacity(args.concurrency);
    for _ in 0..args.concurrency {
        pairs.push((Conn::open(&target).await?, Conn::open(&target).await?));
    }
    let start = Instant::now();
    let shared = Arc::new(Shared {
        target,
        prepared,
        plan,
        next: AtomicUsize::new(0),
        start,
        deadline: start + Duration::from_secs_f64(args.max_secs),
        due,
        timeout: Duration::from_secs_f64(args.timeout_secs),
    });
    let workers: Vec<_> = pairs
        .into_iter()
        .map(|(main, side)| tokio::spawn(worker(shared.clone(), main, side)))
        .collect();
    let mut tally = Tally::default();
    for handle in workers {
        let t = handle.await.map_err(|e| format!("a worker failed: {e}"))?;
        tally.samples.extend(t.samples);
        tally.acked.extend(t.acked);
        tally.bad_sent.extend(t.bad_sent);
        tally.bad_accepted += t.bad_accepted;
        tally.originals_sent += t.originals_sent;
        tally.connections += t.connections;
        if tally.errors.len() < 5 {
            tally.errors.extend(t.errors);
        }
    }
    let elapsed = start.elapsed();

    let key_of = |event: &usize| {
        shared
            .prepared
            .get(*event)
            .map(|p| args.provider.dedup_key(&p.body, &p.id))
    };
    let acked: BTreeSet<String> = tally.acked.iter().filter_map(key_of).collect();
    let bad: BTreeSet<String> = tally.bad_sent.iter().filter_map(key_of).collect();
    if let Some(path) = &args.acked_out {
        write_lines(path, &acked)?;
    }
    if let Some(path) = &args.bad_out {
        write_lines(path, &bad)?;
    }

    let mut latencies: Vec<Duration> = tally.samples.iter().map(|s| s.latency).collect();
    let latency = Percentiles::of(&mut latencies);
    let (statuses, by_kind) = report::count_statuses(&tally.samples);
    let count = |kind: &str| {
        by_kind
            .get(kind)
            .map_or(0, |counts| counts.values().sum::<u64>())
    };
    let secs = elapsed.as_secs_f64().max(1e-9);
    let answered = tally.samples.iter().filter(|s| s.status != 0).count();
    let plan = &shared.plan;
    let json = serde_json::json!({
        "label": args.label,
        "url": args.url,
        "provider": args.provider.name(),
        "concurrency": args.concurrency,
        "rate": args.rate,
        "seed": args.seed,
        "elapsed_secs": report::round3(secs),
        "requests": {
            "planned": plan.requests(),
            "sent": tally.samples.len(),
            "answered": answered,
        },
        "throughput_rps": report::round3(answered as f64 / secs),
        "acked_unique_per_sec": report::round3(acked.len() as f64 / secs),
        "latency_ms": latency.to_json(),
        "status": statuses,
        "by_kind": by_kind,
        "expected": {
            "unique_events": tally.originals_sent,
            "duplicates": count("racing_copy") + count("late_copy"),
            "racing_duplicates": count("racing_copy"),
            "late_duplicates": count("late_copy"),
            "bad_signatures": count("bad_signature"),
            "planned": {
                "unique_events": plan.unique,
                "racing_duplicates": plan.racing,
                "late_duplicates": plan.late,
                "bad_signatures": plan.bad,
            },
        },
        "acked_unique": acked.len(),
        "bad_signatures_accepted": tally.bad_accepted,
        "body_bytes": {
            "min": sizes.iter().min(),
            "max": sizes.iter().max(),
            "mean": report::round3(sizes.iter().sum::<usize>() as f64 / sizes.len().max(1) as f64),
        },
        "connections_opened": tally.connections,
        "first_errors": tally.errors,
    });

    let pace = match args.rate {
        Some(rate) => format!("open loop at {rate} req/s"),
        None => "closed loop".to_string(),
    };
    eprintln!(
        "loadgen [{}]: {} ({}), concurrency {}, {pace}",
        args.label,
        args.url,
        args.provider.name(),
        args.concurrency
    );
    eprintln!(
        "  answered    {answered} of {} in {secs:.2} s = {:.0} req/s",
        tally.samples.len(),
        answered as f64 / secs
    );
    eprintln!(
        "  latency ms  p50 {:.3}  p90 {:.3}  p99 {:.3}  max {:.3}",
        latency.p50, latency.p90, latency.p99, latency.max
    );
    eprintln!("  status      {}", report::counts_line(&statuses));
    eprintln!(
        "  sent        unique {}  duplicates {} ({} racing, {} later)  bad signatures {}",
        tally.originals_sent,
        count("racing_copy") + count("late_copy"),
        count("racing_copy"),
        count("late_copy"),
        count("bad_signature")
    );
    eprintln!(
        "  acked       unique {} of {}  bad signatures accepted {}",
        acked.len(),
        tally.originals_sent,
        tally.bad_accepted
    );
    for why in &tally.errors {
        eprintln!("  error       {why}");
    }

    let text = json.to_string();
    if let Some(path) = &args.json_out {
        std::fs::write(path, format!("{text}\n"))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{text}");
    Ok(())
}

fn main() -> ExitCode {
    loadgen::block_on_main("loadgen", run(Args::parse()))
}
