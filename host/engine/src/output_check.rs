//! The `output` phase: after a tool ran, the policies that export it see its
//! output in priority order, each as the earlier ones left it, and pass,
//! redact, replace or withhold it. A withhold ends the chain.
//!
//! The output is untrusted input (a web page, a file, a server's answer), so
//! everything a policy says about it is checked here: redactions in bounds,
//! on character boundaries and apart; replacements within the cap. A policy
//! that fails is handled by its fail mode: `closed` withholds the output
//! (the model is told a policy could not check it), `open` passes it on.

use toolgate_wire::output::{MAX_CHECKED_OUTPUT, OutputChange, OutputCheck};

use crate::bindings::toolgate::policy::types as wit;
use crate::config::FailMode;
use crate::decision::{Outcome, RiskReport};
use crate::pipeline::Env;
use crate::plugins::{Plugin, PluginSet};
use crate::request::ToolRequest;
use crate::runtime::PolicyFailure;
use crate::wit_convert::ToWit as _;

/// What the policies that check output make of `output`, the result of
/// `request` (`outcome`), whose decision reported `risk`.
pub(crate) fn check(
    env: &Env<'_>,
    plugins: &PluginSet,
    request: &ToolRequest,
    outcome: Outcome,
    output: &str,
    risk: &RiskReport,
) -> OutputCheck {
    let checkers: Vec<_> = plugins
        .iter()
        .filter(|p| p.phases.check_output && p.mode == crate::config::PluginMode::Live)
        .filter(|p| p.takes_part(request))
        .collect();
    let mut check = OutputCheck::default();
    if checkers.is_empty() {
        return check;
    }
    let (mut current, truncated) = cut(output);
    let call = request.to_wit(
        request.call_id.as_deref().unwrap_or(""),
        &request.arguments_json(),
        &[],
    );
    for plugin in checkers {
        let tool_result = wit::ToolResult {
            call: call.clone(),
            outcome: match outcome {
                Outcome::Succeeded => wit::ToolOutcome::Succeeded,
                Outcome::Failed => wit::ToolOutcome::Failed,
                Outcome::Denied => wit::ToolOutcome::Denied,
            },
            output: current.clone(),
            truncated,
            risk: wit::Risk::from(risk),
        };
        let verdict = env
            .sandbox(plugin, Some(request))
            .and_then(|mut sandbox| sandbox.check_output(&tool_result))
            .and_then(|verdict| apply(&current, verdict));
        let change = |action: &str, failure: Option<String>| OutputChange {
            policy: plugin.name.to_string(),
            action: action.into(),
            failure,
        };
        match verdict {
            Ok(Applied::Pass) => {}
            Ok(Applied::Changed(action, text)) => {
                check.changes.push(change(action, None));
                current = text;
            }
            Ok(Applied::Withheld(reason)) => {
                check.changes.push(change("withhold", None));
                return withheld(check, plugin, &reason);
            }
            Err(failure) => match failure_action(plugin, &failure) {
                FailMode::Open => check
                    .changes
                    .push(change("pass", Some(failure.to_string()))),
                FailMode::Closed => {
                    check
                        .changes
                        .push(change("withhold", Some(failure.to_string())));
                    let reason = format!("policy `{}` could not check it ({failure})", plugin.name);
                    return withheld(check, plugin, &reason);
                }
            },
        }
    }
    if !check.changes.is_empty() || truncated {
        if truncated {
            current.push_str(&format!(
                "\n[toolgate: the output was cut at {MAX_CHECKED_OUTPUT} bytes, as far as the policies checked it]"
            ));
        }
        check.output = Some(current);
    }
    check
}

/// The output withheld by `plugin`, the model told why.
fn withheld(mut check: OutputCheck, plugin: &Plugin, reason: &str) -> OutputCheck {
    check.withheld = true;
    check.output = Some(format!(
        "toolgate: this tool's output is withheld ({} says: {reason}).",
        plugin.name
    ));
    check
}

