//! The context budget: thresholds, classification and the texts the agent
//! reads.
//!
//! The metric is context-window occupancy — the prompt the newest turn
//! re-sent — because that, not any one action's price, is what each further
//! tool call costs. Everything fails open: a disabled or zero limit, an
//! unmeasurable context, or a caller outside the policy's scope is `Ok`.

use serde::Deserialize;

/// Default warning level: just under the p90 of measured subagent contexts,
/// so it flags the expensive tail without nagging ordinary work.
pub const DEFAULT_WARN_TOKENS: u64 = 250_000;
/// Default hard stop: off. A shipped-on stop would fire on ordinary long
/// work too often; operators opt in.
pub const DEFAULT_MAX_TOKENS: u64 = 0;
/// The config key an operator raises to widen the ceiling.
pub const MAX_TOKENS_KEY: &str = "plugins.context-cost.config.max_tokens";

/// The policy's config table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CostConfig {
    /// Master switch; `false` → always `Ok`.
    pub enabled: bool,
    /// Flag (but allow) at or above this many tokens; 0 disables the level.
    pub warn_tokens: u64,
    /// Deny at or above this many tokens; 0 disables the stop.
    pub max_tokens: u64,
    /// Govern only agents dispatched by another agent (the seed's scope).
    pub subagents_only: bool,
    /// How much of the transcript's end to read, bytes (the host caps it).
    pub transcript_tail_bytes: u32,
}

impl Default for CostConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            warn_tokens: DEFAULT_WARN_TOKENS,
            max_tokens: DEFAULT_MAX_TOKENS,
            subagents_only: true,
            transcript_tail_bytes: 256 * 1024,
        }
    }
}

/// Where an agent stands against its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Under every configured level.
    Ok,
    /// At or above the warning level.
    Warning,
    /// At or above the stop.
    Exceeded,
}

/// Classify a context size. The stop is checked first, so a warning level
/// above the stop degrades to "stop only", never to silence.
pub fn evaluate_cost(context_tokens: u64, config: &CostConfig) -> Standing {
    if !config.enabled {
        return Standing::Ok;
    }
    if config.max_tokens > 0 && context_tokens >= config.max_tokens {
        return Standing::Exceeded;
    }
    if config.warn_tokens > 0 && context_tokens >= config.warn_tokens {
        return Standing::Warning;
    }
    Standing::Ok
}

/// The note for an agent past the warning level. It promises a stop only
/// when one is configured.
pub fn warn_text(context_tokens: u64, config: &CostConfig) -> String {
    let stop = if config.max_tokens > 0 {
        format!(
            " At {} tokens your tool calls will be DENIED.",
            config.max_tokens
        )
    } else {
        String::new()
    };
    format!(
        "Context-cost warning: you are carrying {context_tokens} tokens of context, at or past the \
         {} warn threshold, and every tool call re-sends all of it, so each step now costs more \
         than the one before.{stop} Wrap up: finish or checkpoint the task at hand, commit and \
         push it, and report back with what remains so a fresh agent can continue. Do not open \
         new lines of investigation.",
        config.warn_tokens
    )
}

