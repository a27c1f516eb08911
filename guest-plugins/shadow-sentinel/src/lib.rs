//! shadow-sentinel: defence-in-depth for risky tool calls.
//!
//! It classifies each call into a risk tier ([`classify`]); for risky tiers,
//! within per-turn probe budgets ([`budget`]), its `decide` asks the host's
//! model whether the call is safe given the session's recent activity and
//! other sessions' history with the same tool ([`probe`]), and its `parse`
//! reads the reply. It records every observed tool call in its persistent
//! event stream. It fails open by default: no endpoint, a timeout or an
//! error allows, unless `deny_on_timeout` is set.

pub mod budget;
pub mod classify;
pub mod config;
pub mod probe;
pub mod secrets;

use classify::Tier;
use config::SentinelConfig;
use probe::ModelVerdict;
use toolgate_guest::host::{self, Event, Level};
use toolgate_guest::{
    Account, BudgetStatus, CheckOutput, Classify, Config, ConfigError, Decision, FailMode,
    ModelError, ModelReply, Observe, ParseVerdict, Policy, PolicyInfo, ResultVerdict, Risk,
    ToolCall, ToolEvent, ToolOrigin, ToolOutcome, ToolResult,
};

/// Event kinds in the stream.
const TOOL_CALL: &str = "tool_call";
const PROBE_RESULT: &str = "probe_result";
/// Observed summaries are cut to this many characters.
const SUMMARY_CHARS: usize = 250;

/// The policy: its parsed config, and the last tier it worked out.
pub struct ShadowSentinel {
    config: SentinelConfig,
    secrets: secrets::Secrets,
    /// `classify`, `account` and `decide` each need the call's tier, so one
    /// classification serves all three.
    last: std::cell::RefCell<Option<Classified>>,
    /// When the host last answered that no model is configured (ms since
    /// the epoch). For [`NO_MODEL_RECHECK_MS`] after, a risky call is not
    /// put to the host: failing open it is not probed (no budget taken,
    /// nothing recorded), with `deny_on_timeout` it gets the same refusal
    /// without its context being read. The default config has no model,
    /// and agents make a shell call every few seconds. Then the host is
    /// asked again (an operator may have configured one since).
    no_model_since: std::cell::Cell<Option<u64>>,
}

/// How long a "no model is configured" answer is taken as standing.
const NO_MODEL_RECHECK_MS: u64 = 60_000;

/// One tool's classification.
struct Classified {
    tool: String,
    from_mcp: bool,
    tier: Tier,
    signal: String,
}

impl ShadowSentinel {
    fn tier(&self, call: &ToolCall) -> (Tier, String) {
        let from_mcp = matches!(call.origin, ToolOrigin::Mcp(_));
        let mut last = self.last.borrow_mut();
        if let Some(last) = &*last
            && last.tool == call.tool
            && last.from_mcp == from_mcp
        {
            return (last.tier, last.signal.clone());
        }
        let (tier, signal) = classify::classify(&call.tool, from_mcp, &self.config.probe_patterns);
        *last = Some(Classified {
            tool: call.tool.clone(),
            from_mcp,
            tier,
            signal: signal.clone(),
        });
        (tier, signal)
    }

    /// Whether the host said, within [`NO_MODEL_RECHECK_MS`], that no model
    /// is configured.
    fn no_model_known(&self) -> bool {
        self.no_model_since
            .get()
            .is_some_and(|since| host::now_ms().saturating_sub(since) < NO_MODEL_RECHECK_MS)
    }

    /// The events the model sees: other sessions' newest uses of this tool
    /// (half the budget), then this session's newest events, oldest first
    /// within each part; probe results never. A part the store cannot read
    /// is left out (and logged): the probe is defence in depth.
    fn context(&self, call: &ToolCall) -> Vec<Event> {
        let total = self.config.max_context_events;
        let cross_budget = total / 2;
        let session_budget = total - cross_budget;
        let hidden = [PROBE_RESULT.to_string()];
        let session = &call.caller.session_id;
        let readable = |read: Result<Vec<Event>, host::EventsError>| {
            read.unwrap_or_else(|err| {
                host::log(Level::Warn, &format!("event history unavailable: {err:?}"));
                Vec::new()
            })
        };
        let mut events = readable(host::events::tool_history(
            &call.tool,
            session,
            cross_budget,
            &hidden,
        ));
        events.extend(readable(host::events::session_recent(
            session,
            session_budget,
            &hidden,
        )));
        events
    }

