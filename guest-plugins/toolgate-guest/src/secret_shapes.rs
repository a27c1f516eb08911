//! Secrets recognisable by their shape alone, as regular expressions (the
//! `regex` crate's syntax, which `regex-lite` shares). One list for the
//! host, which keeps them out of what people and logs see, and for the
//! policies that keep them out of what the model reads (shadow-sentinel's
//! `output` phase): `toolgate-wire` includes this file.

/// The shapes, one alternative each.
pub const SECRET_SHAPES: &[&str] = &[
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
    r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{16,}",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bglpat-[A-Za-z0-9_-]{16,}",
    r"\bsk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_-]{16,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
    r"\bAIza[0-9A-Za-z_-]{35}",
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
];
