//! After the tool ran, and before the model sees it: what the policies
//! that check output made of it, and which tools may be offered at all.

use serde::{Deserialize, Serialize};

use crate::request::Origin;

/// The most of a tool's output the policies are shown, bytes. Past it the
/// output is cut, and where any policy checks output, the model reads only
/// what was checked.
pub const MAX_CHECKED_OUTPUT: usize = 1024 * 1024;

/// `output` as far as it is worth sending to have it checked: past
/// [`MAX_CHECKED_OUTPUT`] nothing more is shown to the policies or the
/// model, so a sender cuts it there, one character past the cap so the
/// check still sees it was cut and says so.
pub fn worth_checking(output: &str) -> &str {
    if output.len() <= MAX_CHECKED_OUTPUT {
        return output;
    }
    let mut end = MAX_CHECKED_OUTPUT + 1;
    while !output.is_char_boundary(end) {
        end += 1;
    }
    &output[..end]
}

/// What the policies that check output made of one tool's output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputCheck {
    /// What the model may read instead of the output, when a policy
    /// redacted, replaced or withheld it; none when it passes unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Whether it was withheld (`output` then says why, for the model).
    #[serde(default)]
    pub withheld: bool,
    /// Each policy that changed it or failed, in the order they checked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<OutputChange>,
}

impl OutputCheck {
    /// The text the model reads: `original`, or what replaced it.
    pub fn text<'a>(&'a self, original: &'a str) -> &'a str {
        self.output.as_deref().unwrap_or(original)
    }
}

/// One policy's change to an output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputChange {
    /// The policy.
    pub policy: String,
    /// `redact`, `replace` or `withhold`.
    pub action: String,
    /// Why it failed, when it did (its fail mode decided the action).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// A tool a runtime could offer the model, for the policies that decide
/// which may be offered at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolDescriptor {
    /// Its name as the model would call it.
    pub name: String,
    /// Where it comes from.
    #[serde(default)]
    pub origin: Origin,
    /// Its description.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of its arguments, as its server declares it.
    #[serde(default)]
    pub input_schema: serde_json::Value,
}
