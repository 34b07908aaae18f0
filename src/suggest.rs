//! "Did you mean": the known name closest to a mistyped one, for config keys, providers,
//! endpoint and route names. A name one edit away (`lisen`, `secert`, `epr`) is offered, else
//! one similar by Jaro's measure (from `strsim`, as clap's own suggestions of subcommands and
//! flags, which avoid its Jaro-Winkler: clap#4660), so a typo at the end (`mercadopag`) finds
//! its name, and an unrelated word finds none.

/// Below this similarity a name is not offered: it would send the reader after a different
/// thing (0.7 is clap's line; ours is a little higher because our lists are long and share
/// prefixes, like `secret`, `secrets`, `secret_env`, `secret_file`).
const LIKENESS: f64 = 0.8;

/// The known name most like `word`, if one is like it enough: one edit away (a letter
/// added, dropped, changed, or two swapped, which Jaro misses in short names like `erp`), or
/// similar by Jaro. The fewest edits win, then the most similar. Case is ignored.
pub fn closest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    known
        .into_iter()
        .filter_map(|name| {
            let lower = name.to_ascii_lowercase();
            let edits = strsim::osa_distance(&word, &lower);
            let likeness = strsim::jaro(&word, &lower);
            let near = edits <= 1 && word.chars().count() >= 3;
            (near || likeness >= LIKENESS).then_some((edits, likeness, name))
        })
        .min_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)))
        .map(|(_, _, name)| name)
}

/// `; did you mean `x`?` for the closest known name, or nothing: the tail of a message that
/// has already said what is wrong.
pub fn hint<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    closest(word, known)
        .map(|name| format!("; did you mean `{name}`?"))
        .unwrap_or_default()
}

/// `a, b, c`, or `none` for an empty list: the known names, to close a message with.
pub fn list<'a>(known: impl IntoIterator<Item = &'a str>) -> String {
    let names: Vec<&str> = known.into_iter().collect();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_name_and_strangers_find_none() {
        let providers = ["pagarme", "mercadopago", "stripe", "paddle", "github"];
        assert_eq!(closest("mercadopag", providers), Some("mercadopago"));
        assert_eq!(closest("MercadoPago", providers), Some("mercadopago"));
        assert_eq!(closest("pagrame", providers), Some("pagarme"));
        assert_eq!(closest("stirpe", providers), Some("stripe"));
        assert_eq!(closest("paypal", providers), None);
        assert_eq!(closest("zzz", providers), None);
        let keys = [
            "secret",
            "secrets",
            "secret_env",
            "secret_file",
            "path",
            "provider",
        ];
        assert_eq!(closest("secert", keys), Some("secret"));
        assert_eq!(closest("secret_evn", keys), Some("secret_env"));
        assert_eq!(closest("provder", keys), Some("provider"));
        assert_eq!(closest("listen", ["lisen"]), Some("lisen"));
        assert_eq!(
            closest("epr", ["erp", "audit"]),
            Some("erp"),
            "a swap in a short name"
        );
        assert_eq!(closest("ab", ["ba"]), None, "too short to guess");
        assert_eq!(closest("x", Vec::<&str>::new()), None);
    }

    #[test]
    fn the_hint_and_the_list_read_as_a_sentence() {
        assert_eq!(hint("stirpe", ["stripe"]), "; did you mean `stripe`?");
        assert_eq!(hint("paypal", ["stripe"]), "");
        assert_eq!(list(["a", "b"]), "a, b");
        assert_eq!(list(Vec::<&str>::new()), "none");
    }
}
