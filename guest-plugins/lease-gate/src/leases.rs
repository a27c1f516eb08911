//! Capability leases: what a thread may do, for how long, how many times.
//! Pure functions here; `state` persists them.

use serde::{Deserialize, Serialize};
use toolgate_guest::glob;

use crate::catalogue::{Catalogue, Tier};

/// Which actions a lease grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Granted {
    /// Every action of the capability.
    All,
    /// These actions (names or glob patterns).
    Specific(Vec<String>),
}

impl Granted {
    /// Whether `action` is granted.
    pub fn covers(&self, action: &str) -> bool {
        match self {
            Granted::All => true,
            Granted::Specific(actions) => actions.iter().any(|a| glob::matches(a, action)),
        }
    }
}

/// A lease held by one thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Unique within the store.
    pub id: String,
    /// The thread holding it.
    pub thread: String,
    /// The capability it is for (a grouping name, e.g. `tools`).
    pub capability: String,
    /// The actions it grants.
    pub actions: Granted,
    /// When it was granted (ms since the epoch).
    pub granted_at_ms: u64,
    /// When it stops being valid (ms since the epoch).
    pub expires_at_ms: Option<u64>,
    /// How many uses it grants; none = unlimited.
    pub max_uses: Option<u64>,
    /// Why it was revoked, if it was.
    pub revoked: Option<String>,
    /// The lease it was derived from.
    pub parent: Option<String>,
}

impl Lease {
    /// Not revoked and not expired at `now_ms` (uses are counted apart).
    pub fn is_valid(&self, now_ms: u64) -> bool {
        self.revoked.is_none() && self.expires_at_ms.is_none_or(|at| now_ms < at)
    }
}

/// The child's grant from one parent lease: the intersection of the parent's
/// actions with the requested set. A wildcard parent gives exactly the
/// requested set, never a wildcard; no request copies the parent's grant.
/// `None` when the intersection is empty.
pub fn child_grant(parent: &Granted, requested: Option<&[String]>) -> Option<Granted> {
    match requested {
        None => Some(parent.clone()),
        Some(requested) => {
            let mut actions: Vec<String> = requested
                .iter()
                .filter(|action| parent.covers(action))
                .cloned()
                .collect();
            actions.sort();
            actions.dedup();
            (!actions.is_empty()).then_some(Granted::Specific(actions))
        }
    }
}

/// The leases a thread of `kind` starts with:
/// - `foreground` (a person is present): every action, approvals still apply;
/// - `mission`: every catalogue action except administrative ones;
/// - `research` and any other kind: read-only and standard actions only.
pub fn plan(kind: &str, catalogue: &Catalogue) -> Granted {
    let allowed: fn(Tier) -> bool = match kind {
        "foreground" => return Granted::All,
        "mission" => |tier| tier != Tier::Administrative,
        _ => |tier| tier <= Tier::Standard,
    };
    Granted::Specific(
        catalogue
            .tiers()
            .filter(|(_, tier)| allowed(*tier))
            .map(|(name, _)| name.to_string())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::catalogue::{ActionSpec, Approval, Effect};

    fn specific(actions: &[&str]) -> Granted {
        Granted::Specific(actions.iter().map(|a| a.to_string()).collect())
    }

    fn requested(actions: &[&str]) -> Vec<String> {
        actions.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn a_child_gets_the_intersection() {
        let parent = specific(&["read", "write", "delete"]);
        let child = child_grant(&parent, Some(&requested(&["write", "delete", "admin"]))).unwrap();
        assert!(child.covers("write") && child.covers("delete"));
        assert!(!child.covers("admin"), "never more than the parent");
        assert!(!child.covers("read"), "never more than requested");
    }

    #[test]
    fn a_wildcard_parent_gives_exactly_the_request() {
        let child = child_grant(&Granted::All, Some(&requested(&["read", "write"]))).unwrap();
        assert_eq!(child, specific(&["read", "write"]));
        assert!(!child.covers("delete"));
    }

    #[test]
    fn no_overlap_gives_nothing_and_no_request_copies_the_parent() {
        assert_eq!(
            child_grant(&specific(&["read"]), Some(&requested(&["write"]))),
            None
        );
        assert_eq!(
            child_grant(&specific(&["read"]), None),
            Some(specific(&["read"]))
        );
    }

    #[test]
    fn validity_checks_revocation_and_expiry() {
        let mut lease = Lease {
            id: "L1".into(),
            thread: "t".into(),
            capability: "tools".into(),
            actions: Granted::All,
            granted_at_ms: 0,
            expires_at_ms: Some(1_000),
            max_uses: None,
            revoked: None,
            parent: None,
        };
        assert!(lease.is_valid(999));
        assert!(!lease.is_valid(1_000));
        lease.expires_at_ms = None;
        lease.revoked = Some("done".into());
        assert!(!lease.is_valid(0));
    }

    fn catalogue() -> Catalogue {
        let mut entries = BTreeMap::new();
        let entry = |effects: &[Effect], approval| ActionSpec {
            effects: effects.to_vec(),
            approval,
            credential: None,
            administrative: false,
        };
        entries.insert(
            "echo".to_string(),
            entry(&[Effect::ReadLocal], Approval::Never),
        );
        entries.insert(
            "http".to_string(),
            entry(&[Effect::WriteExternal], Approval::Always),
        );
        entries.insert(
            "tool_install".to_string(),
            entry(&[Effect::WriteExternal], Approval::Always),
        );
        entries.insert(
            "routine_create".to_string(),
            entry(&[Effect::WriteLocal], Approval::Never),
        );
        Catalogue::new(&entries, None)
    }

    #[test]
    fn research_threads_get_no_privileged_or_administrative_actions() {
        let plan = plan("research", &catalogue());
        assert!(plan.covers("echo"));
        assert!(!plan.covers("http"));
        assert!(!plan.covers("tool_install"));
        assert!(!plan.covers("routine_create"));
        assert!(!plan.covers("some_unknown_tool"));
    }

    #[test]
    fn mission_threads_get_no_administrative_actions() {
        let plan = plan("mission", &catalogue());
        assert!(plan.covers("echo"));
        assert!(plan.covers("http"));
        assert!(!plan.covers("routine_create"));
    }

    #[test]
    fn foreground_threads_get_everything() {
        assert_eq!(plan("foreground", &catalogue()), Granted::All);
        assert!(
            !plan("anything-else", &catalogue()).covers("http"),
            "unknown kinds plan like research"
        );
    }
}
