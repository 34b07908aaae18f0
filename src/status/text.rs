//! The status page in English, or in Brazilian Portuguese when the browser prefers it
//! (`Accept-Language`).
//!
//! The pages are written in English, and each phrase to translate is marked with maud's element
//! syntax: `h1 { t { "Now" } }` renders `<h1><t>Now</t></h1>`. Before a page is answered,
//! [`localize`] replaces every `<t>…</t>` with the phrase's Portuguese from [`PT_BR`] (the one
//! table to edit, keyed by the English), or with the English alone: no `<t>` reaches a browser.
//! A `<t>` can only come from the pages' own literals, because maud escapes every value put in
//! (an event type or a header `<t>` arrives as `&lt;t&gt;`), so nothing of an event is ever
//! translated. The few phrases outside the markup (an attribute, a plain-text answer, "5 min
//! ago" and its units) go through [`Lang::say`]. The tests render every page and check both
//! ways: each marked phrase has its Portuguese, and each Portuguese is used.
//!
//! Why markers, and not a lookup at each place (`(t.now())` in the page): every maud splice
//! cuts the page's literal HTML in two, and each piece becomes its own inlined copy into the
//! buffer: a struct of strings per language looked up at the page's ~100 places cost 12,800
//! bytes of the stripped release binary (as measured by this module's first draft); the markers
//! cost what `CHANGELOG.md` says (the Pi's 6 MiB budget). The catalog keeps a 32-bit hash of
//! each English phrase (computed at build time, collisions refused at build time), not the
//! English again.
//!
//! The JSON API is not translated: its names and values (`"status": "dead"`) are for scripts.
//! Times stay `2026-12-01 11:20:03 UTC` in both languages: the order of the logs and the JSON,
//! with no day/month guessing; only "(5 min ago)" becomes "(há 5 min)". A sentence with a hole
//! is cut at the hole (`Replay all ` 3 ` dead events of ` pagarme), and both languages keep its
//! order.

use http::HeaderMap;
use http::header::ACCEPT_LANGUAGE;

use crate::time::rfc3339;

/// A language the pages speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    En,
    PtBr,
}

