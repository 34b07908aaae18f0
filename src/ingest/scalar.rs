//! One value of a JSON body as `describe` and `pointer` keep it: a non-empty string (its
//! first [`MAX_CHARS`] characters) or a number (as `serde_json::Number` writes it); anything
//! else is nothing, skipped unbuilt.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The longest event type or object id kept from a body, in characters.
pub(super) const MAX_CHARS: usize = 200;

/// A value as `describe` keeps it: a non-empty string (its first 200 characters) or a number
/// (as `serde_json::Number` writes it); `None` for anything else, which is skipped unbuilt.
pub(super) struct Scalar(pub(super) Option<String>);

impl<'de> de::Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarValue).map(Scalar)
    }
}

pub(super) struct ScalarValue;

impl<'de> Visitor<'de> for ScalarValue {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        // One allocation of the kept prefix (`collect` of the chars would grow it char by char).
        let end = s
            .char_indices()
            .nth(MAX_CHARS)
            .map_or(s.len(), |(at, _)| at);
        Ok(s.get(..end)
            .filter(|kept| !kept.is_empty())
            .map(str::to_owned))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
        Ok(Some(serde_json::Number::from(n).to_string()))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
        Ok(Some(serde_json::Number::from(n).to_string()))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Self::Value, E> {
        Ok(serde_json::Number::from_f64(n).map(|n| n.to_string()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        IgnoredAny.visit_seq(seq).map(|_| None)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        IgnoredAny.visit_map(map).map(|_| None)
    }
}
