//! The raw config file, exactly as written: the serde types TOML is read into before any
//! check. Every table refuses unknown keys (`deny_unknown_fields`), so a misspelt key is an
//! error, never silently ignored.

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use crate::verify::HmacOptions;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) server: RawServer,
    #[serde(default)]
    pub(super) storage: RawStorage,
    #[serde(default, rename = "endpoint")]
    pub(super) endpoints: Vec<Spanned<RawEndpoint>>,
    #[serde(default)]
    pub(super) log: RawLog,
    pub(super) alerts: Option<RawAlerts>,
    #[serde(default)]
    pub(super) status: RawStatus,
}

/// `[alerts]`: where alerts to the owner go and how often.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAlerts {
    pub(super) command: Option<Vec<String>>,
    pub(super) url: Option<String>,
    pub(super) alert_every: Option<String>,
    pub(super) timeout_secs: Option<u64>,
}

/// `[status]`: the status page's credential.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStatus {
    pub(super) token_env: Option<String>,
    pub(super) token_file: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLog {
    pub(super) level: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub(super) listen: Option<String>,
    pub(super) max_body_bytes: Option<usize>,
    pub(super) header_timeout_secs: Option<u64>,
    pub(super) body_timeout_secs: Option<u64>,
    pub(super) min_body_bytes_per_sec: Option<u64>,
    pub(super) max_connections: Option<usize>,
    pub(super) body_budget_bytes: Option<usize>,
    pub(super) admin_listen: Option<String>,
    pub(super) real_ip_header: Option<String>,
    pub(super) trusted_proxies: Option<Vec<String>>,
    /// HTTPS on the webhook listener (`config::tls`).
    pub(super) tls: Option<RawTls>,
    /// The canary through the tunnel (`config::canary`).
    pub(super) public_url: Option<String>,
    pub(super) canary_every: Option<String>,
    pub(super) canary_ca_file: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) cert_file: Option<String>,
    pub(super) key_file: Option<String>,
    pub(super) client_ca_file: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStorage {
    pub(super) path: Option<PathBuf>,
    /// The PostgreSQL backend (`config::database`): one of these, instead of `path`.
    pub(super) url: Option<String>,
    pub(super) url_env: Option<String>,
    pub(super) url_file: Option<PathBuf>,
    /// The CA of the PostgreSQL server's certificate (`config::database_tls`).
    pub(super) ca_file: Option<PathBuf>,
    pub(super) retention_days: Option<u32>,
    pub(super) dead_retention_days: Option<u32>,
    pub(super) archive_dir: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEndpoint {
    pub(super) name: Option<String>,
    pub(super) path: Option<String>,
    pub(super) provider: Option<String>,
    pub(super) secret: Option<String>,
    pub(super) secret_env: Option<OneOrMany>,
    pub(super) secret_file: Option<OneOrMany>,
    pub(super) secrets: Option<Vec<String>>,
    /// One rule, or an ordered list of rules (the first whose source is present wins).
    pub(super) dedup: Option<OneOrMany>,
    /// Accept a `dedup` rule that reads what the provider does not sign.
    pub(super) dedup_unsigned: Option<bool>,
    pub(super) dedup_window: Option<String>,
    pub(super) tolerance_secs: Option<u64>,
    pub(super) signature: Option<HmacOptions>,
    /// The public URL the provider calls, for providers that sign it (Twilio, Square).
    pub(super) public_url: Option<String>,
    /// Cielo: the custom headers holding the credential, one secret each in the same order.
    pub(super) credential_headers: Option<Vec<String>>,
    /// Vindi, Efí: the query parameter holding the secret.
    pub(super) query_param: Option<String>,
    /// Discord's application public key (hex): the credential instead of a secret.
    pub(super) public_key: Option<String>,
    /// A JWKS file (Pagar.me v5's public keys): the credential instead of a secret.
    pub(super) jwks_file: Option<PathBuf>,
    /// Refused with a hint: fetching a JWKS needs TLS, which portaria has no client for.
    pub(super) jwks_url: Option<String>,
    /// Woovi's public key(s): a PEM file, or the JSON of its public-keys endpoint.
    pub(super) public_key_file: Option<PathBuf>,
    pub(super) forward: Option<RawForward>,
    pub(super) retry: Option<Vec<String>>,
    pub(super) concurrency: Option<usize>,
    /// `[[endpoint.route]]`: several targets, each with its filter (instead of `forward`).
    pub(super) route: Option<Vec<Spanned<RawRoute>>>,
    /// Only clients in these address ranges may deliver.
    pub(super) allow_ips: Option<Vec<String>>,
    /// Alert when no webhook came for this long (`[alerts]`).
    pub(super) quiet_after: Option<String>,
    /// Alert when an event that matched no route is still stored only after this long.
    pub(super) unrouted_after: Option<String>,
    /// Its rejected requests kept (`config::quarantine`).
    pub(super) quarantine_keep: Option<u32>,
    pub(super) quarantine_for: Option<String>,
    /// Only requests over a connection with a verified client certificate (mutual TLS).
    pub(super) require_client_cert: Option<bool>,
    /// The certificate's subject CN or a DNS SAN must be this.
    pub(super) client_cert_subject: Option<String>,
    /// Where the event type and the object id are (`verify::Field`), over the preset's.
    pub(super) event_type: Option<String>,
    pub(super) object_id: Option<String>,
    /// `events export`'s columns of this endpoint: a name, and `json:<pointer>` into the body.
    pub(super) export_fields: Option<std::collections::BTreeMap<String, String>>,
    /// `[endpoint.reconcile]`: asking the gateway's API what never arrived (`config::reconcile`).
    pub(super) reconcile: Option<RawReconcile>,
}

/// `[endpoint.reconcile]`, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReconcile {
    pub(super) api_key_env: Option<String>,
    pub(super) api_key_file: Option<String>,
    pub(super) every: Option<String>,
    pub(super) window: Option<String>,
    pub(super) api_base: Option<String>,
    pub(super) ca_file: Option<String>,
    pub(super) reactivate: Option<bool>,
    pub(super) hook: Option<String>,
    pub(super) fetch: Option<bool>,
    pub(super) merchant_id: Option<String>,
}

