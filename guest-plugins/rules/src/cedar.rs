//! Cedar policies, for what the TOML rules cannot say: the operator writes
//! them in the config (`cedar = '''…'''`), and each call becomes a Cedar
//! request evaluated inside this policy's sandbox by the `cedar-policy`
//! crate.
//!
//! The request:
//! - `principal`: `User::"<user id>"`;
//! - `action`: `Action::"<action name>"` — `Action::"Bash"`,
//!   `Action::"mcp:github/create_issue"` — in its groups: `Action::"mcp:github"`
//!   then `Action::"mcp"` for an MCP tool, `Action::"builtin"` for a built-in
//!   one, `Action::"other:NAME"` then `Action::"other"` for a tool of another
//!   origin (`action in Action::"mcp:github"` is every tool of that server);
//! - `resource`: `Session::"<session id>"`;
//! - `context`: `tool`, `server` (`""` for a built-in tool), `arguments` (the
//!   call's JSON arguments as a record: `null`s dropped, numbers that are not
//!   64-bit integers as strings, Cedar's own escape keys `__entity`, `__extn`
//!   and `__expr` dropped), `mode`, `is_subagent`, `thread_kind`, `channel`,
//!   `turn`, `context_tokens` (when the runtime reports it), and, for the
//!   actions a policy reading `context.calls` covers, `calls.turn` and
//!   `calls.session`: this action's calls in this turn and session, this one
//!   included, counted atomically in the policy's state.
//!
//! The answer: a satisfied `forbid` denies, with its `@reason("…")` (the
//! agent reads it), and so does a `forbid` that cannot be evaluated on this
//! call (an attribute of the wrong type, say): a rule that cannot be checked
//! fails closed. Otherwise a satisfied `permit` allows, or, with
//! `@ask("…")`, asks a person first (denied when no person is present). The
//! deciding policies' `@note("…")`s go to the agent. Nothing satisfied is an
//! abstention: Cedar's default deny is not toolgate's. Where several
//! policies decide, the first written speaks.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;

use cedar_policy::{
    ActionConstraint, Authorizer, Context, Decision as CedarDecision, Effect, Entities, Entity,
    EntityId, EntityTypeName, EntityUid, PolicyId, PolicySet, Request, Response,
};
use serde_json::{Map, Value, json};
use toolgate_guest::host::StateError;
use toolgate_guest::{ConfigError, ExecutionMode, ToolCall, ToolOrigin, state_key};

use crate::Memory;

/// The config key the policies are written under.
pub const KEY: &str = "cedar";

/// How deep an argument's JSON is carried into the context; deeper values
/// arrive as their JSON text.
const MAX_DEPTH: usize = 16;

/// The operator's Cedar policies, parsed once in `open`.
pub struct CedarPolicies {
    policies: PolicySet,
    authorizer: Authorizer,
    /// Each policy's place in the text: where several decide, the first
    /// written speaks.
    order: HashMap<PolicyId, usize>,
    /// The actions of the policies that read `context.calls`: only their
    /// calls are counted.
    counted: Vec<ActionConstraint>,
}

/// What the policies say.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// No policy is satisfied: no opinion.
    Abstain,
    Allow {
        notes: Vec<String>,
    },
    Deny {
        reason: String,
        notes: Vec<String>,
    },
    /// A satisfied `permit` asks a person first.
    Ask {
        reason: String,
        notes: Vec<String>,
    },
}

