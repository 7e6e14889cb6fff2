//! The targets: where a release is put in place and its status recorded. Each target is one
//! folder over the controller's shared core (`crate::controller`): `kubernetes/` (the per-Cluster
//! reconciler on kube-runtime's `Controller`) and `directory/` (rendered manifests and status
//! files in a directory).

pub mod directory;
pub mod kubernetes;
