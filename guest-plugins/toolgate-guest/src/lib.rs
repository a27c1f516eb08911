//! Helpers for writing toolgate policies.
//!
//! A policy implements [`Policy`] and exports itself with
//! [`export_policy!`]. Every optional phase has a neutral default, so a small
//! policy is `info`, `configure` and `decide`. The host capabilities are
//! wrapped in [`host`] with Rust-friendly signatures.
//!
//! Policy logic should live in plain functions over these types so it can be
//! unit-tested natively (`cargo test`) as well as through the wasm boundary;
//! only the [`host`] wrappers need a running host.

use std::cell::RefCell;

/// Re-exported so policies parse JSON with the same version.
pub use serde_json;

/// The generated bindings for the `toolgate:policy` world.
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "policy",
        path: "../../wit",
        pub_export_macro: true,
        additional_derives: [PartialEq],
        default_bindings_module: "toolgate_guest::bindings",
    });
}

pub mod glob;
pub mod host;
mod verdicts;

pub use bindings::exports::toolgate::policy::{budget, gate, risk, verdict};
pub use bindings::toolgate::policy::types::{
    ApprovalGrant, ApprovalRequest, AuthRequest, BudgetStatus, Caller, Decision, ExecutionMode,
    FailMode, ModelVerdict, PauseRequest, Phases, PolicyInfo, Resolution, Risk, RiskCategory,
    ToolCall, ToolEvent, ToolOrigin, ToolOutcome, Verdict,
};

/// A toolgate policy.
///
/// The host calls [`Policy::configure`] once per instance, so `self` is the
/// parsed configuration. An instance may serve several calls, but only of
/// one user (by default, one session of that user), and it may be replaced
/// by a fresh one at any time: do not rely on memory surviving, or being
/// wiped, between calls; keep what must last in [`host::state`] or
/// [`host::events`].
pub trait Policy: Sized + 'static {
    /// Who the policy is; must not depend on configuration.
    fn info() -> PolicyInfo;

    /// Build the policy from its config table (a JSON object). Errors are
    /// shown to the operator: name the key and the fix.
    fn configure(config: &str) -> Result<Self, String>;

    /// Classify the call's risk (phase `classify`).
    fn classify(&self, _call: &ToolCall) -> Risk {
        Risk {
            category: RiskCategory::Low,
            signals: Vec::new(),
        }
    }

    /// Meter the call against a budget (phase `account`).
    fn account(&self, _call: &ToolCall, _risk: &Risk) -> BudgetStatus {
        BudgetStatus::Ok
    }

    /// Decide on the call.
    fn decide(&self, call: &ToolCall, risk: &Risk, budget: &BudgetStatus) -> Decision;

    /// Learn the outcome of a call.
    fn observe(&self, _event: &ToolEvent) {}

    /// Answer an admin command.
    fn command(&self, name: &str, _args: &str) -> Result<String, String> {
        Err(format!("this policy has no command named `{name}`"))
    }

    /// Parse a model's reply (phase `parse-verdict`).
    fn parse_verdict(&self, _raw: &str) -> ModelVerdict {
        ModelVerdict::Allow
    }
}

/// Parse a policy's JSON config table into `T`, with an error that names the
/// problem. Use `#[serde(deny_unknown_fields, default)]` on `T` so a typo is
/// an error rather than a silently ignored key.
pub fn parse_config<T: serde::de::DeserializeOwned>(config: &str) -> Result<T, String> {
    serde_json::from_str(config).map_err(|err| format!("invalid policy config: {err}"))
}

thread_local! {
    static CONFIGURED: RefCell<Option<Box<dyn std::any::Any>>> = const { RefCell::new(None) };
}

/// Run `f` with the configured policy, configuring with defaults if the host
/// has not called `configure` (the host contract says it always does).
fn with_policy<P: Policy, R>(f: impl FnOnce(&P) -> R) -> R {
    CONFIGURED.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().and_then(|p| p.downcast_ref::<P>()).is_none() {
            let policy = P::configure("{}").unwrap_or_else(|err| panic!("{err}"));
            *slot = Some(Box::new(policy));
        }
        let policy = slot
            .as_ref()
            .and_then(|p| p.downcast_ref::<P>())
            .expect("policy configured above");
        f(policy)
    })
}

/// Adapts a [`Policy`] to the generated export traits. Used by
/// [`export_policy!`]; not meant to be named directly.
#[doc(hidden)]
pub struct Exports<P>(std::marker::PhantomData<P>);

impl<P: Policy> gate::Guest for Exports<P> {
    fn describe() -> PolicyInfo {
        P::info()
    }

    fn configure(config: String) -> Result<(), String> {
        let policy = P::configure(&config)?;
        CONFIGURED.with(|cell| *cell.borrow_mut() = Some(Box::new(policy)));
        Ok(())
    }

    fn decide(call: ToolCall, risk: Risk, budget: BudgetStatus) -> Decision {
        with_policy(|p: &P| p.decide(&call, &risk, &budget))
    }

    fn observe(event: ToolEvent) {
        with_policy(|p: &P| p.observe(&event))
    }

    fn command(name: String, args: String) -> Result<String, String> {
        with_policy(|p: &P| p.command(&name, &args))
    }
}

impl<P: Policy> risk::Guest for Exports<P> {
    fn classify(call: ToolCall) -> Risk {
        with_policy(|p: &P| p.classify(&call))
    }
}

impl<P: Policy> budget::Guest for Exports<P> {
    fn account(call: ToolCall, risk: Risk) -> BudgetStatus {
        with_policy(|p: &P| p.account(&call, &risk))
    }
}

impl<P: Policy> verdict::Guest for Exports<P> {
    fn parse(raw: String) -> ModelVerdict {
        with_policy(|p: &P| p.parse_verdict(&raw))
    }
}

/// Export a [`Policy`] implementation as this component's `toolgate:policy`
/// world: `toolgate_guest::export_policy!(MyPolicy);`
///
/// The exports exist only when building for wasm, so the same crate also
/// builds natively for unit tests of its logic.
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        #[cfg(target_arch = "wasm32")]
        type ToolgatePolicyExports = $crate::Exports<$policy>;
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::export!(ToolgatePolicyExports with_types_in $crate::bindings);
        // Natively nothing is exported; keep the policy "used" for lints.
        #[cfg(not(target_arch = "wasm32"))]
        const _: fn(&str) -> Result<$policy, String> = <$policy as $crate::Policy>::configure;
    };
}
