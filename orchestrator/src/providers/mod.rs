//! Built-in providers.
pub mod scripted;
