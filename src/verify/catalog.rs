//! The provider catalog: every `provider = "..."` name, and the [`Preset`] each one builds.
//!
//! A preset is declarative: a [`Scheme`] (how the signature is read and checked, usually a few
//! builder calls on a generic scheme), the default dedup rule, the event-type header, the
//! replay window, how the secret string becomes key bytes, which request headers carry a
//! credential (redacted before the headers are stored), and what an accepted event is
//! answered with. Each provider's rules live in its own file; this one only lists them.

use super::hmac_scheme::HmacScheme;
use super::preset::Preset;
use super::{
    Settings, adyen, asaas, cielo, discord, efi, github, mercadopago, pagarme, pagarme_v5, pagbank,
    plowf, relya, standard_webhooks, stripe, vindi,
};
use crate::dedup::DedupRule;

/// Every provider name the config accepts, in the order the README lists them.
pub const PROVIDERS: &[&str] = &[
    // Brazilian gateways.
    "plowf",
    "pagarme",
    "relya",
    "mercadopago",
    "pagbank",
    "asaas",
    "cielo",
    "vindi",
    "efi",
    "adyen",
    "rede",
    "picpay",
    "iugu",
    // (Brazilian gateways: new names above this line.)
    //
    // SaaS and international gateways.
    "stripe",
    "standard-webhooks",
    "svix",
    "github",
    "shopify",
    "slack",
    "paddle",
    "woocommerce",
    "twilio",
    "square",
    "zoom",
    "linear",
    "intercom",
    "typeform",
    "calendly",
    // (SaaS: new names above this line.)
    //
    // Asymmetric signatures.
    "discord",
    "pagarme-v5",
    "woovi",
    "openpix",
    // (Asymmetric: new names above this line.)
    //
    // Your own description of a scheme.
    "hmac",
];

/// The providers whose senders sign with a private key: an endpoint of theirs holds the public
/// key (its preset says which setting), never a shared secret.
/// (Woovi's endpoint may take a secret besides, or instead: its older HMAC form.)
pub const PUBLIC_KEY_PROVIDERS: &[&str] = &["discord", "pagarme-v5", "woovi", "openpix"];

/// Whether an endpoint of `provider` is given a shared secret (an unknown name: yes, so that
/// a missing secret is reported beside the unknown provider).
pub fn takes_secret(provider: &str) -> bool {
    !PUBLIC_KEY_PROVIDERS.contains(&provider)
}

/// The preset of `provider`, or why there is none.
pub(super) fn preset(provider: &str, settings: &Settings<'_>) -> Result<Preset, String> {
    // One platform, two names.
    let provider = if provider == "openpix" {
        "woovi"
    } else {
        provider
    };
    if provider != "hmac" && settings.hmac.is_some() {
        return Err(format!(
            "a `signature` table is only allowed with provider `hmac`, not `{provider}`"
        ));
    }
    if !matches!(provider, "cielo" | "picpay") && settings.credential_headers.is_some() {
        return Err(format!(
            "`credential_headers` is only allowed with providers `cielo` and `picpay`, not \
             `{provider}`"
        ));
    }
    if !matches!(provider, "vindi" | "efi" | "iugu") && settings.query_param.is_some() {
        return Err(format!(
            "`query_param` is only allowed with providers `vindi`, `efi` and `iugu`, not \
             `{provider}`"
        ));
    }
    for (key, value, owner) in [
        ("public_key", settings.public_key, "discord"),
        ("jwks_file", settings.jwks, "pagarme-v5"),
        ("public_key_file", settings.public_key_pem, "woovi"),
    ] {
        if value.is_some() && provider != owner {
            return Err(format!(
                "`{key}` is only for provider `{owner}`, not `{provider}`"
            ));
        }
    }
    match provider {
        "plowf" => Ok(plowf::preset()),
        "pagarme" => Ok(pagarme::preset()),
        "relya" => Ok(relya::preset()),
        "stripe" => Ok(stripe::preset()),
        "standard-webhooks" => Ok(standard_webhooks::preset(false)),
        "svix" => Ok(standard_webhooks::preset(true)),
        "mercadopago" => Ok(mercadopago::preset()),
        "pagbank" => Ok(pagbank::preset()),
        "asaas" => Ok(asaas::preset()),
        "cielo" => cielo::preset(settings),
        "vindi" => Ok(vindi::preset(settings)),
        "efi" => Ok(efi::preset(settings)),
        "adyen" => Ok(adyen::preset()),
        "rede" => Ok(super::rede::preset()),
        "picpay" => super::picpay::preset(settings),
        "iugu" => Ok(super::iugu::preset(settings)),
        // (Brazilian gateways: new arms above this line.)
        //
        "github" => Ok(github::preset()),
        "shopify" => Ok(super::shopify::preset()),
        "slack" => Ok(super::slack::preset()),
        "paddle" => Ok(super::paddle::preset()),
        "woocommerce" => Ok(super::woocommerce::preset()),
        "twilio" => super::twilio::preset(settings),
        "square" => super::square::preset(settings),
        "zoom" => Ok(super::zoom::preset()),
        "linear" => Ok(super::linear::preset()),
        "intercom" => Ok(super::intercom::preset()),
        "typeform" => Ok(super::typeform::preset()),
        "calendly" => Ok(super::calendly::preset()),
        // (SaaS: new arms above this line.)
        //
        "discord" => discord::preset(settings.public_key),
        "pagarme-v5" => pagarme_v5::preset(settings.jwks),
        "woovi" => super::woovi::preset(settings),
        // (Asymmetric: new arms above this line.)
        //
        "hmac" => {
            let options = settings.hmac.ok_or_else(|| {
                "provider `hmac` needs a `signature` table (at least `header = \"...\"`)"
                    .to_string()
            })?;
            Ok(Preset::new(
                "hmac",
                HmacScheme::from_options(options)?,
                DedupRule::BodySha256,
            ))
        }
        other => Err(format!(
            "unknown provider `{other}` (known: {})",
            PROVIDERS.join(", ")
        )),
    }
}
