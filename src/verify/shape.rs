//! What a provider's requests look like besides their signature: the paths they arrive at
//! (Efí appends `/pix` to the URL it was given), the probe that is not an event (Rede's GET),
//! what else the endpoint needs (iugu's `allow_ips`), where their event type and object id are
//! ([`Field`](super::Field): a preset's default, or the endpoint's `event_type` and `object_id`), whether
//! what the signature covers includes the event type, and the fields its events always carry
//! ([`Carried`]: an event without one is `drift`, flagged and never refused).
//!
//! Whether a body has a field is read like `ingest`'s pointer: serde_json's parser driven along
//! the pointer's path only, what is off the path skipped unbuilt, stopped at the value; the
//! first occurrence of a member decides. A value of any kind but null is there.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::Verifier;
use super::preset::{Carried, Coverage, Field};

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

    /// The fields its provider's events always carry ([`Carried`]); empty for most.
    pub fn carries(&self) -> &'static [Carried] {
        self.preset.carries
    }
}

impl Carried {
    /// The names of those of `carried` that an event of `event_type` should carry and whose
    /// `body` lacks (absent, or null). One pass over the body per field that applies; none for
    /// a provider without fields.
    pub fn missing(
        carried: &'static [Carried],
        event_type: Option<&str>,
        body: &[u8],
    ) -> Vec<&'static str> {
        carried
            .iter()
            .filter(|c| {
                c.types
                    .is_none_or(|p| event_type.is_some_and(|t| t.starts_with(p)))
            })
            .filter(|c| {
                let except = |t: &str| c.except.iter().any(|p| t.starts_with(p));
                !event_type.is_some_and(except)
            })
            .filter(|c| !has(c.pointer, body))
            .map(|c| c.name)
            .collect()
    }
}

/// Whether `body` is JSON with a value other than null at `pointer` (checked: starts with `/`).
fn has(pointer: &str, body: &[u8]) -> bool {
    let path: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let mut found = false;
    let reach = Reach {
        path: &path,
        found: &mut found,
    };
    // Stopped at the value, the check for the end of the enclosing object fails: that error
    // is the stop, not a broken body (`found` says).
    let _ = reach.deserialize(&mut serde_json::Deserializer::from_slice(body));
    found
}

/// What is left of the path; `found` set once its end holds a value other than null.
struct Reach<'a> {
    path: &'a [String],
    found: &'a mut bool,
}

impl Reach<'_> {
    fn scalar<E>(self) -> Result<(), E> {
        *self.found = self.path.is_empty();
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Reach<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Reach<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        self.scalar()
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        self.scalar()
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        self.scalar()
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        self.scalar()
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        self.scalar()
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((token, rest)) = self.path.split_first() else {
            *self.found = true;
            return Err(de::Error::custom("found"));
        };
        while let Some(matched) = map.next_key_seed(Named(token))? {
            if matched {
                map.next_value_seed(Reach {
                    path: rest,
                    found: self.found,
                })?;
                // The first occurrence decides, whatever it held.
                return Err(de::Error::custom("decided"));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((token, rest)) = self.path.split_first() else {
            *self.found = true;
            return Err(de::Error::custom("found"));
        };
        // RFC 6901: digits, no leading zero; anything else names no element.
        let index = match token.as_bytes() {
            [b'0'] => 0,
            [b'1'..=b'9', ..] => token.parse::<usize>().unwrap_or(usize::MAX),
            _ => return Ok(()),
        };
        for _ in 0..index {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        seq.next_element_seed(Reach {
            path: rest,
            found: self.found,
        })?;
        Err(de::Error::custom("decided"))
    }
}

/// A member name, compared with the token without being kept.
struct Named<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for Named<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Named<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, name: &str) -> Result<bool, E> {
        Ok(name == self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Verifier;
    use super::{Carried, Field, has};

    #[test]
    fn a_field_is_there_with_any_value_but_null() {
        let body = br#"{"data":{"object":{"id":"ch_1"},"id":7,"n":null},"list":[1,{"a":""}]}"#;
        for pointer in ["/data/object", "/data/id", "/list/1/a", "/list/0", "/data"] {
            assert!(has(pointer, body), "{pointer}");
        }
        for pointer in [
            "/data/n",
            "/data/missing",
            "/list/2",
            "/list/01",
            "/data/id/x",
            "/x",
        ] {
            assert!(!has(pointer, body), "{pointer}");
        }
        // The first occurrence decides; not JSON at all: nothing is there.
        assert!(!has("/a", br#"{"a":null,"a":1}"#));
        assert!(has("/a/b", br#"{"a":{"b":1},"a":null}"#));
        assert!(!has("/id", b"id=1&type=x"));
        // Escaped names, and a body cut after the value.
        assert!(has("/a~1b", br#"{"a/b":1"#));
    }

    #[test]
    fn each_preset_names_the_fields_its_events_carry() {
        let carries = |provider: &str| {
            Verifier::new(provider, None, &["s".to_string()], None)
                .unwrap()
                .carries()
        };
        assert!(carries("pagarme").is_empty());
        assert!(carries("github").is_empty());
        let stripe = carries("stripe");
        let ok = br#"{"id":"evt_1","type":"charge.succeeded","data":{"object":{"id":"ch_1"}}}"#;
        assert!(Carried::missing(stripe, Some("charge.succeeded"), ok).is_empty());
        let drifted = br#"{"id":"evt_1","type":"charge.succeeded","data":{"obj":{}}}"#;
        assert_eq!(Carried::missing(stripe, None, drifted), ["data.object"]);
        // A thin event (an event destination's) carries a related object only.
        let thin = br#"{"id":"evt_1","object":"v2.core.event","type":"v1.billing.meter.no_meter_found","related_object":{"id":"mtr_1"}}"#;
        assert!(Carried::missing(stripe, Some("v1.billing.meter.no_meter_found"), thin).is_empty());
        let mp = carries("mercadopago");
        assert!(Carried::missing(mp, None, br#"{"data":{"id":"123"}}"#).is_empty());
        assert_eq!(Carried::missing(mp, None, br#"{"data":{}}"#), ["data.id"]);
        // Asaas: only its payment events carry a payment.
        let asaas = carries("asaas");
        let paid = br#"{"event":"PAYMENT_RECEIVED","payment":{"id":"pay_1"}}"#;
        assert!(Carried::missing(asaas, Some("PAYMENT_RECEIVED"), paid).is_empty());
        let bare = br#"{"event":"PAYMENT_RECEIVED","charge":{"id":"pay_1"}}"#;
        assert_eq!(
            Carried::missing(asaas, Some("PAYMENT_RECEIVED"), bare),
            ["payment.id"]
        );
        let transfer = br#"{"event":"TRANSFER_DONE","transfer":{"id":"t_1"}}"#;
        assert!(Carried::missing(asaas, Some("TRANSFER_DONE"), transfer).is_empty());
        assert!(Carried::missing(asaas, None, transfer).is_empty());
    }

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
