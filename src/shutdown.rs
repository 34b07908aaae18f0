//! One cancellation signal, passed down to every task (never global): the server's accept
//! loop, each connection, and the forwarding worker all listen to the same [`Shutdown`]. One
//! `Trigger` fires it: SIGTERM or SIGINT in the binary, the test itself in tests.

use tokio::sync::watch;

/// The sending side, held by whoever decides that it is time to stop.
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

/// A listener for the signal. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Shutdown(rx))
}

impl Trigger {
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    pub fn is_fired(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the signal has fired (or its trigger is gone).
    pub async fn fired(&mut self) {
        let _ = self.0.wait_for(|fired| *fired).await;
    }
}

/// Resolves on SIGTERM (what systemd sends) or SIGINT (Ctrl-C). The handlers are installed
/// when this is called (inside the runtime), not when the future is first polled: a SIGTERM
/// that comes right after `READY=1` must find them in place, or it would kill the process
/// without a graceful stop.
pub fn os_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let handlers = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        );
        async move {
            match handlers {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
                        _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
