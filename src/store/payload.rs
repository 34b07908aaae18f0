//! How an event's body is kept in SQLite's `payloads` (schema 7): as received, or deflated
//! when that saves enough for rows to share pages. The one place that encodes a body for
//! storage ([`StoredBody::encode`], on the tokio worker that took the request) and decodes it
//! on every read ([`decode`]), so forwarding, `events show`, the status page, the archive,
//! backups and `store copy` all see the bytes exactly as received. `payloads.codec` says
//! which: raw and deflated rows live side by side, and rows from before schema 7 are raw.
//! PostgreSQL keeps raw bodies (TOAST compresses them already).

use std::fmt;

use rusqlite::types::{ToSqlOutput, Type, ValueRef};
use rusqlite::{Row, ToSql};

/// `payloads.codec` of a body kept as received.
pub(super) const RAW: i64 = 0;
/// `payloads.codec` of a deflated body: its length as 4 bytes little-endian, then a zlib
/// stream (RFC 1950, whose Adler-32 checks the bytes that come out).
pub(super) const DEFLATE: i64 = 1;

/// Bodies shorter than this are kept raw without trying: a short row shares its page already.
const MIN_BODY: usize = 256;
/// Bodies longer than this are kept raw: deflating 64 KiB at level 1 takes ~0.3 ms of the
/// worker that runs the request, and a body that large spans overflow pages either way.
const MAX_BODY: usize = 64 * 1024;
/// A deflated body is kept only if it is at least this much shorter ...
const MIN_SAVED_BYTES: usize = 128;
/// ... and at least this fraction (in percent) shorter than the raw one.
const MIN_SAVED_PERCENT: usize = 20;
/// miniz's level 1: the fastest; levels 3 and 6 save 1-3 % more of a 1 KiB JSON body at
/// 1.6-2.5 times the CPU (bench/PROFILE.md, "Payload compression").
const LEVEL: u8 = 1;
/// The longest body a deflated row may claim to hold. Far above any `max_body_bytes`; a
/// corrupt length prefix must not make a read allocate gigabytes.
const MAX_DECODED: usize = 256 * 1024 * 1024;
/// The length prefix of a deflated row.
const PREFIX: usize = 4;

/// A body as it goes into `payloads`: the codec and, when deflated, the stored bytes (a raw
/// body is bound from the event itself, never copied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredBody {
    Raw,
    Deflated(Vec<u8>),
}

impl StoredBody {
    /// What to store for `body`: deflated if that saves at least [`MIN_SAVED_BYTES`] and
    /// [`MIN_SAVED_PERCENT`] %, else raw. CPU work: run it off the writer thread.
    pub fn encode(body: &[u8]) -> StoredBody {
        if !(MIN_BODY..=MAX_BODY).contains(&body.len()) {
            return StoredBody::Raw;
        }
        let zlib = miniz_oxide::deflate::compress_to_vec_zlib(body, LEVEL);
        let stored = PREFIX + zlib.len();
        let saved = body.len().saturating_sub(stored);
        if saved < MIN_SAVED_BYTES || saved * 100 < body.len() * MIN_SAVED_PERCENT {
            return StoredBody::Raw;
        }
        let mut out = Vec::with_capacity(stored);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&zlib);
        StoredBody::Deflated(out)
    }

    /// The `payloads.codec` value.
    pub fn codec(&self) -> i64 {
        match self {
            StoredBody::Raw => RAW,
            StoredBody::Deflated(_) => DEFLATE,
        }
    }

    /// The `payloads.body` value, `raw` being the body as received.
    pub fn column<'a>(&'a self, raw: &'a [u8]) -> StoredColumn<'a> {
        match self {
            StoredBody::Raw => StoredColumn(raw),
            StoredBody::Deflated(bytes) => StoredColumn(bytes),
        }
    }
}

/// The bytes bound to `payloads.body`.
pub struct StoredColumn<'a>(&'a [u8]);

impl ToSql for StoredColumn<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Blob(self.0)))
    }
}

/// A stored body that cannot be turned back into the bytes received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptPayload {
    pub event_id: i64,
    pub reason: String,
}

impl fmt::Display for CorruptPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the stored body of event {} is corrupt ({}); it is not forwarded or shown",
            self.event_id, self.reason
        )
    }
}

impl std::error::Error for CorruptPayload {}

/// The body as received, from a stored row's codec and bytes.
pub fn decode(event_id: i64, codec: i64, stored: Vec<u8>) -> Result<Vec<u8>, CorruptPayload> {
    let corrupt = |reason: String| CorruptPayload { event_id, reason };
    match codec {
        RAW => Ok(stored),
        DEFLATE => {
            let (prefix, zlib) = stored
                .split_first_chunk::<PREFIX>()
                .ok_or_else(|| corrupt(format!("{} bytes, no length", stored.len())))?;
            let len = u32::from_le_bytes(*prefix) as usize;
            if len > MAX_DECODED {
                return Err(corrupt(format!("claims {len} bytes")));
            }
            let body = miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(zlib, len)
                .map_err(|e| corrupt(format!("inflate: {:?}", e.status)))?;
            if body.len() != len {
                return Err(corrupt(format!("{} bytes, expected {len}", body.len())));
            }
            Ok(body)
        }
        other => Err(corrupt(format!("unknown codec {other}"))),
    }
}

