//! The composed decision toolgate returns, as the library type and as the
//! JSON `toolgate check` prints.

use serde::{Deserialize, Serialize};

/// The final answer for one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// allow, deny or pause.
    pub verdict: Verdict,
    /// Why (for deny and pause): the deciding policy's words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The policy whose verdict decided; none when every policy allowed or
    /// abstained.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// Notes for the agent from every policy that ran, in priority order.
    pub notes: Vec<Note>,
    /// The highest risk any policy reported.
    pub risk: RiskReport,
    /// The pending gate, when paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseInfo>,
    /// When a person's answer to an earlier pause of this exact call let
    /// it through: who answered, and how (`terminal`, `web`, …). A runtime
    /// with its own prompt need not ask them again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
    /// The arguments the call is to run with, when a policy rewrote them
    /// (the whole arguments, not a patch); absent when none did. A runtime
    /// that cannot run a call with other arguments must refuse it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
    /// Whether policies check this call's output (the `output` phase): a
    /// runtime that can change what the model reads hands them the output
    /// before the model sees it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_checked: bool,
    /// The call's id (the runtime's, or generated).
    pub call_id: String,
    /// Each policy that ran, in the order it ran.
    pub policies: Vec<PolicyResult>,
    /// Shadow plugins' verdicts on the same call, recorded, never used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadows: Vec<PolicyResult>,
    /// Wall time for the whole evaluation, microseconds.
    pub duration_us: u64,
}

/// What happened when a tool ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It ran and succeeded.
    Succeeded,
    /// It ran and failed.
    Failed,
    /// It did not run because it was denied.
    Denied,
}

/// Who decides when toolgate itself refuses a call (self-protection).
pub const HOST: &str = "toolgate";

impl Decision {
    /// A deny by toolgate itself, before any policy ran.
    pub fn refused_by_host(request: &crate::ToolRequest, reason: String) -> Self {
        tracing::warn!(tool = %request.tool, %reason, "refused: the call targets toolgate's control plane");
        let call_id = request
            .call_id
            .clone()
            .unwrap_or_else(crate::request::new_call_id);
        Self::host_deny(&call_id, reason)
    }

    /// A deny by the host itself with `reason`, no policy asked: a call a
    /// person already refused, or one aimed at toolgate's control plane.
    pub fn host_deny(call_id: &str, reason: String) -> Self {
        Self {
            verdict: Verdict::Deny,
            reason: Some(reason),
            decided_by: Some(HOST.into()),
            notes: Vec::new(),
            risk: RiskReport::default(),
            pause: None,
            approved_by: None,
            arguments: None,
            output_checked: false,
            call_id: call_id.to_string(),
            policies: Vec::new(),
            shadows: Vec::new(),
            duration_us: 0,
        }
    }
}

/// A shadow plugin's own verdict as the final verdict it would have made
/// alone (an abstention is an allow).
pub fn shadow_verdict(verdict: PolicyVerdict) -> Verdict {
    match verdict {
        PolicyVerdict::Allow | PolicyVerdict::Skip => Verdict::Allow,
        PolicyVerdict::Deny => Verdict::Deny,
        PolicyVerdict::Pause => Verdict::Pause,
    }
}

/// The final verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Let the call run.
    Allow,
    /// Refuse it.
    Deny,
    /// Hold it for a person.
    Pause,
}

/// One policy's note for the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    /// The policy that wrote it.
    pub policy: String,
    /// The text.
    pub text: String,
}

/// How dangerous a call is, in ascending order; the composed risk is the
/// highest level any policy reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RiskLevel {
    /// Nothing noteworthy.
    #[default]
    None,
    /// Worth a look (e.g. an MCP tool no rule recognised).
    Low,
    /// Changes local state (e.g. writes files).
    Medium,
    /// Could move data off the machine.
    High,
    /// Runs arbitrary commands.
    Critical,
}

/// The category of a call no policy classified.
pub const UNCLASSIFIED: &str = "low";

/// A risk classification and who made it. Categories are an open
/// vocabulary chosen by policies ("shell", "file-write", ...); the level
/// orders them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RiskReport {
    /// How dangerous (records written before contract 0.2 have none).
    #[serde(default)]
    pub level: RiskLevel,
    /// The category, kebab-case.
    pub category: String,
    /// The signals behind it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
    /// The policy that reported it (for the composed risk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl Default for RiskReport {
    fn default() -> Self {
        Self {
            level: RiskLevel::None,
            category: UNCLASSIFIED.into(),
            signals: Vec::new(),
            by: None,
        }
    }
}

/// Where a paused call waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseInfo {
    /// Present this to resolve the gate.
    pub request_id: String,
    /// The gate's user.
    pub user_id: String,
    /// The gate's thread.
    pub thread_id: String,
    /// Only this channel (or a trusted one) may resolve it.
    pub channel: String,
    /// When it stops being resolvable (ms since the epoch).
    pub expires_at_ms: u64,
    /// What the person is asked for.
    #[serde(flatten)]
    pub kind: PauseKind,
}

/// Why a call is paused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PauseKind {
    /// A person must approve the call.
    Approval {
        /// What is being approved.
        description: String,
        /// Whether "allow always" may be offered.
        allow_always: bool,
    },
    /// A person must supply a credential.
    Authentication {
        /// The credential's name.
        credential: String,
        /// How to obtain it.
        instructions: String,
        /// Where to obtain it.
        url: Option<String>,
    },
}

/// One policy's own verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyVerdict {
    /// Allowed.
    Allow,
    /// Denied.
    Deny,
    /// Paused.
    Pause,
    /// Abstained (or failed open).
    Skip,
}

/// A budget's standing, as one policy accounted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", content = "text", rename_all = "lowercase")]
pub enum BudgetReport {
    /// Within budget.
    Ok,
    /// Over the soft limit.
    Warning(String),
    /// Over the hard limit.
    Exceeded(String),
}

/// What one policy said about the call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyResult {
    /// The plugin's name.
    pub name: String,
    /// Its priority.
    pub priority: i32,
    /// The sha256 of the component that ran.
    pub sha256: String,
    /// Its verdict (a failure shows as the verdict its fail mode produced).
    pub verdict: PolicyVerdict,
    /// Its reason, for deny and pause.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its notes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The arguments it rewrote the call to, if it did, in this process
    /// only (the pipeline and the decision log read it). An answer carries
    /// the rewritten call once, as the decision's `arguments`: a rewrite
    /// may be as large as the policy's output limit, and was sent twice.
    #[serde(skip)]
    pub rewrite: Option<serde_json::Value>,
    /// Its rewrite, as the sha256 of its JSON: which policies rewrote the
    /// call, recognisably. A shadow's rewrite is only this (a shadow never
    /// decides, so what it would have run is never returned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite_sha256: Option<String>,
    /// Its risk classification, if it classifies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub risk: Option<RiskReport>,
    /// Its budget, if it accounts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetReport>,
    /// Why it failed, if it did; the fail mode decided its verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// What the policy logged through the host during this call (for the
    /// operator; never shown to the agent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<String>,
    /// Bytes of the call's transcript the host read for this policy.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub transcript_bytes: u64,
    /// Time spent in this policy, microseconds.
    pub duration_us: u64,
}

impl PolicyResult {
    /// Record that this policy rewrote the call to `arguments`.
    pub fn rewrote(&mut self, arguments: serde_json::Value) {
        use sha2::Digest as _;
        let json = serde_json::to_vec(&arguments).expect("a JSON value serialises");
        self.rewrite_sha256 = Some(hex::encode(sha2::Sha256::digest(json)));
        self.rewrite = Some(arguments);
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
