//! placeholder
pub mod standard_webhooks;
