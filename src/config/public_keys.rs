//! The key material of providers that verify with the sender's public key, read when the
//! config loads (the verifier checks it). It is public, so it is read under `Secrets::Skip`
//! too: every command sees the same endpoints. Such a preset
//! (`verify::catalog::PUBLIC_KEY_PROVIDERS`) does not build without its key, and a secret
//! given for it is refused.

use std::path::PathBuf;

use super::validator::Validator;

impl Validator<'_> {
    /// The texts of `jwks_file` and `public_key_file` (Woovi's PEM or public-keys JSON), read
    /// alike.
    pub(super) fn key_files(
        &mut self,
        at: &str,
        jwks_file: Option<PathBuf>,
        jwks_url: Option<String>,
        public_key_file: Option<PathBuf>,
    ) -> (Option<String>, Option<String>) {
        let jwks = self.jwks(at, jwks_file, jwks_url);
        let pem = public_key_file.and_then(|file| self.key_file(at, "public_key_file", file));
        (jwks, pem)
    }

    /// The text of the JWKS in `jwks_file` (relative to the config file's directory).
    /// `jwks_url` is refused with what to do instead.
    fn jwks(&mut self, at: &str, file: Option<PathBuf>, url: Option<String>) -> Option<String> {
        if url.is_some() {
            self.problem(format!(
                "{at}.jwks_url: not supported: Pagar.me serves its JWKS over https only, and \
                 portaria has no TLS client; save https://hubapi.pagar.me/.well-known/jwks.json \
                 to a file and set jwks_file (download it again when Pagar.me rotates its keys)"
            ));
        }
        self.key_file(at, "jwks_file", file?)
    }

    /// A key file's text (relative to the config file's directory), or a problem at `key`.
    fn key_file(&mut self, at: &str, key: &str, file: PathBuf) -> Option<String> {
        if file.as_os_str().is_empty() {
            self.problem(format!("{at}.{key}: is empty"));
            return None;
        }
        let path = self.resolve(&file);
        match read_key_file(&path) {
            Ok(text) => Some(text),
            Err(why) => {
                self.problem(format!("{at}.{key}: {why}"));
                None
            }
        }
    }
}

/// A JWKS or PEM file of a few keys is a few KiB; this bounds what the config load reads.
const MAX_KEY_FILE_BYTES: u64 = 1024 * 1024;