impl CedarPolicies {
    /// Parse `text`; a refusal carries Cedar's own message and where in the
    /// text it is.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let policies = PolicySet::from_str(text).map_err(|errors| {
            ConfigError::at(
                KEY,
                format!("Cedar refused the policies: {}", located(&errors, text)),
            )
        })?;
        if policies.templates().next().is_some() {
            return Err(ConfigError::at(
                KEY,
                "Cedar templates (`?principal`, `?resource`) are not supported here: write each policy out",
            ));
        }
        // Parsed from text, the policies are `policy0`, `policy1`, … in order.
        let order = policies
            .policies()
            .map(|p| {
                let place = p.id().to_string()["policy".len()..]
                    .parse()
                    .unwrap_or(usize::MAX);
                (p.id().clone(), place)
            })
            .collect();
        let counted = policies
            .policies()
            .filter(|p| p.to_json().is_ok_and(|est| reads_context_calls(&est)))
            .map(|p| p.action_constraint())
            .collect();
        Ok(Self {
            policies,
            authorizer: Authorizer::new(),
            order,
            counted,
        })
    }

    /// Evaluate `call` (its action name `action`); `resumed`: a person
    /// approved this policy's pause of it, so its calls were already counted.
    pub fn evaluate(
        &self,
        call: &ToolCall,
        action: &str,
        resumed: bool,
        memory: &mut impl Memory,
    ) -> Result<Answer, StateError> {
        let groups = groups(call, action);
        let calls = if self.counts(action, &groups) {
            Some(count_calls(call, action, resumed, memory)?)
        } else {
            None
        };
        let Some((request, entities)) = request(call, action, &groups, calls) else {
            return Ok(Answer::Deny {
                reason: format!(
                    "The operator's Cedar policies cannot judge a call to `{action}` (Cedar refuses its names), so it is refused."
                ),
                notes: Vec::new(),
            });
        };
        let response = self
            .authorizer
            .is_authorized(&request, &self.policies, &entities);
        if let Some(refusal) = self.unevaluable_forbid(&response) {
            return Ok(refusal);
        }
        let mut deciding: Vec<&PolicyId> = response.diagnostics().reason().collect();
        deciding.sort_by_key(|id| self.order.get(*id).copied().unwrap_or(usize::MAX));
        let notes = self.annotations(&deciding, "note");
        let first = |key: &str| self.annotations(&deciding, key).into_iter().next();
        Ok(match response.decision() {
            CedarDecision::Deny if deciding.is_empty() => Answer::Abstain,
            CedarDecision::Deny => Answer::Deny {
                reason: first("reason").unwrap_or_else(|| {
                    format!(
                        "Refused by the operator's Cedar policy {}.",
                        self.name(deciding[0])
                    )
                }),
                notes,
            },
            CedarDecision::Allow => match first("ask") {
                Some(reason) => Answer::Ask { reason, notes },
                None => Answer::Allow { notes },
            },
        })
    }

    /// Whether a policy reading `context.calls` covers `action` (in `groups`).
    fn counts(&self, action: &str, groups: &[String]) -> bool {
        let is = |uid: &EntityUid| {
            let id = uid.id().unescaped();
            id == action || groups.iter().any(|g| g == id)
        };
        self.counted.iter().any(|constraint| match constraint {
            ActionConstraint::Any => true,
            ActionConstraint::Eq(uid) => uid.id().unescaped() == action,
            ActionConstraint::In(uids) => uids.iter().any(is),
        })
    }

    /// A deny when a `forbid` could not be evaluated on this call: a rule
    /// that cannot be checked must not let the call through. (A `permit`
    /// that cannot be evaluated is simply not satisfied.)
    fn unevaluable_forbid(&self, response: &Response) -> Option<Answer> {
        let mut broken: Vec<_> = response
            .diagnostics()
            .errors()
            .filter_map(|error| {
                let cedar_policy::AuthorizationError::PolicyEvaluationError(error) = error;
                let id = error.policy_id();
                (self.policies.policy(id)?.effect() == Effect::Forbid).then_some((id, error))
            })
            .collect();
        broken.sort_by_key(|(id, _)| self.order.get(*id).copied().unwrap_or(usize::MAX));
        let (id, error) = broken.first()?;
        Some(Answer::Deny {
            reason: format!(
                "The operator's Cedar policy {} could not be checked on this call ({}), so it is refused.",
                self.name(id),
                error.inner()
            ),
            notes: Vec::new(),
        })
    }

    /// The values of annotation `key` on the `deciding` policies, in order.
    fn annotations(&self, deciding: &[&PolicyId], key: &str) -> Vec<String> {
        deciding
            .iter()
            .filter_map(|id| self.policies.annotation(id, key))
            .map(str::to_string)
            .collect()
    }

    /// A policy's `@id("…")`, or the place Cedar gave it (`policy0`).
    pub fn name(&self, id: &PolicyId) -> String {
        self.policies
            .annotation(id, "id")
            .map_or_else(|| id.to_string(), |name| format!("`{name}`"))
    }
}

/// Whether a policy, in Cedar's JSON form, reads `context.calls` (as
/// `context.calls`, `context["calls"]` or `context has calls`).
fn reads_context_calls(est: &Value) -> bool {
    match est {
        Value::Object(fields) => fields.iter().any(|(key, value)| {
            let on_context = value.get("left") == Some(&json!({ "Var": "context" }));
            let attr = value.get("attr");
            let calls = attr == Some(&json!("calls"))
                || attr.and_then(|a| a.get(0)) == Some(&json!("calls"));
            (matches!(key.as_str(), "." | "has") && on_context && calls)
                || reads_context_calls(value)
        }),
        Value::Array(items) => items.iter().any(reads_context_calls),
        _ => false,
    }
}