/// Every phrase of the pages, in English and in Brazilian Portuguese. Words that are the same
/// in both (`Endpoint`, `Status`, units) are not marked. The store's status words are the
/// status as a label (`dead`: the event is dead, "morto"); the chart's series are adjectives
/// of requests or deliveries.
const PT_BR: &[(&str, &str)] = &[
    // Every page's frame.
    ("Main", "Principal"),
    ("Now", "Agora"),
    ("Events", "Eventos"),
    ("Dead", "Mortos"),
    ("Rejected", "Recusados"),
    ("Log out", "Sair"),
    (
        "This page asks for no password because it listens on loopback only (",
        "Esta página não pede senha porque só aceita conexões desta mesma máquina (",
    ),
    (
        "). To open it to your network, set an admin token ([status] token_file).",
        "). Para abri-la para a sua rede, defina um token de administrador ([status] token_file).",
    ),
    // The overview.
    ("The last 48 hours", "As últimas 48 horas"),
    ("No endpoint yet.", "Nenhum endpoint ainda."),
    ("Updated ", "Atualizado em "),
    (
        ". Received counts are exact; duplicates and rejected requests are counted per clock \
         hour (the last 24).",
        ". As contagens de recebidos são exatas; duplicados e requisições recusadas são \
         contados por hora cheia (as últimas 24).",
    ),
    ("Needs you: ", "Precisa da sua atenção: "),
    ("Reconcile", "Reconciliação"),
    (" checked, ", " verificados, "),
    (" never received, ", " nunca recebidos, "),
    (" got back", " recuperados"),
    ("ok: nothing left missing", "ok: nada ficou faltando"),
    (
        "The last run of each endpoint's reconcile (portaria reconcile, or its every).",
        "A última execução do reconcile de cada endpoint (portaria reconcile, ou o seu every).",
    ),
    ("The public URL ", "O endereço público "),
    (" does not reach portaria", " não chega ao portaria"),
    (" (since ", " (desde "),
    (" failed probe", " teste com falha"),
    (" failed probes", " testes com falha"),
    (
        ". Gateways cannot deliver until the tunnel is back; each keeps retrying for a while (",
        ". Os gateways não conseguem entregar até o túnel voltar; cada um continua tentando \
         por um tempo (",
    ),
    (" of it used):", " já passados):"),
    (" dead event", " evento morto"),
    (" dead events", " eventos mortos"),
    (
        " (every retry failed; replay them once the target works). ",
        " (todas as tentativas falharam; reenvie quando o destino voltar a funcionar). ",
    ),
    (
        "The oldest pending event has waited ",
        "O evento pendente mais antigo espera há ",
    ),
    ("See pending events", "Ver os eventos pendentes"),
    (
        "Nothing needs you: no dead events, nothing waiting longer than 15 minutes.",
        "Nada precisa da sua atenção: nenhum evento morto, nada esperando há mais de 15 minutos.",
    ),
    ("Received, last hour", "Recebidos, última hora"),
    ("Received, last 24 h", "Recebidos, últimas 24 h"),
    ("Duplicates, 24 h", "Duplicados, 24 h"),
    ("Rejected, 24 h", "Recusados, 24 h"),
    ("bad signature", "assinatura inválida"),
    ("stale timestamp", "horário fora da janela"),
    ("too large", "grande demais"),
    ("bad request", "requisição inválida"),
    ("storage error", "erro de armazenamento"),
    ("Rejected, kept", "Recusados, guardados"),
    ("Pending", "Pendentes"),
    ("Oldest pending", "Pendente mais antigo"),
    ("waiting ", "esperando há "),
    ("none", "nenhum"),
    ("Last event", "Último evento"),
    ("never", "nunca"),
    ("Replay all ", "Reenviar "),
    ("Replay these ", "Reenviar estes "),
    (" event", " evento"),
    (" events", " eventos"),
    ("Since", "Desde"),
    ("Until", "Até"),
    (" dead event of ", " evento morto de "),
    (" dead events of ", " eventos mortos de "),
    // The chart.
    (
        "Requests and deliveries per hour, last ",
        "Requisições e entregas por hora, últimas ",
    ),
    (" hours", " horas"),
    ("Totals: ", "Totais: "),
    (". The highest hour: ", ". A hora de pico: "),
    ("received", "recebido"),
    ("duplicate", "duplicado"),
    ("rejected", "recusado"),
    ("failed attempts", "tentativas com falha"),
    ("Hours in UTC.", "Horas em UTC."),
    ("The same as a table", "Os mesmos números em tabela"),
    ("Hour (UTC)", "Hora (UTC)"),
    // The events list.
    ("any", "todos"),
    ("pending", "pendente"),
    ("delivering", "entregando"),
    ("delivered", "entregue"),
    ("dead", "morto"),
    ("stored", "armazenado"),
    ("Event type", "Tipo de evento"),
    ("Key or id contains", "Chave ou ID contém"),
    ("Show", "Mostrar"),
    ("No events match.", "Nenhum evento encontrado."),
    ("Newest first", "Mais recentes primeiro"),
    ("Received", "Recebido em"),
    ("Type", "Tipo"),
    ("Attempts", "Tentativas"),
    ("Last error", "Último erro"),
    ("Older events →", "Eventos mais antigos →"),
    // One event.
    ("Event ", "Evento "),
    ("Dead: ", "Morto: "),
    ("every attempt failed.", "todas as tentativas falharam."),
    ("Drift: ", "Mudança: "),
    (
        "this event lacks what its provider's events always carry: ",
        "este evento não traz o que os eventos do seu provedor sempre trazem: ",
    ),
    (
        ". It was accepted as usual; has the gateway changed its payload?",
        ". Foi aceito como de costume; o gateway mudou o formato dos eventos?",
    ),
    (
        " (not covered by the signature)",
        " (não coberto pela assinatura)",
    ),
    (" (from the gateway's API)", " (da API do gateway)"),
    ("Origin", "Origem"),
    (
        "reconcile: its webhook never arrived; taken from the gateway's API",
        "reconcile: o webhook nunca chegou; obtido da API do gateway",
    ),
    ("Signed id", "ID assinado"),
    ("Fetched", "Consultado"),
    ("Dedup key", "Chave de deduplicação"),
    ("Object", "Objeto"),
    ("Next attempt", "Próxima tentativa"),
    ("Replay this event", "Reenviar este evento"),
    (
        " It goes back to pending and is delivered again from the first attempt.",
        " Ele volta para pendente e é entregue de novo, desde a primeira tentativa.",
    ),
    ("Delivery attempts", "Tentativas de entrega"),
    ("None yet.", "Nenhuma ainda."),
    ("Started", "Início"),
    ("Took", "Duração"),
    ("Outcome", "Resultado"),
    ("Error", "Erro"),
    ("failed", "falhou"),
    ("interrupted", "interrompida"),
    ("Headers", "Cabeçalhos"),
    ("Body", "Corpo"),
    (
        "Download the body as received",
        "Baixar o corpo como foi recebido",
    ),
    ("Cut at ", "Cortado em "),
    (
        " KiB; download it for the rest.",
        " KiB; baixe-o para ver o resto.",
    ),
    // Logging in, and what is not there.
    ("Log in", "Entrar"),
    ("Admin token", "Token de administrador"),
    (
        "The token is the one in the file or variable that [status] token_file or token_env \
         names in portaria's configuration.",
        "O token é o que está no arquivo ou na variável que [status] token_file ou token_env \
         indica na configuração do portaria.",
    ),
    (
        "That is not the admin token.",
        "Esse não é o token de administrador.",
    ),
    ("Not found", "Não encontrado"),
    (
        "No such event (it may have been pruned). ",
        "Este evento não existe (pode ter sido apagado pela retenção). ",
    ),
    ("All events", "Todos os eventos"),
    // The rejected requests.
    ("Rejected requests", "Requisições recusadas"),
    (
        "Requests portaria refused (bad signature, stale timestamp, no dedup key, too large), \
         kept to see why: the newest quarantine_keep of each endpoint, for quarantine_for. \
         They are not events and are never forwarded.",
        "Requisições que o portaria recusou (assinatura inválida, horário fora da janela, sem \
         chave de deduplicação, grande demais), guardadas para ver o motivo: as \
         quarantine_keep mais recentes de cada endpoint, por quarantine_for. Não são eventos \
         e nunca são encaminhadas.",
    ),
    (
        "No rejected requests kept.",
        "Nenhuma requisição recusada guardada.",
    ),
    ("Reason", "Motivo"),
    ("Detail", "Detalhe"),
    ("truncated", "cortado"),
    (
        "Older rejected requests →",
        "Requisições recusadas mais antigas →",
    ),
    ("Rejected request ", "Requisição recusada "),
    ("Why it was refused", "Por que foi recusada"),
    (
        "On the machine portaria runs on, this checks it again with the endpoint's current \
         configuration and secrets, and says what does not match:",
        "Na máquina onde o portaria roda, este comando a verifica de novo com a configuração \
         e os segredos atuais do endpoint, e diz o que não confere:",
    ),
    (
        "A rejected request is never forwarded, so it has no replay button. Once the cause is \
         put right (a rotated secret, a clock), the gateway's own retries bring it again.",
        "Uma requisição recusada nunca é encaminhada, por isso não tem botão de reenvio. \
         Corrigida a causa (um segredo trocado, um relógio), as novas tentativas do próprio \
         gateway a trazem de novo.",
    ),
    (
        "Larger than max_body_bytes: not kept whole.",
        "Maior que max_body_bytes: não foi guardada inteira.",
    ),
    ("No body was kept.", "Nenhum corpo foi guardado."),
    (
        "Not UTF-8 text: shown as hex.",
        "Não é texto UTF-8: mostrado em hexadecimal.",
    ),
    (
        "No such rejected request (it may have been pruned). ",
        "Esta requisição recusada não existe (pode ter sido apagada pela retenção). ",
    ),
    ("All rejected requests", "Todas as requisições recusadas"),
    // Times: `{}` is how long (`5 min`).
    ("({} ago)", "(há {})"),
    ("(in {})", "(daqui a {})"),
    ("day", "dia"),
    ("days", "dias"),
    // The routes panel.
    ("Routes", "Rotas"),
    ("paused", "pausada"),
    ("since", "desde"),
    ("until", "até"),
    ("— its deliveries wait.", "— as entregas dela esperam."),
    ("Pause", "Pausar"),
    ("Resume", "Retomar"),
];

