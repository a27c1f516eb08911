//! The audit trail: a hash chain over what toolgate decided and what people
//! approved, with checkpoints signed by this host's key, so that an edit,
//! a deletion, a reordering or an insertion is found by `toolgate audit
//! verify` — even by someone who can write the store but not read the key.
//!
//! A link is stored as the exact bytes of one JSON object,
//! `{"seq":N,"at_ms":T,"kind":"decision","prev":"<hex>","body":{…}}`, and
//! its hash is the sha256 of those bytes; `prev` is the previous link's hash
//! (the first link's is [`GENESIS`]). The body of a decision is its
//! decision-log entry, so arguments are kept as the log keeps them (a digest
//! by default): secrets never enter the chain.
//!
//! The chain's end is signed after every commit ([`SignedHead`]) and a
//! `checkpoint` link is appended every `checkpoint_every` links; retention
//! removes links from the front only, and appends a signed `prune` link
//! saying what the first kept link's `prev` is. What a signature cannot
//! prove: that the newest links were not all removed together with the head
//! by someone who kept an older signed head. Exporting the trail as it is
//! written (OTLP, syslog) keeps a copy out of the agent's reach.

use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The `prev` of the first link ever written.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What a signature covers: this prefix, what the signature is for (its
/// [`Purpose`]), the link's sequence number and its hash, so no other signature
/// of this key passes for one — a checkpoint's is not a head's.
const DOMAIN: &str = "toolgate-audit-v1";

/// What a signature vouches for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The chain's newest link, after a commit.
    Head,
    /// The link before a checkpoint link.
    Checkpoint,
    /// The link before the first kept one, after retention removed links.
    Prune,
}

impl Purpose {
    fn name(self) -> &'static str {
        match self {
            Self::Head => "head",
            Self::Checkpoint => "checkpoint",
            Self::Prune => "prune",
        }
    }
}

/// What a link records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// A decision (its body is the decision-log entry).
    Decision,
    /// A person approved a paused call.
    Approval,
    /// A person refused a paused call.
    Refusal,
    /// The config and plugins were reloaded (the plugins' digests).
    Reload,
    /// A plugin's rollout changed in a reload.
    Rollout,
    /// The chain so far, signed.
    Checkpoint,
    /// Links removed from the front by retention, signed.
    Prune,
}

impl AuditKind {
    /// The name in a link and in exports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Decision => "decision",
            Self::Approval => "approval",
            Self::Refusal => "refusal",
            Self::Reload => "reload",
            Self::Rollout => "rollout",
            Self::Checkpoint => "checkpoint",
            Self::Prune => "prune",
        }
    }
}

/// A link's fields, its body left unread.
#[derive(Debug, Clone, Deserialize)]
pub struct LinkHead {
    /// Its place in the chain, from 0.
    pub seq: u64,
    /// When it was written (ms since the epoch).
    pub at_ms: u64,
    /// What it records.
    pub kind: AuditKind,
    /// The previous link's hash.
    pub prev: String,
}

/// A link, read whole.
#[derive(Debug, Clone, Deserialize)]
pub struct Link {
    /// Its place in the chain, from 0.
    pub seq: u64,
    /// When it was written (ms since the epoch).
    pub at_ms: u64,
    /// What it records.
    pub kind: AuditKind,
    /// The previous link's hash.
    pub prev: String,
    /// What it records, as JSON.
    pub body: serde_json::Value,
}

/// A record waiting for the writer to chain it.
#[derive(Debug, Clone)]
pub struct AuditRecord {
    /// What it records.
    pub kind: AuditKind,
    /// When (ms since the epoch).
    pub at_ms: u64,
    /// Its body: one JSON value.
    pub body: Vec<u8>,
}

impl AuditRecord {
    /// A record of `kind` now with `body`.
    pub fn now(kind: AuditKind, body: &serde_json::Value) -> Self {
        Self {
            kind,
            at_ms: crate::now_ms(),
            body: serde_json::to_vec(body).expect("JSON values always serialise"),
        }
    }
}

