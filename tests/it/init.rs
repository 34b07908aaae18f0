//! `portaria init` as the owner uses it, the real binary in a temp folder: by flags, or by
//! answers on stdin (in English, or in Portuguese by the locale); then a plain `check` and
//! `serve` in that folder use the file it wrote, not the embedded demo.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use crate::support::*;

/// `portaria ARGS` in `dir`, with nothing else to find (no user config, no $PORTARIA_CONFIG),
/// `stdin` as its input and English unless `env` says otherwise.
fn in_dir(dir: &Path, args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = portaria();
    cmd.args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("LC_ALL")
        .env_remove("LC_MESSAGES")
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in env {
        cmd.env(name, value);
    }
    let mut child = cmd.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The steps `init` printed: the lines `  1. ...` to `  3. ...`.
fn steps(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.trim_start().split_once(". "))
        .filter(|(n, _)| ["1", "2", "3"].contains(n))
        .map(|(_, command)| command.to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_by_flags_writes_what_a_plain_check_and_serve_in_that_folder_use() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let handler = d.join("on-payment");
    write_executable(&handler, "#!/bin/sh\ncat >> \"$(dirname \"$0\")/inbox\"\n");
    let forward = handler.display().to_string();
    let out = in_dir(
        d,
        &[
            "init",
            "--provider",
            "pagarme",
            "--secret-env",
            "PAGARME_IT_SECRET",
            "--forward-command",
            &forward,
        ],
        "",
        &[],
    );
    let said = ok_stdout(&out);
    let config = d.join("portaria.toml");
    assert!(said.contains("wrote portaria.toml"), "{said}");
    let mode = std::fs::metadata(&config).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "owner only: it may hold a secret");
    assert_eq!(
        steps(&said),
        [
            "export PAGARME_IT_SECRET='...'",
            "portaria check",
            "portaria serve"
        ],
        "the next three commands, plain: the lookup finds the file from here\n{said}"
    );
    assert!(said.contains("/webhooks/pagarme"), "{said}");

    // A plain `check` here reads what init wrote, and needs the variable it named.
    let secret = [("PAGARME_IT_SECRET", PAGARME_SECRET)];
    let unset = in_dir(d, &["check"], "", &[]);
    assert_eq!(unset.status.code(), Some(1), "{}", text(&unset.stdout));
    assert!(
        text(&unset.stderr).contains("PAGARME_IT_SECRET is not set"),
        "{}",
        text(&unset.stderr)
    );
    let checked = in_dir(d, &["check"], "", &secret);
    assert_eq!(
        ok_stdout(&checked).trim(),
        format!("ok: {}", config.display())
    );

    // A plain `serve` here too: free ports instead of 8080 and 9464 (other tests run beside
    // this one); the file stays where init put it.
    let written = std::fs::read_to_string(&config).unwrap();
    let moved = written.replace(
        "listen = \"127.0.0.1:8080\"",
        "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"",
    );
    assert_ne!(written, moved, "{written}");
    std::fs::write(&config, moved).unwrap();
    let mut serve = portaria();
    serve
        .arg("serve")
        .current_dir(d)
        .env("HOME", d)
        .env_remove("XDG_CONFIG_HOME")
        .env("PAGARME_IT_SECRET", PAGARME_SECRET);
    let server = Process::spawn_command(serve).await;
    let log = server.log.lock().unwrap().clone();
    assert!(!log.contains("DEMO"), "not the embedded demo: {log}");
    assert!(log.contains(&config.display().to_string()), "{log}");
    let body = payment_body(1);
    assert_eq!(post_pagarme(server.addr, &body).await.status, 200);
    eventually(Duration::from_secs(10), "the forward command ran", || {
        std::fs::read(d.join("inbox")).is_ok_and(|got| got == body)
    })
    .await;
    assert!(
        d.join("portaria.db").exists(),
        "the database is next to the file"
    );
}

#[test]
fn init_never_replaces_a_file_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = [
        "init",
        "--provider",
        "stripe",
        "--secret-env",
        "S",
        "--no-forward",
    ];
    ok_stdout(&in_dir(d, &args, "", &[]));
    std::fs::write(d.join("portaria.toml"), "# mine\n").unwrap();
    let again = in_dir(d, &args, "", &[]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stderr).contains("portaria.toml exists already; not overwriting it"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(d.join("portaria.toml")).unwrap(),
        "# mine\n"
    );
    let mut forced: Vec<&str> = args.to_vec();
    forced.push("--force");
    ok_stdout(&in_dir(d, &forced, "", &[]));
    let replaced = std::fs::read_to_string(d.join("portaria.toml")).unwrap();
    assert!(replaced.contains("provider = \"stripe\""), "{replaced}");
}

