//! Registry credentials from where container tools keep them, in this
//! order: `TOOLGATE_REGISTRY_USERNAME` and `TOOLGATE_REGISTRY_PASSWORD`
//! for the one registry `TOOLGATE_REGISTRY_HOST` names (so a config that
//! names several registries never hands one the credentials of another),
//! then the Docker config file
//! (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`): a
//! credential helper named for the registry (`credHelpers`), an inline
//! `auths` entry, or the default helper (`credsStore`). None of them: the
//! registry is asked anonymously.
//!
//! A secret never appears in an error, a log line or `Debug` output: errors
//! name the file or helper and the registry, not what they hold.

use std::path::PathBuf;

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

/// The environment variables that override every other source, for the
/// registry [`HOST_ENV`] names.
pub const USERNAME_ENV: &str = "TOOLGATE_REGISTRY_USERNAME";
/// See [`USERNAME_ENV`].
pub const PASSWORD_ENV: &str = "TOOLGATE_REGISTRY_PASSWORD";
/// The registry (`host[:port]`) the environment's credentials are for.
pub const HOST_ENV: &str = "TOOLGATE_REGISTRY_HOST";

#[derive(Deserialize, Default)]
struct DockerConfig {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, AuthEntry>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: std::collections::BTreeMap<String, String>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
}

#[derive(Deserialize)]
struct AuthEntry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    #[serde(rename = "identitytoken")]
    identity_token: Option<String>,
}

/// What a credential helper's `get` prints.
#[derive(Deserialize)]
struct HelperAnswer {
    #[serde(rename = "Username")]
    username: String,
    #[serde(rename = "Secret")]
    secret: String,
}

fn docker_config_path() -> Option<PathBuf> {
    match std::env::var_os("DOCKER_CONFIG") {
        Some(dir) => Some(PathBuf::from(dir).join("config.json")),
        None => {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker/config.json"))
        }
    }
}

/// The credentials for `registry` (`host[:port]`).
pub fn for_registry(registry: &str) -> Result<RegistryAuth, String> {
    let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    match (var(USERNAME_ENV), var(PASSWORD_ENV), var(HOST_ENV)) {
        (None, None, _) => {}
        (Some(user), Some(password), Some(host)) => {
            if host.eq_ignore_ascii_case(registry) {
                return Ok(RegistryAuth::Basic(user, password));
            }
        }
        (Some(_), Some(_), None) => {
            return Err(format!(
                "{USERNAME_ENV} and {PASSWORD_ENV} are set but {HOST_ENV} is not; set it to the \
                 registry they are for (e.g. {registry})"
            ));
        }
        _ => {
            return Err(format!(
                "only one of {USERNAME_ENV} and {PASSWORD_ENV} is set; set both (and {HOST_ENV})"
            ));
        }
    }
    let Some(path) = docker_config_path() else {
        return Ok(RegistryAuth::Anonymous);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Ok(RegistryAuth::Anonymous);
        }
        Err(err) => return Err(format!("cannot read {} ({err})", path.display())),
    };
    // serde's message could quote the file's text; say only where it is.
    let config: DockerConfig = serde_json::from_str(&text).map_err(|err| {
        format!(
            "{} is not a Docker config file (line {}, column {}); fix it or point DOCKER_CONFIG elsewhere",
            path.display(),
            err.line(),
            err.column()
        )
    })?;
    if let Some(helper) = config.cred_helpers.get(registry) {
        return from_helper(helper, registry);
    }
    let entry = config.auths.iter().find(|(key, _)| {
        let key = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        key.split('/').next() == Some(registry)
    });
    if let Some((_, entry)) = entry {
        return from_entry(entry, registry, &path);
    }
    match &config.creds_store {
        Some(helper) => from_helper(helper, registry),
        None => Ok(RegistryAuth::Anonymous),
    }
}

fn from_entry(
    entry: &AuthEntry,
    registry: &str,
    path: &std::path::Path,
) -> Result<RegistryAuth, String> {
    if entry.identity_token.is_some() {
        // An OAuth refresh token, to be exchanged at the registry's token
        // service, which this client does not do.
        return Err(format!(
            "the `auths` entry for {registry} in {} holds an identity token, which toolgate \
             cannot use; log in with a username and password (or a token as the password) instead",
            path.display()
        ));
    }
    if let (Some(user), Some(password)) = (&entry.username, &entry.password) {
        return Ok(RegistryAuth::Basic(user.clone(), password.clone()));
    }
    let bad = || {
        format!(
            "the `auths` entry for {registry} in {} is not base64 of USER:PASSWORD",
            path.display()
        )
    };
    let Some(auth) = &entry.auth else {
        return Ok(RegistryAuth::Anonymous);
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .map_err(|_| bad())?;
    let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
    let (user, password) = decoded.split_once(':').ok_or_else(bad)?;
    Ok(RegistryAuth::Basic(user.to_string(), password.to_string()))
}

/// Ask `docker-credential-HELPER get` (the Docker credential-helper
/// protocol: the registry on stdin, JSON on stdout).
fn from_helper(helper: &str, registry: &str) -> Result<RegistryAuth, String> {
    use std::io::Write as _;
    let program = format!("docker-credential-{helper}");
    let mut child = std::process::Command::new(&program)
        .arg("get")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|err| format!("cannot run the credential helper `{program}` ({err})"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(registry.as_bytes());
    }
    let output = child
        .wait_with_output()
        .map_err(|err| format!("the credential helper `{program}` failed ({err})"))?;
    if !output.status.success() {
        // Helpers exit non-zero for "no credentials for this registry".
        return Ok(RegistryAuth::Anonymous);
    }
    let answer: HelperAnswer = serde_json::from_slice(&output.stdout).map_err(|_| {
        format!("the credential helper `{program}` answered something other than its JSON")
    })?;
    Ok(if answer.username == "<token>" {
        RegistryAuth::Bearer(answer.secret)
    } else {
        RegistryAuth::Basic(answer.username, answer.secret)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_auths_entry_decodes_without_quoting_the_secret_when_broken() {
        let path = std::path::Path::new("/x/config.json");
        let entry = AuthEntry {
            auth: Some(base64::engine::general_purpose::STANDARD.encode("ops:s3cret")),
            username: None,
            password: None,
            identity_token: None,
        };
        let RegistryAuth::Basic(user, password) = from_entry(&entry, "r", path).unwrap() else {
            panic!("basic credentials expected");
        };
        assert_eq!((user.as_str(), password.as_str()), ("ops", "s3cret"));

        let broken = AuthEntry {
            auth: Some("s3cret-not-base64!".into()),
            ..entry
        };
        let err = from_entry(&broken, "r", path).unwrap_err();
        assert!(!err.contains("s3cret"), "{err}");
        assert!(err.contains("/x/config.json"), "{err}");
    }
}