/// The hash of a stored link: the sha256 of its bytes, hex.
pub fn link_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The bytes of a link; `body` is one JSON value.
fn encode(seq: u64, at_ms: u64, kind: AuditKind, prev: &str, body: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(body.len() + 140);
    bytes.extend_from_slice(
        format!(
            r#"{{"seq":{seq},"at_ms":{at_ms},"kind":"{}","prev":"{prev}","body":"#,
            kind.name()
        )
        .as_bytes(),
    );
    bytes.extend_from_slice(body);
    bytes.push(b'}');
    bytes
}

/// The audit settings a store's writer follows (from `[audit]`).
#[derive(Debug, Clone)]
pub struct AuditSettings {
    /// Whose chain this is: one chain per host on a shared store.
    pub host: String,
    /// The key that signs checkpoints, prunes and the head.
    pub key: AuditKey,
    /// Keep at most this many links (retention removes from the front).
    pub max_entries: u64,
    /// Remove links older than this.
    pub max_age_secs: u64,
    /// A signed checkpoint link after this many links.
    pub checkpoint_every: u64,
}

impl AuditSettings {
    /// How many links to remove from the front of a chain of `len`: none
    /// until it is a tenth (or a checkpoint interval) over `max_entries`,
    /// then down to `max_entries`, so a full chain is not pruned (and a
    /// prune link signed) on every commit.
    pub fn excess(&self, len: u64) -> u64 {
        let slack = (self.max_entries / 10).max(self.checkpoint_every).max(1);
        if len > self.max_entries.saturating_add(slack) {
            len - self.max_entries
        } else {
            0
        }
    }

    /// Links written before this are past their age.
    pub fn cutoff_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.max_age_secs.saturating_mul(1000))
    }
}

/// What retention removed: the first kept link's number and `prev` (none
/// if every link went), and how many went.
pub type Pruned = (Option<(u64, String)>, u64);

/// The end of the chain a writer appends to.
#[derive(Debug, Clone)]
pub struct Chain {
    next_seq: u64,
    head: String,
}

/// A link to store: its sequence number and bytes.
pub type Stored = (u64, Vec<u8>);

impl Chain {
    /// The chain whose newest stored link is `last` (its key and bytes;
    /// none: a new chain) and whose signed head is `head`. The bytes are
    /// hashed, not read: a damaged newest link is chained on from (and
    /// `verify` names it), not a reason to stop writing the log. A valid
    /// head (signed by `key`) at or past `last` wins: links changed or cut
    /// off while toolgate was stopped are then not built upon as if whole —
    /// the next link follows what was signed, and `verify` shows the break.
    pub fn resume(last: Option<(u64, &[u8])>, head: Option<&SignedHead>, key: &AuditKey) -> Self {
        let signed = head.filter(|head| {
            let valid = head.check(&key.public_hex(), Purpose::Head).is_ok();
            if !valid {
                tracing::error!(
                    seq = head.seq,
                    "the audit chain's head is not signed by this host's key; ignored"
                );
            }
            valid && last.is_none_or(|(seq, _)| head.seq >= seq)
        });
        match (signed, last) {
            (Some(head), last) => {
                if last.is_none_or(|(seq, bytes)| seq != head.seq || link_hash(bytes) != head.hash)
                {
                    tracing::error!(
                        seq = head.seq,
                        "the newest audit links differ from the signed head; the chain goes on from the head (run `toolgate audit verify`)"
                    );
                }
                Self {
                    next_seq: head.seq.saturating_add(1),
                    head: head.hash.clone(),
                }
            }
            (None, None) => Self {
                next_seq: 0,
                head: GENESIS.to_string(),
            },
            (None, Some((seq, bytes))) => Self {
                next_seq: seq.saturating_add(1),
                head: link_hash(bytes),
            },
        }
    }

    /// Append `record`, and a checkpoint after it when one is due (every
    /// link whose number is a multiple of `checkpoint_every` is one, so a
    /// writer that resumes each pass still writes them); the links to store,
    /// in order.
    pub fn append(&mut self, record: &AuditRecord, settings: &AuditSettings) -> Vec<Stored> {
        self.append_body(record.at_ms, record.kind, &record.body, settings)
    }

