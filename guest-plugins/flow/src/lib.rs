//! flow: what a session took in decides what it may send.
//!
//! Each call is read for what it takes in — a **secret** (a key file, a
//! credential store, an env file, a token command, a token in a tool's
//! output) or **untrusted** text (a web page, an MCP server's answer, a
//! fetch) — and for its **sinks**: where it would send data (network
//! tools, a push to a remote not known, an exfil-capable MCP tool) or what
//! it would change (the system, what runs later, destruction, a file
//! outside the project). What a session took in is kept by the host as
//! labels on the session, and on every file the session then writes, so a
//! secret copied into `notes.txt` is still a secret when another session
//! reads it.
//!
//! A rule (`after = "secret"`, `to = ["egress", …]`) pauses a call to a
//! sink once its session took in what the rule follows, naming what was
//! read and when. A person's approval is bound to the flow — this source to
//! this sink — not to the tool; "always" keeps it for later calls of the
//! same flow. Only earlier calls count: a call is judged on what its session
//! held before it, and what it takes in counts from the next call on.
//!
//! Fail-closed by default: labels it cannot read are a flow it cannot rule
//! out.

pub mod config;
pub mod reading;
mod when;

use config::{Action, FlowConfig, Rule};
use reading::{Intake, Sink};
use regex_lite::Regex;
use toolgate_guest::host::flows::{self, FlowLabel};
use toolgate_guest::host::state;

use toolgate_guest::{
    BudgetStatus, CheckOutput, Config, ConfigError, Decision, ExecutionMode, FailMode, Policy,
    PolicyInfo, Resolution, ResultVerdict, Risk, ToolCall, ToolResult, state_key,
};

/// The policy, opened.
pub struct Flow {
    book: rulebook::RuleBook,
    rules: Vec<Rule>,
    trusted_servers: Vec<String>,
    known_remotes: Vec<String>,
    secrets: Regex,
}

/// A rule that fired: the label it followed into the sink.
struct Fired<'a> {
    rule: &'a Rule,
    label: &'a FlowLabel,
    sink: &'a Sink,
}

impl Flow {
    /// Build from the config.
    pub fn from_config(mut config: FlowConfig) -> Result<Self, ConfigError> {
        let rules = config::rules(&mut config)?;
        let pattern = toolgate_guest::secret_shapes::SECRET_SHAPES.join("|");
        Ok(Self {
            book: rulebook::RuleBook::new(Vec::new(), &[])?,
            rules,
            trusted_servers: config.trusted_servers,
            known_remotes: config.known_remotes,
            secrets: Regex::new(&pattern).expect("the secret shapes are valid regexes"),
        })
    }

    /// The first flow from `held` into one of `sinks` a rule stops and no
    /// person approved for good.
    fn fired<'a>(
        &'a self,
        call: &ToolCall,
        held: &'a [FlowLabel],
        sinks: &'a [Sink],
    ) -> Option<Fired<'a>> {
        self.rules.iter().find_map(|rule| {
            held.iter()
                .filter(|label| rule.after.contains(&label.kind))
                .flat_map(|label| {
                    sinks
                        .iter()
                        .filter(|sink| rule.to.iter().any(|t| t == sink.kind))
                        .map(move |sink| Fired { rule, label, sink })
                })
                .find(|fired| !approved_for_good(call, fired))
        })
    }

    /// The verdict on a flow that fired.
    fn stop(&self, call: &ToolCall, fired: &Fired<'_>) -> Decision {
        let Fired { rule, label, sink } = fired;
        let what = format!(
            "This session took in {} ({}, {}); {} {} needs a person",
            label.source,
            label.kind,
            when::said(label.at_ms),
            match sink.kind {
                "egress" | "exfil-capable" => "sending to",
                "publish" => "publishing to",
                "outside-write" => "writing outside the project to",
                _ => "changing",
            },
            sink.target,
        );
        let why = rule
            .reason
            .as_deref()
            .map_or(String::new(), |r| format!(" {r}"));
        let said = format!("{what}.{why} (toolgate flow: rule `{}`)", rule.name);
        if rule.action == Action::Deny {
            return Decision::deny(said);
        }
        if call.caller.mode == ExecutionMode::Autonomous {
            return Decision::deny(format!(
                "{said}, and this agent runs with nobody to ask. Do the task without sending \
                 what came from {}, or ask the person to approve it.",
                label.source
            ));
        }
        Decision::pause_for_approval(said, true)
    }
}

/// Whether a path is scratch space or a device, where writing changes
/// nothing of the system (`/dev/tcp` is the egress pack's).
fn scratch(path: &str) -> bool {
    ["/tmp/", "/var/tmp/", "/dev/"]
        .iter()
        .any(|dir| path.starts_with(dir))
}

/// The state key of a person's "always" for one flow: this source of this
/// kind, to this sink, for this user.
fn flow_key(call: &ToolCall, label: &FlowLabel, sink: &Sink) -> String {
    state_key(&[
        "always",
        &call.caller.user_id,
        &label.kind,
        &label.source,
        sink.kind,
        &sink.target,
    ])
}

