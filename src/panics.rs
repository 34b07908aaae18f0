//! What a panic does in `portaria serve`: it ends the process with status 70, so that
//! systemd (`Restart=on-failure`) starts it again, after one error log line naming the task
//! that panicked. A release build aborts on any panic anyway (`panic = "abort"`); the hook
//! makes the debug build behave the same and names the task in the log, flushed before the
//! exit. A background task half dead would be worse than a restart: the worker silently
//! stopped leaves the queue unserved, the writer thread gone leaves intake answering 503
//! forever. Restarting is safe: every acknowledged event is in the database, and
//! `Store::recover` puts interrupted deliveries back in the queue.
//!
//! Tokio tasks name themselves with [`named`] (a task-local); the store's threads are known
//! by their thread names (`portaria-writer`, `portaria-checkpoint`).

use std::future::Future;

tokio::task_local! {
    static TASK: &'static str;
}

/// The exit status after a panic (EX_SOFTWARE).
pub const EXIT_STATUS: i32 = 70;

/// Runs `task` as the background task `name`, for the panic hook's log line.
pub fn named<F: Future>(name: &'static str, task: F) -> impl Future<Output = F::Output> {
    TASK.scope(name, task)
}

/// What was running where the panic happened.
fn which() -> String {
    if let Ok(name) = TASK.try_with(|name| *name) {
        return name.to_string();
    }
    match std::thread::current().name() {
        Some("portaria-writer") => "writer thread".into(),
        Some("portaria-checkpoint") => "checkpoint thread".into(),
        Some(name) => format!("thread {name}"),
        None => "an unnamed thread".into(),
    }
}

/// Installs the hook: the default report (message and location) on stderr, an error log line
/// naming the task, `flush` (the log buffer), then exit with [`EXIT_STATUS`].
pub fn exit_on_panic(flush: impl Fn() + Send + Sync + 'static) {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        let task = which();
        let location = info
            .location()
            .map_or_else(String::new, |l| format!("{}:{}", l.file(), l.line()));
        tracing::error!(
            task,
            location,
            "a task panicked; exiting so that the service manager restarts portaria"
        );
        flush();
        std::process::exit(EXIT_STATUS);
    }));
}
