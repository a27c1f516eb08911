//! Per-turn probe budgets, kept in the policy's state so every evaluation
//! (each on a fresh instance) sees the same counters, and taken with the
//! host's atomic `try-increment` so two concurrent decisions for one session
//! can never both take the last slot.

use crate::classify::Tier;

/// Which counter a category draws from, and its cap for `max` probes per
/// turn. `None`: the category is never probed.
///
/// - shell and file-write share one counter up to `max`;
/// - mcp-unclassified (engaged by MCP origin alone, a weaker signal) may use
///   at most `max − 1` of that shared counter, so one slot always stays for a
///   shell or file-write call later in the turn — at `max = 1` it gets none;
/// - exfil-capable (MCP origin *and* a write-ish name) has its own counter
///   capped at `2 × max`: never starved by earlier probes, never unbounded.
pub fn pool(category: Tier, max: u32) -> Option<(&'static str, u64)> {
    let max = u64::from(max);
    match category {
        Tier::Low => None,
        Tier::ExfilCapable => Some(("exfil", max.saturating_mul(2))),
        Tier::McpUnclassified => Some(("shared", max.saturating_sub(1))),
        Tier::Shell | Tier::FileWrite => Some(("shared", max)),
    }
}

/// The state-key prefix of one session's counters.
pub fn session_prefix(session: &str) -> String {
    // Escape `/` so no session id can reach into another's prefix.
    format!(
        "probes/{}/",
        session.replace('%', "%25").replace('/', "%2F")
    )
}

/// The state key of one counter for one turn.
pub fn counter_key(session: &str, turn: u64, pool: &str) -> String {
    format!("{}{turn}/{pool}", session_prefix(session))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_follow_the_seed() {
        assert_eq!(pool(Tier::Shell, 2), Some(("shared", 2)));
        assert_eq!(pool(Tier::FileWrite, 2), Some(("shared", 2)));
        assert_eq!(pool(Tier::McpUnclassified, 2), Some(("shared", 1)));
        assert_eq!(pool(Tier::McpUnclassified, 1), Some(("shared", 0)));
        assert_eq!(pool(Tier::McpUnclassified, 0), Some(("shared", 0)));
        assert_eq!(pool(Tier::ExfilCapable, 1), Some(("exfil", 2)));
        assert_eq!(pool(Tier::ExfilCapable, 0), Some(("exfil", 0)));
        assert_eq!(pool(Tier::Low, 5), None);
    }

    #[test]
    fn sessions_cannot_share_a_prefix() {
        assert_ne!(session_prefix("a/1"), session_prefix("a"));
        assert!(!counter_key("a/1", 2, "shared").starts_with(&session_prefix("a")));
        assert_eq!(counter_key("s", 7, "exfil"), "probes/s/7/exfil");
    }
}
