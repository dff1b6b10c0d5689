//! Built-in providers.
pub mod command;
pub mod dry_run;
pub mod openai;
pub mod router;
pub mod scripted;
