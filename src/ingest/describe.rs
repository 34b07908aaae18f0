//! What a webhook's body says about itself, for the store and the log line: its event type (a
//! top-level `type`, else `event`; a provider's header wins) and the object it is about
//! (`data.id`). [`describe`] reads the body only as far as it needs: serde_json's parser, driven
//! member by member, stopped once it has both. Where an endpoint or its preset names a
//! [`Field`] for either ([`describe_with`]), that field alone is read: a header, a form field,
//! or a JSON pointer, read as far as the pointer goes (`pointer`); the body's own `type` and
//! `data.id` are then not looked at.
//!
//! The rules (docs/forwarding.md, "The event type and object id"): the first occurrence of a
//! member wins; a `type` that is not a non-empty string or a number falls back to `event`;
//! strings keep their first 200 characters, numbers are written as JSON has them; a `data` that
//! is not an object has no id. What comes after the stop point is never read, so it may be
//! anything; a body that is not JSON up to that point (or is not an object) gives nothing.

use std::fmt;

use http::HeaderMap;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::headers::header_text;
use super::scalar::{MAX_CHARS, Scalar};
use crate::verify::{Field, Verifier};

/// What the body says about itself, best effort, for the store and the log line.
#[derive(Debug, Default)]
pub struct Described {
    /// The provider's event-type header, else a top-level `type` or `event`.
    pub event_type: Option<String>,
    /// `data.id`, the object the event is about (a charge, an order), when there is one.
    pub object_id: Option<String>,
}

/// Where [`describe_with`] reads: the endpoint's fields, else the defaults of [`describe`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Sources<'a> {
    pub event_type: Option<&'a Field>,
    /// The provider's event-type header, for a type without a field.
    pub type_header: Option<&'a str>,
    pub object_id: Option<&'a Field>,
}

impl<'a> Sources<'a> {
    /// Where an endpoint with this verifier finds them.
    pub fn of(verifier: &'a Verifier) -> Sources<'a> {
        Sources {
            event_type: verifier.event_type_field(),
            type_header: verifier.event_type_header(),
            object_id: verifier.object_id_field(),
        }
    }
}

/// The event type and object id from where `sources` says. A field that finds nothing gives
/// nothing: never the default's value, never a reason to refuse the request.
pub fn describe_with(sources: Sources<'_>, headers: &HeaderMap, body: &[u8]) -> Described {
    let defaults = match (sources.event_type, sources.object_id) {
        (Some(_), Some(_)) => Described::default(),
        _ => describe(sources.type_header, headers, body),
    };
    let read = |field: &Field| match field {
        Field::Header(name) => header_text(headers, name.as_str()).map(kept),
        Field::Form(name) => form_urlencoded::parse(body)
            .find(|(key, _)| key == name)
            .and_then(|(_, value)| (!value.is_empty()).then(|| kept(value.into_owned()))),
        Field::Json(pointer) => super::pointer::read(pointer, body),
    };
    Described {
        event_type: sources.event_type.map_or(defaults.event_type, read),
        object_id: sources.object_id.map_or(defaults.object_id, read),
    }
}

/// Its first [`MAX_CHARS`] characters.
fn kept(mut text: String) -> String {
    if let Some((at, _)) = text.char_indices().nth(MAX_CHARS) {
        text.truncate(at);
    }
    text
}

/// Reads the event type (from `event_type_header`, the provider's, if it sent it) and the
/// object id, in one pass over the body that ends as soon as both are known.
pub fn describe(event_type_header: Option<&str>, headers: &HeaderMap, body: &[u8]) -> Described {
    let from_header = event_type_header.and_then(|h| header_text(headers, h));
    let mut found = Found {
        wants_type: from_header.is_none(),
        ..Found::default()
    };
    let read = serde_json::Deserializer::from_slice(body).deserialize_map(Top(&mut found));
    // The end of the object, or the early stop (which may end in an error: `Found::stop`);
    // any other error is a body that is not JSON, or not an object, before the stop point.
    if read.is_err() && !found.stopped {
        found = Found::default();
    }
    Described {
        event_type: from_header.or_else(|| found.kind.flatten().or(found.event.flatten())),
        object_id: found.id.flatten(),
    }
}

/// The first `type`, `event` and `data.id` met so far: `Some(None)` is a member that is there
/// but not a usable scalar.
#[derive(Default)]
struct Found {
    /// False when a header gave the type: `type` and `event` are skipped unread.
    wants_type: bool,
    kind: Option<Option<String>>,
    event: Option<Option<String>>,
    id: Option<Option<String>>,
    /// The first `data` member has been read (or skipped) whole.
    data_done: bool,
    /// The parse was ended on purpose, with everything wanted found.
    stopped: bool,
}

impl Found {
    /// Nothing later in the body could change the event type: it came from the header, or a
    /// usable `type` was read, or an unusable one and `event` both were.
    fn has_type(&self) -> bool {
        !self.wants_type
            || matches!(self.kind, Some(Some(_)))
            || (self.kind.is_some() && self.event.is_some())
    }

