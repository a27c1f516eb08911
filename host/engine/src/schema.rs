//! Checking a policy's rewrite of a call against the tool's input schema,
//! where the runtime knows it (the MCP gateway has it from `tools/list`).
//!
//! The subset of JSON Schema tool schemas use: `type` (one or a list),
//! `enum`, `const`, `required`, `properties`, `additionalProperties`
//! (`false` or a schema), `items`, `minimum`/`maximum`,
//! `minLength`/`maxLength`, `minItems`/`maxItems`, and `anyOf`/`oneOf`/
//! `allOf` of those. Keywords outside it are not checked: the server still
//! validates what it receives; this check is so that a policy's mistake is
//! the policy's failure, not a confusing error from the tool.

use serde_json::Value;

/// The deepest schema or value nesting checked; deeper is refused.
const MAX_DEPTH: usize = 64;

/// Whether `value` satisfies `schema`; the first problem found, with its
/// path (`/options/limit`), otherwise.
pub(crate) fn check(schema: &Value, value: &Value) -> Result<(), String> {
    at(schema, value, &mut String::new(), 0)
}

fn at(schema: &Value, value: &Value, path: &mut String, depth: usize) -> Result<(), String> {
    let Value::Object(schema) = schema else {
        // `true` (or a non-schema) accepts anything; `false` nothing.
        return match schema {
            Value::Bool(false) => Err(format!("{} is not allowed", shown(path))),
            _ => Ok(()),
        };
    };
    if depth > MAX_DEPTH {
        return Err(format!("{} is nested too deeply to check", shown(path)));
    }
    if let Some(types) = schema.get("type")
        && !type_matches(types, value)
    {
        return Err(format!("{} is not of type {types}", shown(path)));
    }
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.contains(value)
    {
        return Err(format!(
            "{} is not one of {}",
            shown(path),
            Value::Array(allowed.clone())
        ));
    }
    if let Some(constant) = schema.get("const")
        && constant != value
    {
        return Err(format!("{} must be {constant}", shown(path)));
    }
    bounds(schema, value, path)?;
    combinators(schema, value, path, depth)?;
    match value {
        Value::Object(fields) => object(schema, fields, path, depth),
        Value::Array(items) => match schema.get("items") {
            Some(item_schema) => items.iter().enumerate().try_for_each(|(i, item)| {
                within(path, &i.to_string(), |path| {
                    at(item_schema, item, path, depth + 1)
                })
            }),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

fn object(
    schema: &serde_json::Map<String, Value>,
    fields: &serde_json::Map<String, Value>,
    path: &mut String,
    depth: usize,
) -> Result<(), String> {
    if let Some(Value::Array(required)) = schema.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !fields.contains_key(name) {
                return Err(format!("{} lacks the required `{name}`", shown(path)));
            }
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    for (name, item) in fields {
        let item_schema = properties
            .and_then(|p| p.get(name))
            .or_else(|| schema.get("additionalProperties"));
        if let Some(item_schema) = item_schema {
            within(path, name, |path| at(item_schema, item, path, depth + 1))?;
        }
    }
    Ok(())
}

fn combinators(
    schema: &serde_json::Map<String, Value>,
    value: &Value,
    path: &mut String,
    depth: usize,
) -> Result<(), String> {
    if let Some(Value::Array(all)) = schema.get("allOf") {
        for s in all {
            at(s, value, path, depth + 1)?;
        }
    }
    for keyword in ["anyOf", "oneOf"] {
        if let Some(Value::Array(options)) = schema.get(keyword)
            && !options
                .iter()
                .any(|s| at(s, value, &mut path.clone(), depth + 1).is_ok())
        {
            return Err(format!(
                "{} matches none of its {keyword} schemas",
                shown(path)
            ));
        }
    }
    Ok(())
}

fn bounds(
    schema: &serde_json::Map<String, Value>,
    value: &Value,
    path: &str,
) -> Result<(), String> {
    let limit = |key: &str| schema.get(key).and_then(Value::as_f64);
    let (measure, low, high) = match value {
        Value::Number(n) => (n.as_f64(), limit("minimum"), limit("maximum")),
        Value::String(s) => (
            Some(s.chars().count() as f64),
            limit("minLength"),
            limit("maxLength"),
        ),
        Value::Array(items) => (
            Some(items.len() as f64),
            limit("minItems"),
            limit("maxItems"),
        ),
        _ => return Ok(()),
    };
    let Some(measure) = measure else {
        return Ok(());
    };
    if low.is_some_and(|low| measure < low) || high.is_some_and(|high| measure > high) {
        return Err(format!("{} is out of its schema's bounds", shown(path)));
    }
    Ok(())
}

fn type_matches(types: &Value, value: &Value) -> bool {
    let one = |name: &str| match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => true,
    };
    match types {
        Value::String(name) => one(name),
        Value::Array(names) => names.iter().filter_map(Value::as_str).any(one),
        _ => true,
    }
}

/// Run `f` with `segment` appended to `path`, then restore it.
fn within<T>(path: &mut String, segment: &str, f: impl FnOnce(&mut String) -> T) -> T {
    let len = path.len();
    path.push('/');
    path.push_str(segment);
    let result = f(path);
    path.truncate(len);
    result
}

fn shown(path: &str) -> String {
    if path.is_empty() {
        "the arguments".into()
    } else {
        format!("`{path}`")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::check;

    #[test]
    fn what_a_tool_schema_says_is_checked() {
        let schema = json!({
            "type": "object",
            "required": ["path"],
            "additionalProperties": false,
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                "mode": {"enum": ["read", "write"]},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            },
        });
        assert_eq!(
            check(&schema, &json!({"path": "a", "limit": 5, "tags": ["x"]})),
            Ok(())
        );
        for (value, problem) in [
            (json!([]), "the arguments is not of type \"object\""),
            (json!({}), "lacks the required `path`"),
            (json!({"path": ""}), "`/path` is out of its schema's bounds"),
            (json!({"path": "a", "limit": 500}), "`/limit` is out of"),
            (
                json!({"path": "a", "limit": 1.5}),
                "`/limit` is not of type \"integer\"",
            ),
            (
                json!({"path": "a", "mode": "delete"}),
                "`/mode` is not one of",
            ),
            (
                json!({"path": "a", "tags": ["x", 1]}),
                "`/tags/1` is not of type",
            ),
            (
                json!({"path": "a", "tags": ["x", "y", "z"]}),
                "`/tags` is out of",
            ),
            (
                json!({"path": "a", "either": true}),
                "`/either` matches none of its anyOf",
            ),
            (json!({"path": "a", "extra": 1}), "`/extra` is not allowed"),
        ] {
            let err = check(&schema, &value).unwrap_err();
            assert!(err.contains(problem), "{value}: {err}");
        }
        // What it does not know, it does not refuse.
        assert_eq!(
            check(&json!({"pattern": "^x$", "format": "uri"}), &json!("y")),
            Ok(())
        );
        assert_eq!(check(&json!(true), &json!({"anything": 1})), Ok(()));
    }
}
