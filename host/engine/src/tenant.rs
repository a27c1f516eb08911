//! Whose calls a caller may see and touch. One daemon may serve several
//! OS users (system mode); each of them is a tenant, named by the kernel
//! (`SO_PEERCRED`) and never by anything the caller says. A tenant's
//! requests are confined before anything reads them: its user becomes
//! `uid:N` and its sessions and threads `uid:N/…`, so every key built from
//! them (gates, approvals, leases, budgets, turns, events, the policies'
//! own state) is its own, whatever ids it names. A tenant naming another's
//! session id gets a session of its own by that name.
//!
//! The daemon's own user, root and the persons the operator named
//! (`[approvals] terminal_uids`) are the operator: their requests are taken
//! as they come, and they see every tenant.

use toolgate_wire::protocol::DaemonRequest;
use toolgate_wire::request::TENANT_PREFIX as PREFIX;
pub use toolgate_wire::request::owner_of_user;

use crate::hooks::{Event, EventKind};
use crate::request::{DEFAULT_USER_ID, ToolRequest};
use crate::{Error, Result};

/// Who is asking, as far as isolation goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tenant {
    /// This process, the daemon's own user, root or a person: sees and
    /// names everything.
    Operator,
    /// Another OS user, by uid: confined to what it made.
    User(u32),
}

impl Tenant {
    /// The user id its requests act for (`uid:N`); none for the operator,
    /// whose requests keep their own.
    pub fn user_id(self) -> Option<String> {
        match self {
            Self::Operator => None,
            Self::User(uid) => Some(format!("{PREFIX}{uid}")),
        }
    }

    /// `session` (or a thread) as this tenant's: `uid:N/session`.
    pub fn session(self, session: &str) -> String {
        match self {
            Self::Operator => session.to_string(),
            Self::User(uid) => format!("{PREFIX}{uid}/{session}"),
        }
    }

    /// `request` made this tenant's: its user, session and thread.
    pub fn confine(self, request: &mut ToolRequest) {
        let Some(user) = self.user_id() else {
            return;
        };
        // A user id of its own naming is kept below the tenant's, for
        // embedders that serve several people from one OS user.
        request.user_id = match request.user_id.as_str() {
            DEFAULT_USER_ID => user,
            own => format!("{user}/{own}"),
        };
        request.session_id = self.session(&request.session_id);
        request.thread_id = request.thread_id.as_deref().map(|t| self.session(t));
    }

    /// Whether this tenant may see what `user_id` owns.
    pub fn sees_user(self, user_id: &str) -> bool {
        match self {
            Self::Operator => true,
            Self::User(uid) => owner_of_user(user_id) == Some(uid),
        }
    }
}

impl Tenant {
    /// The tenant of OS user `uid`; `operator`: it is one of the users who
    /// see every tenant (the daemon's own, the persons named to approve),
    /// as root always is.
    pub fn of_uid(uid: u32, operator: bool) -> Self {
        match uid == 0 || operator {
            true => Self::Operator,
            false => Self::User(uid),
        }
    }

    /// Refuse (and log) ids written as a tenant's own are (`uid:N…`): a
    /// tenant never needs one, since toolgate adds its prefix itself, so
    /// such a request is aimed at another user's sessions.
    pub fn refuse_foreign<'a>(self, ids: impl IntoIterator<Item = &'a str>) -> Result<()> {
        let Self::User(uid) = self else {
            return Ok(());
        };
        match ids.into_iter().find(|id| id.starts_with(PREFIX)) {
            None => Ok(()),
            Some(id) => {
                tracing::warn!(uid, id, "a tenant named another user's id; refused");
                Err(Error::Unauthorized(format!(
                    "`{id}` names another user's session or user (ids starting `{PREFIX}` are \
                     toolgate's own for each user); name your own"
                )))
            }
        }
    }

    /// A runtime's hook `event` as this tenant may send it: the ids its
    /// call and session name refused if another tenant's, then made its own
    /// (the hook's side of [`Tenant::confine_request`]).
    pub fn confine_event(self, event: &mut Event) -> Result<()> {
        if self == Self::Operator {
            return Ok(());
        }
        let mut request = match &mut event.kind {
            EventKind::Decide { request, .. } | EventKind::Ran { request, .. } => Some(request),
            EventKind::Nothing | EventKind::NewTurn => None,
        };
        let named = request.iter().flat_map(|request| ids_of(request));
        self.refuse_foreign(named.chain([event.session.as_str()]))?;
        event.session = self.session(&event.session);
        if let Some(request) = request.as_mut() {
            self.confine(request);
        }
        Ok(())
    }

    /// `request` as this tenant may make it: the ids it names made its own,
    /// and what only the operator may read refused.
    pub fn confine_request(self, mut request: DaemonRequest) -> Result<DaemonRequest> {
        if self == Self::Operator {
            return Ok(request);
        }
        match &mut request {
            DaemonRequest::Evaluate { request }
            | DaemonRequest::Observe { request, .. }
            | DaemonRequest::CheckOutput { request, .. }
            | DaemonRequest::VisibleTools {
                caller: request, ..
            } => {
                self.refuse_foreign(ids_of(request))?;
                self.confine(request)
            }
            DaemonRequest::NextTurn { session } | DaemonRequest::Turn { session } => {
                self.refuse_foreign([session.as_str()])?;
                *session = self.session(session)
            }
            DaemonRequest::Log { .. }
            | DaemonRequest::Audit { .. }
            | DaemonRequest::Flows
            | DaemonRequest::ClearFlows { .. }
            | DaemonRequest::Events { .. }
            | DaemonRequest::StoreStats
            | DaemonRequest::Sweep => {
                return Err(Error::Unauthorized(
                    "the decision log, audit trail, flow labels, events and store are every user's: only the operator \
                     reads them (root, the daemon's user, or a person in [approvals] \
                     terminal_uids)"
                        .into(),
                ));
            }
            // A hook's event is confined as it is parsed (see `hooks`); a
            // gate list is filtered; the rest is the operator's alone
            // (authorized per connection) or the same for everyone.
            DaemonRequest::Hook { .. }
            | DaemonRequest::Gates { .. }
            | DaemonRequest::Resolve { .. }
            | DaemonRequest::Command { .. }
            | DaemonRequest::Reload
            | DaemonRequest::Plugins
            | DaemonRequest::Health
            | DaemonRequest::WebLogin
            | DaemonRequest::Metrics => {}
        }
        Ok(request)
    }
}

