//! HTTPS and mutual TLS on the webhook listener (issue 16), with real TLS on loopback and
//! certificates made here (rcgen): TLS 1.2 and 1.3 served, TLS 1.1 and plain HTTP refused, a
//! silent client closed at the header deadline, client certificates from the configured CA
//! accepted (and stored), none refused where one is required, another CA's failing the
//! handshake, Efí's sequence (first without a certificate, then with it), its `?hmac=`
//! fallback kept out of the store and the log, and certificate renewal by modification time
//! and by SIGHUP, a bad renewal leaving the old certificate in force.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ProtocolVersion, RootCertStore, SupportedProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(15);
const EFI_SECRET: &str = "efi-hmac-secret-4f1d";
const EFI_CLIENT: &str = "efi-client.example";

type Ca = CertifiedIssuer<'static, KeyPair>;

fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// A leaf signed by `ca`: (certificate PEM, key PEM, certificate DER).
fn leaf(ca: &Ca, cn: &str, client: bool) -> (String, String, CertificateDer<'static>) {
    let mut params = CertificateParams::new(vec![cn.to_string()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![if client {
        ExtendedKeyUsagePurpose::ClientAuth
    } else {
        ExtendedKeyUsagePurpose::ServerAuth
    }];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, ca).unwrap();
    (cert.pem(), key.serialize_pem(), cert.der().clone())
}

/// The certificates of one test: the server's CA and leaf, the clients' CA and one client.
struct Pki {
    server_ca: Ca,
    client_ca: Ca,
    server_der: CertificateDer<'static>,
}

impl Pki {
    /// Writes `server.pem`, `server.key` and `clients-ca.pem` into `dir`.
    fn write(dir: &Path) -> Pki {
        let server_ca = ca("portaria test server CA");
        let client_ca = ca("efi test client CA");
        let (cert, key, server_der) = leaf(&server_ca, "localhost", false);
        std::fs::write(dir.join("server.pem"), cert).unwrap();
        std::fs::write(dir.join("server.key"), key).unwrap();
        std::fs::write(dir.join("clients-ca.pem"), client_ca.pem()).unwrap();
        Pki {
            server_ca,
            client_ca,
            server_der,
        }
    }

    /// A client trusting the server's CA, with TLS `versions`, presenting `cert` if given.
    fn client(
        &self,
        versions: &[&'static SupportedProtocolVersion],
        cert: Option<&(String, String, CertificateDer<'static>)>,
    ) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(self.server_ca.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots);
        let config = match cert {
            None => builder.with_no_client_auth(),
            Some((_, key, der)) => builder
                .with_client_auth_cert(
                    vec![der.clone()],
                    PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
                )
                .unwrap(),
        };
        Arc::new(config)
    }
}

use rustls::pki_types::pem::PemObject;

const BOTH: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];

/// A config serving HTTPS with a client CA: Efí in its mTLS mode at `/efi` (registered as
/// `https://host/efi`, it is called at `/efi/pix`, which the endpoint answers too), one with
/// a subject rule, and Efí's `?hmac=`
/// fallback at `/efi-hmac`, which takes requests without a certificate.
fn tls_config(dir: &Path) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
header_timeout_secs = 1
tls = {{ cert_file = "server.pem", key_file = "server.key", client_ca_file = "clients-ca.pem" }}

[storage]
path = "{db}"

[[endpoint]]
name = "efi"
path = "/efi"
provider = "efi"
require_client_cert = true

[[endpoint]]
name = "efi-named"
path = "/efi-named"
provider = "efi"
client_cert_subject = "{EFI_CLIENT}"

[[endpoint]]
name = "efi-hmac"
path = "/efi-hmac"
provider = "efi"
secret = "{EFI_SECRET}"
"#,
        db = dir.join("portaria.db").display()
    )
}

fn pix(id: &str) -> Vec<u8> {
    format!(r#"{{"pix":[{{"endToEndId":"{id}","txid":"7978c0c97ea847e78e8849634473c1f1","valor":"110.00"}}]}}"#)
        .into_bytes()
}

/// What one HTTPS request came to.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: String,
    version: ProtocolVersion,
    server_cert: CertificateDer<'static>,
}