const PHRASES: usize = PT_BR.len();

/// FNV-1a, 32 bits: a phrase's key in the catalog.
const fn hash(text: &[u8]) -> u32 {
    let (mut h, mut i) = (0x811c_9dc5_u32, 0);
    while i < text.len() {
        h = (h ^ text[i] as u32).wrapping_mul(0x0100_0193);
        i += 1;
    }
    h
}

/// The English phrases' hashes, in the catalog's order; two phrases with one hash do not build.
static KEYS: [u32; PHRASES] = {
    let mut keys = [0; PHRASES];
    let mut i = 0;
    while i < PHRASES {
        keys[i] = hash(PT_BR[i].0.as_bytes());
        let mut j = 0;
        while j < i {
            assert!(keys[j] != keys[i], "two phrases of PT_BR share a hash");
            j += 1;
        }
        i += 1;
    }
    keys
};

/// Where each Portuguese phrase ends in [`PT_TEXT`].
static ENDS: [u16; PHRASES] = {
    let mut ends = [0; PHRASES];
    let (mut at, mut i) = (0, 0);
    while i < PHRASES {
        at += PT_BR[i].1.len();
        assert!(at <= u16::MAX as usize, "the Portuguese fits 64 KiB");
        ends[i] = at as u16;
        i += 1;
    }
    ends
};