/// The ids of `request` a tenant could aim at another's.
pub fn ids_of(request: &ToolRequest) -> impl Iterator<Item = &str> {
    [
        Some(&request.user_id),
        Some(&request.session_id),
        request.thread_id.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(String::as_str)
}

/// Whether `request` may come from a caller no kernel names (HTTP): what
/// answers the same for everyone, or proves a person's channel itself (a
/// resolve with the channel's token).
pub fn needs_no_tenant(request: &DaemonRequest) -> bool {
    matches!(
        request,
        DaemonRequest::Resolve { .. }
            | DaemonRequest::Plugins
            | DaemonRequest::Health
            | DaemonRequest::Metrics
    )
}

/// The tenant part of a session id (`uid:N/`), empty for the operator's
/// sessions: events of one tenant's sessions are never shown to another's.
pub fn of_session(session: &str) -> &str {
    let Some(rest) = session.strip_prefix(PREFIX) else {
        return "";
    };
    match rest.split_once('/') {
        Some((uid, _)) if !uid.is_empty() && uid.bytes().all(|b| b.is_ascii_digit()) => {
            &session[..PREFIX.len() + uid.len() + 1]
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_names_only_its_own_users_and_sessions() {
        let mut request: ToolRequest = serde_json::from_value(serde_json::json!({
            "tool": "Write", "session_id": "s1", "thread_id": "t1"
        }))
        .unwrap();
        Tenant::User(1001).confine(&mut request);
        assert_eq!(request.user_id, "uid:1001");
        assert_eq!(request.session_id, "uid:1001/s1");
        assert_eq!(request.thread_id.as_deref(), Some("uid:1001/t1"));
        // Naming another tenant's session makes one of its own by that name.
        let mut forged = request.clone();
        forged.user_id = "uid:1002".into();
        forged.session_id = "uid:1002/s1".into();
        Tenant::User(1001).confine(&mut forged);
        assert_eq!(forged.user_id, "uid:1001/uid:1002");
        assert_eq!(forged.session_id, "uid:1001/uid:1002/s1");
        assert_eq!(of_session(&forged.session_id), "uid:1001/");
        assert_eq!(owner_of_user(&forged.user_id), Some(1001));
        assert!(Tenant::User(1001).sees_user(&forged.user_id));
        assert!(!Tenant::User(1002).sees_user(&forged.user_id));
        // The operator's requests stay as they are.
        let mut own = request.clone();
        own.user_id = "alice".into();
        Tenant::Operator.confine(&mut own);
        assert_eq!(own.user_id, "alice");
        assert_eq!(owner_of_user("alice"), None);
        assert_eq!(of_session("s1"), "");
        assert_eq!(of_session("uid:x/s1"), "");
        assert!(Tenant::Operator.sees_user("uid:1001"));
    }

    #[test]
    fn a_tenant_naming_another_users_ids_is_refused() {
        let forged = DaemonRequest::NextTurn {
            session: "uid:1002/s1".into(),
        };
        let err = Tenant::User(1001).confine_request(forged).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Unauthorized, "{err}");
        assert!(err.to_string().contains("uid:1002/s1"), "{err}");
        let own = DaemonRequest::NextTurn {
            session: "s1".into(),
        };
        assert!(Tenant::User(1001).confine_request(own).is_ok());
        assert!(Tenant::Operator.refuse_foreign(["uid:1002/s1"]).is_ok());
    }
}