    /// [`Chain::append`] for a record given by its parts.
    pub fn append_body(
        &mut self,
        at_ms: u64,
        kind: AuditKind,
        body: &[u8],
        settings: &AuditSettings,
    ) -> Vec<Stored> {
        let mut links = vec![self.link(at_ms, kind, body)];
        if self
            .next_seq
            .is_multiple_of(settings.checkpoint_every.max(1))
        {
            let body = settings
                .key
                .sign(Purpose::Checkpoint, self.next_seq - 1, &self.head);
            let body = serde_json::to_vec(&body).expect("signatures always serialise");
            links.push(self.link(at_ms, AuditKind::Checkpoint, &body));
        }
        links
    }

    /// The link saying `removed` links were removed from the front: `kept`
    /// is the first kept link's number and `prev` (none: every link went).
    pub fn prune(&mut self, kept: Option<(u64, &str)>, removed: u64, key: &AuditKey) -> Stored {
        let (kept_from, prev) = kept.unwrap_or((self.next_seq, &self.head));
        let mut statement = key.sign(Purpose::Prune, kept_from.saturating_sub(1), prev);
        statement.removed = Some(removed);
        let body = serde_json::to_vec(&statement).expect("signatures always serialise");
        self.link(crate::now_ms(), AuditKind::Prune, &body)
    }

    fn link(&mut self, at_ms: u64, kind: AuditKind, body: &[u8]) -> Stored {
        let seq = self.next_seq;
        let bytes = encode(seq, at_ms, kind, &self.head, body);
        self.head = link_hash(&bytes);
        self.next_seq += 1;
        (seq, bytes)
    }

    /// The newest link's number and hash, none before the first.
    pub fn head(&self) -> Option<(u64, &str)> {
        self.next_seq
            .checked_sub(1)
            .map(|seq| (seq, self.head.as_str()))
    }
}

/// This host's audit key (ed25519).
#[derive(Clone)]
pub struct AuditKey {
    key: SigningKey,
}

impl std::fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditKey")
            .field("public", &self.public_hex())
            .finish()
    }
}

impl AuditKey {
    /// The key in `path` (64 hex digits), made (readable by its owner only)
    /// with its public half in `PATH.pub` when there is none.
    pub fn load_or_create(path: &std::path::Path) -> std::io::Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let seed: [u8; 32] = hex::decode(text.trim())
                    .ok()
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| {
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!(
                                "{} is not an audit key (64 hex digits); move it aside and a new \
                                 key is made (the chain so far then verifies with the old public \
                                 key only)",
                                path.display()
                            ),
                        )
                    })?;
                Ok(Self {
                    key: SigningKey::from_bytes(&seed),
                })
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Self::create(path),
            Err(err) => Err(err),
        }
    }

    fn create(path: &std::path::Path) -> std::io::Result<Self> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let (secret, public) = crate::signing::generate();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        // create_new: two processes opening at once keep one key.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(mut file) => {
                file.write_all(secret.as_bytes())?;
                file.sync_all()?;
                std::fs::write(public_path(path), format!("{public}\n"))?;
                Self::load_or_create(path)
            }
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                Self::load_or_create(path)
            }
            Err(err) => Err(err),
        }
    }

    /// The public key, hex: what `audit verify --key` trusts.
    pub fn public_hex(&self) -> String {
        hex::encode(self.key.verifying_key().to_bytes())
    }

    /// A signed statement, for `role`, that the link `seq` has hash `hash`.
    pub fn sign(&self, role: Purpose, seq: u64, hash: &str) -> SignedHead {
        let signature = self.key.sign(&message(role, seq, hash));
        SignedHead {
            seq,
            hash: hash.to_string(),
            key: self.public_hex(),
            signature: hex::encode(signature.to_bytes()),
            removed: None,
        }
    }
}

