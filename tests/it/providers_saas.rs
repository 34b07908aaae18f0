//! SaaS providers end to end: the real server, each preset's requests, oracles where a library exists.

#[allow(unused_imports)]
use crate::support::*;
