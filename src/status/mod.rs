//! The status page on the admin listener (issue 14): what came in, what failed, and a replay
//! button, for owners who do not read logs. Server-rendered HTML (maud, escaped by
//! construction) with one embedded stylesheet and an inline SVG chart, and the same data as
//! JSON for scripts. Never on the webhook port: `admin` hands it every path it does not
//! answer itself.
//!
//! This file owns routing and the shape of answers; `auth` who may look and press
//! (`sessions` the logins, `throttle` the pace and the log of wrong tokens), `api` the JSON,
//! `pages` and `event` the HTML, `rejected` the rejected requests kept (their pages and JSON;
//! never a replay), `chart` the SVG, `public` the public path (the canary's probes), `text`
//! what the HTML says (English or Brazilian Portuguese, by `Accept-Language`), `style.css` the
//! looks. Which `Host` is answered at all is the admin listener's rule (`admin`), the same for
//! every path.
//!
//! Everything shown comes from the store's handle, each call bounded by 5 s: `overview` (each
//! endpoint now, from its events, the hourly counters and the queue figures; the chart's 48
//! hours) and `rejected_kept`, `list_events`/`event_detail`, `rejected_page`/`rejected_get`,
//! and `replay_event`/`replay_dead_of`/`replay_matching` (`filters`: the list's filters and
//! the "Replay these N" button), after which the worker is woken (`Notify`: it does not see
//! its own connection's commits through `data_version`). The counters are never on the
//! request path (`store::counters`).

mod answer;
mod api;
mod auth;
mod chart;
mod event;
mod filters;
mod pages;
mod public;
mod reconcile;
mod rejected;
mod routes;
mod sessions;
mod text;
mod throttle;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use tokio::sync::Notify;

use crate::public_path::PublicPath;
use crate::store::{ListFilter, Store};
use crate::time::now_ms;
use crate::verify::{Carried, Patience, Secret};

use answer::{Answer, html, redirect, respond, secure, vary};
use auth::{Guard, Refused, Visitor};
use text::Lang;
use throttle::Way;

/// Hours the chart shows.
pub const CHART_HOURS: usize = 48;

/// An oldest pending event older than this turns the banner red.
pub const PENDING_ALERT_MS: i64 = 15 * 60_000;

/// Events a page of the list shows unless asked for fewer (at most [`MAX_PAGE`]).
const PAGE: usize = 50;
const MAX_PAGE: usize = 200;

/// The largest form a POST may carry.
const MAX_FORM_BYTES: usize = 16 * 1024;

/// How long the store may take for a page's figures.
const STORE_DEADLINE: Duration = Duration::from_secs(5);

const STYLE: &str = include_str!("style.css");

/// The status page of one server process.
pub struct StatusPage {
    store: Store,
    /// Wakes the worker after a replay (it would only notice at its next due time otherwise).
    new_event: Arc<Notify>,
    /// The configured endpoints at start, shown even before their first event.
    endpoints: Vec<String>,
    guard: Guard,
    /// The admin listener's address, for the page's "open on loopback" note.
    listen: Option<SocketAddr>,
    /// What the canary's probes saw, when it runs.
    public: Option<public::PublicView>,
    /// The configured routes at start, (endpoint, route), for the routes panel.
    routes: Vec<(String, String)>,
    /// The fields each endpoint's provider's events always carry: an event without one is
    /// flagged (`drift`), read from its stored body when it is shown.
    carries: Vec<(String, &'static [Carried])>,
}

impl StatusPage {
    /// `token` is `[status]`'s; None: open, which config allows only on loopback.
    pub fn new(
        store: Store,
        new_event: Arc<Notify>,
        endpoints: Vec<String>,
        token: Option<Secret>,
        listen: Option<SocketAddr>,
    ) -> std::io::Result<StatusPage> {
        Ok(StatusPage {
            store,
            new_event,
            endpoints,
            guard: Guard::new(token)?,
            listen,
            public: None,
            routes: Vec::new(),
            carries: Vec::new(),
        })
    }

    /// The configured routes, (endpoint, route): the overview shows each with a Pause or
    /// Resume button (`routes`).
    pub fn with_routes(mut self, routes: Vec<(String, String)>) -> Self {
        self.routes = routes;
        self
    }

    /// Flags an event lacking a field its endpoint's provider's events always carry.
    pub fn with_carries(mut self, carries: Vec<(String, &'static [Carried])>) -> Self {
        self.carries = carries;
        self
    }

    /// The fields `d` lacks of those its endpoint's provider's events always carry.
    fn missing(&self, d: &crate::store::EventDetail) -> Vec<&'static str> {
        let e = &d.summary;
        let carried = self.carries.iter().find(|(name, _)| *name == e.endpoint);
        carried.map_or_else(Vec::new, |(_, c)| {
            Carried::missing(c, e.event_type.as_deref(), &d.body)
        })
    }

