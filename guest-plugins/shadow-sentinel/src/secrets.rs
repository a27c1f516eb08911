//! Keeping secrets out of what the model reads: a tool's output (a file, a
//! command's output, a server's answer) with every secret of a well-known
//! shape (private keys, cloud and forge tokens: the list the host uses,
//! `toolgate_guest::secret_shapes`) replaced before the model sees it.
//!
//! Shapes only, not names: output is prose and logs, where "token: 3" is
//! rarely a secret and redacting by name would blind the model to ordinary
//! text.

use regex_lite::Regex;
use toolgate_guest::{Redaction, ResultVerdict};

/// What a secret in an output becomes.
pub const MARK: &str = "[secret redacted by toolgate]";

/// The secret shapes, compiled once per instance.
pub struct Secrets(Regex);

impl Secrets {
    pub fn new() -> Self {
        let pattern = toolgate_guest::secret_shapes::SECRET_SHAPES.join("|");
        Self(Regex::new(&pattern).expect("the secret shapes are valid regexes"))
    }

    /// Every secret in `output`, as redactions (UTF-8 byte offsets).
    pub fn spans(&self, output: &str) -> Vec<Redaction> {
        self.0
            .find_iter(output)
            .map(|found| Redaction {
                start: found.start() as u32,
                end: found.end() as u32,
                replacement: MARK.into(),
            })
            .collect()
    }

    /// The output phase's answer: redact what was found, else pass.
    pub fn verdict(&self, output: &str) -> ResultVerdict {
        let spans = self.spans(output);
        if spans.is_empty() {
            ResultVerdict::Pass
        } else {
            ResultVerdict::Redact(spans)
        }
    }
}

impl Default for Secrets {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redacted(output: &str) -> String {
        let mut text = output.to_string();
        for span in Secrets::new().spans(output).iter().rev() {
            text.replace_range(span.start as usize..span.end as usize, &span.replacement);
        }
        text
    }

    #[test]
    fn well_known_shapes_are_redacted_and_prose_is_not() {
        let output = "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n\
                      token: ghp_abcdefghijklmnopqrstuvwxyz0123456789\n\
                      -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n\
                      the build took 3 tokens of patience";
        let text = redacted(output);
        for secret in [
            "AKIAIOSFODNN7EXAMPLE",
            "ghp_abc",
            "b3BlbnNzaC1rZXk",
            "PRIVATE KEY",
        ] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(text.matches(MARK).count(), 3, "{text}");
        assert!(text.contains("AWS_ACCESS_KEY_ID="));
        assert!(text.ends_with("the build took 3 tokens of patience"));
        assert_eq!(Secrets::new().verdict("nothing here"), ResultVerdict::Pass);
    }
}