#[test]
fn init_asks_on_stdin_in_portuguese_when_the_locale_is_pt_br() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Where, the gateway (mistyped first), the secret's source (a file, its default name),
    // where events go.
    let answers = "portaria.toml\nmercadopag\nmercadopago\n2\n\nhttp://127.0.0.1:3000/pagamentos\n";
    let out = in_dir(d, &["init"], answers, &[("LANG", "pt_BR.UTF-8")]);
    let said = ok_stdout(&out);
    for expected in [
        "Onde gravar a configuração?",
        "Qual gateway envia os webhooks?",
        "`mercadopag` não é um provedor que o portaria conhece; você quis dizer `mercadopago`?",
        "De onde vem o segredo do webhook?",
        "2) um arquivo",
        "Para onde vai cada evento?",
        "gravado em portaria.toml",
        "Próximos passos:",
    ] {
        assert!(said.contains(expected), "{expected}\n{said}");
    }
    let written = std::fs::read_to_string(d.join("portaria.toml")).unwrap();
    assert!(
        written.contains("provider = \"mercadopago\"")
            && written.contains("secret_file = \"mercadopago.secret\"")
            && written.contains("url = \"http://127.0.0.1:3000/pagamentos\""),
        "{written}"
    );
    let secret_file = d.join("mercadopago.secret");
    assert_eq!(
        steps(&said)[0],
        format!("(umask 077; cat > {})", secret_file.display()),
        "{said}"
    );
    // The file it named is the one `check` reads.
    let missing = in_dir(d, &["check"], "", &[]);
    assert!(
        text(&missing.stderr).contains("mercadopago.secret"),
        "{}",
        text(&missing.stderr)
    );
    std::fs::write(&secret_file, "a-mercado-pago-secret-of-some-length\n").unwrap();
    std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    ok_stdout(&in_dir(d, &["check"], "", &[]));
    // The same questions in English without that locale.
    let english = tempfile::tempdir().unwrap();
    let out = in_dir(english.path(), &["init"], answers, &[]);
    assert!(
        ok_stdout(&out).contains("Which gateway sends the webhooks?"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn an_inline_secret_is_read_from_stdin_and_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let out = in_dir(
        d,
        &[
            "init",
            "--provider",
            "stripe",
            "--secret-inline",
            "--no-forward",
        ],
        &format!("{secret}\n"),
        &[],
    );
    let said = ok_stdout(&out);
    assert!(!said.contains(secret) && !text(&out.stderr).contains(secret));
    let written = std::fs::read_to_string(d.join("portaria.toml")).unwrap();
    assert!(
        written.contains(&format!("secret = \"{secret}\"")),
        "{written}"
    );
    assert_eq!(
        steps(&said),
        [
            "portaria check",
            "portaria serve",
            "portaria send --endpoint stripe --data '{\"id\":\"test_1\",\"type\":\"test\"}'"
        ],
        "{said}"
    );
    ok_stdout(&in_dir(d, &["check"], "", &[]));
}

#[test]
fn init_refuses_what_it_cannot_write_whole() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = in_dir(
        d,
        &["init", "--provider", "twilio", "--secret-env", "T"],
        "",
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("provider `twilio` needs more than a secret"),
        "{}",
        text(&out.stderr)
    );
    // An answer that makes an invalid config writes nothing.
    let out = in_dir(
        d,
        &[
            "init",
            "--provider",
            "stripe",
            "--secret-env",
            "S",
            "--forward-url",
            "https://x.example/",
        ],
        "",
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("must be a plain http:// URL"),
        "{}",
        text(&out.stderr)
    );
    // Without the answers and with stdin at its end, it names the flag to use.
    let out = in_dir(d, &["init", "portaria.toml"], "", &[]);
    assert!(
        text(&out.stderr).contains("give it as --provider"),
        "{}",
        text(&out.stderr)
    );
    assert!(!d.join("portaria.toml").exists(), "nothing written");
}

#[test]
fn init_writes_where_config_says_and_its_commands_name_that_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = in_dir(
        d,
        &[
            "--config",
            "site/portaria.toml",
            "init",
            "--provider",
            "stripe",
            "--secret-env",
            "STRIPE_IT_SECRET",
            "--no-forward",
        ],
        "",
        &[],
    );
    // No such folder yet: nothing is created but the file.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    std::fs::create_dir(d.join("site")).unwrap();
    let out = in_dir(
        d,
        &[
            "--config",
            "site/portaria.toml",
            "init",
            "--provider",
            "stripe",
            "--secret-env",
            "STRIPE_IT_SECRET",
            "--no-forward",
        ],
        "",
        &[],
    );
    let said = ok_stdout(&out);
    let written = d.join("site/portaria.toml");
    assert!(written.exists());
    // Not where the lookup looks from here: the commands name it.
    assert_eq!(
        steps(&said)[1],
        format!("portaria check --config {}", written.display()),
        "{said}"
    );
    let out = in_dir(
        d,
        &["check", "--config", "site/portaria.toml"],
        "",
        &[("STRIPE_IT_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")],
    );
    ok_stdout(&out);
    assert!(d.join("site").join("portaria.toml").exists());
}
