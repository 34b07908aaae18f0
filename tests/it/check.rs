//! `portaria check` tells everything, once: a config seeded with several mistakes, of the file
//! and of the machine, has all of them reported by one run of the real binary, which exits 1.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::support::*;

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn one_check_reports_every_seeded_mistake_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The storage directory: writable by root only. Run as root (as the tests are here), the
    // check runs as `nobody`, the way `check --user portaria` runs as the service's user;
    // run as anyone else, the directory is closed to everyone.
    let locked = d.join("locked");
    std::fs::create_dir(&locked).unwrap();
    chmod(&locked, if is_root() { 0o755 } else { 0o555 });
    chmod(d, 0o755);
    // A status token only root may read: as the service's user, `check` cannot either.
    let token = d.join("status-token");
    std::fs::write(&token, "a-status-token-long-enough\n").unwrap();
    chmod(&token, 0o600);
    let config = d.join("p.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[storage]
path = "{locked}/p.db"
retension_days = 30

[status]
token_file = "{token}"

[[endpoint]]
path = "/webhooks/mp"
provider = "mercadopag"
secret = "a-secret-of-some-length"

[[endpoint]]
path = "/webhooks/pagarme"
provider = "pagarme"
secret_env = "PORTARIA_IT_NEVER_SET"
forward = {{ command = ["/nonexistent/bin/on-payment", "--live"] }}
"#,
            locked = locked.display(),
            token = token.display()
        ),
    )
    .unwrap();
    chmod(&config, 0o644);
    let mut check = portaria();
    check
        .arg("check")
        .arg("--config")
        .arg(&config)
        .env_remove("PORTARIA_IT_NEVER_SET");
    if is_root() {
        check.args(["--user", "nobody"]);
    }
    let out = check.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let expected = [
        // The misspelled key, with the one meant.
        "(`retension_days`): unknown key in [storage]; did you mean `retention_days`?",
        // The unknown provider, with the one meant.
        "unknown provider `mercadopag`",
        "did you mean `mercadopago`?",
        // The secret that is not in the environment.
        "environment variable PORTARIA_IT_NEVER_SET is not set",
        // The database's directory serve could not write.
        &format!("storage.path: {} is not writable", locked.display()),
        // The forward command that is not there.
        "forward.command: `/nonexistent/bin/on-payment` does not exist",
    ];
    for part in expected {
        assert!(err.contains(part), "missing {part:?} in:\n{err}");
    }
    if is_root() {
        assert!(
            err.contains("status.token_file: cannot read")
                && err.contains("(checked as user nobody)"),
            "{err}"
        );
    }
    assert!(err.contains("problems in"), "a count at the end: {err}");
    assert!(String::from_utf8_lossy(&out.stdout).is_empty());
}

#[test]
fn check_as_another_user_needs_that_user_and_root() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("p.toml");
    std::fs::write(&config, base_config(&dir.path().join("p.db"), "", "")).unwrap();
    let out = portaria()
        .args(["check", "--user", "portaria-it-no-such-user", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no such user on this machine"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if !is_root() {
        let out = portaria()
            .args(["check", "--user", "root", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("only root can check as another user")
        );
    }
}

#[test]
fn a_risky_setting_is_a_warning_beside_ok() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("p.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"0.0.0.0:0\"\nadmin_listen = \"127.0.0.1:0\"\n[storage]\npath = \"{}\"\n\
             [[endpoint]]\npath = \"/webhooks/asaas\"\nprovider = \"asaas\"\nsecret = \"an-asaas-access-token\"\n",
            dir.path().join("p.db").display()
        ),
    )
    .unwrap();
    let out = run_cli(&["check"], &config);
    ok_stdout(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: server.listen: 0.0.0.0:0 takes plain HTTP from beyond this machine")
            && err.contains("endpoint asaas (asaas)"),
        "{err}"
    );
}