const PT_LEN: usize = {
    let (mut n, mut i) = (0, 0);
    while i < PHRASES {
        n += PT_BR[i].1.len();
        i += 1;
    }
    n
};

/// The Portuguese phrases end to end: one string, where a `&str` per phrase would add 16
/// bytes and a relocation each.
const PT_TEXT: &str = {
    const BYTES: [u8; PT_LEN] = {
        let mut out = [0; PT_LEN];
        let (mut at, mut i) = (0, 0);
        while i < PHRASES {
            let phrase = PT_BR[i].1.as_bytes();
            let mut j = 0;
            while j < phrase.len() {
                out[at] = phrase[j];
                (at, j) = (at + 1, j + 1);
            }
            i += 1;
        }
        out
    };
    match std::str::from_utf8(&BYTES) {
        Ok(text) => text,
        Err(_) => panic!("whole phrases end to end are UTF-8"),
    }
};

/// `english`'s Portuguese, if the catalog has it.
fn portuguese(english: &str) -> Option<&'static str> {
    let key = hash(english.as_bytes());
    let i = KEYS.iter().position(|k| *k == key)?;
    let start = i.checked_sub(1).map_or(0, |before| ENDS[before]);
    PT_TEXT.get(usize::from(start)..usize::from(ENDS[i]))
}

/// `page` with each `<t>phrase</t>` replaced by the phrase said in `lang` (in English, the
/// phrase itself; a phrase the catalog lacks stays English).
pub fn localize(page: &str, lang: Lang) -> String {
    let mut said = String::with_capacity(page.len() + page.len() / 8);
    let mut rest = page;
    while let Some((before, marked)) = rest.split_once("<t>") {
        let (phrase, after) = marked.split_once("</t>").unwrap_or((marked, ""));
        said.push_str(before);
        said.push_str(lang.say(phrase));
        rest = after;
    }
    said.push_str(rest);
    said
}

impl Lang {
    /// The language a request's `Accept-Language` prefers (RFC 9110 §12.5.4): of the ranges
    /// we speak, the one with the highest weight, the first among equals. Any `pt` (`pt-BR`,
    /// `pt`, and `pt-PT` too, closer to Brazilian than English is) is Brazilian Portuguese;
    /// `en`, `en-*` and `*` are English; without any, or without the header, English.
    pub fn of(headers: &HeaderMap) -> Lang {
        let mut best = (Lang::En, 0);
        let values = headers.get_all(ACCEPT_LANGUAGE).iter();
        for range in values
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
        {
            let mut parts = range.split(';');
            let tag = parts.next().unwrap_or("").trim();
            let primary = tag.split('-').next().unwrap_or("");
            let lang = if primary.eq_ignore_ascii_case("pt") {
                Lang::PtBr
            } else if primary.eq_ignore_ascii_case("en") || tag == "*" {
                Lang::En
            } else {
                continue;
            };
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q=").or(p.trim().strip_prefix("Q=")))
                .map(weight)
                .next()
                .unwrap_or(Some(1000));
            if let Some(q) = q
                && q > best.1
            {
                best = (lang, q);
            }
        }
        best.0
    }

    /// The `<html lang>` value.
    pub fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::PtBr => "pt-BR",
        }
    }

    /// `english` in this language: for the phrases that are not in the markup.
    pub fn say(self, english: &str) -> &str {
        match self {
            Lang::En => english,
            Lang::PtBr => portuguese(english).unwrap_or(english),
        }
    }
}