/// Where the public half of the key at `key` is written.
pub fn public_path(key: &std::path::Path) -> std::path::PathBuf {
    let mut path = key.as_os_str().to_owned();
    path.push(".pub");
    path.into()
}

fn message(role: Purpose, seq: u64, hash: &str) -> Vec<u8> {
    format!("{DOMAIN}\n{}\n{seq}\n{hash}", role.name()).into_bytes()
}

/// A signed statement that link `seq` has hash `hash`: the chain's head, a
/// checkpoint link's body, a prune link's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedHead {
    /// The link.
    pub seq: u64,
    /// Its hash.
    pub hash: String,
    /// The public key that signed (hex).
    pub key: String,
    /// The ed25519 signature (hex).
    pub signature: String,
    /// For a prune: how many links it removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<u64>,
}

impl SignedHead {
    /// Whether `trusted` (a public key, hex) signed this, for `role`.
    pub fn check(&self, trusted: &str, role: Purpose) -> Result<(), String> {
        if !self.key.eq_ignore_ascii_case(trusted.trim()) {
            return Err(format!(
                "signed by key {}, not the trusted key {}",
                self.key,
                trusted.trim()
            ));
        }
        let key: [u8; 32] = hex::decode(trusted.trim())
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or("the trusted key is not 64 hex digits")?;
        let key = VerifyingKey::from_bytes(&key).map_err(|_| "the trusted key is not ed25519")?;
        let signature: [u8; 64] = hex::decode(&self.signature)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or("the signature is not 128 hex digits")?;
        key.verify(
            &message(role, self.seq, &self.hash),
            &Signature::from_bytes(&signature),
        )
        .map_err(|_| "the signature does not match".to_string())
    }
}

/// Where the chain breaks: the first link that does not follow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the audit chain is broken at link {seq}: {why}")]
pub struct Broken {
    /// The first link found wrong (or, for a missing link, where it was).
    pub seq: u64,
    /// What is wrong.
    pub why: String,
}

/// What a verification found whole.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verified {
    /// Links checked.
    pub links: u64,
    /// The first link checked.
    pub first: Option<u64>,
    /// The last link checked.
    pub last: Option<u64>,
    /// Signed checkpoints (and prunes) checked.
    pub checkpoints: u64,
    /// Whether the chain's signed head was checked (the range reached the
    /// newest link).
    pub head_signed: bool,
}

/// Checks links in order, as they are read (a page at a time).
#[derive(Debug)]
pub struct Verifier {
    trusted: String,
    /// The previous link's number and hash.
    prev: Option<(u64, String)>,
    /// The first link's number and `prev`, until a prune vouches for it.
    unvouched: Option<(u64, String)>,
    found: Verified,
}

impl Verifier {
    /// A verifier trusting the public key `trusted` (hex); `before` is the
    /// number and hash of the link before the first one it will see, when
    /// checking a range that starts after the chain's start.
    pub fn new(trusted: &str, before: Option<(u64, String)>) -> Self {
        Self {
            trusted: trusted.trim().to_string(),
            prev: before,
            unvouched: None,
            found: Verified::default(),
        }
    }

