//! The no-op resync in O(kinds): one LIST per kind, selected by our owner label, decides that an
//! object whose manifest did not change needs no request of its own.
//!
//! Why that is enough: under server-side apply, any write by another manager that changes one
//! of the fields we apply moves that field's ownership away from us (an update takes it, a
//! forced apply takes it, a delete and re-create drops our entry). So when the listed object
//! still shows exactly the `managedFields` FieldsV1 our manager had right after our last apply
//! (its hash is in the inventory), and the manifest's digest is the one we applied, the dry-run
//! would find nothing to change. Anything else — a different digest, a different hash, an object
//! missing from the list (deleted, or our owner label changed), a failed list, an object being
//! deleted — goes through the full read / dry-run / compare path for that object only.

use std::collections::HashMap;

use kube::api::{ApiResource, DynamicObject, ListParams};

use super::Applier;
use super::answer::{self, Seen};
use super::object::{Outcome, Policy, Target};
use crate::{Action, SkipReason};

/// Items per LIST page: bounds each response however many objects one owner has.
const PAGE: u32 = 500;
/// Pages per list; an owner with more objects of one kind than this takes the full path.
const MAX_PAGES: usize = 100;

/// The owner's objects of one kind by namespace (empty for cluster-scoped ones), then name;
/// `None` when the list failed. Looked up by `&str`, without building a key per object.
pub(super) type Listing = Option<HashMap<String, HashMap<String, Seen>>>;

/// Listings of one sync, by `(group, plural)`: each kind is listed at most once. A sync has a
/// handful of kinds, so a list searched in place beats a map keyed by owned strings.
#[derive(Default)]
pub(super) struct Listings(Vec<((String, String), Listing)>);

/// Where a kind's list looks: in one namespace when every object of the kind the previous sync
/// recorded lives there (the narrowest permission), otherwise in all namespaces.
pub(super) type Scopes<'a> = HashMap<(&'a str, &'a str), Option<&'a str>>;

impl Listings {
    fn get(&self, resource: &ApiResource) -> Option<&Listing> {
        self.0.iter().find(|((g, p), _)| *g == resource.group && *p == resource.plural).map(|(_, l)| l)
    }
}

impl Target<'_> {
    /// Whether the listing may decide this object: an applied manifest that did not change
    /// since the apply whose ownership we recorded (or an apply-once object, which only needs
    /// to exist).
    /// Whether no sync applied this object yet (policy `apply`): if the listing of its kind does
    /// not show it, it is applied at once ([`Applier::apply_new`]).
    pub(super) fn is_new(&self) -> bool {
        self.policy == Policy::Apply && self.previous_digest.is_none()
    }

    pub(super) fn may_skip(&self) -> bool {
        match self.policy {
            Policy::ApplyOnce => true,
            Policy::Apply => {
                self.previous_digest.as_deref() == Some(self.inventory.digest.as_str())
                    && self.previous_fields.as_deref().is_some_and(|f| !f.is_empty())
            }
            Policy::Ignore => false,
        }
    }
}

