//! Test helpers, the one place for what more than one test file needs: a real server on
//! 127.0.0.1:0 with a real SQLite file in a temp dir, the real binary when a test needs a
//! process to kill (`server`), configs written a table at a time (`config_text`), a tiny HTTP
//! client and a recording HTTP target (`http`),
//! signing helpers computed here independently of portaria's own code (`signing`), and
//! command targets that record their calls (`recorder`). Those are re-exported here, for
//! `use crate::support::*`. The rest is named where it is used: a throwaway PostgreSQL
//! (`pg_cluster`) and what the PostgreSQL tests share (`postgres`), one test body on either
//! engine with its deliveries read through the store API (`engine`), the providers' own
//! libraries as oracles (`oracle`), storage that fails on purpose (`faults`: a tmpfs to fill;
//! `refusing_fs`: a FUSE mount that turns read-only), HTTPS on loopback and a tunnel in front
//! of portaria (`tunnel`), and a small random generator (`rng`).
//!
//! No test file is a helper library for another: what two files share lives here.

#![allow(dead_code)]

pub mod config_text;
pub mod engine;
pub mod faults;
pub mod gateway;
pub mod http;
pub mod oracle;
pub mod pg_cluster;
pub mod postgres;
pub mod recorder;
pub mod refusing_fs;
pub mod rng;
pub mod server;
pub mod signing;
pub mod tunnel;

use std::time::{Duration, Instant};

pub use config_text::*;
pub use http::*;
pub use recorder::*;
pub use server::*;
pub use signing::*;

/// Polls `check` every 20 ms until it holds, or panics after `limit`.
pub async fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A loopback port held without listening: connections to it are refused, and no other socket
/// can take it meanwhile. (A port bound and freed at once is the next one `127.0.0.1:0` may hand
/// out: a server a test starts afterwards can land on it and answer where a refusal was meant.)
pub struct ClosedPort {
    socket: tokio::net::TcpSocket,
    pub addr: std::net::SocketAddr,
}

impl ClosedPort {
    pub fn new() -> ClosedPort {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind(([127, 0, 0, 1], 0).into())
            .expect("a loopback port");
        let addr = socket.local_addr().expect("its address");
        ClosedPort { socket, addr }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The port opens: from now on connections are accepted by the returned listener.
    pub fn listen(self) -> tokio::net::TcpListener {
        self.socket.listen(128).expect("listen on the held port")
    }
}
