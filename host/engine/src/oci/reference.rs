//! `oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`: where a plugin lives
//! in a registry, and which version of it.

use std::fmt;

/// The scheme that names a plugin in an OCI registry.
pub const SCHEME: &str = "oci://";

/// A parsed `oci://` reference. The registry is always explicit (no
/// implied Docker Hub), so the same text names the same place everywhere.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// `host[:port]`.
    pub registry: String,
    /// `path/of/repository`, lowercase.
    pub repository: String,
    /// The tag, if one is named.
    pub tag: Option<String>,
    /// The manifest digest (`sha256:` and 64 hex digits), if pinned.
    pub digest: Option<String>,
}

impl Reference {
    /// Parse `oci://…`; the error says what is wrong and what is expected.
    pub fn parse(text: &str) -> Result<Self, String> {
        const SHAPE: &str = "expected oci://REGISTRY/REPOSITORY:TAG@sha256:DIGEST";
        let rest = text
            .strip_prefix(SCHEME)
            .ok_or_else(|| format!("`{text}` does not start with {SCHEME}; {SHAPE}"))?;
        let (name, digest) = match rest.split_once('@') {
            Some((name, digest)) => (name, Some(digest)),
            None => (rest, None),
        };
        let (registry, path) = name
            .split_once('/')
            .ok_or_else(|| format!("`{text}` names no repository; {SHAPE}"))?;
        if !is_registry(registry) {
            return Err(format!(
                "`{text}`: `{registry}` is not a registry host (HOST or HOST:PORT, lowercase); {SHAPE}"
            ));
        }
        // A tag follows the last `:` after the last `/`.
        let last = path.rsplit('/').next().unwrap_or(path);
        let (repository, tag) = match last.rsplit_once(':') {
            Some((_, tag)) => (&path[..path.len() - tag.len() - 1], Some(tag)),
            None => (path, None),
        };
        // The distribution spec's path components: lowercase alphanumerics
        // joined by `.`, `_` or `-`; never `.` or `..` alone.
        let component_ok = |part: &str| {
            let edge =
                |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
            edge(part.chars().next())
                && edge(part.chars().last())
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        };
        if !repository.split('/').all(component_ok) {
            return Err(format!(
                "`{text}`: the repository `{repository}` must be lowercase letters, digits, `.`, `_`, `-`, separated by `/`"
            ));
        }
        if let Some(tag) = tag
            && (tag.len() > 128
                || !tag
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                || !tag
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)))
        {
            return Err(format!(
                "`{text}`: the tag `{tag}` must be 1 to 128 letters, digits, `.`, `_`, `-`, not \
                 starting with `.` or `-`"
            ));
        }
        if let Some(digest) = digest
            && !digest.strip_prefix("sha256:").is_some_and(is_sha256_hex)
        {
            return Err(format!(
                "`{text}`: the digest must be sha256: and 64 hex digits (as `toolgate plugins push` prints it)"
            ));
        }
        if tag.is_none() && digest.is_none() {
            return Err(format!(
                "`{text}` names neither a tag nor a digest; {SHAPE}"
            ));
        }
        Ok(Self {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest: digest.map(str::to_ascii_lowercase),
        })
    }

    /// Whether the text names an `oci://` reference at all.
    pub fn is_oci(text: &str) -> bool {
        text.starts_with(SCHEME)
    }

    /// The same reference pinned to `digest`.
    pub fn pinned(&self, digest: &str) -> Self {
        Self {
            digest: Some(digest.to_string()),
            ..self.clone()
        }
    }

    /// Whether both name the same tag of the same repository (whatever
    /// digest each is pinned to).
    pub fn names_same_tag(&self, other: &Self) -> bool {
        (&self.registry, &self.repository, &self.tag)
            == (&other.registry, &other.repository, &other.tag)
    }

    /// Whether the registry is on this machine's loopback interface: the
    /// only place plain HTTP is used.
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => self.registry.split(':').next().unwrap_or_default(),
        };
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// As the OCI client names it (the digest wins over the tag).
    #[cfg(feature = "oci")]
    pub(crate) fn to_client(&self) -> oci_client::Reference {
        match (&self.tag, &self.digest) {
            (_, Some(digest)) => oci_client::Reference::with_digest(
                self.registry.clone(),
                self.repository.clone(),
                digest.clone(),
            ),
            (Some(tag), None) => oci_client::Reference::with_tag(
                self.registry.clone(),
                self.repository.clone(),
                tag.clone(),
            ),
            (None, None) => unreachable!("parse requires a tag or a digest"),
        }
    }
}

/// `host[:port]`: a lowercase DNS name or IPv4 address, or `[IPv6]`, and
/// an optional port.
fn is_registry(text: &str) -> bool {
    let (host, port) = match text.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((v6, port)) if v6.parse::<std::net::Ipv6Addr>().is_ok() => ("v6", port),
            _ => return false,
        },
        None => match text.find(':') {
            Some(colon) => text.split_at(colon),
            None => (text, ""),
        },
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && p.parse::<u16>().is_ok());
    let host_ok = host.split('.').all(|label| {
        !label.is_empty()
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    });
    port_ok && host_ok
}

/// 64 hex digits: a sha256 digest's hex part.
pub(crate) fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_and_print_back() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        for text in [
            "oci://127.0.0.1:5000/policies/allow:1.0".to_string(),
            format!("oci://ghcr.io/acme/toolgate/lease-gate:v2@{digest}"),
            format!("oci://localhost/x@{digest}"),
        ] {
            assert_eq!(Reference::parse(&text).unwrap().to_string(), text);
        }
        let parsed = Reference::parse("oci://[::1]:5000/a/b:c").unwrap();
        assert_eq!(
            (parsed.registry.as_str(), parsed.repository.as_str()),
            ("[::1]:5000", "a/b")
        );
        assert!(parsed.is_loopback());
        assert!(!Reference::parse("oci://ghcr.io/a:b").unwrap().is_loopback());
        assert!(
            !Reference::parse("oci://localhost.evil.example/a:b")
                .unwrap()
                .is_loopback()
        );
    }

    #[test]
    fn malformed_references_say_what_is_wrong() {
        for (text, says) in [
            ("ghcr.io/a:b", "does not start with oci://"),
            ("oci://ghcr.io", "names no repository"),
            ("oci://ghcr.io/a", "neither a tag nor a digest"),
            ("oci://ghcr.io/A:b", "must be lowercase"),
            ("oci://ghcr.io/a:b@sha256:12", "64 hex digits"),
            ("oci://ghcr.io/a:b c", "the tag"),
            ("oci://gh cr.io/a:b", "not a registry host"),
            ("oci://GHCR.io/a:b", "not a registry host"),
            ("oci://ghcr.io:/a:b", "not a registry host"),
            ("oci://[::1/a:b", "not a registry host"),
            ("oci://ghcr.io/../a:b", "must be lowercase"),
            ("oci://ghcr.io/a/./b:c", "must be lowercase"),
            ("oci://ghcr.io/-a:b", "must be lowercase"),
            ("oci://ghcr.io/a:.b", "the tag"),
            ("oci://ghcr.io/a:", "the tag"),
        ] {
            let err = Reference::parse(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
