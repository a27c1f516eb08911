//! The policy's admin commands: `rules` lists every rule with its class
//! and action, `explain` shows how a command is read and which rules it
//! meets.

use toolgate_guest::serde_json::{self, Value};

use crate::{Safeguards, shell};

/// The answer to admin command `name` with JSON `args`.
pub fn answer(policy: &Safeguards, name: &str, args: &str) -> Result<String, String> {
    match name {
        "rules" => {
            let listed: Vec<Value> = policy
                .book
                .rules()
                .iter()
                .map(|rule| {
                    serde_json::json!({
                        "name": rule.name,
                        "class": rule.class.name(),
                        "action": format!("{:?}", rule.action.unwrap_or(policy.actions[&rule.class])).to_lowercase(),
                        "reason": rule.reason,
                    })
                })
                .collect();
            serde_json::to_string(&listed).map_err(|e| e.to_string())
        }
        "explain" => {
            let text: String = serde_json::from_str::<Value>(args)
                .ok()
                .and_then(|v| v.get("command").and_then(Value::as_str).map(str::to_string))
                .ok_or("explain takes {\"command\": \"SHELL TEXT\"}")?;
            let reading = shell::read(&text);
            let hits = policy.book.shell_hits(&text);
            serde_json::to_string(&serde_json::json!({
                "commands": reading.commands.iter().map(|c| c.words.join(" ")).collect::<Vec<_>>(),
                "code": reading.code.iter().map(|c| &c.interpreter).collect::<Vec<_>>(),
                "hits": hits.iter().map(|h| serde_json::json!({
                    "rule": h.rule.name, "class": h.rule.class.name(), "subject": h.subject,
                })).collect::<Vec<_>>(),
            }))
            .map_err(|e| e.to_string())
        }
        other => Err(format!(
            "safeguards has no command `{other}`; it has rules and explain"
        )),
    }
}