/// POSTs over a fresh TLS connection; Err if the handshake or the request fails.
async fn https_post(
    addr: SocketAddr,
    client: Arc<ClientConfig>,
    target: &str,
    body: &[u8],
) -> Result<Answer, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").unwrap();
    let tls = tokio::time::timeout(WAIT, TlsConnector::from(client).connect(name, tcp))
        .await
        .map_err(|_| "handshake timed out".to_string())?
        .map_err(|e| format!("handshake: {e}"))?;
    let (_, session) = tls.get_ref();
    let version = session.protocol_version().unwrap();
    let server_cert = session.peer_certificates().unwrap()[0].clone().into_owned();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = hyper::Request::post(target)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::copy_from_slice(body)))
        .unwrap();
    let res = tokio::time::timeout(WAIT, sender.send_request(req))
        .await
        .map_err(|_| "no answer".to_string())?
        .map_err(|e| format!("request: {e}"))?;
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.map_err(|e| e.to_string())?;
    Ok(Answer {
        status,
        body: String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        version,
        server_cert,
    })
}

async fn start() -> (TestServer, Pki) {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::write(dir.path());
    let text = tls_config(dir.path());
    let db = dir.path().join("portaria.db");
    (TestServer::start_with(dir, db, &text).await, pki)
}

/// What the server sends back to `bytes` before it closes the connection (bounded).
async fn answer_to(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(bytes).await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(WAIT, tcp.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "the connection was not closed");
    got
}

/// A TLS 1.1 ClientHello (record and client version 3.2, no supported_versions extension).
fn tls11_client_hello() -> Vec<u8> {
    let mut hello = vec![0x03, 0x02];
    hello.extend_from_slice(&[0x11; 32]); // random
    hello.push(0); // no session id
    // ECDHE-RSA- and ECDHE-ECDSA-AES128-GCM-SHA256: suites rustls has, at a version it refuses.
    hello.extend_from_slice(&[0x00, 0x04, 0xc0, 0x2f, 0xc0, 0x2b]);
    hello.extend_from_slice(&[0x01, 0x00]); // null compression
    let mut handshake = vec![0x01, 0x00];
    handshake.extend_from_slice(&(hello.len() as u16).to_be_bytes());
    handshake.extend_from_slice(&hello);
    let mut record = vec![0x16, 0x03, 0x02];
    record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
    record.extend_from_slice(&handshake);
    record
}

#[tokio::test]
async fn https_is_served_with_tls_1_2_and_1_3() {
    let (server, pki) = start().await;
    let target = format!("/efi-hmac?hmac={EFI_SECRET}&ignorar=/pix");
    for (version, expected) in [
        (&rustls::version::TLS12, ProtocolVersion::TLSv1_2),
        (&rustls::version::TLS13, ProtocolVersion::TLSv1_3),
    ] {
        let client = pki.client(&[version], None);
        let id = format!("E{:?}", expected).replace(['(', ')'], "");
        let answer = https_post(server.addr, client, &target, &pix(&id))
            .await
            .unwrap();
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(answer.version, expected);
        assert_eq!(answer.server_cert, pki.server_der);
    }
    assert_eq!(server.count_rows(), 2);
    server.stop().await;
}

#[tokio::test]
async fn tls_1_1_and_plain_http_are_refused() {
    let (server, _pki) = start().await;
    // TLS 1.1: a protocol_version alert (or a bare close), never a ServerHello.
    let got = answer_to(server.addr, &tls11_client_hello()).await;
    assert!(
        got.first() != Some(&0x16),
        "a TLS 1.1 hello got a handshake: {got:02x?}"
    );
    if !got.is_empty() {
        // A fatal alert (rustls says handshake_failure to a hello it cannot answer).
        assert_eq!(got[..2], [0x15, 0x03], "an alert record: {got:02x?}");
        assert_eq!(got[5], 2, "a fatal alert: {got:02x?}");
    }
    // OpenSSL's own TLS 1.1 client, where the machine has one (SECLEVEL=0: OpenSSL 3 would
    // otherwise refuse 1.1 itself, and the test would prove nothing about the server).
    if let Ok(out) = tokio::process::Command::new("openssl")
        .args([
            "s_client",
            "-tls1_1",
            "-cipher",
            "DEFAULT:@SECLEVEL=0",
            "-connect",
        ])
        .arg(server.addr.to_string())
        .stdin(std::process::Stdio::null())
        .output()
        .await
    {
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "openssl -tls1_1 connected: {text}");
        assert!(text.contains("alert"), "{text}");
    }
    // Plain HTTP to the HTTPS port: no HTTP answer, the connection closed.
    let plain = format!(
        "POST /efi-hmac?hmac={EFI_SECRET} HTTP/1.1\r\nhost: localhost\r\ncontent-length: 2\r\n\r\n{{}}"
    );
    let got = answer_to(server.addr, plain.as_bytes()).await;
    assert!(
        !got.starts_with(b"HTTP/"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(server.count_rows(), 0);
    server.stop().await;
}

#[tokio::test]
async fn a_client_that_never_says_hello_is_closed_at_the_header_deadline() {
    let (server, pki) = start().await;
    let started = std::time::Instant::now();
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut got)).await;
    assert!(
        read.is_ok(),
        "a silent connection was still open after 10 s"
    );
    // header_timeout_secs = 1: closed after about that, not at once.
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    // And the server still serves.
    let client = pki.client(BOTH, None);
    let target = format!("/efi-hmac?hmac={EFI_SECRET}");
    let answer = https_post(server.addr, client, &target, &pix("E1"))
        .await
        .unwrap();
    assert_eq!(answer.status, 200);
    server.stop().await;
}

