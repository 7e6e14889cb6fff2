//! Which resource serves a kind, and whether it is namespaced: asked of the API server once per
//! group-version per sync, and asked again after CRDs were applied.

use std::collections::HashMap;

use kube::Client;
use kube::api::ApiResource;
use kube::core::GroupVersion;
use kube::discovery::{Scope, pinned_group};

/// A resolved kind.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub resource: ApiResource,
    pub namespaced: bool,
}

/// Why a kind could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// The server does not serve the kind at that version (kubectl's wording).
    NoMatch(String),
    /// Discovery itself failed (the server's message): worth retrying later.
    Failed(String),
}

/// Discovery results of one sync, per `apiVersion`.
pub struct DiscoveryCache {
    client: Client,
    versions: HashMap<String, Result<Vec<Resolved>, Unresolved>>,
}

impl DiscoveryCache {
    pub fn new(client: Client) -> DiscoveryCache {
        DiscoveryCache { client, versions: HashMap::new() }
    }

    /// Forgets everything (after CRDs were applied, new kinds may be served).
    pub fn refresh(&mut self) {
        self.versions.clear();
    }

    /// The resource serving `kind` in `api_version`.
    ///
    /// # Errors
    /// [`Unresolved::NoMatch`] when the server does not serve it, [`Unresolved::Failed`] when
    /// discovery failed.
    pub async fn resolve(&mut self, api_version: &str, kind: &str) -> Result<Resolved, Unresolved> {
        let no_match = || Unresolved::NoMatch(format!("no matches for kind \"{kind}\" in version \"{api_version}\""));
        if !self.versions.contains_key(api_version) {
            let found = self.query(api_version).await;
            self.versions.insert(api_version.to_string(), found);
        }
        match self.versions.get(api_version) {
            Some(Ok(resources)) => resources.iter().find(|r| r.resource.kind == kind).cloned().ok_or_else(no_match),
            Some(Err(Unresolved::NoMatch(_))) | None => Err(no_match()),
            Some(Err(e)) => Err(e.clone()),
        }
    }

    async fn query(&self, api_version: &str) -> Result<Vec<Resolved>, Unresolved> {
        let gv: GroupVersion = api_version.parse().map_err(|_| Unresolved::NoMatch(format!("invalid apiVersion \"{api_version}\"")))?;
        match pinned_group(&self.client, &gv).await {
            Ok(group) => Ok(group
                .versioned_resources(&gv.version)
                .into_iter()
                .map(|(resource, caps)| Resolved { resource, namespaced: caps.scope == Scope::Namespaced })
                .collect()),
            Err(kube::Error::Api(status)) if status.code == 404 => Err(Unresolved::NoMatch(String::new())),
            Err(kube::Error::Api(status)) => Err(Unresolved::Failed(format!("discovering {api_version}: {}", status.message))),
            Err(e) => Err(Unresolved::Failed(format!("discovering {api_version}: {e}"))),
        }
    }
}
