//! The one place the WIT contract (`wit/`) becomes Rust for the host.
//!
//! The host binds the `full` world, the union of every export a policy may
//! have, but never instantiates it as a whole: a policy exports `gate` and
//! only the optional phases it implements, so each export is looked up on
//! its own ([`ExportIndices`]) and an absent phase is simply never called.

use wasmtime::component::{Instance, InstancePre};

use crate::error::PluginProblem;

/// The WIT package version this host implements.
pub const WIT_VERSION: &str = "0.4.0";
/// The WIT package every policy targets.
pub const WIT_PACKAGE: &str = "toolgate:policy";

wasmtime::component::bindgen!({
    world: "full",
    path: "../../wit",
});

pub(crate) use exports::toolgate::policy::{
    budget, gate, observe, output, risk, verdict, visibility,
};

/// Where a component's exports are, found once per plugin version.
#[derive(Clone)]
pub(crate) struct ExportIndices {
    gate: gate::GuestIndices,
    risk: Option<risk::GuestIndices>,
    budget: Option<budget::GuestIndices>,
    verdict: Option<verdict::GuestIndices>,
    observe: Option<observe::GuestIndices>,
    output: Option<output::GuestIndices>,
    visibility: Option<visibility::GuestIndices>,
}

/// A live instance's exports.
pub(crate) struct PolicyExports {
    pub gate: gate::Guest,
    pub risk: Option<risk::Guest>,
    pub budget: Option<budget::Guest>,
    pub verdict: Option<verdict::Guest>,
    pub observe: Option<observe::Guest>,
    pub output: Option<output::Guest>,
    pub visibility: Option<visibility::Guest>,
}

/// The phases a component exports, by interface.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Phases {
    pub classify: bool,
    pub account: bool,
    pub parse: bool,
    pub observe: bool,
    /// Checks a tool's output (`output`).
    pub check_output: bool,
    /// Says which tools may be offered (`visibility`).
    pub visibility: bool,
}

impl ExportIndices {
    /// Find the exports on a pre-linked component. `gate` must be there; an
    /// optional phase is absent when its interface is not exported at all,
    /// and refused when it is exported without the functions it needs.
    pub(crate) fn new<T>(pre: &InstancePre<T>) -> Result<Self, PluginProblem> {
        let invalid = |err: wasmtime::Error| PluginProblem::Invalid(format!("{err:#}"));
        let exported = |interface: &str| {
            let name = format!("{WIT_PACKAGE}/{interface}@{WIT_VERSION}");
            pre.component().get_export_index(None, &name).is_some()
        };
        Ok(Self {
            gate: gate::GuestIndices::new(pre).map_err(invalid)?,
            risk: optional(exported("risk"), || risk::GuestIndices::new(pre)).map_err(invalid)?,
            budget: optional(exported("budget"), || budget::GuestIndices::new(pre))
                .map_err(invalid)?,
            verdict: optional(exported("verdict"), || verdict::GuestIndices::new(pre))
                .map_err(invalid)?,
            observe: optional(exported("observe"), || observe::GuestIndices::new(pre))
                .map_err(invalid)?,
            output: optional(exported("output"), || output::GuestIndices::new(pre))
                .map_err(invalid)?,
            visibility: optional(exported("visibility"), || {
                visibility::GuestIndices::new(pre)
            })
            .map_err(invalid)?,
        })
    }

    /// Which optional phases the component implements.
    pub(crate) fn phases(&self) -> Phases {
        Phases {
            classify: self.risk.is_some(),
            account: self.budget.is_some(),
            parse: self.verdict.is_some(),
            observe: self.observe.is_some(),
            check_output: self.output.is_some(),
            visibility: self.visibility.is_some(),
        }
    }

    /// Type-check and bind the exports of a fresh instance.
    pub(crate) fn load(
        &self,
        mut store: impl wasmtime::AsContextMut,
        instance: &Instance,
    ) -> wasmtime::Result<PolicyExports> {
        let mut store = store.as_context_mut();
        Ok(PolicyExports {
            gate: self.gate.load(&mut store, instance)?,
            risk: self
                .risk
                .as_ref()
                .map(|i| i.load(&mut store, instance))
                .transpose()?,
            budget: self
                .budget
                .as_ref()
                .map(|i| i.load(&mut store, instance))
                .transpose()?,
            verdict: self
                .verdict
                .as_ref()
                .map(|i| i.load(&mut store, instance))
                .transpose()?,
            observe: self
                .observe
                .as_ref()
                .map(|i| i.load(&mut store, instance))
                .transpose()?,
            output: self
                .output
                .as_ref()
                .map(|i| i.load(&mut store, instance))
                .transpose()?,
            visibility: self
                .visibility
                .as_ref()
                .map(|i| i.load(&mut store, instance))
                .transpose()?,
        })
    }
}

fn optional<T>(
    present: bool,
    find: impl FnOnce() -> wasmtime::Result<T>,
) -> wasmtime::Result<Option<T>> {
    present.then(find).transpose()
}