    /// Shows the canary's record of the public path, and each endpoint's gateway's patience
    /// (in the config's order) while it fails.
    pub fn with_public_path(
        mut self,
        path: Option<PublicPath>,
        patience: Vec<(String, Patience)>,
    ) -> Self {
        self.public = path.map(|path| public::PublicView { path, patience });
        self
    }

    /// Answers one request to the admin listener that is not `/healthz`, `/readyz` or
    /// `/metrics`.
    pub async fn handle(&self, req: Request<Incoming>) -> Answer {
        let mut answer = self.route(req).await;
        secure(answer.headers_mut());
        answer
    }

    /// The admin listener's address (None: unknown).
    pub fn listen(&self) -> Option<SocketAddr> {
        self.listen
    }

    /// Logs the wrong admin tokens after the first of a spell, one summary line a minute,
    /// until `stop` (the admin listener runs it beside its connections).
    pub async fn log_wrong_tokens(&self, stop: impl Future<Output = ()>) {
        self.guard.failures.summarise(stop).await;
    }

    async fn route(&self, req: Request<Incoming>) -> Answer {
        let path = req.uri().path().to_string();
        let query = req.uri().query().unwrap_or("").to_string();
        let method = req.method().clone();
        let is_get = method == Method::GET || method == Method::HEAD;
        let t = Lang::of(req.headers());
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        // What needs no login.
        match (segments.as_slice(), is_get) {
            (["style.css"], true) => return css(),
            // Browsers ask for it on every page; none, and no 404 in their console.
            (["favicon.ico"], true) => return respond(StatusCode::NO_CONTENT, "image/x-icon", ""),
            (["login"], true) => return self.login_page(t, None),
            (["login"], false) if method == Method::POST => return self.login(req, t).await,
            _ => {}
        }
        let api = segments.first() == Some(&"api");
        let visitor = match self.guard.check(req.headers()).await {
            Ok(visitor) => visitor,
            Err(refused) => {
                return match (refused, api || !is_get) {
                    (Refused::Unauthenticated, false) => redirect("/login"),
                    (Refused::Unauthenticated, true) => {
                        let mut r = api::error(StatusCode::UNAUTHORIZED, refused.message());
                        r.headers_mut()
                            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                        r
                    }
                    _ => api::error(StatusCode::FORBIDDEN, refused.message()),
                };
            }
        };
        let mut answer = self
            .serve(req, &visitor, t, &segments, is_get, &query)
            .await;
        // The open page's first visit: the cookie its forms' token is bound to.
        if let Some(cookie) = visitor.new_cookie.as_deref()
            && let Ok(cookie) = HeaderValue::from_str(cookie)
        {
            answer.headers_mut().append(header::SET_COOKIE, cookie);
        }
        answer
    }

    /// What a request that passed the guard asks for.
    async fn serve(
        &self,
        req: Request<Incoming>,
        visitor: &Visitor,
        t: Lang,
        segments: &[&str],
        is_get: bool,
        query: &str,
    ) -> Answer {
        let method = req.method().clone();
        let api = segments.first() == Some(&"api");
        if !is_get && method != Method::POST {
            return not_allowed("GET, HEAD, POST");
        }
        let id = segments.get(1).and_then(|s| s.parse::<i64>().ok());
        match (segments, is_get, id) {
            ([""], true, _) => self.overview(visitor, t).await,
            (["events"], true, _) => self.events(visitor, t, query).await,
            (["events", _], true, Some(id)) => self.event(visitor, t, id).await,
            (["events", _, "body"], true, Some(id)) => event::download(&self.store, id, t).await,
            (["rejected"], true, _) => self.rejected_list(self.chrome(visitor, t), query).await,
            (["rejected", _], true, Some(id)) => {
                self.rejected_one(self.chrome(visitor, t), id).await
            }
            (["events", _, "replay"], false, Some(id)) => match self.form(req, visitor).await {
                Ok(_) => self.replay(id).await,
                Err(refused) => refused,
            },
            (["replay-dead"], false, _) => match self.form(req, visitor).await {
                Ok(form) => self.replay_dead(field(&form, "endpoint")).await,
                Err(refused) => refused,
            },
            (["replay-matching"], false, _) => match self.form(req, visitor).await {
                Ok(form) => self.replay_matching(&form).await,
                Err(refused) => refused,
            },
            (["routes", action @ ("pause" | "resume")], false, _) => {
                match self.form(req, visitor).await {
                    Ok(form) => {
                        let (endpoint, route) = (field(&form, "endpoint"), field(&form, "route"));
                        let asked = routes::asked(&self.routes, endpoint, route);
                        routes::pause_or_resume(
                            &self.store,
                            &self.new_event,
                            *action == "pause",
                            asked,
                        )
                        .await
                    }
                    Err(refused) => refused,
                }
            }
            (["logout"], false, _) => match self.form(req, visitor).await {
                Ok(_) => {
                    self.guard.log_out(visitor);
                    logout()
                }
                Err(refused) => refused,
            },
            (["api", "stats"], true, _) => api::stats(self).await,
            (["api", "events"], true, _) => api::events(self, query).await,
            (["api", "events", n], true, _) => match n.parse::<i64>() {
                Ok(id) => api::event(self, id).await,
                Err(_) => not_found(true, t),
            },
            (["api", "rejected"], true, _) => self.api_rejected_list(query).await,
            (["api", "rejected", n], true, _) => match n.parse::<i64>() {
                Ok(id) => self.api_rejected_one(id).await,
                Err(_) => not_found(true, t),
            },
            (
                ["events", _, "replay"]
                | ["replay-dead" | "replay-matching"]
                | ["logout"]
                | ["routes", _],
                true,
                _,
            ) => not_allowed("POST"),
            (_, false, _) => not_allowed("GET, HEAD"),
            _ => not_found(api, t),
        }
    }