/// The fail mode that applies to `plugin`'s failure, logged.
fn failure_action(plugin: &Plugin, failure: &PolicyFailure) -> FailMode {
    tracing::warn!(policy = %plugin.name, cause = %failure, fail_mode = ?plugin.fail_mode, "checking a tool's output failed");
    plugin.fail_mode
}

/// `output` cut to what the policies are shown, on a character boundary;
/// whether it was cut.
fn cut(output: &str) -> (String, bool) {
    if output.len() <= MAX_CHECKED_OUTPUT {
        return (output.to_string(), false);
    }
    let mut end = MAX_CHECKED_OUTPUT;
    while !output.is_char_boundary(end) {
        end -= 1;
    }
    (output[..end].to_string(), true)
}

/// A policy's verdict, made concrete.
enum Applied {
    Pass,
    Changed(&'static str, String),
    Withheld(String),
}

/// `verdict` applied to `current`; a redaction out of bounds, off a
/// character boundary or overlapping another, or any text past the cap,
/// is the policy's failure.
fn apply(current: &str, verdict: wit::ResultVerdict) -> Result<Applied, PolicyFailure> {
    let too_long = |text: &str| {
        (text.len() > MAX_CHECKED_OUTPUT).then(|| {
            PolicyFailure::Other(format!(
                "answered {} bytes for an output, over the {MAX_CHECKED_OUTPUT}-byte cap",
                text.len()
            ))
        })
    };
    match verdict {
        wit::ResultVerdict::Pass => Ok(Applied::Pass),
        wit::ResultVerdict::Withhold(reason) => match too_long(&reason) {
            Some(failure) => Err(failure),
            None => Ok(Applied::Withheld(crate::bounds::cut(reason, 1024))),
        },
        wit::ResultVerdict::Replace(text) => match too_long(&text) {
            Some(failure) => Err(failure),
            None => Ok(Applied::Changed("replace", text)),
        },
        wit::ResultVerdict::Redact(mut spans) => {
            spans.sort_by_key(|s| s.start);
            let mut text = String::with_capacity(current.len());
            let mut at = 0usize;
            for span in &spans {
                let (start, end) = (span.start as usize, span.end as usize);
                let fits = at <= start
                    && start <= end
                    && current.is_char_boundary(start)
                    && current.is_char_boundary(end)
                    && end <= current.len();
                if !fits {
                    return Err(PolicyFailure::Other(format!(
                        "redacted bytes {start}..{end}, which are out of bounds, off a character boundary or overlap another span"
                    )));
                }
                text.push_str(&current[at..start]);
                text.push_str(&span.replacement);
                at = end;
            }
            text.push_str(&current[at..]);
            match too_long(&text) {
                Some(failure) => Err(failure),
                None => Ok(Applied::Changed("redact", text)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: u32, end: u32, replacement: &str) -> wit::Redaction {
        wit::Redaction {
            start,
            end,
            replacement: replacement.into(),
        }
    }

    #[test]
    fn redactions_apply_in_order_and_bad_ones_are_failures() {
        let text = "key=sk-123 and key=sk-456";
        let applied = apply(
            text,
            wit::ResultVerdict::Redact(vec![span(19, 25, "[x]"), span(4, 10, "[x]")]),
        );
        assert!(matches!(applied, Ok(Applied::Changed("redact", t)) if t == "key=[x] and key=[x]"));
        for bad in [
            vec![span(4, 10, ""), span(8, 12, "")],
            vec![span(20, 99, "")],
            vec![span(6, 4, "")],
        ] {
            assert!(apply(text, wit::ResultVerdict::Redact(bad)).is_err());
        }
        // Not on a character boundary (inside the 2-byte `é`).
        assert!(apply("é", wit::ResultVerdict::Redact(vec![span(1, 2, "")])).is_err());
    }
}
