//! Dev-only test infrastructure for stacksync: real peers on loopback (Debian's `git daemon`)
//! and fixture builders. Nothing here is a mock of a part that exists on this machine.

pub mod git;