    /// Ends the parse: everything wanted is found. A visitor returns from the middle of its
    /// object, and serde_json's check for the object's end fails it: a syntax error, cheaper
    /// than one of ours (`de::Error::custom` searches its message for a position), and never
    /// shown.
    fn stop<E>(&mut self) -> Result<(), E> {
        self.stopped = true;
        Ok(())
    }
}

/// The member names `describe` reads; escapes are undone by serde_json first.
#[derive(PartialEq)]
enum Key {
    Type,
    Event,
    Data,
    Id,
    Other,
}

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_identifier(KeyName)
    }
}

struct KeyName;

impl Visitor<'_> for KeyName {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<Key, E> {
        Ok(match name {
            "type" => Key::Type,
            "event" => Key::Event,
            "data" => Key::Data,
            "id" => Key::Id,
            _ => Key::Other,
        })
    }
}

/// The body: an object, read member by member.
struct Top<'a>(&'a mut Found);

impl<'de> Visitor<'de> for Top<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let found = self.0;
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Type if found.wants_type && found.kind.is_none() => {
                    found.kind = Some(map.next_value::<Scalar>()?.0);
                }
                Key::Event if found.wants_type && found.event.is_none() => {
                    found.event = Some(map.next_value::<Scalar>()?.0);
                }
                Key::Data if !found.data_done => {
                    map.next_value_seed(Data(&mut *found))?;
                    found.data_done = true;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            if found.data_done && found.has_type() {
                return found.stop();
            }
        }
        Ok(())
    }
}

/// The first `data` member: an object whose first `id` is wanted; anything else has no id.
struct Data<'a>(&'a mut Found);