#[test]
fn check_says_an_efi_endpoint_answers_on_its_path_and_on_it_plus_pix() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("p.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n[storage]\npath = \"{}\"\n\
             [[endpoint]]\npath = \"/webhooks/efi\"\nprovider = \"efi\"\nsecret = \"an-efi-hmac-secret\"\n\
             [[endpoint]]\npath = \"/webhooks/asaas\"\nprovider = \"asaas\"\nsecret = \"an-asaas-access-token\"\n",
            dir.path().join("p.db").display()
        ),
    )
    .unwrap();
    let out = ok_stdout(&run_cli(&["check"], &config));
    assert!(
        out.contains(
            "endpoint `efi` answers on /webhooks/efi and on /webhooks/efi/pix: efi appends `/pix`"
        ),
        "{out}"
    );
    assert!(!out.contains("endpoint `asaas`"), "{out}");
}

#[test]
fn check_names_the_api_an_endpoint_verifies_by_fetching_from_and_refuses_it_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("p.toml");
    std::fs::write(dir.path().join("mp.key"), "APP_USR-1\n").unwrap();
    let text = |provider: &str, secret: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n[storage]\npath = \"{}\"\n\
             [[endpoint]]\npath = \"/webhooks/mp\"\nprovider = \"{provider}\"\nsecret = \"{secret}\"\n\
             [endpoint.reconcile]\napi_key_file = \"mp.key\"\nfetch = true\n",
            dir.path().join("p.db").display()
        )
    };
    std::fs::write(&config, text("mercadopago", "a-mercado-pago-secret")).unwrap();
    let out = ok_stdout(&run_cli(&["check"], &config));
    assert!(
        out.contains(
            "endpoint `mp` verifies by fetching: the payment each event names is fetched from \
             https://api.mercadopago.com before it is forwarded"
        ),
        "{out}"
    );
    std::fs::write(&config, text("github", "a-github-secret")).unwrap();
    let out = run_cli(&["check"], &config);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("fetch: verify-by-fetching is built for mercadopago, asaas, cielo only"),
        "{err}"
    );
}

#[test]
fn a_mistyped_subcommand_or_name_is_answered_with_the_one_meant() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let config = dir.path().join("p.toml");
    std::fs::write(
        &config,
        base_config(
            &db,
            "",
            "[[endpoint.route]]\nname = \"erp\"\nforward = { command = [\"/bin/true\"] }\n",
        ),
    )
    .unwrap();
    let out = run_cli(&["chek"], &config);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("similar subcommand exists: 'check'"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The database commands need a database.
    portaria::store::Store::open(&db).unwrap().close();
    ok_stdout(&run_cli(&["events", "list"], &config));
    for (args, said) in [
        (
            &["events", "list", "--endpoint", "pagarm"][..],
            "no endpoint named `pagarm`",
        ),
        (
            &["events", "replay", "--dead", "--endpoint", "pagarm"][..],
            "no endpoint named `pagarm`",
        ),
        (
            &["events", "replay", "--dead", "--route", "epr"][..],
            "no route named `epr` (configured: erp); did you mean `erp`?",
        ),
        (
            &[
                "events",
                "replay",
                "--dead",
                "--endpoint",
                "pagarme",
                "--route",
                "epr",
            ][..],
            "no route named `epr` in endpoint `pagarme` (configured: erp); did you mean `erp`?",
        ),
        (
            &["send", "--endpoint", "pagarm", "--data", "{}"][..],
            "no endpoint named `pagarm`",
        ),
        (
            &[
                "archive",
                "replay",
                "/nonexistent.jsonl.gz",
                "--endpoint",
                "pagarm",
            ][..],
            "no endpoint named `pagarm`",
        ),
    ] {
        let out = run_cli(args, &config);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
        if said.starts_with("no endpoint") {
            assert!(
                err.contains(
                    "(configured: pagarme, relya, github, stripe); did you mean `pagarme`?"
                ),
                "{args:?}: {err}"
            );
        }
    }
    // A name that is right still finds nothing, and says so with a zero, not an error.
    let out = run_cli(
        &["events", "replay", "--dead", "--endpoint", "pagarme"],
        &config,
    );
    assert_eq!(ok_stdout(&out).trim(), "0 dead event(s) pending again");
}
