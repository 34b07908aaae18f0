//! An endpoint's `event_type` and `object_id`: where its event type and object id are read
//! (`verify::Field`: `json:<pointer>`, `header:<name>`, `form:<field>`), set on its verifier
//! over the preset's defaults, so that routes, `order_by`'s warning, the status page and the
//! targets all see the same values (docs/forwarding.md, "The event type and object id"); and
//! its `export_fields`, the columns `events export` reads from each event's body.

use super::validator::Validator;

/// The columns every line of `events export` has, before an endpoint's `export_fields`.
pub const EXPORT_COLUMNS: [&str; 8] = [
    "id",
    "received_at",
    "received_at_local",
    "endpoint",
    "event_type",
    "object_id",
    "status",
    "dedup_key",
];
use crate::verify::{Field, Verifier};

impl Validator<'_> {
    /// The verifier with the endpoint's fields; a field that cannot be parsed, or that reads a
    /// credential header (which is stored redacted, so the type would be the credential), is a
    /// problem.
    pub(super) fn event_fields(
        &mut self,
        at: &str,
        verifier: Option<Verifier>,
        event_type: Option<String>,
        object_id: Option<String>,
    ) -> Option<Verifier> {
        let event_type = self.field(at, "event_type", event_type, verifier.as_ref());
        let object_id = self.field(at, "object_id", object_id, verifier.as_ref());
        Some(verifier?.with_fields(event_type, object_id))
    }

    /// `export_fields = { amount = "json:/data/amount" }`: each a name (not one of the
    /// export's own columns) and a JSON pointer; a problem for each that is not.
    pub(super) fn export_fields(
        &mut self,
        at: &str,
        raw: Option<std::collections::BTreeMap<String, String>>,
    ) -> Vec<(String, String)> {
        let mut fields = Vec::new();
        for (name, field) in raw.unwrap_or_default() {
            let at = format!("{at}.export_fields.{name}");
            if EXPORT_COLUMNS.contains(&name.as_str()) || !super::validate::valid_name(&name) {
                self.problem(format!(
                    "{at}: a column needs a name of letters, digits, `-`, `_` or `.`, other \
                     than the export's own ({})",
                    EXPORT_COLUMNS.join(", ")
                ));
                continue;
            }
            let pointer = field.strip_prefix("json:").ok_or_else(|| {
                format!("`{field}`: give `json:<pointer>` into the body, like json:/data/amount")
            });
            match pointer.and_then(|p| crate::dedup::check_pointer(p).map(|()| p)) {
                Ok(pointer) => fields.push((name, pointer.to_string())),
                Err(why) => self.problem(format!("{at}: {why}")),
            }
        }
        fields
    }

    fn field(
        &mut self,
        at: &str,
        key: &str,
        text: Option<String>,
        verifier: Option<&Verifier>,
    ) -> Option<Field> {
        let field = match text?.parse::<Field>() {
            Ok(field) => field,
            Err(why) => {
                self.problem(format!("{at}.{key}: {why}"));
                return None;
            }
        };
        if let (Field::Header(name), Some(v)) = (&field, verifier)
            && (name == http::header::AUTHORIZATION || v.credential_headers().contains(name))
        {
            self.problem(format!(
                "{at}.{key}: `{field}` carries this provider's credential, which is never \
                 stored; read it from somewhere else"
            ));
            return None;
        }
        Some(field)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::{parse, problems};

    fn endpoint(extra: &str) -> String {
        format!(
            "[[endpoint]]\npath = \"/webhooks/shop\"\nprovider = \"github\"\nsecret = \"s\"\n{extra}\n"
        )
    }

    #[test]
    fn the_fields_are_set_on_the_verifier() {
        let config = parse(&endpoint(
            "event_type = \"json:/events/0\"\nobject_id = \"form:data[id]\"",
        ))
        .unwrap();
        let v = &config.endpoints[0].verifier;
        assert_eq!(v.event_type_field().unwrap().to_string(), "json:/events/0");
        assert_eq!(v.object_id_field().unwrap().to_string(), "form:data[id]");
        // A body field of a provider that signs the body: a signed type.
        assert!(v.event_type_signed());
        let plain = parse(&endpoint("")).unwrap();
        assert!(plain.endpoints[0].verifier.event_type_field().is_none());
    }

    /// A field decides the type's signedness by what the provider's signature covers: a body
    /// field is signed only where the body is, a header only where that header is.
    #[test]
    fn a_field_outside_the_signature_gives_an_unsigned_type() {
        let of = |provider: &str, secret: &str, field: &str| {
            let text = format!(
                "[[endpoint]]\npath = \"/w\"\nprovider = \"{provider}\"\nsecret = \"{secret}\"\n\
                 event_type = \"{field}\"\n"
            );
            parse(&text).unwrap().endpoints[0]
                .verifier
                .event_type_signed()
        };
        // GitHub signs the body, not its headers.
        assert!(!of("github", "s", "header:X-Topic"));
        assert!(of("github", "s", "form:event"));
        // Mercado Pago signs the query's data.id and x-request-id, not the body.
        assert!(!of("mercadopago", "s", "json:/type"));
        assert!(of("mercadopago", "s", "header:x-request-id"));
        // A static credential signs nothing.
        assert!(!of("asaas", "t", "json:/event"));
    }

    #[test]
    fn export_fields_are_json_pointers_under_names_of_their_own() {
        let config = parse(&endpoint(
            "export_fields = { customer = \"json:/data/customer/email\", amount = \"json:/data/amount\" }",
        ))
        .unwrap();
        assert_eq!(
            config.endpoints[0].export_fields,
            [
                ("amount".to_string(), "/data/amount".to_string()),
                ("customer".to_string(), "/data/customer/email".to_string())
            ]
        );
        let msg = problems(&endpoint(
            "export_fields = { a = \"/data/a\", b = \"json:data\", status = \"json:/s\", \"x y\" = \"json:/x\" }",
        ));
        assert!(
            msg.contains(".export_fields.a: `/data/a`: give `json:<pointer>`"),
            "{msg}"
        );
        assert!(
            msg.contains(".export_fields.b: JSON pointer `data` must start"),
            "{msg}"
        );
        assert!(
            msg.contains(".export_fields.status: a column needs a name"),
            "{msg}"
        );
        assert!(
            msg.contains(".export_fields.x y: a column needs a name"),
            "{msg}"
        );
    }

    #[test]
    fn a_bad_field_or_a_credential_header_is_refused() {
        let msg = problems(&endpoint(
            "event_type = \"events/0\"\nobject_id = \"json:id\"",
        ));
        assert!(
            msg.contains(".event_type: `events/0`: give `json:<pointer>`"),
            "{msg}"
        );
        assert!(
            msg.contains(".object_id: JSON pointer `id` must start with `/`"),
            "{msg}"
        );
        let msg = problems(&endpoint("event_type = \"header:Authorization\""));
        assert!(msg.contains("carries this provider's credential"), "{msg}");
        let asaas = "[[endpoint]]\npath = \"/a\"\nprovider = \"asaas\"\nsecret = \"t\"\n\
                     object_id = \"header:asaas-access-token\"\n";
        assert!(problems(asaas).contains(".object_id: `header:asaas-access-token` carries"));
    }
}
