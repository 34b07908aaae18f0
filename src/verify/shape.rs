//! What a provider's requests look like besides their signature: the paths they arrive at
//! (Efí appends `/pix` to the URL it was given), and where their event type is, with whether
//! what the signature covers includes it.

use super::{Verifier, catalog};

impl Verifier {
    /// The header carrying the event type for this provider, if it sends one.
    pub fn event_type_header(&self) -> Option<&'static str> {
        self.preset.event_type_header
    }

    /// Whether the event type this provider's requests carry is covered by what the signature
    /// signs: false where it comes from an unsigned header (GitHub's `X-GitHub-Event`,
    /// Shopify's topic, ...) or from a body whose bytes the scheme does not sign (Mercado
    /// Pago's, Adyen's, a Twilio form's, which can be spelled anew), or that a static
    /// credential admits whatever it says (Asaas, Cielo, Vindi, Efí's `?hmac=`: whoever
    /// captured one request can send any body with it). Read from the scheme's
    /// [`catalog::Coverage`]; Efí's mutual TLS, where only Efí's private key opens the
    /// connection the body comes on, is as good as a signature. Targets are told
    /// (`PORTARIA_EVENT_TYPE_SIGNED=0`).
    pub fn event_type_signed(&self) -> bool {
        match (self.preset.scheme.coverage(), self.preset.event_type_header) {
            (catalog::Coverage::Credential, _) => false,
            (catalog::Coverage::Connection, _) => true,
            (catalog::Coverage::Signed { headers, .. }, Some(name)) => {
                headers.iter().any(|signed| signed == name)
            }
            (catalog::Coverage::Signed { body, .. }, None) => body,
        }
    }

    /// What the provider appends to the URL it was given (Efí's `/pix`): an endpoint of its
    /// answers on its path and on its path followed by this.
    pub fn appended_path(&self) -> Option<&'static str> {
        self.preset.appended_path
    }
}
