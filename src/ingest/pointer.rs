//! One value of a JSON body, addressed by an RFC 6901 pointer (`/events/0`, `/data/id`), read
//! the way `describe` reads `type` and `data.id`: serde_json's parser driven along the
//! pointer's path only, what is off the path skipped unbuilt, and stopped at the value. The
//! first occurrence of a member counts (a later one of the same name is never read); the value
//! is kept by the rules of [`Scalar`](super::scalar) (a non-empty string, its first 200
//! characters, or a number). A body that is not JSON up to the value gives nothing.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::scalar::ScalarValue;

/// The value at `pointer` (already checked: empty, or starting with `/`), or None.
pub fn read(pointer: &str, body: &[u8]) -> Option<String> {
    let tokens: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let mut found = None;
    let walk = Walk {
        path: &tokens,
        found: &mut found,
    };
    // Stopped at the value, serde_json's check for the end of the enclosing object or array
    // fails: that error is the stop, not a broken body (`found` is set).
    let _ = walk.deserialize(&mut serde_json::Deserializer::from_slice(body));
    found.flatten()
}

/// What is left of the path, and where the value goes: `Some(None)` once the first
/// occurrence of the path was reached and is not a usable scalar (nothing later counts).
struct Walk<'a> {
    path: &'a [String],
    found: &'a mut Option<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.path.is_empty() {
            *self.found = Some(d.deserialize_any(ScalarValue)?);
            return Ok(());
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((token, rest)) = self.path.split_first() else {
            return Ok(());
        };
        while let Some(matched) = map.next_key_seed(Named(token))? {
            if matched {
                let found = &mut *self.found;
                map.next_value_seed(Walk { path: rest, found })?;
                // The first occurrence decides, whatever it held: stop here.
                self.found.get_or_insert(None);
                return Ok(());
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((token, rest)) = self.path.split_first() else {
            return Ok(());
        };
        // RFC 6901: digits, no leading zero; anything else names no element.
        let index = match token.as_bytes() {
            [b'0'] => Some(0),
            [b'1'..=b'9', ..] => token.parse::<usize>().ok(),
            _ => None,
        };
        let Some(index) = index else {
            return IgnoredAny.visit_seq(seq).map(drop);
        };
        for _ in 0..index {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        let found = &mut *self.found;
        if seq.next_element_seed(Walk { path: rest, found })?.is_some() {
            self.found.get_or_insert(None);
        }
        Ok(())
    }

    // A scalar where the path goes on: nothing there.
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

/// A member name, compared with the path's token without being kept.
struct Named<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for Named<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Named<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<bool, E> {
        Ok(name == self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::read;

    fn at(pointer: &str, body: &str) -> Option<String> {
        read(pointer, body.as_bytes())
    }

    #[test]
    fn reads_through_objects_and_arrays() {
        let rede = r#"{"id":"n1","companyNumber":"12345678","events":["PV.UPDATE_TRANSACTION_PIX"],"data":{"id":"TID1234567890","txid":"t"}}"#;
        assert_eq!(
            at("/events/0", rede).as_deref(),
            Some("PV.UPDATE_TRANSACTION_PIX")
        );
        assert_eq!(at("/data/id", rede).as_deref(), Some("TID1234567890"));
        assert_eq!(at("/events/1", rede), None);
        assert_eq!(at("/events/x", rede), None);
        assert_eq!(at("/events/00", rede), None);
        assert_eq!(at("/data/id/0", rede), None);
        assert_eq!(at("/missing", rede), None);
        assert_eq!(
            at("/a/2/b", r#"{"a":[{"b":1},{"b":2},{"b":3}]}"#).as_deref(),
            Some("3")
        );
        assert_eq!(at("/0", r#"[7]"#).as_deref(), Some("7"));
        // Escaped tokens, and escapes in names undone by serde_json.
        assert_eq!(
            at("/a~1b/~0c", r#"{"a/b":{"~c":"x"}}"#).as_deref(),
            Some("x")
        );
        assert_eq!(at("/type", r#"{"ty\u0070e":"t"}"#).as_deref(), Some("t"));
        // The empty pointer is the whole body, kept only as a scalar.
        assert_eq!(at("", r#""whole""#).as_deref(), Some("whole"));
        assert_eq!(at("", "{}"), None);
    }

    #[test]
    fn the_value_is_kept_by_describes_rules_and_the_first_occurrence_wins() {
        assert_eq!(at("/n", r#"{"n":1e3}"#).as_deref(), Some("1000.0"));
        for unusable in [r#""""#, "null", "true", "{}", "[1]"] {
            assert_eq!(
                at("/v", &format!(r#"{{"v":{unusable},"v":"later"}}"#)),
                None
            );
        }
        let long = "é".repeat(300);
        assert_eq!(
            at("/v", &format!(r#"{{"v":"{long}"}}"#)),
            Some("é".repeat(200))
        );
        assert_eq!(at("/d/id", r#"{"d":{"x":1},"d":{"id":2}}"#), None);
        assert_eq!(
            at("/d/id", r#"{"d":{"id":1,"id":2}}"#).as_deref(),
            Some("1")
        );
    }

    #[test]
    fn nothing_after_the_value_is_read_and_a_body_broken_before_it_gives_nothing() {
        for tail in ["", "}", "]]]", ",\"x\":", "\u{0}{{{"] {
            let body = format!(r#"{{"events":["E",{tail}"#);
            assert_eq!(at("/events/0", &body).as_deref(), Some("E"), "{body:?}");
        }
        let mut body = br#"{"data":{"id":"ch_1","#.to_vec();
        body.extend_from_slice(b"\xff\xfe");
        assert_eq!(read("/data/id", &body).as_deref(), Some("ch_1"));
        for broken in [
            r#"{"x":nope,"data":{"id":1}}"#,
            r#"{"data":{"x":1,"#,
            "data=1",
            "",
        ] {
            assert_eq!(at("/data/id", broken), None, "{broken}");
        }
        // Deep nesting off the path is skipped without recursion.
        let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(
            at("/t", &format!(r#"{{"x":{deep},"t":"t"}}"#)).as_deref(),
            Some("t")
        );
    }
}
