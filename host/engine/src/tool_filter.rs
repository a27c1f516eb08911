//! The `visibility` phase: which tools may be offered to the model at all.
//! A tool is offered only if every policy that exports the phase (and takes
//! part in the caller's calls) answers yes. A policy that fails is handled
//! by its fail mode: `closed` hides every tool, `open` hides none of its
//! own accord. Hiding is not refusing: a hidden tool called anyway is
//! decided like any other call.

use toolgate_wire::output::ToolDescriptor;

use crate::bindings::toolgate::policy::types as wit;
use crate::config::{FailMode, PluginMode};
use crate::pipeline::Env;
use crate::plugins::PluginSet;
use crate::request::ToolRequest;
use crate::wit_convert::ToWit as _;

/// For each of `tools`, in order: may it be offered to `caller` (a request
/// naming the session, thread and user; its tool is not read)?
pub(crate) fn visible(
    env: &Env<'_>,
    plugins: &PluginSet,
    caller: &ToolRequest,
    tools: &[ToolDescriptor],
) -> Vec<bool> {
    let mut shown = vec![true; tools.len()];
    let filters: Vec<_> = plugins
        .iter()
        .filter(|p| p.phases.visibility && p.mode == PluginMode::Live && p.takes_part(caller))
        .collect();
    if filters.is_empty() || tools.is_empty() {
        return shown;
    }
    let wit_caller = caller.to_wit("", "{}", &[]).caller;
    let descriptors: Vec<wit::ToolDescriptor> = tools
        .iter()
        .map(|tool| wit::ToolDescriptor {
            name: tool.name.clone(),
            origin: (&tool.origin).into(),
            description: tool.description.clone(),
            input_schema: tool.input_schema.to_string(),
        })
        .collect();
    for plugin in filters {
        let answers = env
            .sandbox(plugin, Some(caller))
            .and_then(|mut sandbox| sandbox.visible(&wit_caller, &descriptors));
        match answers {
            Ok(answers) => {
                for (shown, answer) in shown.iter_mut().zip(answers) {
                    *shown &= answer;
                }
            }
            Err(failure) => {
                tracing::warn!(policy = %plugin.name, cause = %failure, fail_mode = ?plugin.fail_mode, "deciding which tools to offer failed");
                if plugin.fail_mode == FailMode::Closed {
                    return vec![false; tools.len()];
                }
            }
        }
    }
    shown
}
