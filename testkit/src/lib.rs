//! Dev-only test infrastructure for stacksync: real peers on loopback (Debian's `git daemon`),
//! a loopback Kubernetes API server held honest by the real kubectl (no real kube-apiserver can
//! be installed here), and fixture builders. Nothing here is a mock of a part that exists on
//! this machine.

pub mod apiserver;
pub mod git;
pub mod github;
pub mod private_git;
pub mod registry;
