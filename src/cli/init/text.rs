//! What `portaria init` says, one table per language: English, and Brazilian Portuguese when
//! the locale asks for it (`LC_ALL`, else `LC_MESSAGES`, else `LANG`, the first one set,
//! starting `pt_BR`). The code that asks and explains is written once, against [`Text`]; a
//! language is only its table. `{name}`-style holes are filled by the caller; commands, keys,
//! file names and provider names stay as they are in every language.

/// Every sentence `init` prints.
pub(super) struct Text {
    pub ask_path: &'static str,
    /// `{path}`.
    pub exists: &'static str,
    /// `{known}`.
    pub ask_provider: &'static str,
    /// `{name}`, `{hint}`.
    pub unknown_provider: &'static str,
    /// `{name}`: the `{hint}` above.
    pub did_you_mean: &'static str,
    /// `{name}`, `{why}`.
    pub provider_needs_more: &'static str,
    pub ask_secret_source: &'static str,
    pub secret_choices: [&'static str; 4],
    pub bad_choice: &'static str,
    pub ask_env: &'static str,
    pub ask_file: &'static str,
    pub ask_credential: &'static str,
    pub ask_inline: &'static str,
    pub ask_forward: &'static str,
    /// `{question}`, `{flag}`.
    pub no_answer: &'static str,
    pub no_inline_secret: &'static str,
    /// `{problems}`.
    pub invalid: &'static str,
    /// `{path}`.
    pub wrote: &'static str,
    pub next: &'static str,
    /// `{var}`.
    pub put_env: &'static str,
    /// `{var}`.
    pub put_env_file: &'static str,
    pub put_file: &'static str,
    /// `{name}`, `{file}`.
    pub put_credential: &'static str,
    /// `{name}`.
    pub put_credential_dir: &'static str,
    pub check: &'static str,
    pub serve: &'static str,
    pub start: &'static str,
    /// `{provider}`.
    pub send: &'static str,
    pub gateway_url: &'static str,
}

pub(super) const EN: Text = Text {
    ask_path: "Where should the config be written?",
    exists: "{path} exists already; not overwriting it (pass --force to replace it)",
    ask_provider: "Which gateway sends the webhooks? ({known})",
    unknown_provider: "`{name}` is not a provider portaria knows{hint}",
    did_you_mean: "; did you mean `{name}`?",
    provider_needs_more: "provider `{name}` needs more than a secret ({why}); write its \
                          [[endpoint]] by hand (docs/providers.md)",
    ask_secret_source: "Where does its webhook secret come from?",
    secret_choices: [
        "an environment variable (recommended)",
        "a file",
        "a systemd credential",
        "written in this config file",
    ],
    bad_choice: "answer 1, 2, 3 or 4",
    ask_env: "The environment variable's name",
    ask_file: "The file that holds it (one secret per line)",
    ask_credential: "The credential's name (LoadCredential=NAME:FILE in the unit)",
    ask_inline: "Paste the secret from the gateway's dashboard",
    ask_forward: "Where should each event go? A command (e.g. /usr/local/bin/on-payment), a \
                  local http:// URL, or nothing to keep the events for `portaria events`",
    no_answer: "no answer to \"{question}\" (stdin ended); give it as {flag}",
    no_inline_secret: "no secret: the first line of stdin is empty",
    invalid: "those answers make a config portaria refuses; nothing was written:\n{problems}",
    wrote: "wrote {path}",
    next: "Next:",
    put_env: "the secret from the gateway's dashboard",
    put_env_file: "add the line {var}=<the secret from the gateway's dashboard>",
    put_file: "paste the secret from the gateway's dashboard, then Ctrl-D",
    put_credential: "type the secret; then `sudo systemctl edit portaria` and add \
                     [Service] LoadCredential={name}:{file}",
    put_credential_dir: "the directory that holds the file `{name}` (systemd sets it for the \
                         service from LoadCredential={name}:FILE)",
    check: "reads the config as `serve` will and lists every problem",
    serve: "receives webhooks until Ctrl-C",
    start: "starts the service now and at every boot",
    send: "in another terminal: a test webhook, signed as {provider} would",
    gateway_url: "The gateway's webhook URL is your public hostname (the tunnel's) plus",
};

pub(super) const PT_BR: Text = Text {
    ask_path: "Onde gravar a configuração?",
    exists: "{path} já existe; não foi sobrescrito (use --force para substituí-lo)",
    ask_provider: "Qual gateway envia os webhooks? ({known})",
    unknown_provider: "`{name}` não é um provedor que o portaria conhece{hint}",
    did_you_mean: "; você quis dizer `{name}`?",
    provider_needs_more: "o provedor `{name}` precisa de mais que um segredo ({why}); escreva \
                          o [[endpoint]] dele à mão (docs/providers.md)",
    ask_secret_source: "De onde vem o segredo do webhook?",
    secret_choices: [
        "uma variável de ambiente (recomendado)",
        "um arquivo",
        "uma credencial do systemd",
        "escrito neste arquivo de configuração",
    ],
    bad_choice: "responda 1, 2, 3 ou 4",
    ask_env: "O nome da variável de ambiente",
    ask_file: "O arquivo que o guarda (um segredo por linha)",
    ask_credential: "O nome da credencial (LoadCredential=NOME:ARQUIVO na unit)",
    ask_inline: "Cole o segredo do painel do gateway",
    ask_forward: "Para onde vai cada evento? Um comando (ex.: /usr/local/bin/on-payment), uma \
                  URL http:// local, ou nada para guardar os eventos para `portaria events`",
    no_answer: "sem resposta para \"{question}\" (a entrada acabou); informe com {flag}",
    no_inline_secret: "sem segredo: a primeira linha da entrada está vazia",
    invalid: "essas respostas dão uma configuração que o portaria recusa; nada foi gravado:\n\
              {problems}",
    wrote: "gravado em {path}",
    next: "Próximos passos:",
    put_env: "o segredo do painel do gateway",
    put_env_file: "acrescente a linha {var}=<o segredo do painel do gateway>",
    put_file: "cole o segredo do painel do gateway e tecle Ctrl-D",
    put_credential: "digite o segredo; depois `sudo systemctl edit portaria` e acrescente \
                     [Service] LoadCredential={name}:{file}",
    put_credential_dir: "o diretório que contém o arquivo `{name}` (o systemd o define para o \
                         serviço a partir de LoadCredential={name}:ARQUIVO)",
    check: "lê a configuração como o `serve` vai ler e lista todos os problemas",
    serve: "recebe webhooks até Ctrl-C",
    start: "inicia o serviço agora e a cada boot",
    send: "em outro terminal: um webhook de teste, assinado como o {provider} assinaria",
    gateway_url: "A URL de webhook do gateway é o seu endereço público (o do túnel) mais",
};

/// The table for this process's locale.
pub(super) fn text() -> &'static Text {
    let locale = ["LC_ALL", "LC_MESSAGES", "LANG"]
        .iter()
        .filter_map(|var| std::env::var(var).ok())
        .find(|value| !value.is_empty());
    table_for(locale.as_deref())
}

