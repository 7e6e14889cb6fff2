//! Dev-only test infrastructure for stacksync: real peers on loopback (Debian's `git daemon`),
//! a real Kubernetes control plane (`kube`, built from pinned Go modules), a loopback
//! Kubernetes API server of our own for injected faults and request counting (held honest by
//! the real kubectl and by a differential test against the real server), and fixture builders.

pub mod apiserver;
pub mod capi;
pub mod git;
pub mod github;
pub mod kube;
pub mod private_git;
pub mod registry;
