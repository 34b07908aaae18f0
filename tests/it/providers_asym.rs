//! Asymmetric signatures (Ed25519, RS256 with a JWKS) end to end against the real server.

#[allow(unused_imports)]
use crate::support::*;
