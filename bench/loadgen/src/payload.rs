//! Realistic payment-event bodies: a Pagar.me-style `charge.paid` with its customer, order
//! items, shipping address and card transaction, 800 to 1,000 bytes of JSON each.
//!
//! Size and shape matter more than realism of every field: the receiver hashes, verifies and
//! stores the raw bytes, so the byte count drives its cost, and a body of the size gateways
//! really send keeps the disk figures (bytes written per event) honest. Every body is unique
//! (its ids come from a counter as well as the generator), so no two count as one event.

/// A small, seeded generator (SplitMix64). Not for secrets; only so runs are repeatable
/// without pulling in a random-number crate.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`. (The modulo bias is irrelevant at these ranges.)
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.next_u64() % (high - low + 1)
    }

    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        let i = self.range(0, items.len().saturating_sub(1) as u64) as usize;
        items.get(i).copied().unwrap_or("")
    }

    /// `len` characters of base-36, as gateways' ids look.
    pub fn token(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
        (0..len)
            .map(|_| ALPHABET[(self.next_u64() % ALPHABET.len() as u64) as usize] as char)
            .collect()
    }

    pub fn digits(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| char::from(b'0' + (self.next_u64() % 10) as u8))
            .collect()
    }

    /// Fisher-Yates.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.range(0, i as u64) as usize;
            items.swap(i, j);
        }
    }
}

/// Shortest and longest body made, in bytes.
pub const MIN_BYTES: usize = 800;
pub const MAX_BYTES: usize = 1000;

/// One generated event: its body and the id inside it.
#[derive(Debug, Clone)]
pub struct Body {
    /// The body's top-level `id` (what a `json:/id` dedup rule would take).
    pub id: String,
    pub bytes: Vec<u8>,
}

const FIRST_NAMES: &[&str] = &[
    "Maria", "Joao", "Ana", "Pedro", "Juliana", "Lucas", "Fernanda", "Rafael", "Camila", "Bruno",
];
const LAST_NAMES: &[&str] = &[
    "Silva", "Santos", "Oliveira", "Souza", "Lima", "Pereira", "Costa", "Almeida", "Ribeiro",
];
const PRODUCTS: &[&str] = &[
    "Camiseta algodao organico",
    "Caneca ceramica 350ml",
    "Fone de ouvido bluetooth",
    "Livro: Introducao a Rust",
    "Cafe especial torra media 500g",
    "Mochila notebook 15 polegadas",
    "Assinatura mensal plano Pro",
];
const STREETS: &[&str] = &[
    "Avenida Paulista",
    "Rua Augusta",
    "Rua das Laranjeiras",
    "Avenida Afonso Pena",
    "Rua XV de Novembro",
];
const CITIES: &[(&str, &str)] = &[
    ("Sao Paulo", "SP"),
    ("Rio de Janeiro", "RJ"),
    ("Belo Horizonte", "MG"),
    ("Curitiba", "PR"),
    ("Porto Alegre", "RS"),
];
const BRANDS: &[(&str, &str)] = &[("Visa", "1111"), ("Mastercard", "4444"), ("Elo", "6315")];

/// The `n`-th event body. `n` makes it unique even if the generator repeated itself.
pub fn charge_paid(rng: &mut Rng, n: u64) -> Body {
    let target = rng.range(MIN_BYTES as u64, MAX_BYTES as u64) as usize;
    let id = format!("hook_{n:06}{}", rng.token(10));
    let day = rng.range(1, 28);
    let (hour, minute, second, milli) = (
        rng.range(0, 23),
        rng.range(0, 59),
        rng.range(0, 59),
        rng.range(0, 999),
    );
    let at = format!("2026-11-{day:02}T{hour:02}:{minute:02}:{second:02}.{milli:03}Z");
    let first = rng.pick(FIRST_NAMES);
    let last = rng.pick(LAST_NAMES);
    let (city, state) = CITIES[rng.range(0, CITIES.len() as u64 - 1) as usize];
    let (brand, last_four) = BRANDS[rng.range(0, BRANDS.len() as u64 - 1) as usize];

    let item_count = rng.range(1, 2);
    let mut amount = 0;
    let mut items = Vec::new();
    for _ in 0..item_count {
        let quantity = rng.range(1, 3);
        let price = rng.range(990, 49_990);
        amount += quantity * price;
        items.push(format!(
            r#"{{"id":"oi_{}","description":"{}","amount":{price},"quantity":{quantity}}}"#,
            rng.token(16),
            rng.pick(PRODUCTS)
        ));
    }
    let installments = rng.range(1, 6);

    let head = format!(
        concat!(
            r#"{{"id":"{id}","type":"charge.paid","created_at":"{at}","data":{{"#,
            r#""id":"ch_{charge}","code":"{code}","amount":{amount},"status":"paid","#,
            r#""currency":"BRL","payment_method":"credit_card","#,
            r#""customer":{{"id":"cus_{customer}","name":"{first} {last}","#,
            r#""email":"{email}@example.com","document":"{document}"}},"#,
            r#""order":{{"id":"or_{order}","items":[{items}],"#,
            r#""address":{{"line_1":"{number}, {street}","zip_code":"{zip}","#,
            r#""city":"{city}","state":"{state}","country":"BR"}}}},"#,
            r#""last_transaction":{{"id":"tran_{tran}","status":"captured","#,
            r#""installments":{installments},"acquirer_tid":"{tid}","#,
            r#""card":{{"last_four_digits":"{last_four}","brand":"{brand}"}}}},"#,
            r#""metadata":{{"note":""#
        ),
        id = id,
        at = at,
        charge = rng.token(16),
        code = rng.token(10).to_uppercase(),
        amount = amount,
        customer = rng.token(16),
        first = first,
        last = last,
        email = format!("{}.{}{}", first, last, rng.range(1, 999)).to_lowercase(),
        document = rng.digits(11),
        order = rng.token(16),
        items = items.join(","),
        number = rng.range(1, 3000),
        street = rng.pick(STREETS),
        zip = rng.digits(8),
        city = city,
        state = state,
        tran = rng.token(16),
        installments = installments,
        tid = rng.digits(12),
        last_four = last_four,
        brand = brand,
    );
    // The note pads the body to its drawn size, the way free-text fields vary in real ones.
    const TAIL: &str = r#""}}}"#;
    let pad = target.saturating_sub(head.len() + TAIL.len());
    let mut text = head;
    text.extend((0..pad).map(|i| if i % 9 == 8 { ' ' } else { 'x' }));
    text.push_str(TAIL);
    Body {
        id,
        bytes: text.into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_json_of_the_promised_size_and_unique() {
        let mut rng = Rng::new(7);
        let mut seen = std::collections::HashSet::new();
        for n in 0..500 {
            let body = charge_paid(&mut rng, n);
            let len = body.bytes.len();
            assert!((MIN_BYTES..=MAX_BYTES).contains(&len), "{len} bytes");
            let value: serde_json::Value =
                serde_json::from_slice(&body.bytes).expect("the body is JSON");
            assert_eq!(value["id"].as_str(), Some(body.id.as_str()));
            assert_eq!(value["type"].as_str(), Some("charge.paid"));
            assert!(seen.insert(body.bytes));
        }
    }

    #[test]
    fn the_padding_is_a_minor_part() {
        let mut rng = Rng::new(3);
        for n in 0..500 {
            let body = charge_paid(&mut rng, n);
            let pad = body.bytes.iter().filter(|b| **b == b'x').count();
            assert!(pad < 400, "{pad} bytes of padding");
        }
    }
}
