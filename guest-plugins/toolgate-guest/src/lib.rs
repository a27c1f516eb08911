//! Helpers for writing toolgate policies (contract `toolgate:policy@0.4.0`).
//!
//! A policy implements [`Policy`] (`info`, `open`, `decide`) and, for each
//! optional phase it has, that phase's trait: [`Classify`], [`Account`],
//! [`ParseVerdict`], [`Observe`], [`CheckOutput`], [`FilterTools`]. [`export_policy!`] exports the gate and
//! exactly the phases it names, so the component's exports say what it
//! implements and the host never calls anything else. The host capabilities
//! are wrapped in [`host`] with Rust-friendly signatures.
//!
//! Policy logic should live in plain functions over these types so it can be
//! unit-tested natively (`cargo test`) as well as through the wasm boundary;
//! only the [`host`] wrappers need a running host.

use std::cell::RefCell;

/// Re-exported so policies parse JSON with the same version.
pub use serde_json;

/// The generated bindings for the `toolgate:policy/policy` world: the
/// imports, the shared types and the `gate` export.
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "policy",
        path: "../../wit",
        pub_export_macro: true,
        additional_derives: [PartialEq],
        default_bindings_module: "toolgate_guest::bindings",
        generate_all,
    });
}

/// One module per optional phase world, sharing the types above. Each
/// carries its own export macro and component-type section, which the
/// component linker merges with the `policy` world's: exporting a phase is
/// invoking its macro, not writing a stub.
#[allow(missing_docs, clippy::all)]
#[doc(hidden)]
pub mod phases {
    macro_rules! phase_world {
        ($module:ident, $world:literal) => {
            pub mod $module {
                wit_bindgen::generate!({
                    world: $world,
                    path: "../../wit",
                    pub_export_macro: true,
                    with: {
                        "toolgate:policy/types@0.4.0": crate::bindings::toolgate::policy::types,
                    },
                });
            }
        };
    }
    phase_world!(classifier, "classifier");
    phase_world!(accountant, "accountant");
    phase_world!(verdict_parser, "verdict-parser");
    phase_world!(observer, "observer");
    phase_world!(output_checker, "output-checker");
    phase_world!(tool_filter, "tool-filter");
}

pub mod config;
pub mod glob;
pub mod host;
mod naming;
pub mod secret_shapes;
mod verdicts;

pub use bindings::exports::toolgate::policy::gate;
pub use bindings::toolgate::policy::types::{
    ApprovalGrant, ApprovalRequest, AuthRequest, BudgetStatus, Caller, ConfigError, Decision,
    ExecutionMode, FailMode, ModelError, ModelQuestion, ModelReply, PauseRequest, PolicyInfo,
    Redaction, Resolution, ResultVerdict, Risk, RiskLevel, ToolCall, ToolDescriptor, ToolEvent,
    ToolOrigin, ToolOutcome, ToolResult, Verdict,
};
pub use config::Config;
pub use naming::{action_name, action_name_of, state_key};

/// A toolgate policy.
///
/// The host calls `gate.open` once per instance, before anything else; this
/// crate builds `Self` there with [`Policy::open`] and hands it to every
/// later call of that instance. An instance may serve several calls, but
/// only of one user (by default, one session of that user), and it may be
/// replaced by a fresh one at any time: do not rely on memory surviving, or
/// being wiped, between calls; keep what must last in [`host::state`] or
/// [`host::events`].
pub trait Policy: Sized + 'static {
    /// Who the policy is; must not depend on configuration.
    fn info() -> PolicyInfo;

    /// Build the policy from its config table. Errors are shown to the
    /// operator: name the key and the fix ([`Config::parse`] does).
    fn open(config: Config) -> Result<Self, ConfigError>;

    /// Decide on the call (or ask the model: [`Decision::ask_model`]).
    fn decide(&self, call: &ToolCall, risk: &Risk, budget: &BudgetStatus) -> Decision;

    /// Answer an admin command.
    fn command(&self, name: &str, _args: &str) -> Result<String, String> {
        Err(format!("this policy has no command named `{name}`"))
    }
}

/// The optional `risk` phase: export with `export_policy!(P, classify)`.
pub trait Classify: Policy {
    /// Classify the call's risk. Must be pure (no state writes).
    fn classify(&self, call: &ToolCall) -> Risk;
}