/// Cedar's messages, each with the line and column (in characters) of the
/// text it points at.
fn located(errors: &cedar_policy::ParseErrors, text: &str) -> String {
    use miette::Diagnostic as _;
    errors
        .iter()
        .map(|error| {
            let at = error
                .labels()
                .and_then(|mut labels| labels.next())
                .and_then(|label| text.get(..label.offset()))
                .map(|before| {
                    let line = before.matches('\n').count() + 1;
                    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
                    format!(" (line {line}, column {column} of the Cedar text)")
                })
                .unwrap_or_default();
            format!("{error}{at}")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// This action's calls in this turn and this session, this one included.
fn count_calls(
    call: &ToolCall,
    action: &str,
    resumed: bool,
    memory: &mut impl Memory,
) -> Result<(u64, u64), StateError> {
    let caller = &call.caller;
    let turn_scope = format!("cedar/turn/{}/", state_key(&[&caller.session_id, action]));
    let turn_key = format!("{turn_scope}{}", caller.turn);
    let session_key = format!("cedar/session/{}", state_key(&[&caller.session_id, action]));
    if resumed {
        // Counted when it paused.
        return Ok((memory.peek(&turn_key)?, memory.peek(&session_key)?));
    }
    let turn = memory.take(&turn_key, u64::MAX)?.unwrap_or(u64::MAX);
    if turn == 1 {
        memory.sweep(&turn_scope, &turn_key)?;
    }
    let session = memory.take(&session_key, u64::MAX)?.unwrap_or(u64::MAX);
    Ok((turn, session))
}

/// The groups `action` is in, nearest first (never the action itself).
fn groups(call: &ToolCall, action: &str) -> Vec<String> {
    let groups = match &call.origin {
        ToolOrigin::Mcp(server) => vec![format!("mcp:{server}"), "mcp".into()],
        ToolOrigin::Builtin => vec!["builtin".into()],
        ToolOrigin::Other(origin) => vec![format!("other:{origin}"), "other".into()],
    };
    groups.into_iter().filter(|group| group != action).collect()
}

/// The Cedar request for `call`, and the entities it needs (the action's
/// group chain); none when Cedar refuses an id.
fn request(
    call: &ToolCall,
    action: &str,
    groups: &[String],
    calls: Option<(u64, u64)>,
) -> Option<(Request, Entities)> {
    let uid = |kind: &str, id: &str| {
        EntityTypeName::from_str(kind)
            .ok()
            .map(|kind| EntityUid::from_type_name_and_id(kind, EntityId::new(id)))
    };
    let mut chain = vec![uid("Action", action)?];
    for group in groups {
        chain.push(uid("Action", group)?);
    }
    let entities = chain
        .windows(2)
        .map(|pair| Entity::new_no_attrs(pair[0].clone(), HashSet::from([pair[1].clone()])));
    let entities = Entities::from_entities(entities, None).ok()?;

    let caller = &call.caller;
    let server = match &call.origin {
        ToolOrigin::Mcp(server) => server.as_str(),
        _ => "",
    };
    let mut context = json!({
        "tool": call.tool,
        "server": server,
        "arguments": arguments(&call.arguments),
        "mode": match caller.mode {
            ExecutionMode::Interactive => "interactive",
            ExecutionMode::InteractiveAutoApprove => "interactive-auto-approve",
            ExecutionMode::Autonomous => "autonomous",
        },
        "is_subagent": caller.is_subagent,
        "thread_kind": caller.thread_kind,
        "channel": caller.channel,
        "turn": long(caller.turn),
    });
    if let Some(tokens) = call.context_tokens {
        context["context_tokens"] = long(tokens);
    }
    if let Some((turn, session)) = calls {
        context["calls"] = json!({ "turn": long(turn), "session": long(session) });
    }
    let context = Context::from_json_value(context, None).ok()?;
    let request = Request::new(
        uid("User", &caller.user_id)?,
        chain[0].clone(),
        uid("Session", &caller.session_id)?,
        context,
        None,
    )
    .ok()?;
    Some((request, entities))
}

/// A u64 as a Cedar long (saturating: Cedar's integers are 64-bit signed).
fn long(n: u64) -> Value {
    Value::from(i64::try_from(n).unwrap_or(i64::MAX))
}

/// The call's arguments as a Cedar record.
pub(crate) fn arguments(text: &str) -> Value {
    match serde_json::from_str(text) {
        Ok(Value::Object(fields)) => record(fields, 0),
        _ => Value::Object(Map::new()),
    }
}

fn record(fields: Map<String, Value>, depth: usize) -> Value {
    Value::Object(
        fields
            .into_iter()
            .filter(|(key, _)| !matches!(key.as_str(), "__entity" | "__extn" | "__expr"))
            .filter_map(|(key, value)| Some((key, cedar_value(value, depth + 1)?)))
            .collect(),
    )
}

/// One JSON value as Cedar reads it; `null` has no Cedar form.
fn cedar_value(value: Value, depth: usize) -> Option<Value> {
    if depth > MAX_DEPTH {
        return Some(Value::String(value.to_string()));
    }
    Some(match value {
        Value::Null => return None,
        Value::Number(n) if n.is_i64() => Value::Number(n),
        Value::Number(n) => Value::String(n.to_string()),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .filter_map(|item| cedar_value(item, depth + 1))
                .collect(),
        ),
        Value::Object(fields) => record(fields, depth),
        other => other,
    })
}