/// The ways to give a secret. `secret_env` and `secret_file` may name several (rotation):
/// a list of variables, or a file with one secret per line. (Not a flattened struct: serde's
/// `flatten` would switch off `deny_unknown_fields`.)
pub(super) struct RawSecret {
    pub(super) secret: Option<String>,
    pub(super) secret_env: Option<OneOrMany>,
    pub(super) secret_file: Option<OneOrMany>,
}

/// `"X"` or `["X", "Y"]`. Read by a visitor of its own rather than `#[serde(untagged)]`,
/// whose buffering of any value costs the binary tens of KB (the 6 MiB budget) and whose
/// error names no expectation.
pub(super) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl<'de> Deserialize<'de> for OneOrMany {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> serde::de::Visitor<'de> for Either {
            type Value = OneOrMany;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<OneOrMany, E> {
                Ok(OneOrMany::One(v.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<OneOrMany, A::Error> {
                let mut all = Vec::new();
                while let Some(one) = seq.next_element::<String>()? {
                    all.push(one);
                }
                Ok(OneOrMany::Many(all))
            }
        }
        deserializer.deserialize_any(Either)
    }
}

impl OneOrMany {
    pub(super) fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// One `[[endpoint.route]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    pub(super) name: Option<String>,
    pub(super) events: Option<Vec<String>>,
    pub(super) forward: Option<RawForward>,
    pub(super) retry: Option<Vec<String>>,
    pub(super) concurrency: Option<usize>,
    pub(super) order_by: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawForward {
    pub(super) command: Option<Vec<String>>,
    pub(super) pipe: Option<Vec<String>>,
    pub(super) url: Option<String>,
    pub(super) timeout_secs: Option<u64>,
    pub(super) secret: Option<String>,
    pub(super) secret_env: Option<OneOrMany>,
    pub(super) secret_file: Option<OneOrMany>,
}
