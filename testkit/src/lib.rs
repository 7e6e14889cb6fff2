//! Dev-only test infrastructure for stacksync: real peers on loopback (Debian's `git daemon`),
//! a real Kubernetes control plane (`kube`, built from pinned Go modules) and Cluster API on it,
//! and fixture builders. The loopback API server of our own, for injected faults and request
//! counting, is its own crate, `fake-apiserver`; this crate's binary serves it as `testkit apiserver`.

pub mod capi;
pub mod git;
pub mod github;
pub mod kube;
pub mod private_git;
pub mod providers;
pub mod registry;
