//! lease-gate: capability leases and human-in-the-loop pauses.
//!
//! A thread may run an action only under a valid lease covering it
//! ([`leases`]); a thread the gate has never seen receives the leases its
//! thread kind plans. Actions that need a person's approval or a credential
//! pause the call ([`gate`]); the host holds the pause as a pending gate and,
//! once a person resolves it from the right channel, the resubmitted call
//! carries the resolution and runs without pausing again. Fail-closed by
//! default: if this policy fails, the call is denied.

pub mod catalogue;
pub mod gate;
pub mod leases;

use std::collections::BTreeMap;

use catalogue::{ActionSpec, Catalogue};
use gate::{GateInput, GateOutcome};
use leases::{Granted, Lease};
use serde::Deserialize;
use toolgate_guest::host::{self, StateError, state};
use toolgate_guest::{
    BudgetStatus, Caller, Config, ConfigError, Decision, FailMode, FilterTools, Observe, Policy,
    PolicyInfo, Resolution, Risk, ToolCall, ToolDescriptor, ToolEvent, ToolOutcome,
};
use toolgate_guest::{action_name, action_name_of, state_key as key};

/// A state read: a store failure is an error, never "no lease".
type Read<T> = Result<T, StateError>;

/// The most leases one thread may hold (older ones are still honoured;
/// this bounds a scan).
const MAX_LEASES_PER_THREAD: u32 = 256;

/// The policy's config table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseGateConfig {
    /// Give a new thread the leases its kind plans.
    pub auto_plan: bool,
    /// The capability name planned leases are granted under.
    pub capability: String,
    /// Catalogue entries (action name or glob → spec), over the defaults.
    pub actions: BTreeMap<String, ActionSpec>,
    /// The spec for actions no entry names.
    pub unknown: Option<ActionSpec>,
}

impl Default for LeaseGateConfig {
    fn default() -> Self {
        Self {
            auto_plan: true,
            capability: "tools".into(),
            actions: BTreeMap::new(),
            unknown: None,
        }
    }
}

/// The policy: its config and the catalogue built from it.
pub struct LeaseGate {
    config: LeaseGateConfig,
    catalogue: Catalogue,
}

/// A state key from parts, each escaped so no id can reach into another's
/// keys.
/// (uses taken, uses refunded) of a lease, read in one host call.
fn use_counters(lease_id: &str) -> Read<(u64, u64)> {
    let keys = [key(&["uses", lease_id]), key(&["refunds", lease_id])];
    let counter = |value: Option<Vec<u8>>| {
        value
            .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
            .map_or(0, u64::from_le_bytes)
    };
    let mut values = state::get_many(&keys)?.into_iter();
    Ok((
        counter(values.next().flatten()),
        counter(values.next().flatten()),
    ))
}

/// The id of the lease a thread's kind plans.
const PLANNED_LEASE: &str = "planned";

impl LeaseGate {
    /// A thread's leases: their keys, then every value in one host call.
    fn leases_of(&self, thread: &str) -> Read<Vec<Lease>> {
        let keys = state::keys(
            &format!("{}/", key(&["lease", thread])),
            MAX_LEASES_PER_THREAD,
        )?;
        Ok(state::get_many(&keys)?
            .into_iter()
            .flatten()
            .filter_map(|bytes| serde_json::from_slice(&bytes).ok())
            .collect())
    }

    fn uses_left(lease: &Lease) -> Read<bool> {
        let Some(max) = lease.max_uses else {
            return Ok(true); // unlimited: no need to read the counter
        };
        let (taken, refunded) = use_counters(&lease.id)?;
        Ok(taken.saturating_sub(refunded) < max)
    }

    /// Take one use of `lease` for call `call_id`, atomically (concurrent
    /// calls cannot overspend it). Uses refunded by denied calls count as
    /// free again; reading a stale refund count can only refuse, never
    /// overspend.
    fn take_use(lease: &Lease, max: u64, call_id: &str) -> Read<bool> {
        let (_, refunded) = use_counters(&lease.id)?;
        let taken = state::try_increment(&key(&["uses", &lease.id]), max.saturating_add(refunded))?;
        if taken.is_none() {
            return Ok(false);
        }
        // Remember which lease this call used, to refund it if a later
        // policy denies the call.
        state::set(&key(&["reserved", call_id]), lease.id.as_bytes())?;
        Ok(true)
    }

