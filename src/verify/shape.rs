//! What a provider's requests look like besides their signature: the paths they arrive at
//! (Efí appends `/pix` to the URL it was given), the probe that is not an event (Rede's GET),
//! what else the endpoint needs (iugu's `allow_ips`), where their event type and object id are
//! ([`Field`](super::Field): a preset's default, or the endpoint's `event_type` and `object_id`), and whether
//! what the signature covers includes the event type.

use super::Verifier;
use super::preset::{Coverage, Field};

impl Verifier {
    /// The header carrying the event type for this provider, if it sends one and no
    /// [`Field`] says otherwise; a request without it has its type read from the body.
    pub fn event_type_header(&self) -> Option<&'static str> {
        match self.preset.event_type {
            Some(_) => None,
            None => self.preset.event_type_header,
        }
    }

    /// Where the event type is, when the endpoint (`event_type`) or the preset says: only
    /// there. None: the provider's header ([`Verifier::event_type_header`]), else the body's
    /// `type`, else its `event`.
    pub fn event_type_field(&self) -> Option<&Field> {
        self.preset.event_type.as_ref()
    }

    /// Where the object id is, when the endpoint (`object_id`) or the preset says; None: the
    /// body's `data.id`.
    pub fn object_id_field(&self) -> Option<&Field> {
        self.preset.object_id.as_ref()
    }

    /// The endpoint's `event_type` and `object_id`, over the preset's defaults.
    pub fn with_fields(mut self, event_type: Option<Field>, object_id: Option<Field>) -> Self {
        self.preset.event_type = event_type.or(self.preset.event_type);
        self.preset.object_id = object_id.or(self.preset.object_id);
        self
    }

    /// Whether the event type this provider's requests carry is covered by what the signature
    /// signs: false where it comes from an unsigned header (GitHub's `X-GitHub-Event`,
    /// Shopify's topic, a `header:` field the scheme does not sign) or from a body whose bytes
    /// the scheme does not sign (Mercado Pago's, Adyen's, a Twilio form's, which can be spelled
    /// anew), or that a static credential admits whatever it says (Asaas, Cielo, Vindi, Efí's
    /// `?hmac=`, Rede, PicPay, iugu: whoever captured one request can send any body with it).
    /// Read from the scheme's [`preset::Coverage`]; Efí's mutual TLS, where only Efí's
    /// private key opens the connection the body comes on, is as good as a signature. Targets
    /// are told (`PORTARIA_EVENT_TYPE_SIGNED=0`).
    pub fn event_type_signed(&self) -> bool {
        let header = match &self.preset.event_type {
            Some(Field::Header(name)) => Some(name.as_str()),
            Some(Field::Json(_) | Field::Form(_)) => None,
            None => self.preset.event_type_header,
        };
        match (self.preset.scheme.coverage(), header) {
            (Coverage::Credential, _) => false,
            (Coverage::Connection, _) => true,
            (Coverage::Signed { headers, .. }, Some(name)) => {
                headers.iter().any(|signed| signed == name)
            }
            (Coverage::Signed { body, .. }, None) => body,
        }
    }

    /// Whether a bare GET is the provider checking the URL (Rede's, at registration): answered
    /// 200, never stored.
    pub fn answers_get(&self) -> bool {
        self.preset.answers_get
    }

    /// Why an endpoint of this provider cannot go without `allow_ips` (iugu), if it cannot.
    pub fn needs_allow_ips(&self) -> Option<&'static str> {
        self.preset.needs_allow_ips
    }

    /// What the provider appends to the URL it was given (Efí's `/pix`): an endpoint of its
    /// answers on its path and on its path followed by this.
    pub fn appended_path(&self) -> Option<&'static str> {
        self.preset.appended_path
    }
}

#[cfg(test)]
mod tests {
    use super::super::Verifier;
    use super::Field;

    #[test]
    fn a_field_is_a_header_a_json_pointer_or_a_form_field() {
        for text in [
            "header:x-topic",
            "json:/events/0",
            "json:/a~1b/~0c",
            "form:data[id]",
        ] {
            let field: Field = text.parse().unwrap();
            assert_eq!(field.to_string(), text);
        }
        assert_eq!(
            "header:X-Topic".parse::<Field>().unwrap().to_string(),
            "header:x-topic"
        );
        for (bad, why) in [
            ("events/0", "give `json:<pointer>`"),
            ("json:events/0", "must start with `/`"),
            ("json:/a~2", "followed by 0 or 1"),
            ("header:X Topic", "not a valid header name"),
            ("form:", "give `json:<pointer>`"),
            ("body:event", "give `json:<pointer>`"),
        ] {
            let err = bad.parse::<Field>().unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn a_field_decides_whether_the_type_is_signed() {
        let github = |field: &str| {
            Verifier::new("github", None, &["s".to_string()], None)
                .unwrap()
                .with_fields(Some(field.parse().unwrap()), None)
        };
        // GitHub signs the body, not its `X-GitHub-Event` header.
        let plain = Verifier::new("github", None, &["s".to_string()], None).unwrap();
        assert!(!plain.event_type_signed());
        assert_eq!(plain.event_type_header(), Some("x-github-event"));
        let from_body = github("json:/action");
        assert!(from_body.event_type_signed());
        assert_eq!(from_body.event_type_header(), None);
        assert!(!github("header:x-github-event").event_type_signed());
        assert!(github("form:action").event_type_signed());
        // A static credential signs nothing, wherever the type is read.
        let asaas = Verifier::new("asaas", None, &["t".to_string()], None)
            .unwrap()
            .with_fields(Some("json:/event".parse().unwrap()), None);
        assert!(!asaas.event_type_signed());
    }
}
