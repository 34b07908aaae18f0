//! `[endpoint.reconcile]`: asking the gateway's API for the deliveries that never reached
//! portaria (`reconcile`, docs/reconcile.md). The API key (`api_key_env` or `api_key_file`,
//! which may be a systemd credential `credential:NAME`) is read like any other secret: held
//! as a [`Secret`] (redacted in `Debug`), its variable taken out of `serve`'s environment and
//! kept from every program it runs, never in a message.
//!
//! `window` (3 days by default, at most the gateway's own retention) is how far back a run
//! looks; `every` is the schedule `serve` runs it on (`reconcile::Schedule`; without it only
//! `portaria reconcile` runs it); `api_base` the gateway's API (`https://`, or `http://`
//! to this machine only, as for the canary), `ca_file` an extra CA for it beside the system's
//! roots (a sandbox behind a private CA, a test).
//!
//! A run knows what portaria never stored by the dedup key a real delivery would have, read
//! from the JSON the API gives back: so the endpoint's dedup rule must be a `json:` pointer
//! (every preset with a reconcile has one by default).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls::pki_types::CertificateDer;

use super::Secrets;
use super::canary::loopback;
use super::raw::RawReconcile;
use super::validate::parse_duration;
use super::validator::Validator;
use crate::dedup::DedupRule;
use crate::verify::Secret;

/// How far back a run looks unless `window` says otherwise.
pub const DEFAULT_RECONCILE_WINDOW: Duration = Duration::from_secs(3 * 86_400);

/// The shortest `every` (tests); under 15 minutes is warned about (the gateways' quotas).
const MIN_EVERY: Duration = Duration::from_millis(100);

/// Stands in for the key under `Secrets::Skip` (the database commands never call out).
const PLACEHOLDER_KEY: &[u8] = b"portaria: reconcile key not loaded";

/// The providers a run is built for: their API's address and how long it keeps what a run
/// lists (Pagar.me's hooks and Stripe's events: 30 days; Paddle's notifications: 90 days;
/// a paused Asaas queue's events: 14 days; GitHub redelivers 3 days back; Mercado Pago's
/// payments are searchable for a year, a run looks at most 30 days back; docs/reconcile.md).
const PROVIDERS: &[(&str, &str, Duration)] = &[
    (
        "pagarme-v5",
        "https://api.pagar.me",
        Duration::from_secs(30 * 86_400),
    ),
    (
        "stripe",
        "https://api.stripe.com",
        Duration::from_secs(30 * 86_400),
    ),
    (
        "paddle",
        "https://api.paddle.com",
        Duration::from_secs(90 * 86_400),
    ),
    (
        "asaas",
        "https://api.asaas.com",
        Duration::from_secs(14 * 86_400),
    ),
    (
        "github",
        "https://api.github.com",
        Duration::from_secs(3 * 86_400),
    ),
    (
        "mercadopago",
        "https://api.mercadopago.com",
        Duration::from_secs(30 * 86_400),
    ),
    // Sales are queried by id for 3 months (reconcile/cielo.rs).
    (
        "cielo",
        "https://apiquery.cieloecommerce.cielo.com.br",
        Duration::from_secs(90 * 86_400),
    ),
];

/// An endpoint's reconcile, as validated.
#[derive(Debug, Clone)]
pub struct Reconcile {
    /// The API key; never shown (`Secret` redacts).
    pub api_key: Secret,
    /// The schedule `serve` runs it on; None: only the command does.
    pub every: Option<Duration>,
    /// How far back a run looks.
    pub window: Duration,
    /// The API's base URL, without a trailing `/`.
    pub api_base: String,
    /// `ca_file`, absolute, and its certificates (read at validation).
    pub ca_file: Option<PathBuf>,
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// Asaas only: a run resumes a paused webhook queue and drops its penalty.
    pub reactivate: bool,
    /// GitHub only: the hook, `repos/OWNER/REPO/hooks/ID` or `orgs/ORG/hooks/ID`.
    pub hook: Option<String>,
    /// Mercado Pago, Asaas and Cielo only: before an event is forwarded, the object it names
    /// is fetched from the API with this key (verify by fetching, `forward/fetch.rs`).
    pub fetch: bool,
    /// Cielo only: the store's `MerchantId` (a GUID; it names the store, the `MerchantKey`
    /// in `api_key_*` is the secret), sent beside the key.
    pub merchant_id: Option<String>,
}