    /// A later policy denied `call_id`: give back the use it took (once).
    fn refund_use(call_id: &str) -> Read<()> {
        let reserved = key(&["reserved", call_id]);
        let Some(lease_id) = state::get(&reserved)?.and_then(|b| String::from_utf8(b).ok()) else {
            return Ok(());
        };
        // Exactly one refund per call, however often it is reported.
        if state::try_increment(&key(&["refund-once", call_id]), 1)?.is_some() {
            state::try_increment(&key(&["refunds", &lease_id]), u64::MAX)?;
        }
        state::delete(&reserved)
    }

    /// The lease a new thread of `kind` starts with when `auto_plan` is
    /// on: the catalogue's plan for that kind, unlimited.
    fn planned_lease(&self, thread: &str, kind: &str) -> Lease {
        Lease {
            id: PLANNED_LEASE.into(),
            thread: thread.to_string(),
            capability: self.config.capability.clone(),
            actions: leases::plan(kind, &self.catalogue),
            granted_at_ms: host::now_ms(),
            expires_at_ms: None,
            max_uses: None,
            revoked: None,
            parent: None,
        }
    }

    /// `thread`'s leases for the `visibility` phase, which writes nothing:
    /// for a thread never seen, the lease its kind would be planned, in
    /// memory only.
    fn leases_for_listing(&self, thread: &str, kind: &str) -> Read<Vec<Lease>> {
        let mut leases = self.leases_of(thread)?;
        let planned = leases.iter().any(|lease| lease.id == PLANNED_LEASE);
        if self.config.auto_plan && !planned && state::get(&key(&["planned", thread]))?.is_none() {
            leases.push(self.planned_lease(thread, kind));
        }
        Ok(leases)
    }

    /// For each tool, whether a lease of the caller's thread could let it
    /// run: a tool none covers is refused whatever else happens, so it is
    /// not offered.
    fn visible_with_store(&self, caller: &Caller, tools: &[ToolDescriptor]) -> Read<Vec<bool>> {
        let leases = self.leases_for_listing(&caller.thread_id, &caller.thread_kind)?;
        let now = host::now_ms();
        let mut usable = Vec::new();
        for lease in leases {
            if lease.is_valid(now) && Self::uses_left(&lease)? {
                usable.push(lease);
            }
        }
        Ok(tools
            .iter()
            .map(|tool| {
                let action = action_name_of(&tool.name, &tool.origin);
                usable.iter().any(|lease| lease.actions.covers(&action))
            })
            .collect())
    }

    /// A valid lease of `thread` covering `action` with a use left.
    fn find_lease(&self, thread: &str, action: &str) -> Read<Option<Lease>> {
        let now = host::now_ms();
        for lease in self.leases_of(thread)? {
            if lease.is_valid(now) && lease.actions.covers(action) && Self::uses_left(&lease)? {
                return Ok(Some(lease));
            }
        }
        Ok(None)
    }

    fn grant(
        &self,
        thread: &str,
        capability: &str,
        actions: Granted,
        expires_in_ms: Option<i64>,
        max_uses: Option<u64>,
        parent: Option<String>,
    ) -> Result<Lease, String> {
        let now = host::now_ms();
        let expires_at_ms = match expires_in_ms {
            Some(ms) if ms <= 0 => {
                return Err(format!("a lease must last a positive time, not {ms} ms"));
            }
            Some(ms) => Some(now.saturating_add(ms as u64)),
            None => None,
        };
        if max_uses == Some(0) {
            return Err("max_uses must be at least 1".into());
        }
        let seq = state::try_increment("seq", u64::MAX)
            .map_err(|e| format!("cannot allocate a lease id: {e:?}"))?
            .ok_or("lease ids exhausted")?;
        let lease = Lease {
            id: format!("L{seq}"),
            thread: thread.to_string(),
            capability: capability.to_string(),
            actions,
            granted_at_ms: now,
            expires_at_ms,
            max_uses,
            revoked: None,
            parent,
        };
        state::set_json(&key(&["lease", thread, &lease.id]), &lease)
            .map_err(|e| format!("cannot store the lease: {e:?}"))?;
        Ok(lease)
    }

    /// Give a thread seen for the first time the leases its kind plans
    /// (`planned`: its marker was already read, in the call's first read).
    fn ensure_planned(&self, thread: &str, kind: &str, planned: bool) -> Read<()> {
        if !self.config.auto_plan || planned {
            return Ok(());
        }
        // Every first call of a new thread writes the same planned lease (an
        // idempotent write, under a fixed id) before it looks for a lease,
        // so of several concurrent first calls none finds the thread bare.
        let lease_key = key(&["lease", thread, PLANNED_LEASE]);
        if state::get(&lease_key)?.is_none() {
            let lease = self.planned_lease(thread, kind);
            state::set_json(&lease_key, &lease)?;
        }
        state::try_increment(&key(&["planned", thread]), 1)?;
        Ok(())
    }