    /// A POST's form, if it passes the CSRF checks; else the answer refusing it, and nothing
    /// changes.
    async fn form(
        &self,
        req: Request<Incoming>,
        visitor: &Visitor,
    ) -> Result<Vec<(String, String)>, Answer> {
        let (parts, body) = req.into_parts();
        let Some(form) = read_form(body).await else {
            return Err(api::error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the form is too large or too slow",
            ));
        };
        match self
            .guard
            .check_post(&parts.headers, visitor, field(&form, "csrf").as_deref())
        {
            Ok(()) => Ok(form),
            Err(refused) => {
                tracing::warn!(path = %parts.uri.path(), "status page: a cross-site or stale form refused");
                Err(api::error(StatusCode::FORBIDDEN, refused.message()))
            }
        }
    }

    /// The login form's POST. It carries no form token (the page has no session yet, and
    /// a login made from elsewhere would need the token anyway); the browser's word on where
    /// it came from still counts.
    async fn login(&self, req: Request<Incoming>, t: Lang) -> Answer {
        if self.guard.is_open() {
            return redirect("/");
        }
        let (parts, body) = req.into_parts();
        let Some(form) = read_form(body).await else {
            return api::error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the form is too large or too slow",
            );
        };
        if !auth::same_origin(&parts.headers) {
            tracing::warn!("status page: a login from another site refused");
            return api::error(StatusCode::FORBIDDEN, Refused::CrossSite.message());
        }
        let token = field(&form, "token").unwrap_or_default();
        if !self.guard.token_matches(&token, Way::Login).await {
            // The answer says nothing about how close it was.
            return self.login_page(t, Some("That is not the admin token."));
        }
        match self.guard.log_in() {
            Ok(cookie) => {
                let mut answer = redirect("/");
                if let Ok(cookie) = HeaderValue::from_str(&cookie) {
                    answer.headers_mut().insert(header::SET_COOKIE, cookie);
                }
                answer
            }
            Err(e) => unavailable(&format!("no random session id: {e}")),
        }
    }

    fn login_page(&self, t: Lang, error: Option<&str>) -> Answer {
        if self.guard.is_open() {
            return redirect("/");
        }
        let status = if error.is_some() {
            StatusCode::UNAUTHORIZED
        } else {
            StatusCode::OK
        };
        html(status, pages::login(t, error), t)
    }

    async fn overview(&self, visitor: &Visitor, t: Lang) -> Answer {
        let now = now_ms();
        let asked = async {
            let overview = self
                .store
                .overview(self.endpoints.clone(), CHART_HOURS, now)
                .await?;
            let (pauses, kept) = (
                self.store.route_pauses(now).await?,
                self.store.rejected_kept().await?,
            );
            let runs = self.store.reconcile_runs().await?;
            Ok::<_, crate::store::StoreError>((overview, pauses, kept, runs))
        };
        match tokio::time::timeout(STORE_DEADLINE, asked).await {
            Ok(Ok((overview, pauses, kept, runs))) => {
                let chrome = self.chrome(visitor, t);
                let routes = routes::panel(&chrome, &self.routes, &pauses, now);
                let routes = maud::html! { (routes) (reconcile::panel(&chrome, &runs, now)) };
                let public = self.public.as_ref();
                let page = pages::overview(&chrome, &overview, public, routes, &kept, now);
                html(StatusCode::OK, page, t)
            }
            Ok(Err(e)) => unavailable(&e.to_string()),
            Err(_) => unavailable("the database did not answer within 5 s"),
        }
    }

    async fn events(&self, visitor: &Visitor, t: Lang, query: &str) -> Answer {
        let filter = filters::filter(form_urlencoded::parse(query.as_bytes()));
        match self.list(filter.clone()).await {
            Ok(events) => html(
                StatusCode::OK,
                pages::events(
                    &self.chrome(visitor, t),
                    &self.endpoints,
                    &filter,
                    &events,
                    self.replayable(&filter).await,
                    now_ms(),
                ),
                t,
            ),
            Err(e) => unavailable(&e),
        }
    }

    async fn event(&self, visitor: &Visitor, t: Lang, id: i64) -> Answer {
        match self.detail(id).await {
            Ok(Some(detail)) => html(
                StatusCode::OK,
                event::page(
                    &self.chrome(visitor, t),
                    &detail,
                    &self.missing(&detail),
                    now_ms(),
                ),
                t,
            ),
            Ok(None) => html(
                StatusCode::NOT_FOUND,
                pages::not_found(&self.chrome(visitor, t)),
                t,
            ),
            Err(e) => unavailable(&e),
        }
    }

    async fn replay(&self, id: i64) -> Answer {
        match self.store.replay_event(id, now_ms()).await {
            Ok(replayed) => {
                if replayed {
                    tracing::info!(event = id, "status page: event replayed");
                    self.new_event.notify_one();
                }
                redirect(&format!("/events/{id}"))
            }
            Err(e) => unavailable(&e.to_string()),
        }
    }

    async fn replay_dead(&self, endpoint: Option<String>) -> Answer {
        let Some(endpoint) = endpoint.filter(|e| !e.is_empty()) else {
            return api::error(
                StatusCode::BAD_REQUEST,
                "which endpoint? (the form's endpoint field)",
            );
        };
        match self.store.replay_dead_of(endpoint.clone(), now_ms()).await {
            Ok(n) => {
                tracing::info!(endpoint, events = n, "status page: dead events replayed");
                if n > 0 {
                    self.new_event.notify_one();
                }
                let to: String = form_urlencoded::Serializer::new(String::new())
                    .append_pair("endpoint", &endpoint)
                    .finish();
                redirect(&format!("/events?{to}"))
            }
            Err(e) => unavailable(&e.to_string()),
        }
    }

    /// One page of the events list, through the writer, bounded in time.
    async fn list(&self, filter: ListFilter) -> Result<Vec<crate::store::EventSummary>, String> {
        match tokio::time::timeout(STORE_DEADLINE, self.store.list_events(filter)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err("the database did not answer within 5 s".into()),
        }
    }

    async fn detail(&self, id: i64) -> Result<Option<crate::store::EventDetail>, String> {
        match tokio::time::timeout(STORE_DEADLINE, self.store.event_detail(id)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err("the database did not answer within 5 s".into()),
        }
    }

    /// What every page's frame needs: `visitor`'s form token (None without a session: then
    /// the page shows no buttons), and the language the browser prefers.
    fn chrome(&self, visitor: &Visitor, lang: Lang) -> pages::Chrome {
        let csrf = self.guard.csrf(visitor);
        pages::Chrome {
            logged_in: !self.guard.is_open() && csrf.is_some(),
            csrf,
            open_on: self.guard.is_open().then_some(self.listen).flatten(),
            lang,
        }
    }
}

