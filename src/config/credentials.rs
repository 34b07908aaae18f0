//! systemd credentials (`LoadCredential=`, `LoadCredentialEncrypted=`): a `secret_file`
//! written `credential:NAME` or `$CREDENTIALS_DIRECTORY/NAME` is the file NAME in the directory
//! systemd passes the service in `$CREDENTIALS_DIRECTORY`. Missing directory or file is a
//! config error naming the credential; the directory is a parameter here, so tests never
//! touch the process environment.

use std::path::{Path, PathBuf};

/// The variable systemd sets to the service's credentials directory.
pub const VARIABLE: &str = "CREDENTIALS_DIRECTORY";

/// The credential a `secret_file` names, if it names one: `Some(Ok(name))`, `Some(Err(why))`
/// for a credential form with a name that cannot be one, None for an ordinary path.
pub(super) fn credential_name(secret_file: &str) -> Option<Result<&str, String>> {
    let name = [
        "credential:",
        "$CREDENTIALS_DIRECTORY/",
        "${CREDENTIALS_DIRECTORY}/",
    ]
    .iter()
    .find_map(|prefix| secret_file.strip_prefix(prefix))
    .or_else(|| {
        // The bare variable names the directory, not a credential in it.
        ["$CREDENTIALS_DIRECTORY", "${CREDENTIALS_DIRECTORY}"]
            .contains(&secret_file)
            .then_some("")
    })?;
    let plain = !name.is_empty() && name != "." && name != ".." && !name.contains('/');
    Some(if plain {
        Ok(name)
    } else {
        Err(format!(
            "`{secret_file}` names no credential: give the credential's name, as in \
             `credential:pagarme` (the NAME of LoadCredential=NAME:FILE)"
        ))
    })
}

/// The file of credential `name` in `dir` (the value of `$CREDENTIALS_DIRECTORY`).
pub(super) fn resolve(name: &str, dir: Option<&Path>) -> Result<PathBuf, String> {
    let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty()) else {
        return Err(format!(
            "credential `{name}`: ${VARIABLE} is not set; systemd sets it for a service with \
             LoadCredential={name}:FILE or LoadCredentialEncrypted={name}:FILE (outside systemd, \
             set it to the directory that holds the file `{name}`)"
        ));
    };
    let path = dir.join(name);
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "credential `{name}` is not in ${VARIABLE} ({}): add LoadCredential={name}:FILE \
             (or LoadCredentialEncrypted=) to the unit",
            dir.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_name_a_credential_and_plain_paths_do_not() {
        for given in [
            "credential:pagarme",
            "$CREDENTIALS_DIRECTORY/pagarme",
            "${CREDENTIALS_DIRECTORY}/pagarme",
        ] {
            assert_eq!(credential_name(given), Some(Ok("pagarme")), "{given}");
        }
        for plain in ["/etc/portaria/pagarme", "secrets/pagarme", "credentials/x"] {
            assert_eq!(credential_name(plain), None, "{plain}");
        }
        for bad in [
            "credential:",
            "credential:a/b",
            "credential:..",
            "$CREDENTIALS_DIRECTORY",
            "$CREDENTIALS_DIRECTORY/",
            "$CREDENTIALS_DIRECTORY/../etc/shadow",
        ] {
            let why = credential_name(bad).unwrap().unwrap_err();
            assert!(why.contains("names no credential"), "{bad}: {why}");
        }
    }

    #[test]
    fn a_credential_resolves_in_the_directory_or_says_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pagarme"), "s3cret\n").unwrap();
        assert_eq!(
            resolve("pagarme", Some(dir.path())).unwrap(),
            dir.path().join("pagarme")
        );
        let missing = resolve("stripe", Some(dir.path())).unwrap_err();
        assert!(
            missing.contains("credential `stripe` is not in $CREDENTIALS_DIRECTORY")
                && missing.contains("LoadCredential=stripe:FILE"),
            "{missing}"
        );
        for unset in [None, Some(Path::new(""))] {
            let why = resolve("pagarme", unset).unwrap_err();
            assert!(
                why.contains("credential `pagarme`: $CREDENTIALS_DIRECTORY is not set"),
                "{why}"
            );
        }
    }
}
