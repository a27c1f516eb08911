//! A policy's configuration, read from `wasi:config/store`.
//!
//! The host serves one entry per top-level key of the policy's table, each
//! value JSON-encoded; [`Config`] puts the table back together so a policy
//! deserialises it into its own typed struct.

use serde::de::DeserializeOwned;

use crate::ConfigError;

/// A policy's config table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config(serde_json::Map<String, serde_json::Value>);

impl Config {
    /// Read the table the host holds for this policy.
    pub(crate) fn from_host() -> Result<Self, ConfigError> {
        use crate::bindings::wasi::config::store;
        let entries = store::get_all().map_err(|err| {
            ConfigError::whole(match err {
                store::Error::Upstream(m) | store::Error::Io(m) => {
                    format!("the host could not serve the config: {m}")
                }
            })
        })?;
        Self::from_entries(entries)
    }

    /// Build from `(key, JSON value)` entries, as the host serves them.
    pub fn from_entries(
        entries: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        entries
            .into_iter()
            .map(|(key, json)| match serde_json::from_str(&json) {
                Ok(value) => Ok((key, value)),
                Err(err) => Err(ConfigError::at(key, format!("not valid JSON: {err}"))),
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Build from a JSON object (for native tests of policy logic).
    pub fn from_json(json: &str) -> Result<Self, ConfigError> {
        serde_json::from_str(json)
            .map(Self)
            .map_err(|err| ConfigError::whole(format!("not a JSON object: {err}")))
    }

    /// Deserialise the table into `T`, naming the offending key on error.
    /// Use `#[serde(deny_unknown_fields, default)]` on `T` so a typo is an
    /// error rather than a silently ignored key.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        let value = serde_json::Value::Object(self.0.clone());
        T::deserialize(value).map_err(|err| {
            let message = err.to_string();
            match named_key(&message).filter(|key| self.0.contains_key(*key)) {
                Some(key) => {
                    ConfigError::at(key.to_string(), format!("invalid policy config: {message}"))
                }
                None => ConfigError::whole(format!("invalid policy config: {message}")),
            }
        })
    }
}

/// The key serde's message is about: the first it quotes in backticks
/// ("unknown field `x`, expected one of `a`, `b`"; the keys it lists after
/// are the ones it expected, not the problem).
fn named_key(message: &str) -> Option<&str> {
    message.split('`').nth(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug, Default, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Sample {
        limit: u32,
        name: String,
    }

    #[test]
    fn entries_rebuild_the_typed_table() {
        let config = Config::from_entries([
            ("limit".to_string(), "3".to_string()),
            ("name".to_string(), "\"x\"".to_string()),
        ])
        .unwrap();
        assert_eq!(
            config.parse::<Sample>().unwrap(),
            Sample {
                limit: 3,
                name: "x".into()
            }
        );
    }

    #[test]
    fn errors_name_the_key() {
        let typo = Config::from_json(r#"{"limt": 3}"#).unwrap();
        assert_eq!(
            typo.parse::<Sample>().unwrap_err().key.as_deref(),
            Some("limt")
        );
        let bad = Config::from_entries([("limit".to_string(), "{".to_string())]).unwrap_err();
        assert_eq!(bad.key.as_deref(), Some("limit"));
    }

    #[test]
    fn a_typo_is_blamed_not_a_correct_key_the_message_lists() {
        // serde lists the keys it expected ("expected `limit` or `name`"):
        // the correct `limit` beside the typo is not the problem.
        let typo = Config::from_json(r#"{"limit": 3, "nmae": "x"}"#).unwrap();
        assert_eq!(
            typo.parse::<Sample>().unwrap_err().key.as_deref(),
            Some("nmae")
        );
    }
}