/// The providers whose objects an event can be verified by fetching (`fetch = true`).
pub const FETCHED: &[&str] = &["mercadopago", "asaas", "cielo"];

impl Validator<'_> {
    /// The reconcile of endpoint `at` (provider `provider`, dedup rule `dedup`), if it has one.
    pub(super) fn reconcile(
        &mut self,
        at: &str,
        provider: &str,
        dedup: Option<&DedupRule>,
        raw: Option<RawReconcile>,
    ) -> Option<Reconcile> {
        let raw = raw?;
        let at = format!("{at}.reconcile");
        let Some(&(_, base, retention)) = PROVIDERS.iter().find(|(p, ..)| *p == provider) else {
            let built = PROVIDERS.iter().map(|(p, ..)| *p).collect::<Vec<_>>();
            self.problem(format!(
                "{at}: provider `{provider}` has no reconcile yet (built for: {}; \
                 docs/reconcile.md)",
                built.join(", ")
            ));
            return None;
        };
        // GitHub's list names deliveries by their GUID, not by what portaria keys on: a run
        // asks GitHub again for every event it never delivered (reconcile/github.rs). Mercado
        // Pago's run keys the states it stores in a namespace of its own
        // (reconcile/mercadopago.rs), and so does Cielo's (reconcile/cielo.rs).
        let keyed = !matches!(provider, "github" | "mercadopago" | "cielo");
        let hook = self.github_hook(&at, provider, raw.hook);
        if let Some(rule) = dedup.filter(|r| keyed && !matches!(r, DedupRule::JsonPointer(_))) {
            self.problem(format!(
                "{at}: a run finds what portaria never stored by the dedup key read from the \
                 event's JSON, and this endpoint's dedup rule is `{rule}`; use a `json:` rule \
                 (the preset's default is json:/id)"
            ));
        }
        if raw.reactivate.is_some() && provider != "asaas" {
            self.problem(format!(
                "{at}.reactivate: only an Asaas webhook queue is paused and resumed; remove it"
            ));
        }
        let fetch = raw.fetch.unwrap_or(false);
        if fetch && !FETCHED.contains(&provider) {
            self.problem(format!(
                "{at}.fetch: verify-by-fetching is built for {} only; remove it \
                 (docs/reconcile.md, \"Verify by fetching\")",
                FETCHED.join(", ")
            ));
        }
        if provider == "cielo" && !fetch {
            self.problem(format!(
                "{at}: set fetch = true: a Cielo run asks again for the sales whose last state \
                 portaria fetched (Cielo has no list to read; docs/reconcile.md)"
            ));
        }
        let merchant_id = self.merchant_id(&at, provider, raw.merchant_id);
        let api_key = self.reconcile_key(&at, raw.api_key_env, raw.api_key_file);
        let every = match raw.every {
            None => Some(None),
            Some(text) => self.reconcile_every(&at, &text),
        };
        let window = match raw.window.as_deref().map(parse_duration) {
            None => DEFAULT_RECONCILE_WINDOW,
            Some(Ok(w)) if w >= Duration::from_secs(60) && w <= retention => w,
            Some(Ok(_)) => {
                let days = retention.as_secs() / 86_400;
                self.problem(format!(
                    "{at}.window: must be between 1m and {days}d (what the gateway keeps)"
                ));
                return None;
            }
            Some(Err(why)) => {
                self.problem(format!("{at}.window: {why}"));
                return None;
            }
        };
        let api_base = raw.api_base.as_deref().unwrap_or(base);
        let api_base = self.api_base(&at, api_base)?;
        let (ca_file, extra_roots) = match raw.ca_file {
            None => (None, Vec::new()),
            Some(path) => {
                let path = self.resolve(Path::new(&path));
                let certs = match self.secrets {
                    Secrets::Skip => Vec::new(),
                    Secrets::Load => {
                        match super::tls::certificates(&path, &format!("{at}.ca_file")) {
                            Ok(certs) => certs,
                            Err(why) => {
                                self.problem(why);
                                return None;
                            }
                        }
                    }
                };
                (Some(path), certs)
            }
        };
        Some(Reconcile {
            api_key: api_key?,
            every: every?,
            window,
            api_base,
            ca_file,
            extra_roots,
            reactivate: raw.reactivate.unwrap_or(false),
            hook: hook?,
            fetch,
            merchant_id: merchant_id?,
        })
    }

    /// `merchant_id`: required for Cielo (a GUID), refused elsewhere. Some(it) or Some(None)
    /// when right, None after a problem.
    fn merchant_id(
        &mut self,
        at: &str,
        provider: &str,
        id: Option<String>,
    ) -> Option<Option<String>> {
        let guid = |s: &str| {
            s.len() == 36
                && s.bytes().enumerate().all(|(i, b)| {
                    matches!(i, 8 | 13 | 18 | 23) == (b == b'-')
                        && (b == b'-' || b.is_ascii_hexdigit())
                })
        };
        match (provider, id) {
            ("cielo", Some(id)) if guid(&id) => Some(Some(id)),
            ("cielo", Some(id)) => {
                self.problem(format!(
                    "{at}.merchant_id: `{id}` is not a MerchantId (a GUID like \
                     xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, in Cielo's credentials page)"
                ));
                None
            }
            ("cielo", None) => {
                self.problem(format!(
                    "{at}: Cielo's API needs the store's merchant_id = \"<MerchantId>\" beside \
                     its MerchantKey (api_key_env or api_key_file)"
                ));
                None
            }
            (_, Some(_)) => {
                self.problem(format!(
                    "{at}.merchant_id: only a Cielo table names a MerchantId"
                ));
                None
            }
            (_, None) => Some(None),
        }
    }

    /// `hook`: required for GitHub, refused elsewhere. Some(the hook) or Some(None) when
    /// right, None after a problem.
    fn github_hook(
        &mut self,
        at: &str,
        provider: &str,
        hook: Option<String>,
    ) -> Option<Option<String>> {
        let plain = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                && !s.starts_with('.')
        };
        match (provider, hook) {
            ("github", Some(hook)) => {
                let parts: Vec<&str> = hook.trim_matches('/').split('/').collect();
                let right = match parts.as_slice() {
                    ["repos", owner, repo, "hooks", id] => {
                        plain(owner) && plain(repo) && id.bytes().all(|b| b.is_ascii_digit())
                    }
                    ["orgs", org, "hooks", id] => {
                        plain(org) && id.bytes().all(|b| b.is_ascii_digit())
                    }
                    _ => false,
                };
                if right {
                    Some(Some(parts.join("/")))
                } else {
                    self.problem(format!(
                        "{at}.hook: `{hook}` is not `repos/OWNER/REPO/hooks/ID` or \
                         `orgs/ORG/hooks/ID` (the hook's ID is in its settings page's URL)"
                    ));
                    None
                }
            }
            ("github", None) => {
                self.problem(format!(
                    "{at}: GitHub needs the hook: hook = \"repos/OWNER/REPO/hooks/ID\" (or \
                     \"orgs/ORG/hooks/ID\")"
                ));
                None
            }
            (_, Some(_)) => {
                self.problem(format!("{at}.hook: only a GitHub reconcile names a hook"));
                None
            }
            (_, None) => Some(None),
        }
    }

    /// The API key: exactly one of `api_key_env`, `api_key_file`.
    fn reconcile_key(
        &mut self,
        at: &str,
        env: Option<String>,
        file: Option<String>,
    ) -> Option<Secret> {
        let value = match (env, file) {
            (Some(_), Some(_)) => {
                self.problem(format!(
                    "{at}: set one of api_key_env, api_key_file, not both"
                ));
                return None;
            }
            (None, None) => {
                self.problem(format!(
                    "{at}: the gateway's API key is missing: set api_key_env (a variable's \
                     name) or api_key_file (a file, or credential:NAME)"
                ));
                return None;
            }
            (Some(var), None) => {
                self.secret_variables.push(var.clone());
                if self.secrets == Secrets::Skip {
                    return Some(Secret::new(PLACEHOLDER_KEY.to_vec()));
                }
                match self.var(&var) {
                    Some(value) => value,
                    None => {
                        self.problem(format!(
                            "{at}.api_key_env: environment variable {var} is not set"
                        ));
                        return None;
                    }
                }
            }
            (None, Some(_)) if self.secrets == Secrets::Skip => {
                return Some(Secret::new(PLACEHOLDER_KEY.to_vec()));
            }
            (None, Some(file)) => self.read_secret_file(&format!("{at}.api_key_file"), &file)?,
        };
        let value = value.trim();
        // A key goes into a header: no control characters, nothing empty.
        if value.is_empty() || value.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            self.problem(format!(
                "{at}: the API key is empty or holds spaces or control characters"
            ));
            return None;
        }
        Some(Secret::new(value.as_bytes().to_vec()))
    }

    /// `every`, when given: Some(the schedule), or None and a problem.
    fn reconcile_every(&mut self, at: &str, text: &str) -> Option<Option<Duration>> {
        match parse_duration(text) {
            Ok(d) if d >= MIN_EVERY => {
                if d < Duration::from_secs(15 * 60) {
                    self.warnings.push(format!(
                        "{at}.every = \"{text}\": the gateways count every call against a quota \
                         (Pagar.me: 50 listings a minute) and may block a key that polls; an \
                         hour or a day is plenty"
                    ));
                }
                Some(Some(d))
            }
            Ok(_) => {
                self.problem(format!("{at}.every: must be at least 100ms"));
                None
            }
            Err(why) => {
                self.problem(format!("{at}.every: {why}"));
                None
            }
        }
    }

    /// `api_base`: a URL the outbound client calls, without a path's trailing `/`.
    fn api_base(&mut self, at: &str, url: &str) -> Option<String> {
        let trimmed = url.trim_end_matches('/');
        let why = match trimmed.parse::<http::Uri>() {
            Err(_) => Some("is not a URL"),
            Ok(uri) => {
                let host = uri.host().unwrap_or("");
                match uri.scheme_str() {
                    _ if host.is_empty() => Some("has no host"),
                    _ if uri.authority().is_some_and(|a| a.as_str().contains('@')) => {
                        Some("holds a user or password")
                    }
                    _ if uri.query().is_some() || url.contains('#') => {
                        Some("has a query or fragment")
                    }
                    Some("https") => None,
                    Some("http") if loopback(host) => None,
                    Some("http") => Some("is plain http to another machine: use https://"),
                    _ => Some("must start with https://"),
                }
            }
        };
        match why {
            Some(why) => {
                self.problem(format!("{at}.api_base: `{url}` {why}"));
                None
            }
            None => Some(trimmed.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{parse, problems};
    use super::*;

    /// A pagarme-v5 endpoint (its JWKS a file beside the config, in `dir`) with `reconcile`.
    fn text_of(dir: &Path, reconcile: &str) -> String {
        let jwks = dir.join("jwks.json");
        // One key that loads (an odd 2048-bit modulus; it verifies nothing).
        let n = "_".repeat(341) + "w";
        let keys = format!(r#"{{"keys":[{{"kty":"RSA","kid":"k1","n":"{n}","e":"AQAB"}}]}}"#);
        std::fs::write(&jwks, keys).unwrap();
        format!(
            "[storage]\npath = \"{}\"\n[[endpoint]]\nname = \"pagarme\"\npath = \"/p\"\n\
             provider = \"pagarme-v5\"\njwks_file = \"{}\"\n{reconcile}",
            dir.join("p.db").display(),
            jwks.display()
        )
    }

    fn key_file(dir: &Path, text: &str) -> String {
        // A file per key: a test builds all its texts before parsing any.
        let path = dir.join(format!("key-{}", text.trim().replace(' ', "_")));
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        format!(
            "[endpoint.reconcile]\napi_key_file = \"{}\"\n",
            path.display()
        )
    }

    #[test]
    fn a_reconcile_reads_its_key_and_takes_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let config = parse(&text_of(dir.path(), &key_file(dir.path(), "sk_test_1\n"))).unwrap();
        let r = config.endpoints[0].reconcile.clone().unwrap();
        assert_eq!(r.api_key.expose(), b"sk_test_1");
        assert_eq!(
            (r.every, r.window, r.api_base.as_str()),
            (None, DEFAULT_RECONCILE_WINDOW, "https://api.pagar.me")
        );
        assert!(!format!("{r:?}").contains("sk_test_1"), "{r:?}");
        let more = "every = \"1h\"\nwindow = \"7d\"\napi_base = \"http://127.0.0.1:9/\"\n";
        let text = text_of(dir.path(), &(key_file(dir.path(), "sk_1") + more));
        let r = parse(&text).unwrap().endpoints[0]
            .reconcile
            .clone()
            .unwrap();
        assert_eq!(r.every, Some(Duration::from_secs(3600)));
        assert_eq!(r.window, Duration::from_secs(7 * 86_400));
        assert_eq!(r.api_base, "http://127.0.0.1:9");
        let often = text_of(
            dir.path(),
            &(key_file(dir.path(), "sk_1") + "every = \"1m\"\n"),
        );
        let warned = parse(&often).unwrap().warnings;
        assert!(warned.iter().any(|w| w.contains("quota")), "{warned:?}");
    }

    #[test]
    fn a_bad_reconcile_is_refused_with_what_to_fix_and_never_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let with = |more: &str| text_of(dir.path(), &(key_file(dir.path(), "sk_s3cret") + more));
        for (text, why) in [
            (
                with("window = \"31d\""),
                "window: must be between 1m and 30d",
            ),
            (with("window = \"soon\""), "window: expected a number"),
            (with("every = \"10ms\""), "every: must be at least 100ms"),
            (with("every = \"1x\""), "every: the unit must be"),
            (
                with("api_base = \"http://api.pagar.me\""),
                "plain http to another machine",
            ),
            (with("api_base = \"ftp://x\""), "must start with https://"),
            (
                with("ca_file = \"/nonexistent/ca.pem\""),
                "reconcile.ca_file: cannot read",
            ),
            (
                with("api_key_env = \"X\""),
                "set one of api_key_env, api_key_file, not both",
            ),
            (
                text_of(
                    dir.path(),
                    &format!("dedup = \"body-sha256\"\n{}", key_file(dir.path(), "k")),
                ),
                "dedup rule is `body-sha256`; use a `json:` rule",
            ),
            (
                text_of(dir.path(), "[endpoint.reconcile]\nwindow = \"1d\"\n"),
                "the gateway's API key is missing",
            ),
            (
                text_of(
                    dir.path(),
                    "[endpoint.reconcile]\napi_key_env = \"PORTARIA_NO_SUCH_VAR\"\n",
                ),
                "api_key_env: environment variable PORTARIA_NO_SUCH_VAR is not set",
            ),
            (
                text_of(dir.path(), &key_file(dir.path(), "sk bad")),
                "the API key is empty or holds spaces",
            ),
            (
                with("apikey = \"x\""),
                "(`apikey`): unknown key in endpoint[0].reconcile",
            ),
            (
                with("reactivate = true"),
                "reactivate: only an Asaas webhook queue is paused and resumed",
            ),
            (
                with("fetch = true"),
                "reconcile.fetch: verify-by-fetching is built for mercadopago, asaas, cielo only",
            ),
        ] {
            let p = problems(&text);
            assert!(p.contains(why), "{why}: {p}");
            assert!(!p.contains("sk_s3cret"), "{p}");
        }
        let github = |hook: &str| {
            format!(
                "[storage]\npath = \"/tmp/p.db\"\n[[endpoint]]\npath = \"/g\"\n\
                 provider = \"github\"\nsecret = \"s3cret-s3cret\"\n{}{hook}",
                key_file(dir.path(), "ghp_t0ken")
            )
        };
        let p = problems(&github(""));
        assert!(p.contains("GitHub needs the hook"), "{p}");
        let p = problems(&github("hook = \"repos/shop/site/hooks/abc\""));
        assert!(p.contains("is not `repos/OWNER/REPO/hooks/ID`"), "{p}");
        let p = problems(&github("hook = \"repos/../x/hooks/1\""));
        assert!(p.contains("is not `repos/OWNER/REPO/hooks/ID`"), "{p}");
        let config = parse(&github("hook = \"/orgs/shop/hooks/42/\"")).unwrap();
        let r = config.endpoints[0].reconcile.clone().unwrap();
        assert_eq!(r.hook.as_deref(), Some("orgs/shop/hooks/42"));
        assert_eq!(r.window, Duration::from_secs(3 * 86_400));
        let p = problems(&with("hook = \"repos/a/b/hooks/1\""));
        assert!(p.contains("only a GitHub reconcile names a hook"), "{p}");
        let shopify = format!(
            "[storage]\npath = \"/tmp/p.db\"\n[[endpoint]]\npath = \"/m\"\n\
             provider = \"shopify\"\nsecret = \"s3cret-s3cret\"\n{}",
            key_file(dir.path(), "shpat-1")
        );
        let p = problems(&shopify);
        assert!(
            p.contains(
                "provider `shopify` has no reconcile yet (built for: pagarme-v5, stripe, paddle, asaas, github, mercadopago, cielo;"
            ),
            "{p}"
        );
    }

    #[test]
    fn fetch_is_taken_for_mercado_pago_and_asaas_with_their_key() {
        let dir = tempfile::tempdir().unwrap();
        for provider in ["mercadopago", "asaas"] {
            let text = format!(
                "[storage]\npath = \"/tmp/p.db\"\n[[endpoint]]\npath = \"/m\"\n\
                 provider = \"{provider}\"\nsecret = \"s3cret-s3cret\"\n{}fetch = true\n",
                key_file(dir.path(), "APP_USR-1")
            );
            let r = parse(&text).unwrap().endpoints[0]
                .reconcile
                .clone()
                .unwrap();
            assert!(r.fetch, "{provider}");
            // Without the table's key, nothing is fetched: the key is required.
            let keyless =
                text.replace(&key_file(dir.path(), "APP_USR-1"), "[endpoint.reconcile]\n");
            assert!(
                problems(&keyless).contains("the gateway's API key is missing"),
                "{provider}"
            );
        }
    }

    #[test]
    fn a_cielo_table_fetches_with_its_merchant_id_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let id = "e4db3e1b-985f-4e33-80cf-a19d559f0f60";
        let text = |more: &str| {
            format!(
                "[storage]\npath = \"/tmp/p.db\"\n[[endpoint]]\npath = \"/c\"\n\
                 provider = \"cielo\"\ncredential_headers = [\"X-Shop-Key\"]\n\
                 secret = \"s3cret-s3cret\"\n{}{more}",
                key_file(dir.path(), "0123456789012345678901234567890123456789")
            )
        };
        let good = text(&format!(
            "fetch = true\nmerchant_id = \"{id}\"\nwindow = \"90d\"\n"
        ));
        let config = parse(&good).unwrap();
        let r = config.endpoints[0].reconcile.clone().unwrap();
        assert_eq!((r.fetch, r.merchant_id.as_deref()), (true, Some(id)));
        assert_eq!(r.api_base, "https://apiquery.cieloecommerce.cielo.com.br");
        // Its body-hash dedup is no problem: a run keys the states it stores itself.
        assert_eq!(config.endpoints[0].dedup.to_string(), "body-sha256");
        // A run knows a sale's state from what fetching got: fetch is required.
        let said = problems(&text(&format!("merchant_id = \"{id}\"\n")));
        assert!(
            said.contains("reconcile: set fetch = true: a Cielo run"),
            "{said}"
        );
        let said = problems(&text(&format!(
            "fetch = true\nmerchant_id = \"{id}\"\nwindow = \"91d\"\n"
        )));
        assert!(
            said.contains("window: must be between 1m and 90d"),
            "{said}"
        );
        let said = problems(&text("fetch = true\n"));
        assert!(said.contains("needs the store's merchant_id"), "{said}");
        for bad in [
            "e4db3e1b985f4e3380cfa19d559f0f60",
            "e4db3e1b-985f-4e33-80cf-a19d559f0f6g",
        ] {
            let said = problems(&text(&format!("fetch = true\nmerchant_id = \"{bad}\"\n")));
            assert!(said.contains("is not a MerchantId"), "{said}");
        }
        // Elsewhere a MerchantId means nothing.
        let other = text_of(
            dir.path(),
            &(key_file(dir.path(), "sk_1") + &format!("merchant_id = \"{id}\"\n")),
        );
        assert!(problems(&other).contains("only a Cielo table names a MerchantId"));
    }

    #[test]
    fn the_key_s_variable_is_kept_from_the_programs_serve_runs() {
        let dir = tempfile::tempdir().unwrap();
        let text = text_of(
            dir.path(),
            "[endpoint.reconcile]\napi_key_env = \"PORTARIA_RK\"\n",
        );
        let config = Config::parse_with(&text, Source::Embedded, Secrets::Skip).unwrap();
        assert!(config.secret_variables.contains(&"PORTARIA_RK".to_string()));
    }

    use super::super::{Config, Source};
}
