//! Risk classification: which tier a tool falls in, and so whether it is
//! probed and from which budget.
//!
//! Order: the builtin fast paths (including Claude Code's own tool names),
//! then the configured glob patterns, then MCP origin alone. MCP origin is
//! taken from the call, which the runtime reports — never from the tool's
//! name, since real MCP tool ids (`server_tool`) carry no reliable prefix.

use toolgate_guest::RiskLevel;
use toolgate_guest::glob::Glob;

/// This policy's risk tiers, in ascending order of danger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// Nothing noteworthy: never probed.
    Low,
    /// An MCP tool no rule recognised: unknown effects, untrusted origin.
    McpUnclassified,
    /// Writes, edits or deletes local files.
    FileWrite,
    /// Could move data off the machine (an MCP tool that writes).
    ExfilCapable,
    /// Runs arbitrary commands.
    Shell,
}

impl Tier {
    /// The tier's name in the contract's open category vocabulary.
    pub fn category(self) -> &'static str {
        match self {
            Tier::Low => "low",
            Tier::McpUnclassified => "mcp-unclassified",
            Tier::FileWrite => "file-write",
            Tier::ExfilCapable => "exfil-capable",
            Tier::Shell => "shell",
        }
    }

    /// The contract's level, which orders this tier among other policies'.
    pub fn level(self) -> RiskLevel {
        match self {
            Tier::Low => RiskLevel::None,
            Tier::McpUnclassified => RiskLevel::Low,
            Tier::FileWrite => RiskLevel::Medium,
            Tier::ExfilCapable => RiskLevel::High,
            Tier::Shell => RiskLevel::Critical,
        }
    }
}

/// Shell tools: the seed's names plus Claude Code's `Bash`.
fn is_shell_name(tool: &str) -> bool {
    matches!(
        tool,
        "builtin:shell" | "builtin:bash" | "bash" | "shell" | "sh" | "Bash"
    ) || tool.starts_with("builtin:shell")
}

/// File-writing tools: the seed's names plus Claude Code's editors.
fn is_file_write_name(tool: &str) -> bool {
    matches!(
        tool,
        "builtin:write"
            | "builtin:edit"
            | "builtin:delete"
            | "write"
            | "edit"
            | "delete"
            | "Write"
            | "Edit"
            | "MultiEdit"
            | "NotebookEdit"
    )
}

/// The tier of `tool`, with the signal that decided it.
pub fn classify(tool: &str, from_mcp: bool, patterns: &[Glob]) -> (Tier, String) {
    if is_shell_name(tool) {
        return (Tier::Shell, format!("name:{tool}"));
    }
    if is_file_write_name(tool) {
        // A writer served by an MCP server can also move data off the machine.
        let tier = if from_mcp {
            Tier::ExfilCapable
        } else {
            Tier::FileWrite
        };
        return (tier, format!("name:{tool}"));
    }
    if let Some(pattern) = patterns.iter().find(|p| p.matches(tool)) {
        let signal = format!("pattern:{pattern}");
        let pattern = pattern.as_str();
        if pattern.contains("shell") || pattern.contains("exec") {
            return (Tier::Shell, signal);
        }
        let writes = ["write", "edit", "delete", "file"]
            .iter()
            .any(|word| pattern.contains(word));
        if writes && !from_mcp {
            return (Tier::FileWrite, signal);
        }
        return (Tier::ExfilCapable, signal);
    }
    if from_mcp {
        return (Tier::McpUnclassified, "mcp-origin".into());
    }
    (Tier::Low, String::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SentinelConfig;

    fn defaults() -> Vec<Glob> {
        SentinelConfig::default().probe_patterns
    }

    fn tier(tool: &str, mcp: bool) -> Tier {
        classify(tool, mcp, &defaults()).0
    }

    #[test]
    fn builtin_shells_are_shell() {
        for tool in [
            "builtin:shell",
            "builtin:bash",
            "builtin:shell_exec",
            "bash",
            "shell",
            "sh",
            "Bash",
        ] {
            assert_eq!(tier(tool, false), Tier::Shell, "{tool}");
        }
    }

    #[test]
    fn builtin_writers_are_file_write() {
        for tool in [
            "builtin:write",
            "builtin:edit",
            "builtin:delete",
            "write",
            "edit",
            "delete",
            "Write",
            "Edit",
            "MultiEdit",
            "NotebookEdit",
        ] {
            assert_eq!(tier(tool, false), Tier::FileWrite, "{tool}");
        }
    }

    #[test]
    fn everything_else_builtin_is_low() {
        for tool in [
            "builtin:read",
            "builtin:search",
            "Read",
            "Grep",
            "Glob",
            "WebSearch",
        ] {
            assert_eq!(tier(tool, false), Tier::Low, "{tool}");
        }
    }

    #[test]
    fn an_unmatched_mcp_tool_is_mcp_unclassified_but_the_same_name_builtin_is_low() {
        assert_eq!(tier("some-server_frobnicate", true), Tier::McpUnclassified);
        assert_eq!(tier("some-server_frobnicate", false), Tier::Low);
    }

    #[test]
    fn an_mcp_write_tool_escalates_to_exfil_capable() {
        let patterns = vec![Glob::new("*edit*")];
        assert_eq!(
            classify("github_edit_file", false, &patterns).0,
            Tier::FileWrite
        );
        assert_eq!(
            classify("github_edit_file", true, &patterns).0,
            Tier::ExfilCapable
        );
    }

    #[test]
    fn the_default_patterns_escalate_a_real_mcp_write_tool() {
        // Real MCP ids are `server_tool`: no prefix to match on.
        assert_eq!(tier("fs-test_write_file", true), Tier::ExfilCapable);
        let (_, signal) = classify("fs-test_write_file", true, &defaults());
        assert_eq!(signal, "pattern:*write*");
    }

    #[test]
    fn an_mcp_tool_named_like_a_builtin_keeps_its_tier_or_escalates() {
        assert_eq!(tier("write", true), Tier::ExfilCapable);
        assert_eq!(tier("Bash", true), Tier::Shell);
        assert_eq!(tier("exec_command", true), Tier::Shell);
    }

    #[test]
    fn a_pattern_without_risk_words_is_exfil_capable() {
        let patterns = vec![Glob::new("*http*")];
        assert_eq!(classify("http_get", false, &patterns).0, Tier::ExfilCapable);
    }

    #[test]
    fn globs_match_like_the_seed() {
        let glob = |pattern: &str, value: &str| Glob::new(pattern).matches(value);
        assert!(glob("mcp:*/file_*", "mcp:myserver/file_read"));
        assert!(!glob("mcp:*/file_*", "builtin:shell"));
        assert!(glob("builtin:shell", "builtin:shell"));
        assert!(!glob("builtin:shell", "builtin:write"));
    }
}