    fn record(
        &self,
        call: &ToolCall,
        kind: &str,
        detail: &str,
        summary: String,
        risk: Option<Risk>,
    ) {
        host::events::append(&Event {
            session_id: call.caller.session_id.clone(),
            turn: call.caller.turn,
            kind: kind.into(),
            tool: Some(call.tool.clone()),
            origin: Some(call.origin.clone()),
            risk,
            detail: Some(detail.into()),
            summary: Some(summary),
            at_ms: 0,
        });
    }

    /// The verdict for a question the model did not answer, per
    /// `deny_on_timeout`, and what to record about it.
    fn unanswered(&self, error: &ModelError) -> (ModelVerdict, String) {
        let (level, cause) = match error {
            ModelError::NotConfigured => {
                (Level::Info, "no model endpoint is configured".to_string())
            }
            ModelError::Timeout => (Level::Warn, "the safety probe timed out".to_string()),
            ModelError::BudgetSpent => (
                Level::Warn,
                "the host's probe limits for this evaluation are spent".to_string(),
            ),
            ModelError::Transport(e) => (Level::Warn, format!("the safety probe failed: {e}")),
        };
        host::log(level, &cause);
        if self.config.deny_on_timeout {
            let reason = format!("{cause}, and this policy is set to deny then");
            (
                ModelVerdict::Deny(reason),
                format!("probe unavailable ({cause}); denied"),
            )
        } else {
            (
                ModelVerdict::Allow,
                format!("probe unavailable ({cause}); allowed"),
            )
        }
    }
}

impl Policy for ShadowSentinel {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: "shadow-sentinel".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "classifies tool risk and asks a model about risky calls".into(),
            default_fail_mode: FailMode::Open,
            commands: Vec::new(),
        }
    }

    fn open(config: Config) -> Result<Self, ConfigError> {
        config.parse().map(|config| Self {
            config,
            secrets: secrets::Secrets::new(),
            last: Default::default(),
            no_model_since: Default::default(),
        })
    }

    /// Risky calls within budget are put to the model; the reply comes back
    /// through [`ParseVerdict::parse`].
    fn decide(&self, call: &ToolCall, _risk: &Risk, budget: &BudgetStatus) -> Decision {
        if !self.config.enabled || self.tier(call).0 == Tier::Low {
            return Decision::skip();
        }
        if matches!(budget, BudgetStatus::Exceeded(_)) {
            return Decision::skip();
        }
        if self.no_model_known() {
            return self.conclude(call, &ModelReply::Unanswered(ModelError::NotConfigured));
        }
        let prompt = probe::user_prompt(&call.tool, &call.arguments, &self.context(call));
        Decision::ask_model(probe::SYSTEM_PROMPT, prompt, self.config.probe_timeout_ms)
    }
}

impl Classify for ShadowSentinel {
    fn classify(&self, call: &ToolCall) -> Risk {
        let (tier, signal) = if self.config.enabled {
            self.tier(call)
        } else {
            (Tier::Low, String::new())
        };
        Risk {
            level: tier.level(),
            category: tier.category().into(),
            signals: (!signal.is_empty()).then_some(signal).into_iter().collect(),
        }
    }
}

