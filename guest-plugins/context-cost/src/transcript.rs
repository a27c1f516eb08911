//! Reading the context size from the tail of a Claude Code transcript.

/// The newest turn's prompt size in a JSONL tail: the last line whose
/// `message.usage` carries at least one of `input_tokens`,
/// `cache_creation_input_tokens`, `cache_read_input_tokens`, summed.
///
/// Lines are parsed independently, so a tail that starts mid-line loses only
/// that line. A usage block with none of the three fields says nothing about
/// context size (reading it as 0 would disarm the guard), so it is skipped in
/// favour of an older complete one. `None` when nothing qualifies: the
/// fail-open answer.
pub fn latest_context_tokens(jsonl: &str) -> Option<u64> {
    jsonl.lines().rev().find_map(|line| {
        let value: serde_json::Value = serde_json::from_str(line).ok()?;
        let usage = value.get("message")?.get("usage")?;
        let fields = [
            "input_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        ]
        .map(|key| usage.get(key).and_then(serde_json::Value::as_u64));
        fields
            .iter()
            .any(Option::is_some)
            .then(|| fields.iter().flatten().sum())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An assistant line shaped like Claude Code's.
    pub(crate) fn assistant_line(input: u64, created: u64, read: u64) -> String {
        serde_json::json!({
            "type": "assistant",
            "message": {
                "role": "assistant",
                "usage": {
                    "input_tokens": input,
                    "cache_creation_input_tokens": created,
                    "cache_read_input_tokens": read,
                    "output_tokens": 873,
                    "service_tier": "standard"
                }
            }
        })
        .to_string()
    }

    #[test]
    fn the_newest_usage_wins() {
        let jsonl = format!(
            "{}\n{}\n",
            assistant_line(8, 776, 70_756),
            assistant_line(12, 1_000, 410_000)
        );
        assert_eq!(latest_context_tokens(&jsonl), Some(411_012));
    }

    #[test]
    fn a_cut_leading_line_is_skipped() {
        let jsonl = format!(
            "d_input_tokens\":70756}}}}}}\n{}\n",
            assistant_line(8, 776, 300_000)
        );
        assert_eq!(latest_context_tokens(&jsonl), Some(300_784));
    }

    #[test]
    fn nothing_measurable_is_none() {
        assert_eq!(
            latest_context_tokens("{\"type\":\"user\",\"message\":{\"role\":\"user\"}}\n"),
            None
        );
        assert_eq!(latest_context_tokens(""), None);
        assert_eq!(latest_context_tokens("not json\n"), None);
    }

    #[test]
    fn a_usage_without_context_fields_is_skipped() {
        let bare = serde_json::json!({"message": {"usage": {"output_tokens": 5}}}).to_string();
        assert_eq!(latest_context_tokens(&bare), None);
        let jsonl = format!("{}\n{}\n", assistant_line(8, 776, 500_000), bare);
        assert_eq!(latest_context_tokens(&jsonl), Some(500_784));
    }
}