#[tokio::test]
async fn efi_first_calls_without_a_certificate_then_with_it() {
    let (server, pki) = start().await;
    let body = pix("E18236120202611301530s0000000001");
    // Efí's first call has no client certificate: refused, nothing stored.
    let bare = pki.client(BOTH, None);
    let refused = https_post(server.addr, bare, "/efi/pix", &body)
        .await
        .unwrap();
    assert_eq!(refused.status, 403, "{refused:?}");
    assert!(
        refused.body.contains("client certificate"),
        "{}",
        refused.body
    );
    assert_eq!(server.count_rows(), 0);
    // Then the real one, with the certificate from the configured CA: accepted and stored
    // with the certificate's names.
    let cert = leaf(&pki.client_ca, EFI_CLIENT, true);
    let with_cert = pki.client(BOTH, Some(&cert));
    let accepted = https_post(server.addr, with_cert.clone(), "/efi/pix", &body)
        .await
        .unwrap();
    assert_eq!(accepted.status, 200, "{accepted:?}");
    assert_eq!(server.count_rows(), 1);
    let stored: String = server.one("SELECT client_cert FROM events");
    assert_eq!(stored, format!("CN={EFI_CLIENT}; DNS={EFI_CLIENT}"));
    // A retry of the same webhook is a duplicate: no second event, no second effect.
    let again = https_post(server.addr, with_cert.clone(), "/efi/pix", &body)
        .await
        .unwrap();
    assert_eq!(again.status, 200);
    assert_eq!(server.count_rows(), 1);
    // Two webhooks sharing their first Pix but not the second are two events; the second
    // one's items in another order is a resend of it.
    let batch = |ids: [&str; 2]| {
        format!(
            r#"{{"pix":[{{"endToEndId":"{}"}},{{"endToEndId":"{}"}}]}}"#,
            ids[0], ids[1]
        )
    };
    for (ids, events) in [(["EA", "EB"], 2), (["EA", "EC"], 3), (["EC", "EA"], 3)] {
        let sent = https_post(
            server.addr,
            with_cert.clone(),
            "/efi/pix",
            batch(ids).as_bytes(),
        )
        .await
        .unwrap();
        assert_eq!(sent.status, 200, "{sent:?}");
        assert_eq!(server.count_rows(), events, "after {ids:?}");
    }
    // The registered path itself is the endpoint's too, under the same certificate rule.
    let bare = pki.client(BOTH, None);
    let refused = https_post(server.addr, bare, "/efi", &pix("ED"))
        .await
        .unwrap();
    assert_eq!(refused.status, 403, "{refused:?}");
    let direct = https_post(server.addr, with_cert.clone(), "/efi", &pix("ED"))
        .await
        .unwrap();
    assert_eq!(direct.status, 200, "{direct:?}");
    assert_eq!(server.count_rows(), 4);
    for elsewhere in ["/efi/pix/pix", "/efi/pixx", "/efi/other"] {
        let sent = https_post(server.addr, with_cert.clone(), elsewhere, &pix("EE"))
            .await
            .unwrap();
        assert_eq!(sent.status, 404, "{elsewhere}: {sent:?}");
    }
    let dir = server.stop().await;
    let shown = ok_stdout(&run_cli(
        &["events", "show", "1"],
        &dir.path().join("portaria.toml"),
    ));
    assert!(
        shown.contains(&format!("client cert: CN={EFI_CLIENT}; DNS={EFI_CLIENT}")),
        "{shown}"
    );
}

