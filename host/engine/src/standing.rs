//! Standing approvals: a person's "always", kept as a rule the operator
//! can read.
//!
//! When a person approves a pause "always" (`toolgate gates resolve
//! --always`, the inbox's *Approve always*) and the pausing policy offered
//! it, the host appends a rule to `[approvals] always_file` (default
//! `STORE.always.toml`, beside the store): the policy, the user, the tool,
//! the project (the working directory the runtime reported) and a digest
//! of what the call does. The same call, by the same user's agents, in that
//! project or below, then reaches that policy already approved, so an
//! ordinary call a person has judged never asks twice.
//!
//! Security: the file sits in toolgate's control plane (self-protection
//! refuses any tool call that names it), so an agent can neither add a rule
//! nor widen one; only a person's authenticated answer writes it, durably,
//! before the answer is acknowledged. A rule matches one exact call (its
//! digest), never a pattern: widening is the operator's to do, in a
//! policy's own rules. Deleting an entry takes it back.

use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::gates::{GateResolution, PauseKind, PendingGate, RecordedResolution};
use crate::request::ToolRequest;
use crate::{Error, Result};

/// Arguments that describe a call rather than change what it does: Claude
/// Code's and Gemini CLI's `description` of a shell command, its `timeout`.
/// The same command described otherwise is the same call.
const COSMETIC_ARGUMENTS: &[&str] = &["description", "timeout"];

/// How often the file is looked at again for an operator's edit.
const RECHECK: Duration = Duration::from_secs(1);

/// What a call does, as a standing approval matches it: a digest of its
/// tool, origin and arguments less the [`COSMETIC_ARGUMENTS`] (hex).
pub fn call_digest(request: &ToolRequest) -> String {
    let mut arguments = request.arguments.clone();
    if let Some(object) = arguments.as_object_mut() {
        for key in COSMETIC_ARGUMENTS {
            object.remove(*key);
        }
    }
    let mut hash = Sha256::new();
    hash.update(request.tool.as_bytes());
    hash.update([0]);
    hash.update(request.origin.key().as_bytes());
    hash.update([0]);
    hash.update(arguments.to_string().as_bytes());
    hex::encode(hash.finalize())
}

/// One standing approval, as the file holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlwaysRule {
    /// The policy whose pause it answers.
    pub policy: String,
    /// The user whose agents it covers.
    pub user: String,
    /// The tool.
    pub tool: String,
    /// Where it holds: this directory and below. Absent: only calls for
    /// which the runtime reports no working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<PathBuf>,
    /// [`call_digest`] of the call it approves.
    pub call: String,
    /// The call's arguments (secrets redacted), for a person reading this
    /// file; matching uses `call`.
    pub arguments: String,
    /// What the policy asked.
    pub asked: String,
    /// Who approved it (the channel), and when (RFC 3339).
    pub approved_by: String,
    /// When it was approved.
    pub approved_at: String,
}

impl AlwaysRule {
    /// The rule a person's "always" for `gate` makes, if the gate can have
    /// one: its policy offered "always", and the call was not rewritten
    /// (an approval holds for the arguments it would run with).
    pub fn for_gate(gate: &PendingGate, channel: &str) -> Option<Self> {
        let PauseKind::Approval {
            description,
            allow_always: true,
        } = &gate.pause
        else {
            return None;
        };
        if gate.rewritten_sha256.is_some() {
            return None;
        }
        Some(Self {
            policy: gate.policy.clone(),
            user: gate.user_id.clone(),
            tool: gate.tool.clone(),
            project: gate.project.clone(),
            call: gate.always_digest.clone()?,
            arguments: gate.arguments.clone(),
            asked: description.clone(),
            approved_by: channel.to_string(),
            approved_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        })
    }

    /// Whether `other` approves the very calls this rule does (a second
    /// "always" for one call adds no entry).
    fn approves_the_same_as(&self, other: &AlwaysRule) -> bool {
        (
            &self.policy,
            &self.user,
            &self.tool,
            &self.project,
            &self.call,
        ) == (
            &other.policy,
            &other.user,
            &other.tool,
            &other.project,
            &other.call,
        )
    }

    /// Whether it approves `request`, whose digest is `digest`.
    fn covers(&self, request: &ToolRequest, digest: &str) -> bool {
        self.user == request.user_id
            && self.tool == request.tool
            && self.call == digest
            && match (&self.project, &request.cwd) {
                (Some(project), Some(cwd)) => cwd.starts_with(project),
                (None, None) => true,
                _ => false,
            }
    }