/// A weight (`q=0.8`) in thousandths; None if it is not one (RFC 9110's `qvalue`).
fn weight(q: &str) -> Option<u16> {
    let (whole, fraction) = q.split_once('.').unwrap_or((q, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = fraction
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(3)
        .fold(0, |n, digit| n * 10 + u16::from(digit - b'0'));
    match whole {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// `2026-12-01 11:20:03 UTC (5 min ago)`, `(há 5 min)` in Portuguese.
pub fn when(ms: i64, now: i64, t: Lang) -> String {
    let text = rfc3339(ms);
    let short = format!(
        "{} {} UTC",
        &text[..10.min(text.len())],
        text.get(11..19).unwrap_or("")
    );
    let (pattern, span) = if now >= ms {
        (t.say("({} ago)"), now - ms)
    } else {
        (t.say("(in {})"), ms - now)
    };
    let (before, after) = pattern.split_once("{}").unwrap_or((pattern, ""));
    format!("{short} {before}{}{after}", ago(span, t))
}

/// `45 s`, `12 min`, `3 h 5 min`, `2 days`.
pub fn ago(ms: i64, t: Lang) -> String {
    let s = ms / 1000;
    match s {
        ..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86_400 => format!("{} h {} min", s / 3600, s / 60 % 60),
        _ => {
            let days = s / 86_400;
            format!("{days} {}", t.say(plural(days as u64, "day", "days")))
        }
    }
}

pub(super) fn plural(n: u64, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 { one } else { many }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use http::HeaderValue;
    use maud::html;

    use super::super::pages::{self, Chrome};
    use super::super::public::PublicView;
    use super::super::{PENDING_ALERT_MS, event, reconcile, rejected, routes};
    use super::*;
    use crate::public_path::PublicPath;
    use crate::store::{
        Attempt, EndpointNow, EventDetail, EventSummary, HourCounts, ListFilter, Overview,
        Quarantined, Rejected, RejectedSummary, RoutePause, Status,
    };

    const NOW: i64 = 1_800_000_000_000;
    const HOUR: i64 = 3_600_000;

    /// The phrases said through [`Lang::say`] rather than marked (each checked in Portuguese
    /// by `the_phrases_outside_the_markup_are_said_too`).
    const SAID: [&str; 5] = ["Main", "({} ago)", "(in {})", "day", "days"];

    fn chrome(lang: Lang) -> Chrome {
        Chrome {
            csrf: Some("form-token".into()),
            open_on: Some(([127, 0, 0, 1], 8081).into()),
            logged_in: true,
            lang,
        }
    }

    fn summary(id: i64, status: Status) -> EventSummary {
        EventSummary {
            origin: crate::store::Origin::Webhook,
            id,
            endpoint: "pagarme".into(),
            dedup_key: format!("hook_{id}"),
            event_type: Some("order.paid".into()),
            received_at_ms: NOW - 3 * 86_400_000,
            status,
            attempts: 3,
            next_attempt_at_ms: Some(NOW + 2 * 86_400_000),
            last_error: Some("HTTP 500".into()),
            object_id: Some("or_1".into()),
        }
    }

    fn detail(status: Status, attempts: &[&str], body: Vec<u8>) -> EventDetail {
        let attempt = |(n, outcome): (usize, &&str)| Attempt {
            attempt: n as u32 + 1,
            started_at_ms: NOW - HOUR,
            duration_ms: 12,
            outcome: outcome.to_string(),
            error: None,
            route: "pagarme".into(),
        };
        EventDetail {
            summary: summary(7, status),
            content_type: Some("application/json".into()),
            headers: b"x-hub-signature: [redacted]\r\n".to_vec(),
            body,
            routes: Vec::new(),
            attempts: attempts.iter().enumerate().map(attempt).collect(),
            signed_id: Some("43".into()),
            event_type_signed: Some(false),
            fetched: None,
        }
    }

    /// An event a reconcile run took from the gateway's API.
    fn reconciled() -> EventDetail {
        let mut d = detail(Status::Delivered, &["delivered"], b"{}".to_vec());
        d.summary.origin = crate::store::Origin::Reconcile;
        d.event_type_signed = Some(true);
        d
    }

    /// An event of an endpoint that verifies by fetching, which the gateway said is not there.
    fn fetched() -> EventDetail {
        let mut d = detail(Status::Dead, &["failed"], b"{}".to_vec());
        d.fetched = Some(crate::store::Fetched::Rejected("no such payment".into()));
        d
    }

    /// Every page in every state that shows a phrase of its own, as maud renders it (with
    /// its `<t>` markers).
    fn every_page(lang: Lang) -> Vec<String> {
        let c = chrome(lang);
        let late = EndpointNow {
            endpoint: "pagarme".into(),
            rejected_last_day: Rejected {
                bad_signature: 1,
                stale_timestamp: 1,
                too_large: 1,
                bad_request: 1,
                storage_error: 1,
            },
            dead: 3,
            oldest_pending_ms: Some(NOW - PENDING_ALERT_MS - 60_000),
            last_received_ms: Some(NOW - 60_000),
            ..EndpointNow::default()
        };
        let one_dead = EndpointNow {
            endpoint: "stripe".into(),
            dead: 1,
            ..EndpointNow::default()
        };
        let hours = vec![HourCounts::default(); 48];
        let red = Overview {
            endpoints: vec![late, one_dead.clone()],
            hours: hours.clone(),
        };
        let one = Overview {
            endpoints: vec![one_dead],
            hours: hours.clone(),
        };
        let calm = Overview {
            endpoints: Vec::new(),
            hours,
        };
        let listed: Vec<_> = Status::ALL.iter().map(|s| summary(1, *s)).collect();
        let full = ListFilter {
            limit: listed.len(),
            ..ListFilter::default()
        };
        let endpoints = ["pagarme".to_string()];
        let big = vec![b'x'; event::SHOWN_BYTES + 1];
        let outcomes = ["delivered", "failed", "interrupted"];
        // Routes: one paused (until a time, with a reason), one paused for good, one not.
        let routes = [
            ("pagarme", "default"),
            ("pagarme", "erp"),
            ("stripe", "crm"),
        ]
        .map(|(e, r)| (e.to_string(), r.to_string()));
        let pause = |route: &str, until_ms: Option<i64>| RoutePause {
            endpoint: "pagarme".into(),
            route: route.into(),
            paused_at_ms: NOW - 3_600_000,
            until_ms,
            reason: Some("maintenance".into()),
        };
        let pauses = [pause("default", Some(NOW + 60_000)), pause("erp", None)];
        // A reconcile run that got everything back, and one that did not.
        let runs = [
            (
                "paddle",
                r#"{"ok":true,"at_ms":1,"checked":4,"missing":[],"recovered":[]}"#,
            ),
            (
                "stripe",
                r#"{"ok":false,"checked":9,"missing":["evt_1"],"errors":["x"]}"#,
            ),
        ]
        .map(|(e, j)| (e.to_string(), j.to_string()));
        let panel = html! {
            (routes::panel(&c, &routes, &pauses, NOW))
            (reconcile::panel(&c, &runs, NOW))
        };
        let kept = [("pagarme".to_string(), 3)];
        // Every reason, one truncated, and a full page (so the next page's link).
        let kept_rows: Vec<RejectedSummary> = [
            "bad_signature",
            "stale_timestamp",
            "too_large",
            "bad_request",
        ]
        .iter()
        .enumerate()
        .map(|(n, why)| {
            let mut r = RejectedSummary::from(&quarantined(b"{}".to_vec(), n == 2));
            (r.id, r.reason) = (10 - n as i64, why.to_string());
            r
        })
        .collect();
        let asked = rejected::Query {
            limit: kept_rows.len(),
            ..rejected::query("")
        };
        [
            pages::overview(&c, &red, Some(&unreachable(1)), panel, &kept, NOW),
            pages::overview(&c, &one, Some(&unreachable(2)), html! {}, &[], NOW),
            pages::overview(&c, &calm, None, html! {}, &[], NOW),
            pages::events(&c, &endpoints, &full, &listed, 3, NOW),
            pages::events(&c, &endpoints, &ListFilter::default(), &[], 1, NOW),
            event::page(&c, &detail(Status::Dead, &outcomes, big), &[], NOW),
            event::page(
                &c,
                &detail(Status::Pending, &[], b"{}".to_vec()),
                &["data.object"],
                NOW,
            ),
            event::page(&c, &reconciled(), &[], NOW),
            event::page(&c, &fetched(), &[], NOW),
            pages::login(lang, Some("That is not the admin token.")),
            pages::not_found(&c),
            rejected::list(&c, &endpoints, &asked, &kept_rows, NOW),
            rejected::list(&c, &endpoints, &rejected::query(""), &[], NOW),
            rejected::one(&c, &quarantined(b"{}".to_vec(), false), NOW),
            rejected::one(
                &c,
                &quarantined(vec![b'x'; event::SHOWN_BYTES + 1], false),
                NOW,
            ),
            rejected::one(
                &c,
                &quarantined(vec![0xff; rejected::SHOWN_HEX + 1], false),
                NOW,
            ),
            rejected::one(&c, &quarantined(Vec::new(), true), NOW),
            rejected::not_found(&c),
        ]
        .into_iter()
        .map(|page| page.into_string())
        .collect()
    }

    fn quarantined(body: Vec<u8>, truncated: bool) -> Quarantined {
        Quarantined {
            id: 9,
            endpoint: "pagarme".into(),
            received_at_ms: NOW - 60_000,
            reason: "bad_signature".into(),
            detail: "signature mismatch".into(),
            content_type: Some("application/json".into()),
            headers: b"x-hub-signature: sha256=00\r\nauthorization: [redacted]\r\n".to_vec(),
            body,
            truncated,
        }
    }

    /// A public path whose canary has failed `probes` times.
    fn unreachable(probes: u32) -> PublicView {
        let path = PublicPath::new("https://hooks.example.com");
        for i in 0..probes {
            path.failed(
                NOW - 60_000 * i64::from(probes - i),
                "dns",
                "no such host".into(),
            );
        }
        PublicView {
            path,
            patience: Vec::new(),
        }
    }

    /// Every `<t>` phrase of `page`.
    fn marked(page: &str) -> BTreeSet<String> {
        page.split("<t>")
            .skip(1)
            .map(|after| {
                after
                    .split_once("</t>")
                    .map_or(after, |(p, _)| p)
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn every_marked_phrase_has_its_portuguese_and_every_portuguese_is_used() {
        let phrases: BTreeSet<String> = every_page(Lang::PtBr)
            .iter()
            .flat_map(|p| marked(p))
            .collect();
        let missing: Vec<_> = phrases.iter().filter(|p| portuguese(p).is_none()).collect();
        assert!(
            missing.is_empty(),
            "phrases without Portuguese: {missing:#?}"
        );
        let unused: Vec<_> = PT_BR
            .iter()
            .map(|(english, _)| *english)
            .filter(|e| !phrases.contains(*e) && !SAID.contains(e))
            .collect();
        assert!(unused.is_empty(), "Portuguese no page says: {unused:#?}");
    }

    #[test]
    fn the_catalog_gives_each_phrase_its_own_portuguese() {
        for (english, pt) in PT_BR {
            assert_eq!(portuguese(english), Some(*pt), "{english}");
            // Put into the page as it is: it must be text, not markup.
            assert!(!pt.contains(['<', '>', '&', '"']), "{pt}");
            assert_ne!(english, pt, "a phrase the same in both needs no mark");
        }
        assert_eq!(portuguese("Not a phrase of the pages"), None);
    }

    #[test]
    fn no_marker_reaches_the_browser_in_either_language() {
        for lang in [Lang::En, Lang::PtBr] {
            for page in every_page(lang) {
                let said = localize(&page, lang);
                assert!(!said.contains("<t>") && !said.contains("</t>"), "{said}");
                assert!(said.contains(&format!("<html lang=\"{}\">", lang.tag())));
            }
        }
        let english = localize(&every_page(Lang::En)[0], Lang::En);
        assert!(english.contains("<h1>Now</h1>") && english.contains("Needs you: "));
        let portuguese = localize(&every_page(Lang::PtBr)[0], Lang::PtBr);
        assert!(portuguese.contains("<h1>Agora</h1>"), "{portuguese}");
        assert!(portuguese.contains("Reenviar 3 eventos mortos de pagarme"));
        assert!(portuguese.contains("Reenviar 1 evento morto de stripe"));
        assert!(portuguese.contains("assinatura inválida 1"));
    }

    #[test]
    fn what_an_event_carries_is_never_translated() {
        // A value that looks like a marker is escaped by maud before `localize` sees it.
        let mut d = detail(Status::Dead, &[], b"<t>Now</t>".to_vec());
        d.summary.event_type = Some("<t>Events</t>".into());
        d.summary.dedup_key = "dead".into();
        let page = localize(
            &event::page(&chrome(Lang::PtBr), &d, &[], NOW).into_string(),
            Lang::PtBr,
        );
        assert!(page.contains("&lt;t&gt;Events&lt;/t&gt;"), "{page}");
        assert!(
            page.contains("<code>&lt;t&gt;Now&lt;/t&gt;</code>"),
            "{page}"
        );
        assert!(page.contains("<code>dead</code>"), "{page}");
        // A marker left open ends the page as it is, never loses the text.
        assert_eq!(localize("a <t>Now", Lang::PtBr), "a Agora");
    }

    #[test]
    fn the_phrases_outside_the_markup_are_said_too() {
        let page = localize(&every_page(Lang::PtBr)[0], Lang::PtBr);
        assert!(page.contains("aria-label=\"Principal\""), "{page}");
        assert_eq!(ago(86_400_000, Lang::PtBr), "1 dia");
        assert_eq!(ago(3 * 86_400_000, Lang::PtBr), "3 dias");
        assert_eq!(ago(3 * 86_400_000, Lang::En), "3 days");
        let past = when(NOW - 5 * 60_000, NOW, Lang::PtBr);
        assert!(past.ends_with(" UTC (há 5 min)"), "{past}");
        let future = when(NOW + 2 * 86_400_000, NOW, Lang::PtBr);
        assert!(future.ends_with(" UTC (daqui a 2 dias)"), "{future}");
        let past = when(NOW - 5 * 60_000, NOW, Lang::En);
        assert!(past.ends_with(" UTC (5 min ago)"), "{past}");
        assert_eq!(Lang::PtBr.say("Not found"), "Não encontrado");
    }

    fn of(accept: &[&str]) -> Lang {
        let mut headers = HeaderMap::new();
        for value in accept {
            headers.append(ACCEPT_LANGUAGE, HeaderValue::from_str(value).unwrap());
        }
        Lang::of(&headers)
    }

    #[test]
    fn accept_language_picks_the_highest_weight_we_speak() {
        assert_eq!(of(&[]), Lang::En);
        assert_eq!(of(&["pt-BR,pt;q=0.9,en-US;q=0.8,en;q=0.7"]), Lang::PtBr);
        assert_eq!(of(&["PT-br"]), Lang::PtBr);
        assert_eq!(of(&["pt-PT"]), Lang::PtBr);
        assert_eq!(of(&["en-US,en;q=0.9"]), Lang::En);
        assert_eq!(of(&["en;q=0.9,pt-BR;q=0.8"]), Lang::En);
        assert_eq!(of(&["en;q=0.8, pt-BR;q=0.9"]), Lang::PtBr);
        assert_eq!(of(&["fr-FR,fr;q=0.9,pt;q=0.5"]), Lang::PtBr);
        assert_eq!(of(&["fr-FR,de;q=0.9"]), Lang::En);
        // The first among equals; a second header line counts like a longer first.
        assert_eq!(of(&["pt-BR, en"]), Lang::PtBr);
        assert_eq!(of(&["en", "pt-BR"]), Lang::En);
        assert_eq!(of(&["fr", "pt-BR;q=0.5"]), Lang::PtBr);
        // q=0 is "not this one"; a weight that is not one is as if the range were not there.
        assert_eq!(of(&["pt-BR;q=0, en;q=0.1"]), Lang::En);
        assert_eq!(of(&["pt-BR;q=0"]), Lang::En);
        assert_eq!(of(&["pt-BR;q=2, en;q=0.1"]), Lang::En);
        assert_eq!(of(&["pt-BR;Q=0.5"]), Lang::PtBr);
        assert_eq!(of(&["*;q=0.9, pt;q=0.8"]), Lang::En);
        // Not `pt`: a tag that only starts with it.
        assert_eq!(of(&["ptx"]), Lang::En);
    }

    #[test]
    fn weights_are_rfc_qvalues() {
        assert_eq!(weight("1"), Some(1000));
        assert_eq!(weight("1.000"), Some(1000));
        assert_eq!(weight("0.8"), Some(800));
        assert_eq!(weight("0.125"), Some(125));
        assert_eq!(weight("0"), Some(0));
        for bad in ["1.5", "0.1234", "2", "0.x", "", "-0.5", "0.-1"] {
            assert_eq!(weight(bad), None, "{bad}");
        }
    }
}
