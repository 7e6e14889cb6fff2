//! Runtime: logging set-up and the daemon loop that ties the scheduler, hot reload and passes
//! together until SIGTERM.

pub mod admin;
mod body;
pub mod daemon;
pub mod election;
pub mod hooks;
pub mod logging;
pub mod progress;
pub mod webhook;
