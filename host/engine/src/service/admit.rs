//! Who may make a request, and whose requests they are: the rules of
//! [`super::peer`] applied to each request, and the tenant a caller's
//! decisions are confined to (see [`crate::tenant`]).

use std::collections::HashSet;
use std::sync::Mutex;

use super::peer::{self, Peer};
use super::{Caller, DaemonRequest};
use crate::tenant::Tenant;
use crate::{Error, Result, Toolgate};

/// An agent terminal: its session and terminal, each with when it began.
type TerminalKey = (u32, u64, u32, u64);

pub(super) struct Admission {
    /// Whether OS users other than the host's own may connect.
    shared_socket: bool,
    /// Agent terminals already written to the store.
    agent_terminals: Mutex<HashSet<TerminalKey>>,
}

impl Admission {
    pub(super) fn new(shared_socket: bool) -> Self {
        Self {
            shared_socket,
            agent_terminals: Mutex::default(),
        }
    }

    /// Whether OS users other than the host's own may connect (system
    /// mode, or a socket opened to others): then each is a tenant of its
    /// own, and a caller the kernel cannot name (HTTP) gets no decisions.
    fn serves_many_users(&self, host: &Toolgate) -> bool {
        self.shared_socket || host.with_config(|c| c.daemon.user.is_some())
    }

    /// Whose requests `caller` makes: by the kernel's word on a socket's
    /// peer. A caller without one was admitted only where the host serves
    /// one user, or for what is the same for everyone (see
    /// [`Admission::admit`]).
    pub(super) fn tenant_of(&self, host: &Toolgate, caller: Caller) -> Tenant {
        match caller {
            Caller::Socket(Some(peer)) => {
                let operator = peer.uid == toolgate_wire::peer::own_uid()
                    || host.with_config(|c| c.approvals.terminal_uids.contains(&peer.uid));
                Tenant::of_uid(peer.uid, operator)
            }
            Caller::InProcess | Caller::Socket(None) | Caller::Http => Tenant::Operator,
        }
    }

    /// Check who may make `request` (see [`peer`]); whether it came from
    /// outside this process.
    pub(super) fn admit(
        &self,
        host: &Toolgate,
        request: &DaemonRequest,
        caller: Caller,
    ) -> Result<bool> {
        let peer = match caller {
            Caller::Socket(peer) => peer,
            Caller::InProcess | Caller::Http => None,
        };
        let remote = !matches!(caller, Caller::InProcess);
        let unnamed = matches!(caller, Caller::Http | Caller::Socket(None));
        if unnamed && self.serves_many_users(host) && !crate::tenant::needs_no_tenant(request) {
            return Err(Error::Unauthorized(
                "this daemon serves several OS users, and only its socket says which one asks \
                 (the kernel's SO_PEERCRED): HTTP cannot. Decide over the socket (`toolgate \
                 hook`, the installed hooks), or resolve with a channel's token"
                    .into(),
            ));
        }
        let approvals = || host.config().approvals;
        let terminals = host.agent_terminals();
        match request {
            // Whoever asks for decisions is an agent's runtime: a hook, the
            // MCP gateway, or a process embedding toolgate (the Python and
            // Node packages). Its terminal session can never approve.
            DaemonRequest::Hook { .. }
            | DaemonRequest::Evaluate { .. }
            | DaemonRequest::Observe { .. }
            | DaemonRequest::CheckOutput { .. }
            | DaemonRequest::VisibleTools { .. } => {
                if let Some(peer) = &peer {
                    self.remember_agent_terminal(host, peer)?;
                }
            }
            DaemonRequest::Resolve { channel, token, .. } if remote => {
                if channel == peer::TERMINAL {
                    let command = "toolgate gates resolve";
                    peer::authorize_person(&approvals(), terminals, peer.as_ref(), command)?;
                } else {
                    peer::authorize_channel(&approvals(), channel, token.as_deref())?;
                }
            }
            DaemonRequest::Command { .. }
            | DaemonRequest::Reload
            | DaemonRequest::WebLogin
            | DaemonRequest::ClearFlows { .. }
                if remote =>
            {
                let command = match request {
                    DaemonRequest::Command { plugin, name, .. } => {
                        format!("toolgate command {plugin} {name}")
                    }
                    DaemonRequest::Reload => "toolgate plugins reload".into(),
                    DaemonRequest::ClearFlows { .. } => "toolgate flows clear".into(),
                    _ => "toolgate approvals open".into(),
                };
                peer::authorize_person(&approvals(), terminals, peer.as_ref(), &command)?;
            }
            _ => {}
        }
        Ok(remote)
    }

    /// Record (once per service) that an agent's hook came from `peer`'s
    /// session and terminal.
    fn remember_agent_terminal(&self, host: &Toolgate, peer: &Peer) -> Result<()> {
        let key = (peer.session, peer.session_born, peer.tty, peer.tty_born);
        if (peer.session, peer.tty) == (0, 0) {
            return Ok(());
        }
        let mut known = self
            .agent_terminals
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if known.insert(key)
            && let Err(err) = host
                .agent_terminals()
                .record_agent_terminals(&peer.terminal_keys())
        {
            known.remove(&key);
            return Err(err);
        }
        Ok(())
    }
}