    /// Check the next link, stored under `key` as `bytes`.
    pub fn next(&mut self, key: u64, bytes: &[u8]) -> Result<(), Broken> {
        let broken = |why: String| Broken { seq: key, why };
        let link: Link = serde_json::from_slice(bytes)
            .map_err(|err| broken(format!("it cannot be read ({err})")))?;
        if link.seq != key {
            return Err(broken(format!(
                "it says it is link {} (moved or reordered)",
                link.seq
            )));
        }
        match &self.prev {
            Some((seq, _)) if key != seq + 1 => {
                let why = match key.checked_sub(seq + 2) {
                    Some(0) => format!("link {} is missing", seq + 1),
                    Some(_) => format!("links {} to {} are missing", seq + 1, key - 1),
                    None => format!("it comes after link {seq} (reordered)"),
                };
                return Err(Broken { seq: seq + 1, why });
            }
            Some((_, hash)) if *hash != link.prev => {
                return Err(broken(format!(
                    "its `prev` is not the hash of link {} (that link or this one was edited, \
                     or this one was inserted)",
                    key - 1
                )));
            }
            Some(_) => {}
            None if key == 0 && link.prev != GENESIS => {
                return Err(broken("the first link does not start from genesis".into()));
            }
            None if key == 0 => {}
            None => self.unvouched = Some((key, link.prev.clone())),
        }
        let hash = link_hash(bytes);
        match link.kind {
            AuditKind::Checkpoint => {
                let signed = self.signed(key, &link.body, Purpose::Checkpoint)?;
                if signed.seq + 1 != key || signed.hash != link.prev {
                    return Err(broken(
                        "the checkpoint signs another link than the one before it".into(),
                    ));
                }
                self.found.checkpoints += 1;
            }
            AuditKind::Prune => {
                let signed = self.signed(key, &link.body, Purpose::Prune)?;
                if let Some((first, prev)) = &self.unvouched
                    && signed.seq + 1 == *first
                {
                    if signed.hash != *prev {
                        return Err(Broken {
                            seq: *first,
                            why: "its `prev` is not what the signed prune says".into(),
                        });
                    }
                    self.unvouched = None;
                }
                self.found.checkpoints += 1;
            }
            _ => {}
        }
        self.found.first.get_or_insert(key);
        self.found.last = Some(key);
        self.found.links += 1;
        self.prev = Some((key, hash));
        Ok(())
    }

    fn signed(
        &self,
        key: u64,
        body: &serde_json::Value,
        role: Purpose,
    ) -> Result<SignedHead, Broken> {
        let broken = |why: String| Broken { seq: key, why };
        let signed: SignedHead = serde_json::from_value(body.clone())
            .map_err(|err| broken(format!("its signature cannot be read ({err})")))?;
        signed.check(&self.trusted, role).map_err(broken)?;
        Ok(signed)
    }

    /// The end of what was read. `head` is the chain's signed head when the
    /// links read reach the newest one (`None`: they stop before it); at the
    /// end, a chain with links and no readable head is broken, and links
    /// whose predecessors are gone must be vouched for by a signed prune.
    pub fn finish(mut self, head: Option<Option<&SignedHead>>) -> Result<Verified, Broken> {
        let Some(head) = head else {
            return Ok(self.found);
        };
        if let Some((first, _)) = &self.unvouched {
            return Err(Broken {
                seq: *first,
                why: "links before it are gone and no signed prune says so".into(),
            });
        }
        let head = match (head, &self.prev) {
            (Some(head), _) => head,
            (None, None) => return Ok(self.found),
            (None, Some((seq, _))) => {
                return Err(Broken {
                    seq: *seq,
                    why: "the chain's signed head is missing or unreadable".into(),
                });
            }
        };
        let end = || Broken {
            seq: head.seq,
            why: String::new(),
        };
        head.check(&self.trusted, Purpose::Head)
            .map_err(|why| Broken {
                why: format!("the signed head: {why}"),
                ..end()
            })?;
        match &self.prev {
            Some((seq, hash)) if *seq == head.seq && *hash == head.hash => {}
            Some((seq, _)) if *seq == head.seq => {
                return Err(Broken {
                    why: "it is not the link the head signs (edited after signing)".into(),
                    ..end()
                });
            }
            Some((seq, _)) if *seq > head.seq => {
                return Err(Broken {
                    seq: head.seq + 1,
                    why: format!(
                        "links {}..={seq} come after the signed head (added)",
                        head.seq + 1
                    ),
                });
            }
            _ => {
                return Err(Broken {
                    why: "the signed head names a link that is not there (the newest links were removed)".into(),
                    ..end()
                });
            }
        }
        self.found.head_signed = true;
        Ok(self.found)
    }
}

