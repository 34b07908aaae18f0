//! The event type and object id that ingest reads from a verified request (`ingest::describe`),
//! over fuzzed headers and bodies, with or without a provider's event-type header, and through
//! an endpoint's `event_type`/`object_id` field (`ingest::describe_with`: a JSON pointer, a
//! header, a form field). Never a panic; what it reads from the body is never empty and at
//! most 200 characters. Text inputs (the seeds): `#portaria [EVENT-TYPE-HEADER] [FIELD]`,
//! then a raw request.

#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use http::{HeaderMap, HeaderName};
use libfuzzer_sys::fuzz_target;
use portaria::ingest::{Sources, describe, describe_with};
use portaria::verify::Field;
use portaria_fuzz::{Header, Name, TextRequest, header_map};

#[derive(Arbitrary, Debug)]
struct Input {
    event_type_header: Option<Name>,
    field: Option<String>,
    headers: Vec<Header>,
    body: Vec<u8>,
}

/// Through a field: whatever it finds is never empty and at most 200 characters.
fn check_field(field: Option<&str>, headers: &HeaderMap, body: &[u8]) {
    let Some(Ok(field)) = field.map(str::parse::<Field>) else {
        return;
    };
    let sources = Sources {
        event_type: Some(&field),
        object_id: Some(&field),
        ..Sources::default()
    };
    let described = describe_with(sources, headers, body);
    for value in [&described.event_type, &described.object_id]
        .into_iter()
        .flatten()
    {
        assert!(!value.is_empty() && value.chars().count() <= 200);
    }
}

fn check(name: Option<HeaderName>, headers: &HeaderMap, body: &[u8]) {
    let described = describe(name.as_ref().map(HeaderName::as_str), headers, body);
    let from_header = name.is_some_and(|n| headers.contains_key(n));
    if let Some(object_id) = &described.object_id {
        assert!(!object_id.is_empty() && object_id.chars().count() <= 200);
    }
    if let (Some(event_type), false) = (&described.event_type, from_header) {
        assert!(!event_type.is_empty() && event_type.chars().count() <= 200);
    }
}

fuzz_target!(|data: &[u8]| {
    if let Some(text) = TextRequest::parse(data) {
        let name = text
            .args
            .first()
            .map(|n| HeaderName::from_bytes(n.as_bytes()));
        if let Some(Err(_)) = name {
            return;
        }
        check(name.and_then(Result::ok), &text.headers, &text.body);
        check_field(
            text.args.get(1).map(String::as_str),
            &text.headers,
            &text.body,
        );
        return;
    }
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let headers = header_map(&input.headers, &[]);
    let name = input.event_type_header.as_ref().and_then(Name::resolve);
    check(name, &headers, &input.body);
    check_field(input.field.as_deref(), &headers, &input.body);
});
