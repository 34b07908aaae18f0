//! How a gateway's API takes its key ([`KeyAuth`]): one header, marked sensitive, so it is in
//! no `Debug` output of the request. Reconcile's runs and fetch-verification build it here.

use base64::Engine as _;
use http::header::AUTHORIZATION;
use http::{HeaderName, HeaderValue};

/// Where and how the key goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAuth {
    /// `Authorization: Basic base64(key + ":")`: the key as the user, no password (Pagar.me,
    /// Stripe).
    Basic,
    /// `Authorization: Bearer key` (Paddle, GitHub, Mercado Pago).
    Bearer,
    /// `access_token: key`, not in `Authorization` (Asaas).
    AccessToken,
    /// `MerchantKey: key`, beside a `MerchantId` the caller sends (Cielo).
    MerchantKey,
}

impl KeyAuth {
    /// The header carrying `key`; None when the key cannot be a header value (a control
    /// character in it).
    pub fn header(self, key: &[u8]) -> Option<(HeaderName, HeaderValue)> {
        let value = match self {
            KeyAuth::Basic => {
                let mut user = key.to_vec();
                user.push(b':');
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(user)
                )
            }
            KeyAuth::Bearer => format!("Bearer {}", String::from_utf8_lossy(key)),
            KeyAuth::AccessToken | KeyAuth::MerchantKey => {
                String::from_utf8_lossy(key).into_owned()
            }
        };
        let name = match self {
            KeyAuth::AccessToken => HeaderName::from_static("access_token"),
            KeyAuth::MerchantKey => HeaderName::from_static("merchantkey"),
            KeyAuth::Basic | KeyAuth::Bearer => AUTHORIZATION,
        };
        let mut value = HeaderValue::from_str(&value).ok()?;
        value.set_sensitive(true);
        Some((name, value))
    }

    /// Every header a call carries for the account: the key's ([`KeyAuth::header`]) and, for
    /// Cielo, the store's `MerchantId` beside it. None as for `header`.
    pub fn headers(
        self,
        key: &[u8],
        merchant_id: Option<&str>,
    ) -> Option<Vec<(HeaderName, HeaderValue)>> {
        let mut out = vec![self.header(key)?];
        if let Some(id) = merchant_id {
            let id = HeaderValue::from_str(id).ok()?;
            out.push((HeaderName::from_static("merchantid"), id));
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scheme_puts_the_key_where_its_api_reads_it_marked_sensitive() {
        let (name, value) = KeyAuth::Basic.header(b"sk_1").unwrap();
        assert_eq!(
            (name.as_str(), value.to_str().unwrap()),
            ("authorization", "Basic c2tfMTo=")
        );
        assert!(value.is_sensitive());
        let (name, value) = KeyAuth::Bearer.header(b"tok").unwrap();
        assert_eq!(
            (name.as_str(), value.to_str().unwrap()),
            ("authorization", "Bearer tok")
        );
        let (name, value) = KeyAuth::AccessToken.header(b"$aact_1").unwrap();
        assert_eq!(
            (name.as_str(), value.to_str().unwrap()),
            ("access_token", "$aact_1")
        );
        let (name, value) = KeyAuth::MerchantKey.header(b"0123456789").unwrap();
        assert_eq!(
            (name.as_str(), value.to_str().unwrap()),
            ("merchantkey", "0123456789")
        );
        assert!(value.is_sensitive());
        assert!(KeyAuth::Bearer.header(b"a\nb").is_none());
        let both = KeyAuth::MerchantKey
            .headers(b"k", Some("e4db3e1b"))
            .unwrap();
        let names: Vec<&str> = both.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["merchantkey", "merchantid"]);
        assert_eq!(KeyAuth::Bearer.headers(b"k", None).unwrap().len(), 1);
    }
}
