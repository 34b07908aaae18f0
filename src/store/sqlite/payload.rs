//! How an event's body is kept in SQLite's `payloads` (schema 7): as received, or deflated
//! when that saves pages (bodies of 1 KiB and more, bench/PROFILE.md "Payload compression"). The one place that encodes a body for
//! storage ([`StoredBody::encode`], on the tokio worker that took the request) and decodes it
//! on every read ([`decode`]), so forwarding, `events show`, the status page, the archive,
//! backups and `store copy` all see the bytes exactly as received. `payloads.codec` says
//! which: raw and deflated rows live side by side, and rows from before schema 7 are raw.
//! A row that does not decode is a [`CorruptPayload`] naming its event, never another body;
//! a delivery whose body is corrupt goes dead at its claim with that reason.
//! PostgreSQL keeps raw bodies (TOAST compresses them already).

use std::fmt;

use rusqlite::Row;
use rusqlite::types::Type;

/// `payloads.codec` of a body kept as received.
pub(super) const RAW: i64 = 0;
/// `payloads.codec` of a deflated body: its length as 4 bytes little-endian, then a zlib
/// stream (RFC 1950, whose Adler-32 checks the bytes that come out).
pub(super) const DEFLATE: i64 = 1;

/// Bodies shorter than this are kept raw without trying. With its headers, such a body spills
/// at most one overflow page, and deflated its row still takes a leaf page of its own: on the
/// bench's 800-1000-byte bodies deflate saved 0.30 of ~4.4 pages per event (WAL and
/// checkpoint, `pages_per_event` below) for ~27 µs of CPU per event, mostly the compressor's
/// fixed cost (its tables are set up for each body), which issue 17's CPU target cannot afford.
/// From 1 KiB on, the saving grows with every overflow page a body no longer needs (a 2.2 KiB
/// gateway event: 7.2 pages to 4.5).
const MIN_BODY: usize = 1024;
/// Bodies longer than this are kept raw: deflating 64 KiB at level 1 would take about half a
/// millisecond of the worker that runs the request (6-10 µs per KiB on 2-3 KiB events), and a body that large spans overflow pages either way.
const MAX_BODY: usize = 64 * 1024;
/// A deflated body is kept only if it is at least this fraction (in percent) shorter than the
/// raw one (from [`MIN_BODY`] on, at least 205 bytes: a fifth of a page or more).
const MIN_SAVED_PERCENT: usize = 20;
/// miniz's level 1: the fastest; levels 3 and 6 save 2-10 % more of a gateway event for 1.2-2
/// times the CPU (bench/PROFILE.md, "Payload compression").
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
    /// What to store for `body`: deflated if it is [`MIN_BODY`] to [`MAX_BODY`] long and that
    /// saves at least [`MIN_SAVED_PERCENT`] %, else raw. CPU work: run it off the writer thread.
    pub fn encode(body: &[u8]) -> StoredBody {
        if !(MIN_BODY..=MAX_BODY).contains(&body.len()) {
            return StoredBody::Raw;
        }
        let stored = deflated(body);
        let saved = body.len().saturating_sub(stored.len());
        if saved * 100 < body.len() * MIN_SAVED_PERCENT {
            return StoredBody::Raw;
        }
        StoredBody::Deflated(stored)
    }

    /// The `payloads.codec` value.
    pub fn codec(&self) -> i64 {
        match self {
            StoredBody::Raw => RAW,
            StoredBody::Deflated(_) => DEFLATE,
        }
    }

    /// The `payloads.body` value, `raw` being the body as received.
    pub fn column<'a>(&'a self, raw: &'a [u8]) -> &'a [u8] {
        match self {
            StoredBody::Raw => raw,
            StoredBody::Deflated(bytes) => bytes,
        }
    }
}