/// A POST's `application/x-www-form-urlencoded` fields; None if it is too large or slow.
async fn read_form(body: Incoming) -> Option<Vec<(String, String)>> {
    let read = Limited::new(body, MAX_FORM_BYTES).collect();
    let bytes = tokio::time::timeout(STORE_DEADLINE, read)
        .await
        .ok()?
        .ok()?
        .to_bytes();
    Some(
        form_urlencoded::parse(&bytes)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
    )
}

fn field(form: &[(String, String)], name: &str) -> Option<String> {
    form.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

fn css() -> Answer {
    respond(StatusCode::OK, "text/css; charset=utf-8", STYLE)
}

fn logout() -> Answer {
    let mut r = redirect("/login");
    let gone = format!(
        "{}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0",
        auth::COOKIE
    );
    if let Ok(cookie) = HeaderValue::from_str(&gone) {
        r.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    r
}

fn not_allowed(allow: &'static str) -> Answer {
    let mut r = api::error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here");
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

fn not_found(api: bool, t: Lang) -> Answer {
    if api {
        api::error(StatusCode::NOT_FOUND, "not found")
    } else {
        vary(respond(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            format!("{}\n", t.say("Not found")),
        ))
    }
}

fn unavailable(why: &str) -> Answer {
    tracing::warn!(error = why, "status page: the store did not answer");
    api::error(
        StatusCode::SERVICE_UNAVAILABLE,
        "the database is not answering; try again",
    )
}