#[tokio::test]
async fn client_certificates_are_judged_by_ca_and_subject() {
    let (server, pki) = start().await;
    // From another CA: the handshake fails, whatever the endpoint.
    let stranger_ca = ca("someone else's CA");
    let stranger = leaf(&stranger_ca, EFI_CLIENT, true);
    let client = pki.client(BOTH, Some(&stranger));
    let target = format!("/efi-hmac?hmac={EFI_SECRET}");
    let failed = https_post(server.addr, client, &target, &pix("E2")).await;
    assert!(
        failed.is_err(),
        "another CA's certificate was accepted: {failed:?}"
    );
    // From the CA but naming someone else: the subject rule refuses it; the plain
    // requirement takes it.
    let other = leaf(&pki.client_ca, "other.example", true);
    let client = pki.client(BOTH, Some(&other));
    let named = https_post(server.addr, client.clone(), "/efi-named/pix", &pix("E3"))
        .await
        .unwrap();
    assert_eq!(named.status, 403, "{named:?}");
    let plain = https_post(server.addr, client, "/efi/pix", &pix("E3"))
        .await
        .unwrap();
    assert_eq!(plain.status, 200, "{plain:?}");
    // The right subject passes the rule.
    let efi = leaf(&pki.client_ca, EFI_CLIENT, true);
    let client = pki.client(BOTH, Some(&efi));
    let named = https_post(server.addr, client, "/efi-named/pix", &pix("E4"))
        .await
        .unwrap();
    assert_eq!(named.status, 200, "{named:?}");
    assert_eq!(server.count_rows(), 2);
    server.stop().await;
}

/// The real binary serving `tls_config` from `dir` (with `env` set).
async fn spawn(dir: &Path, env: &[(&str, &str)]) -> Process {
    let path = dir.join("portaria.toml");
    std::fs::write(&path, tls_config(dir)).unwrap();
    let mut serve = portaria();
    serve.args(["serve", "--config"]).arg(&path);
    for (k, v) in env {
        serve.env(k, v);
    }
    Process::spawn_command(serve).await
}

#[tokio::test]
async fn the_hmac_fallback_is_compared_and_kept_out_of_the_store_and_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::write(dir.path());
    let server = spawn(dir.path(), &[("RUST_LOG", "debug")]).await;
    let client = pki.client(BOTH, None);
    let wrong = https_post(
        server.addr,
        client.clone(),
        "/efi-hmac?hmac=guess&ignorar=/pix",
        &pix("E5"),
    )
    .await
    .unwrap();
    assert_eq!(wrong.status, 401, "{wrong:?}");
    let target = format!("/efi-hmac?hmac={EFI_SECRET}&ignorar=/pix");
    let right = https_post(server.addr, client, &target, &pix("E5"))
        .await
        .unwrap();
    assert_eq!(right.status, 200, "{right:?}");
    let log = server.log.lock().unwrap().clone();
    assert!(log.contains("efi-hmac"), "{log}");
    assert!(!log.contains(EFI_SECRET), "{log}");
    drop(server);
    // Nowhere: not in the database (the request target is not stored), not in `events show`
    // (raw or not), not in the log, even at debug.
    let config = dir.path().join("portaria.toml");
    let shown = ok_stdout(&run_cli(&["events", "show", "1"], &config));
    let raw = ok_stdout(&run_cli(&["events", "show", "1", "--raw"], &config));
    assert!(shown.contains("E5") && raw.contains("E5"), "{shown}\n{raw}");
    for file in ["portaria.db", "portaria.db-wal"] {
        let bytes = std::fs::read(dir.path().join(file)).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(EFI_SECRET), "the secret is in {file}");
    }
    assert!(!shown.contains(EFI_SECRET) && !raw.contains(EFI_SECRET));
}

/// Writes a new server certificate (signed by the same CA) over the old files.
fn renew(dir: &Path, pki: &Pki) -> CertificateDer<'static> {
    let (cert, key, der) = leaf(&pki.server_ca, "localhost", false);
    std::fs::write(dir.join("server.key"), key).unwrap();
    std::fs::write(dir.join("server.pem"), cert).unwrap();
    der
}

async fn served_cert(addr: SocketAddr, pki: &Pki) -> CertificateDer<'static> {
    let target = format!("/efi-hmac?hmac={EFI_SECRET}");
    let answer = https_post(addr, pki.client(BOTH, None), &target, &pix("E6"))
        .await
        .unwrap();
    answer.server_cert
}

