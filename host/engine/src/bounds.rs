//! What a policy hands back, bounded. Everything a policy returns is
//! untrusted: it is copied out of the sandbox only up to [`hostcall_fuel`]
//! per copy (a larger return is refused before it is copied), then each
//! field is cut to its cap here, before the host keeps it, composes it,
//! logs it or hands it to another policy. A cut text ends in a marker that
//! says how much was cut, so a reader knows it is not the whole.
//!
//! | Field                               | Cap                     |
//! |-------------------------------------|-------------------------|
//! | one copy out of the sandbox         | 4 MiB (or 2 × `max_output_bytes`) |
//! | reason + notes of a decision        | `limits.max_output_bytes` (refused past it) |
//! | an error (`open`, `parse`, a trap)  | [`ERROR_TEXT`]          |
//! | risk category / signal / signals    | [`RISK_CATEGORY`] / [`RISK_SIGNAL`] / [`RISK_SIGNALS`] |
//! | a budget text (`account`)           | [`BUDGET_TEXT`]         |
//! | an admin command's answer           | [`COMMAND_OUTPUT`]      |
//! | a log line / a call's logs          | `MAX_LOG_LINE` / `limits.log_max_bytes` |

use crate::bindings::toolgate::policy::types as wit;
use crate::config::Limits;

/// An error text a policy causes (its `open` or `parse` error, a trap's
/// message), bytes.
pub(crate) const ERROR_TEXT: usize = 1024;
/// A risk's category, bytes: a short name such as `file-write`.
pub(crate) const RISK_CATEGORY: usize = 64;
/// One risk signal, bytes.
pub(crate) const RISK_SIGNAL: usize = 256;
/// Risk signals kept of one risk.
pub(crate) const RISK_SIGNALS: usize = 32;
/// A budget's warning or exceeded text, bytes.
pub(crate) const BUDGET_TEXT: usize = 4096;
/// An admin command's answer, bytes.
pub(crate) const COMMAND_OUTPUT: usize = 64 * 1024;

/// The most one copy out of a sandbox may be (a decision, a state value,
/// a model question, an error), bytes: wasmtime's host-call fuel, set per
/// store. The largest legitimate copy is a state entry (1 MiB) or a
/// decision at the plugin's output limit.
pub(crate) fn hostcall_fuel(limits: &Limits) -> usize {
    (4usize << 20).max(2 * limits.max_output_bytes.get() as usize)
}

/// `text` cut to at most `cap` bytes (on a character boundary), ending in
/// a marker that says how much was cut.
pub(crate) fn cut(text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let marker = format!("… [{} bytes cut]", text.len());
    let mut end = cap.saturating_sub(marker.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = text;
    cut.truncate(end);
    cut.push_str(&marker);
    cut
}

/// A risk as the host keeps it and hands it on.
pub(crate) fn risk(mut risk: wit::Risk) -> wit::Risk {
    risk.category = cut(risk.category, RISK_CATEGORY);
    risk.signals.truncate(RISK_SIGNALS);
    risk.signals = risk
        .signals
        .into_iter()
        .map(|signal| cut(signal, RISK_SIGNAL))
        .collect();
    risk
}

/// A budget status as the host keeps it.
pub(crate) fn budget(status: wit::BudgetStatus) -> wit::BudgetStatus {
    match status {
        wit::BudgetStatus::Ok => wit::BudgetStatus::Ok,
        wit::BudgetStatus::Warning(text) => wit::BudgetStatus::Warning(cut(text, BUDGET_TEXT)),
        wit::BudgetStatus::Exceeded(text) => wit::BudgetStatus::Exceeded(cut(text, BUDGET_TEXT)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_text_fits_its_cap_and_says_so() {
        assert_eq!(cut("short".into(), 100), "short");
        let long = cut("é".repeat(1000), 100);
        assert!(long.len() <= 100, "{}", long.len());
        assert!(long.ends_with("… [2000 bytes cut]"), "{long}");
        assert!(long.starts_with("éé"));
    }

    #[test]
    fn a_risk_is_cut_to_its_caps() {
        let kept = risk(wit::Risk {
            level: wit::RiskLevel::High,
            category: "c".repeat(1 << 20),
            signals: vec!["s".repeat(1000); 100],
        });
        assert!(kept.category.len() <= RISK_CATEGORY);
        assert_eq!(kept.signals.len(), RISK_SIGNALS);
        assert!(kept.signals.iter().all(|s| s.len() <= RISK_SIGNAL));
    }
}