/// The optional `budget` phase: export with `export_policy!(P, account)`.
pub trait Account: Policy {
    /// Meter the call against a budget, right before `decide`.
    fn account(&self, call: &ToolCall, risk: &Risk) -> BudgetStatus;
}

/// The optional `verdict` phase: export with `export_policy!(P, parse)`.
pub trait ParseVerdict: Policy {
    /// Turn the reply to the question this policy's `decide` asked into its
    /// decision. `Err` is a failure of the policy (its fail mode applies).
    fn parse(&self, call: &ToolCall, reply: &ModelReply) -> Result<Decision, String>;
}

/// The optional `observe` phase: export with `export_policy!(P, observe)`.
pub trait Observe: Policy {
    /// Learn the outcome of a call (possibly more than once).
    fn observe(&self, event: &ToolEvent);
}

/// The optional `output` phase: export with `export_policy!(P, check_output)`.
pub trait CheckOutput: Policy {
    /// What the model may see of a tool's output: pass, redact, replace or
    /// withhold it. The output is untrusted input.
    fn check_output(&self, result: &ToolResult) -> ResultVerdict;
}

/// The optional `visibility` phase: export with
/// `export_policy!(P, filter_tools)`.
pub trait FilterTools: Policy {
    /// For each tool, in order: may it be offered to `caller` at all? Pure
    /// (no state writes). Hiding is not refusing: `decide` must still
    /// refuse a hidden tool called anyway.
    fn visible(&self, caller: &Caller, tools: &[ToolDescriptor]) -> Vec<bool>;
}

thread_local! {
    static OPENED: RefCell<Option<Box<dyn std::any::Any>>> = const { RefCell::new(None) };
    /// The call of the evaluation in progress (`gate.begin`): it crosses
    /// into the sandbox once, and every phase of the evaluation borrows it.
    static BEGUN: RefCell<Option<ToolCall>> = const { RefCell::new(None) };
}

/// Run `f` with the opened policy. The host opens every instance before
/// any other call; if it ever did not, this traps with a message saying so
/// rather than guessing a configuration.
fn with_policy<P: Policy, R>(f: impl FnOnce(&P) -> R) -> R {
    OPENED.with(|cell| {
        let slot = cell.borrow();
        let policy = slot
            .as_ref()
            .and_then(|p| p.downcast_ref::<P>())
            .unwrap_or_else(|| panic!("toolgate called the policy before gate.open"));
        f(policy)
    })
}