impl Applier {
    /// Lists, once per sync, the kind of every target the listing may decide, and of every
    /// target new to the inventory (the listing tells whether it is already there as ours).
    pub(super) async fn list_kinds(&self, targets: &[&Target<'_>], scopes: &Scopes<'_>, listings: &mut Listings) {
        for t in targets.iter().filter(|t| t.may_skip() || t.is_new()) {
            if listings.get(&t.resource).is_some() {
                continue;
            }
            let scope = match scopes.get(&(t.inventory.group.as_str(), t.inventory.kind.as_str())) {
                Some(scope) => *scope,
                // A kind the previous sync did not have: the one namespace of this rank's
                // objects of the kind, if they share one.
                None => {
                    let mut of_kind = targets.iter().filter(|o| o.resource == t.resource).map(|o| o.inventory.namespace.as_deref());
                    let first = of_kind.next().flatten();
                    of_kind.all(|ns| ns == first).then_some(first).flatten()
                }
            };
            let listing = self.list_owned(&t.resource, t.inventory.namespace.as_deref().and(scope)).await;
            listings.0.push(((t.resource.group.clone(), t.resource.plural.clone()), listing));
        }
    }

    /// Whether a target new to the inventory may be applied at once: the listing of its kind
    /// worked and does not show it (an object already there with our owner label, say after
    /// the inventory was lost, takes the full path, which finds it Unchanged).
    pub(super) fn absent_from_listing(&self, t: &Target<'_>, listings: &Listings) -> bool {
        t.is_new()
            && listings
                .get(&t.resource)
                .and_then(Option::as_ref)
                .is_some_and(|l| find(l, t.inventory.namespace.as_deref(), &t.object.name).is_none())
    }

    /// Every object of one kind carrying our owner label, in `namespace` or everywhere. Only the
    /// few fields [`Seen`] is made of are read of each item.
    async fn list_owned(&self, resource: &ApiResource, namespace: Option<&str>) -> Listing {
        let url = <DynamicObject as kube::Resource>::url_path(resource, namespace);
        let selector = format!("{}={}", self.options.manager.owner_label(), self.owner_value);
        let mut params = ListParams::default().labels(&selector).limit(PAGE);
        let mut found = HashMap::new();
        for _ in 0..MAX_PAGES {
            let request = match kube::core::Request::new(&url).list(&params) {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(kind = %resource.kind, error = %e, "listing our objects failed; checking each object instead");
                    return None;
                }
            };
            let page = match tokio::time::timeout(self.options.request_timeout, self.send(request)).await {
                Ok(Ok((bytes, _))) => answer::page(&bytes, &resource.api_version, &resource.kind, self.options.manager.field_manager()),
                Ok(Err(e)) => {
                    tracing::debug!(kind = %resource.kind, error = %e, "listing our objects failed; checking each object instead");
                    return None;
                }
                Err(_) => {
                    tracing::debug!(kind = %resource.kind, "listing our objects timed out; checking each object instead");
                    return None;
                }
            };
            let (items, next) = match page {
                Ok(Some(page)) => page,
                Ok(None) => {
                    tracing::debug!(kind = %resource.kind, "a list without items; checking each object instead");
                    return None;
                }
                Err(e) => {
                    tracing::debug!(kind = %resource.kind, error = %e, "a list that is no JSON; checking each object instead");
                    return None;
                }
            };
            for seen in items {
                let names: &mut HashMap<String, Seen> = found.entry(seen.namespace.clone().unwrap_or_default()).or_default();
                names.insert(seen.name.clone(), seen);
            }
            match next {
                Some(token) => params = params.continue_token(&token),
                None => return Some(found),
            }
        }
        tracing::debug!(kind = %resource.kind, "too many of our objects to list; checking each object instead");
        None
    }

    /// The outcome the listing proves, if it proves one; `None`: take the full path.
    pub(super) fn decided_by_listing(&self, t: &Target<'_>, listings: &Listings) -> Option<Outcome> {
        // A rotation writes the generated values the digest leaves out.
        if !t.may_skip() || (self.options.rotate_generated && !t.generated.is_empty()) {
            return None;
        }
        let listed = find(listings.get(&t.resource)?.as_ref()?, t.inventory.namespace.as_deref(), &t.object.name)?;
        if listed.deleting {
            return None;
        }
        let outcome = match t.policy {
            Policy::ApplyOnce => Outcome::new(&t.entry, Action::Skipped(SkipReason::ApplyOnceExists), crate::changeset::SKIPPED_APPLY_ONCE),
            _ if listed.fields.is_none() || listed.fields != t.previous_fields => return None,
            // A CRD's kinds are only served once it is Established; the full path waits for that.
            _ if super::is_crd(t.object.group(), &t.object.kind) && !listed.established => return None,
            _ => Outcome::new(&t.entry, Action::Unchanged, ""),
        };
        Some(Outcome { health: Some(listed.health.clone()), fields: t.previous_fields.clone(), ..outcome })
    }
}

fn find<'a>(listing: &'a HashMap<String, HashMap<String, Seen>>, namespace: Option<&str>, name: &str) -> Option<&'a Seen> {
    listing.get(namespace.unwrap_or_default())?.get(name)
}
