//! Where an alert goes: the `[alerts]` command (run like a forward command: no shell, a
//! process group of its own, the secrets' variables removed from its environment, a timeout
//! after which the whole group is killed), the JSON on its stdin; and/or the `[alerts]` URL,
//! the JSON POSTed to it. An alert is sent when every configured sink took it.

use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::time::{Instant, timeout_at};

use crate::config::Alerts;

/// How much of a failing command's stderr the log line quotes.
const QUOTE_LIMIT: usize = 512;

/// The configured command and URL.
#[derive(Debug)]
pub struct Sink {
    command: Option<Vec<String>>,
    url: Option<Uri>,
    timeout: Duration,
    /// Variables of portaria's environment the command must not see (the secrets).
    hidden_env: Vec<String>,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Sink {
    pub fn new(config: &Alerts, hidden_env: Vec<String>) -> Sink {
        Sink {
            command: config.command.clone(),
            url: config.url.clone(),
            timeout: config.timeout,
            hidden_env,
            client: Client::builder(TokioExecutor::new()).build(HttpConnector::new()),
        }
    }

    /// Sends one alert's JSON to every sink; the first failure, with a loggable reason.
    pub async fn send(&self, json: &[u8]) -> Result<(), String> {
        if let Some(argv) = &self.command {
            self.run(argv, json).await?;
        }
        if let Some(url) = &self.url {
            self.post(url, json).await?;
        }
        Ok(())
    }

    async fn run(&self, argv: &[String], json: &[u8]) -> Result<(), String> {
        let Some((program, args)) = argv.split_first() else {
            return Err("no alert command configured".into());
        };
        let mut command = Command::new(program);
        for name in &self.hidden_env {
            command.env_remove(name);
        }
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| format!("could not start {program}: {e}"))?;
        // Killed, with whatever it started, if the timeout passes or this future is dropped
        // (shutdown) while it runs. Declared after `child`, so it drops first: the leader is
        // still unreaped then, and its pid (the group's id) cannot have been reused.
        let mut group = child.id().map(|pid| GroupKill { pid, armed: true });
        let deadline = Instant::now() + self.timeout;
        let mut stdin = child.stdin.take();
        let mut stderr = child.stderr.take();
        let work = async {
            if let Some(mut pipe) = stdin.take() {
                // A program that does not read its stdin is its own business.
                let _ = pipe.write_all(json).await;
                let _ = pipe.write_all(b"\n").await;
            }
            let mut said = Vec::new();
            if let Some(pipe) = stderr.as_mut() {
                let _ = pipe.take(QUOTE_LIMIT as u64).read_to_end(&mut said).await;
                let _ = tokio::io::copy(pipe, &mut tokio::io::sink()).await;
            }
            (child.wait().await, said)
        };
        let ended = timeout_at(deadline, work).await;
        if ended.is_ok()
            && let Some(group) = group.as_mut()
        {
            // It exited on its own: what it left running is its business (as for forwards).
            group.armed = false;
        }
        match ended {
            Err(_) => Err(format!(
                "{program} did not finish within {:?}; killed",
                self.timeout
            )),
            Ok((Err(e), _)) => Err(format!("waiting for {program}: {e}")),
            Ok((Ok(status), _)) if status.success() => Ok(()),
            Ok((Ok(status), said)) => {
                let said = String::from_utf8_lossy(&said);
                Err(format!("{program} failed ({status}): {}", said.trim()))
            }
        }
    }

    async fn post(&self, url: &Uri, json: &[u8]) -> Result<(), String> {
        let request = Request::builder()
            .method(Method::POST)
            .uri(url.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::copy_from_slice(json)))
            .map_err(|e| format!("could not build the request: {e}"))?;
        // Named without any user:password the URL may carry: this goes to the log.
        let shown = format!(
            "POST http://{}:{}{}",
            url.host().unwrap_or_default(),
            url.port_u16().unwrap_or(80),
            url.path()
        );
        let deadline = Instant::now() + self.timeout;
        let response = match timeout_at(deadline, self.client.request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Err(format!("{shown}: {e}")),
            Err(_) => return Err(format!("{shown}: no answer within {:?}", self.timeout)),
        };
        let status = response.status();
        let _ = timeout_at(deadline, response.into_body().collect()).await;
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("{shown}: HTTP {}", status.as_u16()))
        }
    }
}

/// SIGKILLs a process group when dropped while armed: the command timed out, or the alerts
/// task was stopped while it ran.
struct GroupKill {
    pid: u32,
    armed: bool,
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(pgid) = i32::try_from(self.pid) {
            // SAFETY: kill(2) with a negative pid signals that group; no memory is involved.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}
