//! Dedup key extraction: rules parsed from fuzzed text (`body-sha256`, `header:<name>`,
//! `json:<pointer>`, lists of them) and every preset's default (Adyen's custom key included),
//! over fuzzed headers, bodies and a verifier's signed key (the `Signed` rules of Mercado Pago,
//! Standard Webhooks, Twilio and Linear take it). Never a panic; a key is 1..=512 bytes; a single rule's text
//! parses back to the same rule. Text inputs (the seeds): `#portaria RULE...` (a rule, or
//! `preset:NAME` for a preset's default), then a raw request.

#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use http::HeaderMap;
use libfuzzer_sys::fuzz_target;
use portaria::dedup::{DedupRule, MAX_KEY_BYTES};
use portaria_fuzz::{Header, TextRequest, cases, header_map};

#[derive(Arbitrary, Debug)]
enum Rule {
    /// `dedup = [..]` as a config spells it.
    Texts(Vec<String>),
    /// A preset's default rule.
    Preset(u8),
}

#[derive(Arbitrary, Debug)]
struct Input {
    rule: Rule,
    headers: Vec<Header>,
    body: Vec<u8>,
    /// What a verifier's proof would hold as its signed key.
    signed: Option<String>,
}

fn preset(i: usize) -> DedupRule {
    let all = cases();
    all[i % all.len()].verifier.default_dedup()
}

/// Parses the rule texts as a config would (each single rule also through its own text).
fn parse(texts: &[String]) -> Option<DedupRule> {
    for text in texts {
        if let Ok(single) = text.parse::<DedupRule>() {
            let shown = single.to_string();
            assert_eq!(shown.parse::<DedupRule>().as_ref(), Ok(&single), "{shown}");
        }
    }
    DedupRule::parse_list(texts).ok()
}

fn check(rule: &DedupRule, signed: Option<&str>, headers: &HeaderMap, body: &[u8]) {
    let _ = rule.to_string();
    let _ = rule.refuse_credential_headers(&[]);
    match rule.extract_signed(signed, headers, body) {
        Ok(key) => {
            assert!(!key.is_empty() && key.len() <= MAX_KEY_BYTES, "{key:?}");
            // A batch's items (Adyen's): each a key of its own, none twice.
            let items = rule.item_keys(headers, body);
            for (n, item) in items.iter().enumerate() {
                assert!(!item.is_empty() && item.len() <= key.len(), "{item:?}");
                assert!(!items[..n].contains(item), "{item:?} twice");
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Some(text) = TextRequest::parse(data) {
        let named = text.args.first().and_then(|a| a.strip_prefix("preset:"));
        let rule = match named {
            Some(name) => match cases().iter().position(|c| c.provider == name) {
                Some(i) => preset(i),
                None => return,
            },
            None => match parse(&text.args) {
                Some(rule) => rule,
                None => return,
            },
        };
        check(&rule, None, &text.headers, &text.body);
        return;
    }
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let rule = match &input.rule {
        Rule::Texts(texts) => match parse(texts) {
            Some(rule) => rule,
            None => return,
        },
        Rule::Preset(i) => preset(usize::from(*i)),
    };
    let headers = header_map(&input.headers, &[]);
    check(&rule, input.signed.as_deref(), &headers, &input.body);
});
