//! The fault suite: one test per fault stacksync met in a hostile environment, each named after
//! what broke. docs/reliability.md lists every fault, what stacksync does about it, and the test
//! here that proves it.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on any unexpected error")]

#[path = "../common/mod.rs"]
mod common;

mod apply;
mod cache;
mod config;
mod controller;
mod directory;
mod kill;
mod network;
mod pins;
mod reload;