    /// The resolution it stands for, as a policy sees it.
    fn resolution(&self) -> RecordedResolution {
        RecordedResolution {
            policy: self.policy.clone(),
            resolution: GateResolution::Approve { always: true },
            request_id: String::new(),
            expires_at_ms: u64::MAX,
            by: format!("always ({} at {})", self.approved_by, self.approved_at),
            at_ms: 0,
            policy_sha256: String::new(),
            rewritten_sha256: None,
        }
    }
}

/// The file's shape.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AlwaysFile {
    #[serde(default)]
    always: Vec<AlwaysRule>,
}

/// The standing approvals of one host, read from their file and kept in
/// step with it.
#[derive(Debug)]
pub struct StandingApprovals {
    /// None: the host keeps none (an "always" approves once).
    path: Option<PathBuf>,
    loaded: RwLock<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    rules: Vec<AlwaysRule>,
    /// The file's modification time when read (None: no file).
    modified: Option<SystemTime>,
    checked: Instant,
}

impl StandingApprovals {
    /// Read the standing approvals at `path` (none yet if it does not
    /// exist). A file that cannot be read or parsed is an error naming it.
    pub fn open(path: Option<PathBuf>) -> Result<Self> {
        let (rules, modified) = match &path {
            Some(path) => read(path)?,
            None => (Vec::new(), None),
        };
        Ok(Self {
            path,
            loaded: RwLock::new(Loaded {
                rules,
                modified,
                checked: Instant::now(),
            }),
        })
    }

    /// The file, if this host keeps standing approvals.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The resolutions standing approvals give `request` (empty for most
    /// calls: the digest is computed only when a rule could match).
    pub fn for_call(&self, request: &ToolRequest) -> Vec<RecordedResolution> {
        self.refresh();
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        let mut candidates = loaded
            .rules
            .iter()
            .filter(|r| r.user == request.user_id && r.tool == request.tool)
            .peekable();
        if candidates.peek().is_none() {
            return Vec::new();
        }
        let digest = call_digest(request);
        candidates
            .filter(|r| r.covers(request, &digest))
            .map(AlwaysRule::resolution)
            .collect()
    }

    /// Append `rule` to the file, durably, before returning: what a person
    /// was told is remembered must survive a crash. A file an operator left
    /// unreadable is an error, and is not overwritten.
    pub fn remember(&self, rule: AlwaysRule) -> Result<PathBuf> {
        let Some(path) = &self.path else {
            return Err(Error::Request(
                "this host keeps no standing approvals (set [approvals] always_file); the call \
                 was approved once"
                    .into(),
            ));
        };
        let mut loaded = self.loaded.write().unwrap_or_else(|p| p.into_inner());
        let (mut rules, _) = read(path)?;
        if rules.iter().any(|kept| kept.approves_the_same_as(&rule)) {
            return Ok(path.clone());
        }
        let mut text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => HEADER.to_string(),
            Err(err) => return Err(file_error(path, format!("cannot read it: {err}"))),
        };
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        let entry = toml::to_string(&AlwaysFile {
            always: vec![rule.clone()],
        })
        .map_err(|err| file_error(path, format!("cannot write the rule: {err}")))?;
        text.push('\n');
        text.push_str(&entry);
        crate::files::write_durably(path, text.as_bytes())
            .map_err(|err| file_error(path, format!("cannot write it: {err}")))?;
        rules.push(rule);
        *loaded = Loaded {
            rules,
            modified: modified(path),
            checked: Instant::now(),
        };
        Ok(path.clone())
    }

    /// Re-read the file now (`toolgate plugins reload`). A file that no longer
    /// parses keeps no rule (every call asks again, which is safe) and is
    /// the error returned.
    pub fn reload(&self) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut loaded = self.loaded.write().unwrap_or_else(|p| p.into_inner());
        loaded.checked = Instant::now();
        let read = read(path);
        loaded.modified = modified(path);
        match read {
            Ok((rules, _)) => {
                loaded.rules = rules;
                Ok(())
            }
            Err(err) => {
                loaded.rules = Vec::new();
                Err(err)
            }
        }
    }

    /// Re-read the file when an operator changed it (looked at once a
    /// second at most); an error is logged (see [`Self::reload`]).
    fn refresh(&self) {
        let Some(path) = &self.path else { return };
        {
            let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
            if loaded.checked.elapsed() < RECHECK {
                return;
            }
        }
        let stale = {
            let mut loaded = self.loaded.write().unwrap_or_else(|p| p.into_inner());
            loaded.checked = Instant::now();
            modified(path) != loaded.modified
        };
        if stale && let Err(err) = self.reload() {
            tracing::error!(error = %err, "standing approvals dropped until the file is fixed");
        }
    }

    /// Every standing approval, as the file holds them.
    pub fn rules(&self) -> Vec<AlwaysRule> {
        self.refresh();
        self.loaded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .rules
            .clone()
    }
}