/// The machine's host name (`localhost` when it has none): whose chain
/// this is unless `[audit] host` names another.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(name) if ok && !name.is_empty() => name.to_string(),
        _ => "localhost".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(key: &AuditKey) -> AuditSettings {
        AuditSettings {
            host: "h".into(),
            key: key.clone(),
            max_entries: 100,
            max_age_secs: 3600,
            checkpoint_every: 4,
        }
    }

    fn key() -> AuditKey {
        let dir = tempfile::tempdir().unwrap();
        AuditKey::load_or_create(&dir.path().join("audit.key")).unwrap()
    }

    /// `n` decision links (with checkpoints), and the signed head.
    fn chain(key: &AuditKey, n: u64) -> (Vec<Stored>, SignedHead) {
        let mut chain = Chain::resume(None, None, key);
        let mut links = Vec::new();
        for i in 0..n {
            let record = AuditRecord {
                kind: AuditKind::Decision,
                at_ms: 1000 + i,
                body: format!(r#"{{"call_id":"c{i}","tool":"Bash"}}"#).into_bytes(),
            };
            links.extend(chain.append(&record, &settings(key)));
        }
        let (seq, hash) = chain.head().unwrap();
        (links, key.sign(Purpose::Head, seq, hash))
    }

    fn verify(key: &AuditKey, links: &[Stored], head: &SignedHead) -> Result<Verified, Broken> {
        let mut verifier = Verifier::new(&key.public_hex(), None);
        for (seq, bytes) in links {
            verifier.next(*seq, bytes)?;
        }
        verifier.finish(Some(Some(head)))
    }

    #[test]
    fn a_whole_chain_verifies_with_its_checkpoints_and_head() {
        let key = key();
        let (links, head) = chain(&key, 10);
        let found = verify(&key, &links, &head).unwrap();
        assert_eq!(
            found.links, 13,
            "10 decisions and checkpoints at 4, 8 and 12"
        );
        assert_eq!(found.checkpoints, 3);
        assert!(found.head_signed);
    }

    #[test]
    fn an_edited_link_is_found() {
        let key = key();
        let (mut links, head) = chain(&key, 10);
        let edited = String::from_utf8(links[3].1.clone())
            .unwrap()
            .replace("Bash", "Read");
        links[3].1 = edited.into_bytes();
        assert_eq!(verify(&key, &links, &head).unwrap_err().seq, 4);
        // the newest link edited: only the head's signature shows it
        let (mut links, head) = chain(&key, 9);
        let last = links.last_mut().unwrap();
        last.1 = String::from_utf8(last.1.clone())
            .unwrap()
            .replace(r#""c8""#, r#""c0""#)
            .into_bytes();
        let broken = verify(&key, &links, &head).unwrap_err();
        assert!(broken.why.contains("edited after signing"), "{broken}");
    }

    #[test]
    fn a_deleted_link_is_found() {
        let key = key();
        let (mut links, head) = chain(&key, 10);
        links.remove(5);
        let broken = verify(&key, &links, &head).unwrap_err();
        assert_eq!(broken.seq, 5, "{broken}");
        assert!(broken.why.contains("missing"), "{broken}");
        // the newest removed, with the head left as it was
        let (mut links, head) = chain(&key, 10);
        links.pop();
        let broken = verify(&key, &links, &head).unwrap_err();
        assert!(broken.why.contains("removed"), "{broken}");
    }

    #[test]
    fn reordered_links_are_found() {
        let key = key();
        let (mut links, head) = chain(&key, 10);
        // swap the stored bytes of two places
        let (a, b) = (links[2].1.clone(), links[3].1.clone());
        links[2].1 = b;
        links[3].1 = a;
        let broken = verify(&key, &links, &head).unwrap_err();
        assert_eq!(broken.seq, 2, "{broken}");
        assert!(broken.why.contains("reordered"), "{broken}");
    }

    #[test]
    fn an_inserted_link_is_found_even_with_the_chain_rehashed_after_it() {
        let key = key();
        let (links, head) = chain(&key, 6);
        // rebuild from link 3 on with one more decision in between, as
        // someone without the key would: every hash follows, but no
        // signature of the trusted key
        let mut forged: Vec<Stored> = links[..3].to_vec();
        let mut chain = Chain::resume(Some((2, &forged[2].1)), None, &key);
        let unsigned = AuditSettings {
            checkpoint_every: 100,
            ..settings(&self::key())
        };
        let bodies = ["forged", "c3", "c4", "c5"].map(|id| format!(r#"{{"call_id":"{id}"}}"#));
        for body in bodies {
            let record = AuditRecord {
                kind: AuditKind::Decision,
                at_ms: 5,
                body: body.as_bytes().to_vec(),
            };
            forged.extend(chain.append(&record, &unsigned));
        }
        let broken = verify(&key, &forged, &head).unwrap_err();
        assert_eq!(
            forged.len(),
            links.len(),
            "as long as the chain it replaces"
        );
        assert!(broken.why.contains("edited after signing"), "{broken}");
        // and a head signed with another key is refused
        let (seq, hash) = chain.head().unwrap();
        let other = self::key().sign(Purpose::Head, seq, hash);
        let broken = verify(&key, &forged, &other).unwrap_err();
        assert!(broken.why.contains("not the trusted key"), "{broken}");
    }

    #[test]
    fn links_removed_from_the_front_verify_only_with_a_signed_prune() {
        let key = key();
        let (links, _) = chain(&key, 10);
        let kept = &links[5..];
        let (last, bytes) = links.last().unwrap();
        let mut tail = Chain::resume(Some((*last, bytes)), None, &key);
        let first: LinkHead = serde_json::from_slice(&kept[0].1).unwrap();
        let prune = tail.prune(Some((first.seq, &first.prev)), 5, &key);
        let mut with_prune = kept.to_vec();
        with_prune.push(prune);
        let (seq, hash) = tail.head().unwrap();
        let head = key.sign(Purpose::Head, seq, hash);
        verify(&key, &with_prune, &head).unwrap();
        // the same front removed without one
        let (links, head) = chain(&key, 10);
        let broken = verify(&key, &links[5..], &head).unwrap_err();
        assert_eq!(broken.seq, 5);
        assert!(broken.why.contains("no signed prune"), "{broken}");
    }

    #[test]
    fn a_checkpoint_signature_does_not_pass_for_the_head_of_a_cut_chain() {
        let key = key();
        let (links, _) = chain(&key, 10);
        // Cut everything from the checkpoint at 8 on, and make its signature
        // (over link 7) the head.
        let checkpoint: Link = serde_json::from_slice(&links[8].1).unwrap();
        let forged_head: SignedHead = serde_json::from_value(checkpoint.body).unwrap();
        assert_eq!(forged_head.seq, 7);
        let broken = verify(&key, &links[..8], &forged_head).unwrap_err();
        assert!(broken.why.contains("signature does not match"), "{broken}");
    }

    #[test]
    fn a_chain_whose_head_is_gone_is_broken() {
        let key = key();
        let (links, _) = chain(&key, 5);
        let mut verifier = Verifier::new(&key.public_hex(), None);
        for (seq, bytes) in &links {
            verifier.next(*seq, bytes).unwrap();
        }
        let broken = verifier.finish(Some(None)).unwrap_err();
        assert!(broken.why.contains("head is missing"), "{broken}");
        // An empty chain with no head proves nothing and breaks nothing.
        let empty = Verifier::new(&key.public_hex(), None);
        assert_eq!(empty.finish(Some(None)).unwrap().links, 0);
    }

    #[test]
    fn a_key_file_that_is_not_a_key_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.key");
        std::fs::write(&path, "not hex").unwrap();
        let err = AuditKey::load_or_create(&path).unwrap_err().to_string();
        assert!(err.contains("is not an audit key"), "{err}");
        std::fs::remove_file(&path).unwrap();
        let made = AuditKey::load_or_create(&path).unwrap();
        assert_eq!(
            std::fs::read_to_string(public_path(&path)).unwrap().trim(),
            made.public_hex()
        );
        assert_eq!(
            AuditKey::load_or_create(&path).unwrap().public_hex(),
            made.public_hex()
        );
    }
}