impl<'de> DeserializeSeed<'de> for Data<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Data<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let found = self.0;
        while let Some(key) = map.next_key::<Key>()? {
            if key == Key::Id && found.id.is_none() {
                found.id = Some(map.next_value::<Scalar>()?.0);
                if found.has_type() {
                    return found.stop();
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        IgnoredAny.visit_seq(seq).map(drop)
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(event_type, object_id)` of a body, without a provider's header.
    fn read(body: &str) -> (Option<String>, Option<String>) {
        read_bytes(body.as_bytes())
    }

    fn read_bytes(body: &[u8]) -> (Option<String>, Option<String>) {
        let d = describe(None, &HeaderMap::new(), body);
        (d.event_type, d.object_id)
    }

    fn both(kind: &str, id: &str) -> (Option<String>, Option<String>) {
        (Some(kind.into()), Some(id.into()))
    }

    const NOTHING: (Option<String>, Option<String>) = (None, None);

    #[test]
    fn type_and_data_id_in_either_order() {
        let want = both("charge.paid", "ch_1");
        assert_eq!(read(r#"{"type":"charge.paid","data":{"id":"ch_1"}}"#), want);
        assert_eq!(read(r#"{"data":{"id":"ch_1"},"type":"charge.paid"}"#), want);
        assert_eq!(
            read(
                r#" { "id": "hook_1", "data" : { "amount": 5, "id": "ch_1", "x": [1] }, "created": 1, "type": "charge.paid" } "#
            ),
            want
        );
        // Escapes in names and values are undone.
        assert_eq!(
            read(r#"{"ty\u0070e":"charge\u002epaid","data":{"\u0069d":"ch_1"}}"#),
            want
        );
        assert_eq!(read(r#"{"type":"a"}"#), (Some("a".into()), None));
        assert_eq!(read(r#"{"data":{"id":"x"}}"#), (None, Some("x".into())));
        assert_eq!(read("{}"), NOTHING);
        // Only the top level's `type` and `data`, and only `data`'s `id`.
        assert_eq!(
            read(
                r#"{"id":"top","x":{"type":"deep","data":{"id":"deep"}},"data":{"x":{"id":"deep"}}}"#
            ),
            NOTHING
        );
    }

    #[test]
    fn event_is_the_fallback_for_a_missing_or_unusable_type() {
        assert_eq!(
            read(r#"{"event":"order.paid","data":{"id":1}}"#),
            both("order.paid", "1")
        );
        // `type` wins wherever it is, even after `event`.
        assert_eq!(
            read(r#"{"event":"e","type":"t"}"#),
            (Some("t".into()), None)
        );
        assert_eq!(
            read(r#"{"type":"t","event":"e"}"#),
            (Some("t".into()), None)
        );
        for unusable in [
            r#""""#,
            "{}",
            r#"{"name":"t"}"#,
            "[\"t\"]",
            "null",
            "true",
            "false",
        ] {
            let body = format!(r#"{{"type":{unusable},"event":"e","data":{{"id":"x"}}}}"#);
            assert_eq!(read(&body), both("e", "x"), "{body}");
            let body = format!(r#"{{"event":"e","data":{{"id":"x"}},"type":{unusable}}}"#);
            assert_eq!(read(&body), both("e", "x"), "{body}");
        }
        assert_eq!(read(r#"{"type":"","event":""}"#), NOTHING);
        assert_eq!(read(r#"{"type":{},"event":[]}"#), NOTHING);
    }

    #[test]
    fn numbers_are_written_as_json_has_them_and_strings_cut_to_200_characters() {
        assert_eq!(read(r#"{"type":7,"data":{"id":42}}"#), both("7", "42"));
        assert_eq!(read(r#"{"type":-3,"data":{"id":1.5}}"#), both("-3", "1.5"));
        assert_eq!(
            read(r#"{"type":"t","data":{"id":18446744073709551615}}"#),
            both("t", "18446744073709551615")
        );
        assert_eq!(
            read(r#"{"type":"t","data":{"id":1e3}}"#),
            both("t", "1000.0")
        );
        let long = "é".repeat(300);
        let body = format!(r#"{{"type":"{long}","data":{{"id":"{long}"}}}}"#);
        let cut = "é".repeat(200);
        assert_eq!(read(&body), both(&cut, &cut));
        // An unusable id is no id; `data` that is not an object has none.
        for data in [
            r#"{"id":""}"#,
            r#"{"id":null}"#,
            r#"{"id":{"v":1}}"#,
            r#"{"id":[1]}"#,
            r#"{"id":true}"#,
            "null",
            r#""ch_1""#,
            "5",
            "true",
            r#"["ch_1"]"#,
            "[]",
        ] {
            let body = format!(r#"{{"data":{data},"type":"t"}}"#);
            assert_eq!(read(&body), (Some("t".into()), None), "{body}");
        }
    }

    #[test]
    fn the_provider_header_wins_and_the_body_still_gives_the_id() {
        let mut headers = HeaderMap::new();
        headers.insert("x-topic", "orders/paid".parse().unwrap());
        headers.insert("x-blank", "  ".parse().unwrap());
        let body = br#"{"type":"t","data":{"id":"o_1"}}"#;
        let d = describe(Some("x-topic"), &headers, body);
        assert_eq!((d.event_type, d.object_id), both("orders/paid", "o_1"));
        // With the type from the header, `type` and `event` are not read: a broken `type`
        // after the id does not matter, the parse stopped at the id.
        let d = describe(
            Some("x-topic"),
            &headers,
            br#"{"data":{"id":"o_1"},"type":"#,
        );
        assert_eq!((d.event_type, d.object_id), both("orders/paid", "o_1"));
        // Not JSON at all: the header's type alone.
        let d = describe(Some("x-topic"), &headers, b"topic=orders%2Fpaid");
        assert_eq!(
            (d.event_type, d.object_id),
            (Some("orders/paid".into()), None)
        );
        // A header that is missing or blank gives way to the body.
        for name in ["x-missing", "x-blank"] {
            let d = describe(Some(name), &headers, body);
            assert_eq!((d.event_type, d.object_id), both("t", "o_1"), "{name}");
        }
    }

    #[test]
    fn what_follows_the_wanted_members_is_never_read() {
        let want = both("charge.paid", "ch_1");
        for tail in [
            "",
            "}",
            "} trailing",
            "]]]]",
            ",\"x\":",
            ",\"data\":{\"id\":\"other\"}}",
            "\u{0}\u{1}{{{{",
        ] {
            let body = format!(r#"{{"type":"charge.paid","data":{{"id":"ch_1"{tail}"#);
            assert_eq!(read(&body), want, "{body:?}");
        }
        // Not even as bytes: invalid UTF-8 after the stop point.
        let mut body = br#"{"type":"charge.paid","data":{"id":"ch_1","note":""#.to_vec();
        body.extend_from_slice(b"\xff\xfe\"}}");
        assert_eq!(read_bytes(&body), want);
        // The whole object read, then anything after it.
        assert_eq!(
            read(r#"{"type":"a"} {"type":"b"} garbage"#),
            (Some("a".into()), None)
        );
    }

    #[test]
    fn a_body_broken_before_the_stop_point_gives_nothing() {
        // The same tails as above, when `type` comes after `data`: the break comes first.
        for tail in ["", "}", "]]]]", ",\"x\":", "\u{0}\u{1}{{{{"] {
            let body = format!(r#"{{"data":{{"id":"ch_1"{tail}"#);
            assert_eq!(read(&body), NOTHING, "{body:?}");
        }
        // A usable `type` read, and a break before `data` is done.
        assert_eq!(
            read(r#"{"type":"t","x":nope,"data":{"id":"ch_1"}}"#),
            NOTHING
        );
        assert_eq!(read(r#"{"type":"t","data":{"x":1,"#), NOTHING);
        // `event` read, and a break before a `type` could come.
        assert_eq!(read(r#"{"event":"e","data":{"id":"ch_1"},"#), NOTHING);
        assert_eq!(read(r#"{"type":"unterminated"#), NOTHING);
    }

    #[test]
    fn the_first_occurrence_of_a_member_wins() {
        assert_eq!(
            read(r#"{"type":"a","type":"b","data":{"id":1,"id":2}}"#),
            both("a", "1")
        );
        assert_eq!(
            read(r#"{"data":{"id":1,"id":2},"type":"a","type":"b"}"#),
            both("a", "1")
        );
        assert_eq!(
            read(r#"{"data":{"x":1},"data":{"id":2},"type":"a"}"#),
            (Some("a".into()), None)
        );
        assert_eq!(read(r#"{"data":null,"data":{"id":2}}"#), NOTHING);
        // An unusable first `type` is still the first: the fallback is `event`, not a later `type`.
        assert_eq!(
            read(r#"{"type":"","type":"b","event":"e"}"#),
            (Some("e".into()), None)
        );
        assert_eq!(
            read(r#"{"event":"e","event":"f"}"#),
            (Some("e".into()), None)
        );
    }

    #[test]
    fn a_body_that_is_not_a_json_object_gives_nothing() {
        for body in [
            "",
            " ",
            "hello",
            "type=charge.paid&data[id]=1",
            "<xml/>",
            "{",
            "{\"type\"",
            "\u{feff}{\"type\":\"a\"}",
            r#"[{"type":"a","data":{"id":1}}]"#,
            r#"["a","b",{"id":1}]"#,
            r#""charge.paid""#,
            "42",
            "null",
            "true",
        ] {
            assert_eq!(read(body), NOTHING, "{body:?}");
        }
        assert_eq!(read_bytes(b"\xff\xfe{}"), NOTHING);
    }

    #[test]
    fn a_huge_data_with_its_id_first_is_not_read_past_the_id() {
        let items: Vec<String> = (0..20_000)
            .map(|i| format!(r#"{{"n":{i},"s":"{}"}}"#, "x".repeat(40)))
            .collect();
        let data_rest = format!(
            r#""items":[{}],"deep":{}1{}"#,
            items.join(","),
            "[".repeat(100),
            "]".repeat(100)
        );
        let whole = format!(r#"{{"type":"t","data":{{"id":"ch_1",{data_rest}}}}}"#);
        assert!(whole.len() > 1_000_000);
        assert_eq!(read(&whole), both("t", "ch_1"));
        // Proof that it stopped at the id: the same body with its every byte after the id
        // broken still gives both.
        let stop = whole.find("\"ch_1\"").unwrap() + "\"ch_1\"".len();
        let mut broken = whole.as_bytes()[..stop].to_vec();
        broken.extend(std::iter::repeat_n(b'\xff', whole.len() - stop));
        assert_eq!(read_bytes(&broken), both("t", "ch_1"));
        // With `type` after `data`, the whole of `data` is skipped, and the type found.
        let after = format!(r#"{{"data":{{"id":"ch_1",{data_rest}}},"type":"t"}}"#);
        assert_eq!(read(&after), both("t", "ch_1"));
    }

    #[test]
    fn a_field_is_read_alone_and_a_miss_is_no_value() {
        let field = |text: &str| text.parse::<Field>().unwrap();
        let (rede, topic, form) = (
            field("json:/events/0"),
            field("header:x-topic"),
            field("form:data[id]"),
        );
        let mut headers = HeaderMap::new();
        headers.insert("x-topic", " orders/paid ".parse().unwrap());
        let read = |event_type, object_id, body: &[u8]| {
            let sources = Sources {
                event_type,
                type_header: Some("x-provider-type"),
                object_id,
            };
            let d = describe_with(sources, &headers, body);
            (d.event_type, d.object_id)
        };
        let body = br#"{"type":"t","events":["PV.REFUND_PIX"],"data":{"id":"TID1"}}"#;
        assert_eq!(read(Some(&rede), None, body), both("PV.REFUND_PIX", "TID1"));
        assert_eq!(read(Some(&topic), None, body), both("orders/paid", "TID1"));
        // Only the type's field given: the id is still `data.id`; and the other way round.
        assert_eq!(read(None, Some(&rede), body), both("t", "PV.REFUND_PIX"));
        // A field that finds nothing: no value, never the default's.
        assert_eq!(read(Some(&rede), None, br#"{"type":"t"}"#), NOTHING);
        assert_eq!(read(Some(&form), Some(&form), body), NOTHING);
        // A form body, its names percent-decoded; the first occurrence wins, empty is none.
        let iugu = b"event=invoice.status_changed&data%5Bid%5D=899E&data[id]=other&x=";
        let event = field("form:event");
        assert_eq!(
            read(Some(&event), Some(&form), iugu),
            both("invoice.status_changed", "899E")
        );
        let empty = field("form:x");
        assert_eq!(read(Some(&empty), None, iugu), NOTHING);
        let long = format!("event={}", "é".repeat(300));
        assert_eq!(
            read(Some(&event), None, long.as_bytes()).0,
            Some("é".repeat(200))
        );
    }

    #[test]
    fn deep_nesting_is_skipped_without_recursion() {
        // What describe does not want goes through serde_json's skipping, which keeps a byte
        // per level instead of recursing (as the derive did); a value it builds is a scalar.
        let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(
            read(&format!(r#"{{"x":{deep},"type":"t"}}"#)),
            (Some("t".into()), None)
        );
        assert_eq!(
            read(&format!(r#"{{"type":{deep},"event":"e"}}"#)),
            (Some("e".into()), None)
        );
        let body = format!(r#"{{"type":"t","data":{{"id":{deep},"x":{deep}}}}}"#);
        assert_eq!(read(&body), (Some("t".into()), None));
        let unclosed = "[".repeat(100_000);
        assert_eq!(read(&format!(r#"{{"x":{unclosed}"#)), NOTHING);
    }
}
