//! Built-in providers.
pub mod dry_run;
pub mod scripted;
