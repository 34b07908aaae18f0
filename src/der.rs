//! Reading DER's tag-length-value elements, as far as portaria needs: a client certificate's
//! subject names (`server::tls`) and a server certificate's signature algorithm (the
//! PostgreSQL channel binding, `store::postgres::tls`). Definite lengths of up to four bytes;
//! anything else reads as nothing.
//!
//! A leaf: imports nothing of the crate.

/// The element at the start of `input`: its tag, its contents, and what follows it.
pub fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, rest) = rest.split_at(count);
        (
            bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b)),
            rest,
        )
    };
    let contents = rest.get(..len)?;
    Some((tag, contents, rest.get(len..)?))
}

/// The contents of the element at the start of `input` if its tag is `tag`, and what follows.
pub fn element(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    match tlv(input)? {
        (found, contents, rest) if found == tag => Some((contents, rest)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_short_and_long_lengths_and_refuses_what_it_cannot() {
        assert_eq!(
            tlv(&[0x04, 0x02, 1, 2, 9]),
            Some((0x04, &[1u8, 2][..], &[9u8][..]))
        );
        let long: Vec<u8> = [0x30, 0x81, 0x80].into_iter().chain([7; 0x80]).collect();
        assert_eq!(
            tlv(&long).map(|(_, c, r)| (c.len(), r.len())),
            Some((0x80, 0))
        );
        let two: Vec<u8> = [0x30, 0x82, 0x01, 0x00]
            .into_iter()
            .chain([7; 0x100])
            .collect();
        assert_eq!(tlv(&two).map(|(_, c, _)| c.len()), Some(0x100));
        // Indefinite length, five length bytes, contents cut short, nothing at all.
        assert_eq!(tlv(&[0x30, 0x80, 0, 0]), None);
        assert_eq!(tlv(&[0x30, 0x85, 0, 0, 0, 0, 1, 0]), None);
        assert_eq!(tlv(&[0x04, 0x03, 1]), None);
        assert_eq!(tlv(&[]), None);
        assert_eq!(element(&[0x06, 0x01, 5], 0x06), Some((&[5u8][..], &[][..])));
        assert_eq!(element(&[0x06, 0x01, 5], 0x30), None);
    }
}