/// Run `f` with the opened policy and the begun call. The host begins
/// every evaluation before its phases; if it ever did not, this traps
/// rather than deciding on another call.
fn with_call<P: Policy, R>(f: impl FnOnce(&P, &ToolCall) -> R) -> R {
    BEGUN.with(|cell| {
        let call = cell.borrow();
        let call = call
            .as_ref()
            .unwrap_or_else(|| panic!("toolgate called a phase before gate.begin"));
        with_policy(|policy: &P| f(policy, call))
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

    fn open() -> Result<(), ConfigError> {
        let policy = P::open(Config::from_host()?)?;
        OPENED.with(|cell| *cell.borrow_mut() = Some(Box::new(policy)));
        Ok(())
    }

    fn begin(call: ToolCall) {
        BEGUN.with(|cell| *cell.borrow_mut() = Some(call));
    }

    fn decide(risk: Risk, budget: BudgetStatus) -> Decision {
        with_call(|p: &P, call| p.decide(call, &risk, &budget))
    }

    fn command(name: String, args: String) -> Result<String, String> {
        with_policy(|p: &P| p.command(&name, &args))
    }
}

impl<P: Classify> phases::classifier::exports::toolgate::policy::risk::Guest for Exports<P> {
    fn classify() -> Risk {
        with_call(|p: &P, call| p.classify(call))
    }
}

impl<P: Account> phases::accountant::exports::toolgate::policy::budget::Guest for Exports<P> {
    fn account(risk: Risk) -> BudgetStatus {
        with_call(|p: &P, call| p.account(call, &risk))
    }
}

impl<P: ParseVerdict> phases::verdict_parser::exports::toolgate::policy::verdict::Guest
    for Exports<P>
{
    fn parse(reply: ModelReply) -> Result<Decision, String> {
        with_call(|p: &P, call| p.parse(call, &reply))
    }
}

impl<P: Observe> phases::observer::exports::toolgate::policy::observe::Guest for Exports<P> {
    fn observe(event: ToolEvent) {
        with_policy(|p: &P| p.observe(&event))
    }
}

impl<P: CheckOutput> phases::output_checker::exports::toolgate::policy::output::Guest
    for Exports<P>
{
    fn check(result: ToolResult) -> ResultVerdict {
        with_policy(|p: &P| p.check_output(&result))
    }
}

impl<P: FilterTools> phases::tool_filter::exports::toolgate::policy::visibility::Guest
    for Exports<P>
{
    fn visible(caller: Caller, tools: Vec<ToolDescriptor>) -> Vec<bool> {
        with_policy(|p: &P| p.visible(&caller, &tools))
    }
}

/// Export a [`Policy`] as this component's `toolgate:policy` gate, plus the
/// optional phases named after it (`classify`, `account`, `parse`,
/// `observe`, `check_output`, `filter_tools`), each of which needs its trait
/// implemented:
///
/// ```text
/// toolgate_guest::export_policy!(MyPolicy, classify, observe);
/// ```
///
/// The exports exist only when building for wasm, so the same crate also
/// builds natively for unit tests of its logic.
#[macro_export]
macro_rules! export_policy {
    ($policy:ty $(, $phase:ident)* $(,)?) => {
        #[cfg(target_arch = "wasm32")]
        type ToolgatePolicyExports = $crate::Exports<$policy>;
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::export!(ToolgatePolicyExports with_types_in $crate::bindings);
        $( $crate::__export_phase!($policy, $phase); )*
        // Natively nothing is exported; keep the policy "used" for lints.
        #[cfg(not(target_arch = "wasm32"))]
        const _: fn($crate::Config) -> Result<$policy, $crate::ConfigError> =
            <$policy as $crate::Policy>::open;
    };
}

/// One optional phase's exports; see [`export_policy!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __export_phase {
    ($policy:ty, classify) => {
        #[cfg(target_arch = "wasm32")]
        $crate::phases::classifier::export!(ToolgatePolicyExports with_types_in $crate::phases::classifier);
        #[cfg(not(target_arch = "wasm32"))]
        const _: fn(&$policy, &$crate::ToolCall) -> $crate::Risk = <$policy as $crate::Classify>::classify;
    };
    ($policy:ty, account) => {
        #[cfg(target_arch = "wasm32")]
        $crate::phases::accountant::export!(ToolgatePolicyExports with_types_in $crate::phases::accountant);
        #[cfg(not(target_arch = "wasm32"))]
        const _: fn(&$policy, &$crate::ToolCall, &$crate::Risk) -> $crate::BudgetStatus =
            <$policy as $crate::Account>::account;
    };
    ($policy:ty, parse) => {
        #[cfg(target_arch = "wasm32")]
        $crate::phases::verdict_parser::export!(ToolgatePolicyExports with_types_in $crate::phases::verdict_parser);
        #[cfg(not(target_arch = "wasm32"))]
        const _: fn(&$policy, &$crate::ToolCall, &$crate::ModelReply) -> Result<$crate::Decision, String> =
            <$policy as $crate::ParseVerdict>::parse;
    };
    ($policy:ty, observe) => {
        #[cfg(target_arch = "wasm32")]
        $crate::phases::observer::export!(ToolgatePolicyExports with_types_in $crate::phases::observer);
        #[cfg(not(target_arch = "wasm32"))]
        const _: fn(&$policy, &$crate::ToolEvent) = <$policy as $crate::Observe>::observe;
    };
    ($policy:ty, check_output) => {
        #[cfg(target_arch = "wasm32")]
        $crate::phases::output_checker::export!(ToolgatePolicyExports with_types_in $crate::phases::output_checker);
        #[cfg(not(target_arch = "wasm32"))]
        const _: fn(&$policy, &$crate::ToolResult) -> $crate::ResultVerdict =
            <$policy as $crate::CheckOutput>::check_output;
    };
    ($policy:ty, filter_tools) => {
        #[cfg(target_arch = "wasm32")]
        $crate::phases::tool_filter::export!(ToolgatePolicyExports with_types_in $crate::phases::tool_filter);
        #[cfg(not(target_arch = "wasm32"))]
        const _: fn(&$policy, &$crate::Caller, &[$crate::ToolDescriptor]) -> Vec<bool> =
            <$policy as $crate::FilterTools>::visible;
    };
    ($policy:ty, $other:ident) => {
        compile_error!(concat!(
            "unknown policy phase `", stringify!($other),
            "`; the optional phases are classify, account, parse, observe, check_output and filter_tools"
        ));
    };
}