/// The deny reason past the stop: the numbers, exactly what still works and
/// how to write it, and how an operator raises the ceiling.
pub fn stop_text(context_tokens: u64, max_tokens: u64) -> String {
    let git = crate::escape::GIT_SUBCOMMANDS
        .iter()
        .map(|sub| format!("git {sub}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "Context ceiling reached: this agent carries {context_tokens} tokens of context, at or \
         past the {max_tokens}-token limit, and every further call re-sends all of it. Save your \
         work and report back now. Still permitted: SendMessage, and a shell command made only of \
         {git} (every part of a command joined with &&, ||, ; or | must be one of these). Keep \
         those commands plain: no shell metacharacter — no $ or backtick anywhere, and no ( ) < > \
         outside quotes — so put a commit message in single quotes, as in \
         git commit -m 'describe the change', never -m \"fix $ISSUE\"; no :: in any argument, not \
         even inside a quoted message, because git treats :: as a remote-helper transport (reword \
         a message that mentions std::process::Command); and only ordinary flags such as -m, -A, \
         -u, --amend, --force-with-lease, --stat or --short. Everything else, including Write, \
         Edit, Read, Grep and any other shell command, is denied. Commit and push what you have, \
         then SendMessage what you finished, what remains and what a fresh agent needs. An \
         operator can raise the ceiling with {MAX_TOKENS_KEY} in the toolgate config."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Context sizes of three runaway agents (tokens).
    const OVERRUNS: [u64; 3] = [413_300, 418_500, 622_200];
    /// Two snapshots of agents in mid-life, not overruns.
    const MIDLIFE: [u64; 2] = [255_500, 269_900];

    fn with_stop() -> CostConfig {
        CostConfig {
            max_tokens: 400_000,
            ..CostConfig::default()
        }
    }

    #[test]
    fn shipped_defaults_warn_but_never_stop() {
        let config = CostConfig::default();
        assert!(config.enabled);
        assert_eq!(config.warn_tokens, 250_000);
        assert_eq!(config.max_tokens, 0, "the hard stop is opt-in");
        assert_eq!(
            evaluate_cost(136_000, &config),
            Standing::Ok,
            "p50 is untouched"
        );
        assert_eq!(
            evaluate_cost(268_000, &config),
            Standing::Warning,
            "p90 warns"
        );
        for tokens in OVERRUNS.into_iter().chain(MIDLIFE).chain([u64::MAX]) {
            assert_eq!(
                evaluate_cost(tokens, &config),
                Standing::Warning,
                "{tokens}"
            );
        }
    }

    #[test]
    fn an_opted_in_stop_catches_every_overrun_and_warns_midlife() {
        let config = with_stop();
        for tokens in OVERRUNS {
            assert_eq!(
                evaluate_cost(tokens, &config),
                Standing::Exceeded,
                "{tokens}"
            );
        }
        for tokens in MIDLIFE {
            assert_eq!(
                evaluate_cost(tokens, &config),
                Standing::Warning,
                "{tokens}"
            );
        }
        assert_eq!(evaluate_cost(136_000, &config), Standing::Ok);
    }

    #[test]
    fn thresholds_are_inclusive() {
        let config = with_stop();
        assert_eq!(evaluate_cost(249_999, &config), Standing::Ok);
        assert_eq!(evaluate_cost(250_000, &config), Standing::Warning);
        assert_eq!(evaluate_cost(399_999, &config), Standing::Warning);
        assert_eq!(evaluate_cost(400_000, &config), Standing::Exceeded);
        assert_eq!(evaluate_cost(u64::MAX, &config), Standing::Exceeded);
    }

    #[test]
    fn disabled_is_always_ok() {
        let config = CostConfig {
            enabled: false,
            ..with_stop()
        };
        for tokens in [0, 250_000, 400_000, u64::MAX] {
            assert_eq!(evaluate_cost(tokens, &config), Standing::Ok);
        }
    }

    #[test]
    fn zero_disables_a_level() {
        let none = CostConfig {
            warn_tokens: 0,
            max_tokens: 0,
            ..CostConfig::default()
        };
        assert_eq!(evaluate_cost(u64::MAX, &none), Standing::Ok);
        let stop_only = CostConfig {
            warn_tokens: 0,
            max_tokens: 400_000,
            ..CostConfig::default()
        };
        assert_eq!(evaluate_cost(300_000, &stop_only), Standing::Ok);
        assert_eq!(evaluate_cost(400_000, &stop_only), Standing::Exceeded);
    }

    #[test]
    fn a_raised_ceiling_lets_overruns_pass() {
        let config = CostConfig {
            warn_tokens: 700_000,
            max_tokens: 900_000,
            ..CostConfig::default()
        };
        for tokens in OVERRUNS {
            assert_eq!(evaluate_cost(tokens, &config), Standing::Ok, "{tokens}");
        }
        assert_eq!(evaluate_cost(700_000, &config), Standing::Warning);
        assert_eq!(evaluate_cost(900_000, &config), Standing::Exceeded);
    }

    #[test]
    fn misordered_levels_still_stop() {
        let config = CostConfig {
            warn_tokens: 900_000,
            max_tokens: 100_000,
            ..CostConfig::default()
        };
        assert_eq!(evaluate_cost(150_000, &config), Standing::Exceeded);
    }

    #[test]
    fn a_partial_table_keeps_the_other_defaults() {
        let config: CostConfig =
            serde_json::from_str(r#"{"enabled": true, "max_tokens": 123456}"#).unwrap();
        assert_eq!(config.max_tokens, 123_456);
        assert_eq!(config.warn_tokens, DEFAULT_WARN_TOKENS);
        assert!(serde_json::from_str::<CostConfig>(r#"{"max_token": 1}"#).is_err());
    }

    #[test]
    fn stop_text_names_numbers_escape_hatch_and_fix() {
        let text = stop_text(622_200, 400_000);
        for needle in [
            "622200",
            "400000",
            "SendMessage",
            "Write, Edit",
            MAX_TOKENS_KEY,
            "metacharacter",
            "single quotes",
            "$",
            "backtick",
            "(",
            ")",
            "<",
            ">",
            "--force-with-lease",
            "::",
            "quoted message",
        ] {
            assert!(text.contains(needle), "stop text lacks {needle:?}: {text}");
        }
        for sub in crate::escape::GIT_SUBCOMMANDS {
            assert!(
                text.contains(&format!("git {sub}")),
                "stop text lacks git {sub}"
            );
        }
        assert!(!text.contains("never blocked"), "no blanket promise");
    }

    #[test]
    fn warn_text_names_the_numbers_and_a_configured_stop() {
        let text = warn_text(268_000, &with_stop());
        assert!(text.contains("268000"));
        assert!(text.contains("250000"));
        assert!(text.contains("400000"));
        assert!(text.contains("report back"));
    }

    #[test]
    fn warn_text_promises_no_stop_that_is_not_configured() {
        let text = warn_text(268_000, &CostConfig::default());
        assert!(text.contains("268000"));
        assert!(!text.contains("DENIED"), "{text}");
    }
}