fn approved_for_good(call: &ToolCall, fired: &Fired<'_>) -> bool {
    state::get(&flow_key(call, fired.label, fired.sink)).is_ok_and(|v| v.is_some())
}

impl Policy for Flow {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: "flow".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "follows what a session took in (secrets, untrusted text) across calls, \
                          sessions and files, and asks a person before it leaves or changes the \
                          system"
                .into(),
            default_fail_mode: FailMode::Closed,
            commands: Vec::new(),
        }
    }

    fn open(config: Config) -> Result<Self, ConfigError> {
        Self::from_config(config.parse()?)
    }

    fn decide(&self, call: &ToolCall, risk: &Risk, _budget: &BudgetStatus) -> Decision {
        let mut reading = reading::read(
            &self.book,
            call,
            risk,
            &self.trusted_servers,
            &self.known_remotes,
        );
        for path in &reading.reads.clone() {
            if let Some(place) = flows::locate(path)
                && !place.in_project
                && !scratch(&place.path)
            {
                reading.intake.push(Intake {
                    kind: "untrusted",
                    source: format!("{} (outside the project)", place.path),
                    path: false,
                });
            }
        }
        for path in &reading.writes.clone() {
            if let Some(place) = flows::locate(path)
                && !place.in_project
                && !scratch(&place.path)
            {
                reading.push_sink("outside-write", place.path);
            }
        }
        let held = match flows::session_labels() {
            Ok(held) => held,
            // Nothing to send or change: nothing to rule out.
            Err(err) if reading.sinks.is_empty() => {
                toolgate_guest::host::log(
                    toolgate_guest::host::Level::Warn,
                    &format!("flow: could not read the session's labels: {err:?}"),
                );
                Vec::new()
            }
            Err(err) => {
                return Decision::deny(format!(
                    "toolgate flow could not read what this session took in ({err:?}); try \
                     again, or ask the operator to look at the store"
                ));
            }
        };
        if let Some(fired) = self.fired(call, &held, &reading.sinks) {
            let approved = call.resolutions.iter().find_map(|r| match r {
                Resolution::Approved(grant) => Some(grant.always),
                _ => None,
            });
            match approved {
                Some(always) => {
                    if always {
                        let key = flow_key(call, fired.label, fired.sink);
                        let _ = state::set(&key, b"1");
                    }
                }
                None => return self.stop(call, &fired),
            }
        }
        let secrets = take_in(&reading.intake, &reading.reads, &reading.writes, &held);
        match secrets.is_empty() {
            true => Decision::allow(),
            // Said once, when the session takes the secret in, so the
            // agent can plan around it rather than meet a pause later.
            false => Decision::allow().with_note(format!(
                "toolgate flow: this session now holds {}; sending data out of this machine \
                 from here on needs a person",
                secrets.join(", ")
            )),
        }
    }
}

/// What an allowed call adds to the labels: what it takes in and the
/// labels of the files it reads onto the session; everything the session
/// holds onto the files it writes. A label that cannot be written is
/// logged: the call has been judged on what was held before it. Returns
/// the secrets the session did not hold before.
fn take_in(
    intake: &[Intake],
    reads: &[String],
    writes: &[String],
    held: &[FlowLabel],
) -> Vec<String> {
    let mut now: Vec<(String, String)> = intake
        .iter()
        .map(|i| {
            let source = match i.path {
                true => flows::locate(&i.source).map_or_else(|| i.source.clone(), |p| p.path),
                false => i.source.clone(),
            };
            (i.kind.to_string(), source)
        })
        .collect();
    for path in reads {
        for label in flows::file_labels(path).unwrap_or_default() {
            now.push((label.kind, format!("{path} (holding {})", label.source)));
        }
    }
    now.retain(|(kind, source)| !held.iter().any(|l| &l.kind == kind && &l.source == source));
    for (kind, source) in &now {
        if let Err(err) = flows::label_session(kind, source) {
            toolgate_guest::host::log(
                toolgate_guest::host::Level::Warn,
                &format!("flow: could not label the session with {kind} {source}: {err:?}"),
            );
        }
    }
    let all = held
        .iter()
        .map(|l| (l.kind.as_str(), l.source.as_str()))
        .chain(now.iter().map(|(k, s)| (k.as_str(), s.as_str())));
    for (kind, source) in all {
        for path in writes {
            let _ = flows::label_file(path, kind, source);
        }
    }
    now.into_iter()
        .filter(|(kind, _)| kind == "secret")
        .map(|(_, source)| source)
        .collect()
}

impl CheckOutput for Flow {
    /// A token in a tool's output is a secret the session now holds; the
    /// output itself is left as it is (redacting is another policy's job).
    fn check_output(&self, result: &ToolResult) -> ResultVerdict {
        if self.secrets.is_match(&result.output) {
            let source = format!("a token in the output of {}", result.call.tool);
            let _ = flows::label_session("secret", &source);
        }
        ResultVerdict::Pass
    }
}

toolgate_guest::export_policy!(Flow, check_output);