impl Account for ShadowSentinel {
    fn account(&self, call: &ToolCall, _risk: &Risk) -> BudgetStatus {
        let (tier, _) = self.tier(call);
        let Some((pool, limit)) =
            budget::pool(tier, self.config.max_probes_per_turn).filter(|_| self.config.enabled)
        else {
            return BudgetStatus::Ok;
        };
        if limit == 0 {
            // Nothing to take: skip without a state write.
            return BudgetStatus::Exceeded(format!(
                "the {pool} probe budget is 0; the call is not probed"
            ));
        }
        if !self.config.deny_on_timeout && self.no_model_known() {
            // Asking would allow it: no budget to take, nothing to record.
            return BudgetStatus::Exceeded("no model is configured; the call is not probed".into());
        }
        let session = &call.caller.session_id;
        let key = budget::counter_key(session, call.caller.turn, pool);
        match host::state::try_increment(&key, limit) {
            Ok(Some(taken)) => {
                if taken == 1 {
                    forget_other_turns(session, call.caller.turn);
                }
                BudgetStatus::Ok
            }
            Ok(None) => BudgetStatus::Exceeded(format!(
                "the {pool} probe budget for this turn ({limit}) is used up; the call is not probed"
            )),
            Err(err) => {
                host::log(Level::Warn, &format!("probe budget unavailable: {err:?}"));
                BudgetStatus::Exceeded("the probe budget could not be read".into())
            }
        }
    }
}

impl ParseVerdict for ShadowSentinel {
    /// Total: any reply (or none) yields a decision, and a `probe_result`
    /// event records it.
    fn parse(&self, call: &ToolCall, reply: &ModelReply) -> Result<Decision, String> {
        self.no_model_since.set(
            matches!(reply, ModelReply::Unanswered(ModelError::NotConfigured)).then(host::now_ms),
        );
        Ok(self.conclude(call, reply))
    }
}

impl ShadowSentinel {
    /// The decision on `reply`, recorded as a `probe_result` event.
    fn conclude(&self, call: &ToolCall, reply: &ModelReply) -> Decision {
        let (verdict, summary) = match reply {
            ModelReply::Answered(raw) => {
                let (verdict, warning) = probe::parse_verdict(raw);
                if let Some(warning) = warning {
                    host::log(Level::Warn, &warning);
                }
                let summary = match &verdict {
                    ModelVerdict::Allow => format!("probe allowed {}", call.tool),
                    ModelVerdict::Deny(reason) => format!(
                        "probe denied: {}",
                        probe::cut_chars(reason, probe::REASON_SUMMARY_CHARS)
                    ),
                };
                (verdict, summary)
            }
            ModelReply::Unanswered(error) => self.unanswered(error),
        };
        let detail = match verdict {
            ModelVerdict::Allow => "allow",
            ModelVerdict::Deny(_) => "deny",
        };
        self.record(call, PROBE_RESULT, detail, summary, None);
        match verdict {
            ModelVerdict::Allow => Decision::allow(),
            ModelVerdict::Deny(reason) => Decision::deny(reason),
        }
    }
}

impl Observe for ShadowSentinel {
    fn observe(&self, event: &ToolEvent) {
        if !self.config.enabled {
            return;
        }
        let outcome = match event.outcome {
            ToolOutcome::Succeeded => "succeeded",
            ToolOutcome::Failed => "failed",
            ToolOutcome::Denied => "denied",
        };
        let summary = probe::cut_chars(&event.summary, SUMMARY_CHARS).to_string();
        let risk = Some(event.risk.clone());
        self.record(&event.call, TOOL_CALL, outcome, summary, risk);
    }
}

/// A new turn resets the budget: drop counters of earlier turns.
fn forget_other_turns(session: &str, turn: u64) {
    let prefix = budget::session_prefix(session);
    let current = format!("{prefix}{turn}/");
    let keys = host::state::keys(&prefix, 64).unwrap_or_else(|err| {
        host::log(
            Level::Warn,
            &format!("old probe budgets unreadable: {err:?}"),
        );
        Vec::new()
    });
    for key in keys {
        if !key.starts_with(&current) {
            let _ = host::state::delete(&key);
        }
    }
}

impl CheckOutput for ShadowSentinel {
    fn check_output(&self, result: &ToolResult) -> ResultVerdict {
        if !self.config.enabled || !self.config.redact_secrets {
            return ResultVerdict::Pass;
        }
        self.secrets.verdict(&result.output)
    }
}

toolgate_guest::export_policy!(
    ShadowSentinel,
    classify,
    account,
    parse,
    observe,
    check_output
);