/// The body of the row `r`, whose column `codec` holds `payloads.codec` and `body` the stored
/// bytes. A corrupt one is an error of the read (its message names the event), never another
/// body.
pub(super) fn body_column(
    r: &Row<'_>,
    event_id: i64,
    codec: usize,
    body: usize,
) -> rusqlite::Result<Vec<u8>> {
    decode(event_id, r.get(codec)?, r.get(body)?)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(body, Type::Blob, Box::new(e)))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::charge_paid;
    use super::*;

    /// Bytes that do not compress: a SHA-256 chain.
    fn noise(len: usize) -> Vec<u8> {
        use sha2::{Digest, Sha256};
        let mut out = Vec::with_capacity(len + 32);
        let mut block = Sha256::digest(b"noise");
        while out.len() < len {
            out.extend_from_slice(&block);
            block = Sha256::digest(block);
        }
        out.truncate(len);
        out
    }

    #[test]
    fn a_json_body_is_deflated_and_comes_back_exact() {
        let body = charge_paid();
        let stored = StoredBody::encode(&body);
        let StoredBody::Deflated(bytes) = &stored else {
            panic!("a 1 KiB JSON body compresses well: {stored:?}");
        };
        assert!(
            bytes.len() * 10 < body.len() * 7,
            "{} of {}",
            bytes.len(),
            body.len()
        );
        assert_eq!(stored.codec(), DEFLATE);
        assert_eq!(decode(1, DEFLATE, bytes.clone()).unwrap(), body);
    }

    #[test]
    fn short_large_and_incompressible_bodies_stay_raw() {
        // Short: not worth trying, however well it would compress.
        assert_eq!(StoredBody::encode(&[b'a'; MIN_BODY - 1]), StoredBody::Raw);
        // Over the CPU bound, however well it would compress.
        assert_eq!(
            StoredBody::encode(&vec![b'a'; MAX_BODY + 1]),
            StoredBody::Raw
        );
        // Random bytes: deflate would only add its framing.
        assert_eq!(StoredBody::encode(&noise(2000)), StoredBody::Raw);
        // Saving under 20 %: a 1000-byte body of which 850 are noise.
        let mut mostly = noise(850);
        mostly.extend_from_slice(&[b' '; 150]);
        assert_eq!(StoredBody::encode(&mostly), StoredBody::Raw);
        // Raw is stored as is.
        assert_eq!(StoredBody::Raw.column(b"xyz").0, b"xyz");
        assert_eq!(decode(1, RAW, b"xyz".to_vec()).unwrap(), b"xyz");
    }

    #[test]
    fn the_bounds_are_where_they_say() {
        // Compressible bodies at the edges of the tried range are deflated.
        assert!(matches!(
            StoredBody::encode(&[b'a'; MIN_BODY]),
            StoredBody::Deflated(_)
        ));
        assert!(matches!(
            StoredBody::encode(&vec![b'a'; MAX_BODY]),
            StoredBody::Deflated(_)
        ));
    }

    #[test]
    fn a_corrupt_row_is_an_error_naming_the_event_never_another_body() {
        let body = charge_paid();
        let StoredBody::Deflated(good) = StoredBody::encode(&body) else {
            panic!("deflated");
        };
        let mut cases: Vec<(&str, i64, Vec<u8>)> = vec![
            ("empty", DEFLATE, Vec::new()),
            ("no stream", DEFLATE, good[..PREFIX].to_vec()),
            ("truncated", DEFLATE, good[..good.len() - 8].to_vec()),
            ("unknown codec", 7, good.clone()),
        ];
        // One byte changed in the middle of the stream: the checksum or the inflater sees it.
        let mut flipped = good.clone();
        flipped[good.len() / 2] ^= 0x20;
        cases.push(("flipped", DEFLATE, flipped));
        // A length prefix that does not match what the stream holds.
        let mut longer = good.clone();
        longer[..PREFIX].copy_from_slice(&(body.len() as u32 + 1).to_le_bytes());
        cases.push(("longer", DEFLATE, longer));
        let mut shorter = good.clone();
        shorter[..PREFIX].copy_from_slice(&(body.len() as u32 - 1).to_le_bytes());
        cases.push(("shorter", DEFLATE, shorter));
        let mut huge = good.clone();
        huge[..PREFIX].copy_from_slice(&u32::MAX.to_le_bytes());
        cases.push(("huge", DEFLATE, huge));
        for (what, codec, stored) in cases {
            let err = decode(42, codec, stored).expect_err(what);
            assert_eq!(err.event_id, 42, "{what}");
            let text = err.to_string();
            assert!(
                text.contains("stored body of event 42 is corrupt"),
                "{what}: {text}"
            );
        }
        assert_eq!(decode(42, DEFLATE, good).unwrap(), body);
    }
}