/// What a new file starts with.
const HEADER: &str = "\
# toolgate's standing approvals: each entry is a person's \"always\" for one
# exact call (its digest) by one user's agents in one project. toolgate
# appends them; delete an entry to take it back. See the book, \"Approving
# calls\".
";

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The rules in `path` and its modification time (none if it does not
/// exist).
fn read(path: &Path) -> Result<(Vec<AlwaysRule>, Option<SystemTime>)> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), None)),
        Err(err) => return Err(file_error(path, format!("cannot read it: {err}"))),
    };
    let file: AlwaysFile = toml::from_str(&text).map_err(|err| {
        file_error(
            path,
            format!(
                "it is not a list of standing approvals ({}); fix the entry or delete the file \
                 (every call then asks again)",
                err.to_string().trim()
            ),
        )
    })?;
    Ok((file.always, modified(path)))
}

fn file_error(path: &Path, message: String) -> Error {
    Error::Config {
        path: path.display().to_string(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(command: &str, description: &str, cwd: Option<&str>) -> ToolRequest {
        let mut request: ToolRequest = serde_json::from_value(json!({
            "tool": "Bash",
            "arguments": {"command": command, "description": description},
            "user_id": "alice",
        }))
        .unwrap();
        request.cwd = cwd.map(PathBuf::from);
        request
    }

    fn rule(request: &ToolRequest, project: Option<&str>) -> AlwaysRule {
        AlwaysRule {
            policy: "safeguards".into(),
            user: request.user_id.clone(),
            tool: request.tool.clone(),
            project: project.map(PathBuf::from),
            call: call_digest(request),
            arguments: request.arguments.to_string(),
            asked: "publish?".into(),
            approved_by: "terminal".into(),
            approved_at: "2026-12-04T00:00:00Z".into(),
        }
    }

    #[test]
    fn a_rule_covers_the_same_call_described_otherwise_in_its_project_and_below() {
        let dir = tempfile::tempdir().unwrap();
        let approvals = StandingApprovals::open(Some(dir.path().join("always.toml"))).unwrap();
        let approved = request("npm publish", "Publish", Some("/home/alice/app"));
        approvals
            .remember(rule(&approved, Some("/home/alice/app")))
            .unwrap();

        let again = request(
            "npm publish",
            "Publish the package",
            Some("/home/alice/app/web"),
        );
        assert_eq!(approvals.for_call(&again).len(), 1);
        // Approved "always" again later: still one entry.
        let mut later = rule(&approved, Some("/home/alice/app"));
        later.approved_at = "2026-12-05T00:00:00Z".into();
        approvals.remember(later).unwrap();
        assert_eq!(approvals.rules().len(), 1);
        for other in [
            request("npm publish --tag next", "Publish", Some("/home/alice/app")),
            request("npm publish", "Publish", Some("/home/alice/other")),
            request("npm publish", "Publish", Some("/home/alice/application")),
            request("npm publish", "Publish", None),
        ] {
            assert!(approvals.for_call(&other).is_empty(), "{other:?}");
        }
        let mut bob = again.clone();
        bob.user_id = "bob".into();
        assert!(approvals.for_call(&bob).is_empty());
    }

    #[test]
    fn the_file_survives_a_restart_keeps_an_operators_comments_and_refuses_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("always.toml");
        std::fs::write(&path, "# reviewed weekly by ops\n").unwrap();
        let approved = request("npm publish", "Publish", Some("/srv/app"));
        StandingApprovals::open(Some(path.clone()))
            .unwrap()
            .remember(rule(&approved, Some("/srv/app")))
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# reviewed weekly by ops\n"), "{text}");
        let reopened = StandingApprovals::open(Some(path.clone())).unwrap();
        assert_eq!(reopened.for_call(&approved).len(), 1);

        std::fs::write(&path, "[[always]]\npolicy = 3\n").unwrap();
        let err = StandingApprovals::open(Some(path.clone())).unwrap_err();
        assert!(err.to_string().contains("delete the file"), "{err}");
        let err = reopened.reload().unwrap_err();
        assert!(err.to_string().contains("delete the file"), "{err}");
        assert!(
            reopened.for_call(&approved).is_empty(),
            "a damaged file keeps no rule"
        );
        let err = reopened.remember(rule(&approved, None)).unwrap_err();
        assert!(err.to_string().contains("always.toml"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "[[always]]\npolicy = 3\n"
        );
    }
}