/// `pt_BR`, `pt_BR.UTF-8`, `pt-BR`: Portuguese; anything else (or nothing): English.
fn table_for(locale: Option<&str>) -> &'static Text {
    match locale {
        Some(l) if l.starts_with("pt_BR") || l.starts_with("pt-BR") => &PT_BR,
        _ => &EN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_locale_picks_the_table() {
        assert_eq!(table_for(Some("pt_BR.UTF-8")).next, "Próximos passos:");
        assert_eq!(table_for(Some("pt_BR")).next, "Próximos passos:");
        assert_eq!(table_for(Some("pt_PT.UTF-8")).next, "Next:");
        assert_eq!(table_for(Some("C.UTF-8")).next, "Next:");
        assert_eq!(table_for(None).next, "Next:");
    }

    #[test]
    fn both_tables_keep_the_same_holes() {
        let holes = |s: &str| {
            let mut found: Vec<String> = s
                .match_indices('{')
                .filter_map(|(at, _)| {
                    let rest = &s[at + 1..];
                    let end = rest.find('}')?;
                    let name = &rest[..end];
                    name.chars()
                        .all(|c| c.is_ascii_lowercase())
                        .then(|| name.to_string())
                })
                .collect();
            found.sort_unstable();
            found
        };
        let pairs = |t: &Text| {
            vec![
                t.exists,
                t.ask_provider,
                t.unknown_provider,
                t.did_you_mean,
                t.provider_needs_more,
                t.no_answer,
                t.invalid,
                t.wrote,
                t.put_env_file,
                t.put_credential,
                t.put_credential_dir,
                t.send,
            ]
        };
        for (en, pt) in pairs(&EN).into_iter().zip(pairs(&PT_BR)) {
            assert_eq!(holes(en), holes(pt), "{en} / {pt}");
        }
    }
}