    /// The actions a person approved "always" for this user's thread.
    fn parse_auto_approved(value: Option<Vec<u8>>) -> Vec<String> {
        value
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    fn remember_always(set: &mut Vec<String>, user: &str, thread: &str, action: &str) -> Read<()> {
        if !set.iter().any(|a| a == action) {
            set.push(action.to_string());
            state::set_json(&key(&["auto", user, thread]), set)?;
        }
        Ok(())
    }

    fn credential_key(user: &str, name: &str) -> String {
        key(&["credential", user, name])
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantArgs {
    thread: String,
    #[serde(default)]
    capability: Option<String>,
    /// A list of action names or patterns, or `"*"` for all.
    actions: serde_json::Value,
    #[serde(default)]
    expires_in_ms: Option<i64>,
    #[serde(default)]
    max_uses: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RevokeArgs {
    thread: String,
    lease: String,
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ThreadArgs {
    thread: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeriveArgs {
    parent: String,
    child: String,
    #[serde(default)]
    actions: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanArgs {
    thread_kind: String,
}

fn parse<T: serde::de::DeserializeOwned>(command: &str, args: &str) -> Result<T, String> {
    serde_json::from_str(args).map_err(|e| format!("bad arguments for {command}: {e}"))
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, String> {
    serde_json::to_string(value).map_err(|e| e.to_string())
}

impl Policy for LeaseGate {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: "lease-gate".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "capability leases per thread; approval and credential pauses".into(),
            default_fail_mode: FailMode::Closed,
            commands: [
                "lease-grant",
                "lease-revoke",
                "lease-list",
                "lease-derive",
                "plan",
            ]
            .map(String::from)
            .to_vec(),
        }
    }

    fn open(config: Config) -> Result<Self, ConfigError> {
        let config: LeaseGateConfig = config.parse()?;
        let catalogue = Catalogue::new(&config.actions, config.unknown.clone());
        Ok(Self { config, catalogue })
    }

    fn decide(&self, call: &ToolCall, _risk: &Risk, _budget: &BudgetStatus) -> Decision {
        // Fail closed: without its store the gate cannot know of any lease.
        self.decide_with_store(call).unwrap_or_else(|err| {
            host::log(host::Level::Error, &format!("lease store failed: {err:?}"));
            Decision::deny(
                "lease-gate cannot read its leases right now (the store failed); try again shortly",
            )
        })
    }

    fn command(&self, name: &str, args: &str) -> Result<String, String> {
        let store_failed = |err: StateError| format!("the lease store failed: {err:?}");
        match name {
            "lease-grant" => {
                let a: GrantArgs = parse(name, args)?;
                let actions = match &a.actions {
                    serde_json::Value::String(s) if s == "*" => Granted::All,
                    value => Granted::Specific(
                        serde_json::from_value(value.clone())
                            .map_err(|_| "actions must be \"*\" or a list of action names")?,
                    ),
                };
                let capability = a.capability.as_deref().unwrap_or(&self.config.capability);
                json(&self.grant(
                    &a.thread,
                    capability,
                    actions,
                    a.expires_in_ms,
                    a.max_uses,
                    None,
                )?)
            }
            "lease-revoke" => {
                let a: RevokeArgs = parse(name, args)?;
                let slot = key(&["lease", &a.thread, &a.lease]);
                let mut lease: Lease = state::get_json(&slot)
                    .map_err(store_failed)?
                    .ok_or_else(|| format!("thread `{}` has no lease `{}`", a.thread, a.lease))?;
                lease.revoked = Some(a.reason);
                state::set_json(&slot, &lease).map_err(|e| format!("{e:?}"))?;
                json(&lease)
            }
            "lease-list" => {
                let a: ThreadArgs = parse(name, args)?;
                json(&self.leases_of(&a.thread).map_err(store_failed)?)
            }
            "lease-derive" => {
                let a: DeriveArgs = parse(name, args)?;
                let now = host::now_ms();
                let mut children = Vec::new();
                let parents = self.leases_of(&a.parent).map_err(store_failed)?;
                for parent in parents.iter().filter(|l| l.is_valid(now)) {
                    if let Some(grant) = leases::child_grant(&parent.actions, a.actions.as_deref())
                    {
                        let remaining =
                            parent.expires_at_ms.map(|at| at.saturating_sub(now) as i64);
                        children.push(self.grant(
                            &a.child,
                            &parent.capability,
                            grant,
                            remaining,
                            parent.max_uses,
                            Some(parent.id.clone()),
                        )?);
                    }
                }
                json(&children)
            }
            "plan" => {
                let a: PlanArgs = parse(name, args)?;
                let tiers: BTreeMap<&str, catalogue::Tier> = self.catalogue.tiers().collect();
                json(&serde_json::json!({
                    "thread_kind": a.thread_kind,
                    "grants": leases::plan(&a.thread_kind, &self.catalogue),
                    "tiers": tiers,
                }))
            }
            other => Err(format!(
                "lease-gate has no command `{other}`; it has lease-grant, lease-revoke, \
                 lease-list, lease-derive, plan"
            )),
        }
    }
}

impl LeaseGate {
    /// The decision, with every state read checked.
    fn decide_with_store(&self, call: &ToolCall) -> Read<Decision> {
        let caller = &call.caller;
        let (user, thread) = (caller.user_id.as_str(), caller.thread_id.as_str());
        let action = action_name(call);
        let spec = self.catalogue.spec(&action);
        // What every call reads, in one host call: whether the thread was
        // planned, and what a person approved "always" in it.
        let mut first =
            state::get_many(&[key(&["planned", thread]), key(&["auto", user, thread])])?
                .into_iter();
        let planned = first.next().flatten().is_some();
        let mut auto_approved = Self::parse_auto_approved(first.next().flatten());
        self.ensure_planned(thread, &caller.thread_kind, planned)?;

        let mut approved_now = false;
        let mut credential_present = match &spec.credential {
            Some(c) => state::get(&Self::credential_key(user, &c.name))?.is_some(),
            None => false,
        };
        for resolution in &call.resolutions {
            match resolution {
                Resolution::Approved(grant) => {
                    approved_now = true;
                    if grant.always && spec.approval == catalogue::Approval::UnlessAutoApproved {
                        Self::remember_always(&mut auto_approved, user, thread, &action)?;
                    }
                }
                Resolution::Authenticated(name) => {
                    if spec.credential.as_ref().is_some_and(|c| &c.name == name) {
                        state::set(&Self::credential_key(user, name), b"on file")?;
                        credential_present = true;
                    }
                }
            }
        }

        let lease = self.find_lease(thread, &action)?;
        let preview: String = call.arguments.chars().take(200).collect();
        let outcome = gate::evaluate(&GateInput {
            action: &action,
            spec,
            thread,
            has_lease: lease.is_some(),
            mode: caller.mode,
            auto_approved: auto_approved.contains(&action),
            approved_now,
            credential_present,
            preview: &preview,
        });
        Ok(match outcome {
            GateOutcome::Allow => {
                let lease = lease.expect("allow implies a lease");
                if let Some(max) = lease.max_uses
                    && !Self::take_use(&lease, max, &call.call_id)?
                {
                    return Ok(Decision::deny(format!(
                        "lease {} for `{action}` is used up ({max} uses)",
                        lease.id
                    )));
                }
                Decision::allow()
            }
            GateOutcome::Deny(reason) => Decision::deny(reason),
            GateOutcome::PauseForApproval {
                description,
                allow_always,
            } => Decision::pause_for_approval(description, allow_always),
            GateOutcome::PauseForCredential(c) => {
                Decision::pause_for_credential(c.name, c.instructions, c.url)
            }
        })
    }
}

impl Observe for LeaseGate {
    fn observe(&self, event: &ToolEvent) {
        let call_id = &event.call.call_id;
        let done = if event.outcome == ToolOutcome::Denied {
            Self::refund_use(call_id)
        } else {
            state::delete(&key(&["reserved", call_id]))
        };
        if let Err(err) = done {
            host::log(
                host::Level::Warn,
                &format!("lease bookkeeping failed: {err:?}"),
            );
        }
    }
}

impl FilterTools for LeaseGate {
    /// Fail closed: without its store the gate knows of no lease, so it
    /// would refuse every call; it offers no tool either.
    fn visible(&self, caller: &Caller, tools: &[ToolDescriptor]) -> Vec<bool> {
        self.visible_with_store(caller, tools)
            .unwrap_or_else(|err| {
                host::log(host::Level::Error, &format!("lease store failed: {err:?}"));
                vec![false; tools.len()]
            })
    }
}

toolgate_guest::export_policy!(LeaseGate, observe, filter_tools);