#[tokio::test]
async fn a_renewed_certificate_is_picked_up_by_its_modification_time() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::write(dir.path());
    let server = spawn(dir.path(), &[("PORTARIA_TEST_TLS_CHECK_MS", "100")]).await;
    assert_eq!(served_cert(server.addr, &pki).await, pki.server_der);
    // New connections get the renewed certificate.
    let renewed = renew(dir.path(), &pki);
    let deadline = std::time::Instant::now() + WAIT;
    while served_cert(server.addr, &pki).await != renewed {
        assert!(
            std::time::Instant::now() < deadline,
            "the renewal was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A bad renewal (a truncated certificate) is logged; the renewed one keeps serving.
    std::fs::write(
        dir.path().join("server.pem"),
        "-----BEGIN CERTIFICATE-----\nAAAA\n",
    )
    .unwrap();
    let log = server.log.clone();
    eventually(WAIT, "the bad certificate is logged", || {
        log.lock().unwrap().contains("cannot be used")
    })
    .await;
    assert_eq!(served_cert(server.addr, &pki).await, renewed);
}

#[tokio::test]
async fn sighup_reloads_the_certificate_and_refuses_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::write(dir.path());
    // The default check interval (a minute): within this test only SIGHUP reloads.
    let server = spawn(dir.path(), &[]).await;
    assert_eq!(served_cert(server.addr, &pki).await, pki.server_der);
    // A key that does not match the certificate: the reload is refused, the old one serves.
    let (_, other_key, _) = leaf(&pki.server_ca, "localhost", false);
    let good_key = std::fs::read(dir.path().join("server.key")).unwrap();
    std::fs::write(dir.path().join("server.key"), other_key).unwrap();
    server.signal(libc::SIGHUP);
    let log = server.log.clone();
    eventually(WAIT, "the reload is refused", || {
        log.lock().unwrap().contains("reload refused")
    })
    .await;
    assert!(
        log.lock().unwrap().contains("server.tls"),
        "{}",
        log.lock().unwrap()
    );
    assert_eq!(served_cert(server.addr, &pki).await, pki.server_der);
    std::fs::write(dir.path().join("server.key"), good_key).unwrap();
    // A good renewal: SIGHUP puts it in force for new connections.
    let renewed = renew(dir.path(), &pki);
    server.signal(libc::SIGHUP);
    eventually(WAIT, "the certificate is reloaded", || {
        log.lock().unwrap().contains("TLS certificate reloaded")
    })
    .await;
    assert_eq!(served_cert(server.addr, &pki).await, renewed);
}

#[tokio::test]
async fn at_the_cap_a_connection_silent_since_its_handshake_makes_room() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::write(dir.path());
    let text = tls_config(dir.path()).replace(
        "header_timeout_secs = 1",
        "header_timeout_secs = 30\nmax_connections = 1",
    );
    let db = dir.path().join("portaria.db");
    let server = TestServer::start_with(dir, db, &text).await;
    // The one slot: a client that shook hands and then said nothing.
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let silent = TlsConnector::from(pki.client(BOTH, None))
        .connect(name, tcp)
        .await
        .unwrap();
    // A second client is served at once (the silent one is closed for it), not after the
    // 30 s header deadline.
    let target = format!("/efi-hmac?hmac={EFI_SECRET}");
    let served = tokio::time::timeout(
        Duration::from_secs(5),
        https_post(server.addr, pki.client(BOTH, None), &target, &pix("E7")),
    )
    .await
    .expect("served within 5 s")
    .unwrap();
    assert_eq!(served.status, 200);
    drop(silent);
    server.stop().await;
}

#[tokio::test]
async fn the_certificate_and_key_may_be_systemd_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::write(dir.path());
    let creds = dir.path().join("credentials");
    std::fs::create_dir(&creds).unwrap();
    std::fs::rename(dir.path().join("server.pem"), creds.join("tls-cert")).unwrap();
    std::fs::rename(dir.path().join("server.key"), creds.join("tls-key")).unwrap();
    let path = dir.path().join("portaria.toml");
    let text = tls_config(dir.path()).replace(
        r#"cert_file = "server.pem", key_file = "server.key""#,
        r#"cert_file = "credential:tls-cert", key_file = "credential:tls-key""#,
    );
    assert!(text.contains("credential:tls-key"));
    std::fs::write(&path, text).unwrap();
    let mut serve = portaria();
    serve.args(["serve", "--config"]).arg(&path);
    serve.env("CREDENTIALS_DIRECTORY", &creds);
    let server = Process::spawn_command(serve).await;
    assert_eq!(served_cert(server.addr, &pki).await, pki.server_der);
    // Without the directory, `check` names the credential and the variable.
    let out = run_cli(&["check"], &path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("server.tls.cert_file: credential `tls-cert`"),
        "{err}"
    );
}