/// `body` deflated as stored: its length, then the zlib stream.
fn deflated(body: &[u8]) -> Vec<u8> {
    let zlib = miniz_oxide::deflate::compress_to_vec_zlib(body, LEVEL);
    let mut out = Vec::with_capacity(PREFIX + zlib.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&zlib);
    out
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
pub(in crate::store) fn body_column(
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
        // Saving under 20 %: a 1200-byte body of which 1020 are noise.
        let mut mostly = noise(1020);
        mostly.extend_from_slice(&[b' '; 180]);
        assert_eq!(StoredBody::encode(&mostly), StoredBody::Raw);
        // Raw is stored as is.
        assert_eq!(StoredBody::Raw.column(b"xyz"), b"xyz");
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

    /// The bench's request headers as stored (`bench/loadgen`: host, signature, type, length).
    const BENCH_HEADERS: &[u8] = b"content-type: application/json\r\nx-hub-signature: \
        sha256=3f1a9c0e5b7d2f4a6c8e0b1d3f5a7c9e1b3d5f7a9c0e2b4d6f8a0c1e3b5d7f9a\r\nhost: \
        127.0.0.1:40151\r\ncontent-length: 917\r\n";

    /// A body like the bench's: `charge.paid` with fresh ids, padded by a free-text note.
    fn bench_like(n: u64, len: usize) -> Vec<u8> {
        let mut seed = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut token = |k: usize| -> String {
            (0..k)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    b"0123456789abcdefghijklmnopqrstuvwxyz"[(seed % 36) as usize] as char
                })
                .collect()
        };
        let mut text = format!(
            r#"{{"id":"hook_{n:06}{}","type":"charge.paid","created_at":"2026-11-13T09:41:27.118Z","data":{{"id":"ch_{}","code":"{}","amount":25980,"status":"paid","currency":"BRL","payment_method":"credit_card","customer":{{"id":"cus_{}","name":"Maria Souza","email":"maria.souza{}@example.com","document":"{}"}},"order":{{"id":"or_{}","items":[{{"id":"oi_{}","description":"Camiseta basica","amount":12990,"quantity":2}}],"address":{{"line_1":"1500, Rua Augusta","zip_code":"01304001","city":"Sao Paulo","state":"SP","country":"BR"}}}},"last_transaction":{{"id":"tran_{}","status":"captured","installments":3,"acquirer_tid":"{}","card":{{"last_four_digits":"4444","brand":"Mastercard"}}}},"metadata":{{"note":""#,
            token(10),
            token(16),
            token(10).to_uppercase(),
            token(16),
            n % 999,
            token(11),
            token(16),
            token(16),
            token(16),
            token(12)
        );
        while text.len() + 4 < len {
            text.push(if text.len() % 9 == 8 { ' ' } else { 'x' });
        }
        text.push_str(r#""}}}"#);
        text.into_bytes()
    }

    /// A real-sized gateway event of about `len` bytes: the Pagar.me fixture with fresh ids and
    /// more items, each with ids of its own (deflate takes it to about half, as it does the
    /// Stripe and Pagar.me events in bench/PROFILE.md, not to a quarter as repeated items).
    fn gateway_like(n: u64, len: usize) -> Vec<u8> {
        use sha2::{Digest, Sha256};
        let hex = |what: &str, i: usize| hex::encode(Sha256::digest(format!("{what}{n}/{i}")));
        let one = String::from_utf8(charge_paid()).unwrap();
        let item = r#"{"id":"oi_8Xn2Qw5Lm3Rk7Vd9","description":"Camiseta basica","amount":6495,"quantity":2,"status":"active"}"#;
        let products = [
            "Camiseta basica",
            "Tenis de corrida",
            "Mochila",
            "Garrafa termica",
        ];
        let mut items = vec![item.to_string()];
        let mut body = one.clone();
        let mut i = 0;
        while body.len() < len {
            i += 1;
            let h = hex("item", i);
            items.push(format!(
                r#"{{"id":"oi_{}","sku":"{}","description":"{}","amount":{},"quantity":{},"status":"active","created_at":"2026-11-03T14:22:{:02}Z"}}"#,
                &h[..16],
                &h[16..28],
                products[i % products.len()],
                990 + (u64::from_str_radix(&h[28..32], 16).unwrap() % 40_000),
                1 + i % 3,
                i % 60
            ));
            body = one.replace(item, &items.join(","));
        }
        body.replace("RGm8wYkQdA3pXnB2", &hex("hook", 0)[..16])
            .replace("9Kd2LmQx7RtV4bNw", &hex("charge", 0)[..16])
            .replace("3Jx8QwL2mN5vR7tK", &hex("customer", 0)[..16])
            .replace("5Rk8Lw2Qx9Mn3Vd7", &hex("tran", 0)[..16])
            .into_bytes()
    }

    /// bench/PROFILE.md's page arithmetic, measured on a real file with portaria's settings:
    /// the WAL frames a commit of `batch` events writes, and the distinct pages a checkpoint
    /// then copies, per event, with bodies raw and deflated.
    #[test]
    #[ignore = "a measurement: cargo test --lib -- --ignored --nocapture pages_per_event"]
    fn pages_per_event() {
        use super::super::fixtures::{new_event, temp_db};
        use super::super::intake::insert_stored;
        println!("body                   bytes stored batch  WAL raw/enc   checkpoint raw/enc");
        type Body<'a> = &'a dyn Fn(u64) -> Vec<u8>;
        let kinds: [(&str, Body); 4] = [
            ("bench-like 800-1000 B", &|n| {
                bench_like(n, 800 + (n as usize * 37) % 200)
            }),
            ("gateway 1.3 KiB", &|n| gateway_like(n, 1300)),
            ("gateway 2.2 KiB", &|n| gateway_like(n, 2200)),
            ("gateway 3.3 KiB", &|n| gateway_like(n, 3300)),
        ];
        for (name, body) in kinds {
            for batch in [8u64, 1] {
                let mut figures = Vec::new();
                let mut sizes = (0, 0);
                for encode in [false, true] {
                    let (dir, db) = temp_db();
                    db.conn
                        .execute_batch("PRAGMA wal_autocheckpoint = 0")
                        .unwrap();
                    // A warm file first, as in operation: the schema's pages already exist.
                    let events = 1600 / batch * batch;
                    let wal = dir.path().join("p.db-wal");
                    for n in 0..events + 80 {
                        if n == 80 {
                            db.conn
                                .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
                                .unwrap();
                        }
                        if n % batch == 0 {
                            db.conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                        }
                        let mut e = new_event("pagarme", &format!("k{n}"));
                        e.dedup_hash = crate::store::dedup_hash("pagarme", &e.dedup_key);
                        e.headers = BENCH_HEADERS.to_vec();
                        e.body = body(n).into();
                        // Deflated whatever the size rule says, to show what it would save.
                        let stored = if encode {
                            StoredBody::Deflated(deflated(&e.body))
                        } else {
                            StoredBody::Raw
                        };
                        if n >= 80 && encode {
                            sizes.0 += e.body.len();
                            sizes.1 += match &stored {
                                StoredBody::Raw => e.body.len(),
                                StoredBody::Deflated(b) => b.len(),
                            };
                        }
                        insert_stored(&db.conn, &e, &stored).unwrap();
                        if n % batch == batch - 1 {
                            db.conn.execute_batch("COMMIT").unwrap();
                        }
                    }
                    let bytes = std::fs::read(&wal).unwrap();
                    let frames: Vec<u32> = bytes[32..]
                        .chunks(24 + 1024)
                        .map(|f| u32::from_be_bytes([f[0], f[1], f[2], f[3]]))
                        .collect();
                    let distinct: std::collections::HashSet<u32> = frames.iter().copied().collect();
                    figures.push((
                        frames.len() as f64 / events as f64,
                        distinct.len() as f64 / events as f64,
                    ));
                }
                let events = (1600 / batch * batch) as usize;
                println!(
                    "{name:<22} {:>5} {:>6} {batch:>5}  {:.2} / {:.2}   {:.2} / {:.2}",
                    sizes.0 / events,
                    sizes.1 / events,
                    figures[0].0,
                    figures[1].0,
                    figures[0].1,
                    figures[1].1
                );
            }
        }
    }
}