/// Reads a key file: a regular file (a FIFO or `/dev/zero` would hang or fill memory at
/// start-up), at most [`MAX_KEY_FILE_BYTES`].
fn read_key_file(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let shown = path.display();
    let unreadable = |e: std::io::Error| format!("cannot read {shown}: {e}");
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut text = String::new();
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    if text.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(format!(
            "{shown} is larger than {} KiB; a key file holds a few keys",
            MAX_KEY_FILE_BYTES / 1024
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::tests::{parse, problems};
    use crate::config::{Config, Secrets, Source};

    const DISCORD_KEY: &str = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8";

    fn discord(extra: &str) -> String {
        format!("[[endpoint]]\npath = \"/webhooks/discord\"\nprovider = \"discord\"\n{extra}\n")
    }

    /// A JWKS whose one key loads (an odd 2048-bit modulus; it verifies nothing).
    fn write_jwks(dir: &Path) {
        let n = "_".repeat(341) + "w";
        let jwks = format!(r#"{{"keys":[{{"kty":"RSA","kid":"k1","n":"{n}","e":"AQAB"}}]}}"#);
        std::fs::write(dir.join("keys").join("pagarme.json"), jwks).unwrap();
    }

    fn pagarme_v5(dir: &Path, extra: &str, skip: bool) -> Result<Config, String> {
        let text = format!(
            "[[endpoint]]\npath = \"/webhooks/pagarme-v5\"\nprovider = \"pagarme-v5\"\n{extra}\n"
        );
        let secrets = if skip { Secrets::Skip } else { Secrets::Load };
        Config::parse_with(&text, Source::File(dir.join("portaria.toml")), secrets)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_discord_endpoint_loads_with_its_public_key_and_no_secret() {
        let config = parse(&discord(&format!("public_key = \"{DISCORD_KEY}\""))).unwrap();
        let verifier = &config.endpoints[0].verifier;
        assert_eq!(verifier.provider(), "discord");
        assert_eq!(verifier.secret_count(), 0);
        assert_eq!(config.endpoints[0].dedup.to_string(), "json:/id");
    }

    #[test]
    fn a_discord_endpoint_without_its_key_or_with_a_secret_does_not_load() {
        let msg = problems(&discord(""));
        assert!(
            msg.contains("endpoint[0] (line 1): provider `discord` needs `public_key = "),
            "{msg}"
        );
        for secret in [
            "secret = \"s\"",
            "secrets = [\"s\"]",
            "secret_env = \"HOME\"",
        ] {
            let msg = problems(&discord(&format!(
                "public_key = \"{DISCORD_KEY}\"\n{secret}"
            )));
            assert!(
                msg.contains("not a shared secret: remove the secret"),
                "{msg}"
            );
        }
        let msg = problems(&discord("public_key = \"03a1\""));
        assert!(msg.contains("public_key: 2 bytes"), "{msg}");
        let msg = problems(&format!(
            "[[endpoint]]\npath = \"/g\"\nprovider = \"github\"\nsecret = \"s\"\npublic_key = \"{DISCORD_KEY}\"\n"
        ));
        assert!(
            msg.contains("`public_key` is only for provider `discord`, not `github`"),
            "{msg}"
        );
        // Whatever else is wrong, a provider that takes a secret still needs one.
        let msg = problems("[[endpoint]]\npath = \"/g\"\nprovider = \"github\"\n");
        assert!(msg.contains("no secret; set exactly one of"), "{msg}");
    }

    #[test]
    fn the_jwks_file_follows_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("keys")).unwrap();
        write_jwks(dir.path());
        let config = pagarme_v5(dir.path(), "jwks_file = \"keys/pagarme.json\"", false).unwrap();
        assert_eq!(config.endpoints[0].verifier.provider(), "pagarme-v5");
        // Public, so read by the database commands as well.
        assert!(pagarme_v5(dir.path(), "jwks_file = \"keys/pagarme.json\"", true).is_ok());
        let absolute = format!("jwks_file = \"{}/keys/pagarme.json\"", dir.path().display());
        assert!(pagarme_v5(dir.path(), &absolute, false).is_ok());
    }

    #[test]
    fn a_pagarme_v5_endpoint_without_a_readable_jwks_does_not_load() {
        let dir = tempfile::tempdir().unwrap();
        let msg = pagarme_v5(dir.path(), "", false).unwrap_err();
        assert!(msg.contains("needs `jwks_file`"), "{msg}");
        let msg = pagarme_v5(dir.path(), "jwks_file = \"missing.json\"", false).unwrap_err();
        assert!(msg.contains("jwks_file: cannot read"), "{msg}");
        assert!(msg.contains("missing.json"), "{msg}");
        std::fs::write(dir.path().join("bad.json"), "{\"keys\": []}").unwrap();
        let msg = pagarme_v5(dir.path(), "jwks_file = \"bad.json\"", false).unwrap_err();
        assert!(msg.contains("jwks_file: no RSA signing key"), "{msg}");
        let url = "jwks_url = \"https://hubapi.pagar.me/.well-known/jwks.json\"";
        let msg = pagarme_v5(dir.path(), url, false).unwrap_err();
        assert!(msg.contains("jwks_url: not supported"), "{msg}");
        assert!(msg.contains("set jwks_file"), "{msg}");
        std::fs::create_dir(dir.path().join("keys")).unwrap();
        write_jwks(dir.path());
        let msg = pagarme_v5(
            dir.path(),
            "jwks_file = \"keys/pagarme.json\"\nsecret = \"ak_test\"",
            false,
        )
        .unwrap_err();
        assert!(
            msg.contains("not a shared secret: remove the secret"),
            "{msg}"
        );
        let msg = pagarme_v5(
            dir.path(),
            "jwks_file = \"keys/pagarme.json\"\nsecret = \"ak_test\"",
            true,
        )
        .unwrap_err();
        assert!(msg.contains("not a shared secret"), "{msg}");
    }

    #[test]
    fn a_woovi_endpoint_loads_with_its_key_file_a_secret_or_both() {
        let dir = tempfile::tempdir().unwrap();
        let pem = include_str!("../../tests/fixtures/woovi/public-key.pem");
        std::fs::write(dir.path().join("woovi.pem"), pem).unwrap();
        let woovi = |extra: &str, skip: bool| {
            let text = format!("[[endpoint]]\npath = \"/w\"\nprovider = \"woovi\"\n{extra}\n");
            let secrets = if skip { Secrets::Skip } else { Secrets::Load };
            Config::parse_with(
                &text,
                Source::File(dir.path().join("portaria.toml")),
                secrets,
            )
            .map_err(|e| e.to_string())
        };
        let key = "public_key_file = \"woovi.pem\"";
        for (extra, secrets) in [
            (key.to_string(), 0),
            (format!("{key}\nsecret = \"hmac\""), 1),
            ("secret = \"hmac\"".to_string(), 1),
        ] {
            for skip in [false, true] {
                let config = woovi(&extra, skip).unwrap();
                let v = &config.endpoints[0].verifier;
                assert_eq!(
                    (v.provider(), v.secret_count()),
                    ("woovi", secrets),
                    "{extra}"
                );
            }
        }
        let openpix = "[[endpoint]]\npath = \"/o\"\nprovider = \"openpix\"\nsecret = \"h\"\n";
        assert_eq!(
            parse(openpix).unwrap().endpoints[0].verifier.provider(),
            "woovi"
        );
        let msg = woovi("", false).unwrap_err();
        assert!(
            msg.contains("provider `woovi` needs `public_key_file`"),
            "{msg}"
        );
        let msg = woovi("public_key_file = \"missing.pem\"", false).unwrap_err();
        assert!(msg.contains(".public_key_file: cannot read"), "{msg}");
        std::fs::write(dir.path().join("bad.pem"), "not a key").unwrap();
        let msg = woovi("public_key_file = \"bad.pem\"", false).unwrap_err();
        assert!(
            msg.contains("public_key_file: no `-----BEGIN PUBLIC KEY-----` block"),
            "{msg}"
        );
    }

    #[test]
    fn a_jwks_file_must_be_a_small_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; 1024 * 1024 + 1]).unwrap();
        for (file, why) in [
            ("/dev/zero".to_string(), "is not a regular file"),
            (dir.path().display().to_string(), "is not a regular file"),
            (big.display().to_string(), "is larger than 1024 KiB"),
            (
                dir.path().join("missing.json").display().to_string(),
                "cannot read",
            ),
        ] {
            let text = format!(
                "[[endpoint]]\npath = \"/p\"\nprovider = \"pagarme-v5\"\njwks_file = \"{file}\"\n"
            );
            let msg = problems(&text);
            assert!(
                msg.contains(".jwks_file: ") && msg.contains(why),
                "{file}: {msg}"
            );
        }
    }
}
