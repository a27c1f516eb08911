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
    /// The packs' secret rules: what every call is read for.
    intake_rules: rulebook::RuleBook,
    /// The other rules, by sink: read only when a flow could reach it.
    sink_rules: Vec<reading::SinkBook>,
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
        let (intake_rules, sink_rules) =
            reading::sink_books(rulebook::RuleBook::new(Vec::new(), &[])?);
        Ok(Self {
            intake_rules,
            sink_rules,
            rules,
            trusted_servers: config.trusted_servers,
            known_remotes: config.known_remotes,
            secrets: Regex::new(&pattern).expect("the secret shapes are valid regexes"),
        })
    }

    /// Every flow from `held` into one of `sinks` a rule stops and no
    /// person approved for good, the operator's rules first.
    fn fired<'a>(
        &'a self,
        call: &ToolCall,
        held: &'a [FlowLabel],
        sinks: &'a [Sink],
    ) -> Vec<Fired<'a>> {
        self.rules
            .iter()
            .flat_map(|rule| {
                held.iter()
                    .filter(|label| rule.after.contains(&label.kind))
                    .flat_map(move |label| {
                        sinks
                            .iter()
                            .filter(|sink| rule.to.iter().any(|t| t == sink.kind))
                            .map(move |sink| Fired { rule, label, sink })
                    })
            })
            .filter(|fired| !approved(call, fired, ALWAYS))
            .collect()
    }

    /// The sinks a rule follows some of `held` (every sink when the
    /// session's labels could not be read) or `from_files` into.
    fn sinks_wanted(&self, held: Option<&[FlowLabel]>, from_files: &[FlowLabel]) -> Vec<&str> {
        let Some(held) = held else {
            return config::SINKS.to_vec();
        };
        let mut wanted: Vec<&str> = Vec::new();
        for rule in &self.rules {
            let follows = |l: &FlowLabel| rule.after.contains(&l.kind);
            if held.iter().chain(from_files).any(follows) {
                wanted.extend(rule.to.iter().map(String::as_str));
            }
        }
        wanted
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
        let by = format!("(toolgate flow: rule `{}`)", rule.name);
        if rule.action == Action::Deny {
            return Decision::deny(format!("{what}.{why} {by}"));
        }
        if call.caller.mode == ExecutionMode::Autonomous {
            return Decision::deny(format!(
                "{what}, and this agent runs with nobody to ask.{why} Do the task without \
                 sending what came from {}. {by}",
                label.source
            ));
        }
        Decision::pause_for_approval(format!("{what}.{why} {by}"), true)
    }
}

/// Whether a path is scratch space or a device, where writing changes
/// nothing of the system (`/dev/tcp` is the egress pack's).
fn scratch(path: &str) -> bool {
    ["/tmp/", "/var/tmp/", "/dev/"]
        .iter()
        .any(|dir| path.starts_with(dir))
}

/// Where `path` is, when outside the project and not scratch space.
fn outside(path: &str) -> Option<String> {
    flows::locate(path)
        .filter(|place| !place.in_project && !scratch(&place.path))
        .map(|place| place.path)
}

/// What a person said about one flow, kept in the policy's state: asked
/// (a pause named it), or approved for good.
const ASKED: &str = "asked";
const ALWAYS: &str = "always";

/// The state key of what a person said (`what`: [`ASKED`] or [`ALWAYS`])
/// about one flow: this source of this kind, to this sink, for this user.
fn flow_key(what: &str, call: &ToolCall, fired: &Fired<'_>) -> String {
    state_key(&[
        what,
        &call.caller.user_id,
        &fired.label.kind,
        &fired.label.source,
        fired.sink.kind,
        &fired.sink.target,
    ])
}

fn approved(call: &ToolCall, fired: &Fired<'_>, what: &str) -> bool {
    state::get(&flow_key(what, call, fired)).is_ok_and(|v| v.is_some())
}

/// Keep `what` a person said about a flow.
fn keep(what: &str, call: &ToolCall, fired: &Fired<'_>) {
    if let Err(err) = state::set(&flow_key(what, call, fired), b"1") {
        toolgate_guest::host::log(
            toolgate_guest::host::Level::Warn,
            &format!("flow: could not keep what a person said ({what}): {err:?}"),
        );
    }
}

/// A person's approval of this call covers exactly the flows its pauses
/// named (an "always" from any source covers nothing else): each is
/// consumed, and kept for good when they said always. The first flow no
/// pause named, if any, is asked about next.
fn unapproved<'f, 'a>(call: &ToolCall, fired: &'f [Fired<'a>]) -> Option<&'f Fired<'a>> {
    let always = call.resolutions.iter().any(|r| match r {
        Resolution::Approved(grant) => grant.always,
        _ => false,
    });
    let approved_now = call
        .resolutions
        .iter()
        .any(|r| matches!(r, Resolution::Approved(_)));
    fired.iter().find(|flow| {
        if !approved_now || !approved(call, flow, ASKED) {
            return true;
        }
        let _ = state::delete(&flow_key(ASKED, call, flow));
        if always {
            keep(ALWAYS, call, flow);
        }
        false
    })
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
        let read = rulebook::CallReading::new(call);
        let mut reading = reading::intake(
            &self.intake_rules,
            &read,
            risk,
            &self.trusted_servers,
            &self.known_remotes,
        );
        let outside_reads: Vec<String> = reading.reads.iter().filter_map(|p| outside(p)).collect();
        for place in outside_reads {
            reading.intake.push(Intake {
                kind: "untrusted",
                source: format!("{place} (outside the project)"),
                path: false,
            });
        }
        let held = flows::session_labels();
        // What the files this call reads hold was taken in by earlier
        // calls: it counts now.
        let from_files = file_labels(&reading.reads, held.as_deref().unwrap_or_default());
        // Only the sinks a rule could follow a label into matter: none
        // where nothing is held (most calls); all where the labels cannot
        // be read.
        let wanted = self.sinks_wanted(held.as_deref().ok(), &from_files);
        reading.add_sinks(&self.sink_rules, &wanted, &read);
        if wanted.contains(&"outside-write") {
            let outside_writes: Vec<String> =
                reading.writes.iter().filter_map(|p| outside(p)).collect();
            for place in outside_writes {
                reading.push_sink("outside-write", place);
            }
        }
        let held = match held {
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
        let all: Vec<FlowLabel> = held.iter().chain(&from_files).cloned().collect();
        let fired = self.fired(call, &all, &reading.sinks);
        let stop = unapproved(call, &fired).map(|flow| {
            keep(ASKED, call, flow);
            self.stop(call, flow)
        });
        // Taken in even when paused: a person may let the call run in the
        // runtime's own prompt, where toolgate does not hear it.
        let secrets = match take_in(&reading, &held, &from_files) {
            Ok(secrets) => secrets,
            Err(refusal) => return refusal,
        };
        if let Some(stop) = stop {
            return stop;
        }
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

/// The labels of the files at `paths` the session does not hold already,
/// each as the session takes it: the file (as the call named it) holding
/// the label's source. (A session reading back what it wrote learns
/// nothing new, and labels nothing again.)
fn file_labels(paths: &[String], held: &[FlowLabel]) -> Vec<FlowLabel> {
    let mut labels = Vec::new();
    for path in paths {
        for label in flows::file_labels(path).unwrap_or_default() {
            if held
                .iter()
                .any(|h| h.kind == label.kind && h.source == label.source)
            {
                continue;
            }
            labels.push(FlowLabel {
                source: format!("{path} (holding {})", label.source),
                ..label
            });
        }
    }
    labels
}

/// The most files one call labels, and the most labels it puts on each
/// (the host keeps 16 sources of a kind): past them a call would make
/// thousands of writes.
const MAX_FILES_LABELLED: usize = 16;
const MAX_LABELS_PER_FILE: usize = 32;

/// What a call adds to the labels: what it takes in and the labels of the
/// files it reads onto the session; everything the session holds onto the
/// files it writes. Returns the secrets the session did not hold before;
/// a refusal when a secret cannot be recorded (the session would then hold
/// it unseen). Other labels that cannot be written are logged.
fn take_in(
    reading: &reading::Reading,
    held: &[FlowLabel],
    from_files: &[FlowLabel],
) -> Result<Vec<String>, Decision> {
    let mut now: Vec<(String, String)> = reading
        .intake
        .iter()
        .map(|i| {
            let source = match i.path {
                true => flows::locate(&i.source).map_or_else(|| i.source.clone(), |p| p.path),
                false => i.source.clone(),
            };
            (i.kind.to_string(), source)
        })
        .collect();
    now.extend(
        from_files
            .iter()
            .map(|l| (l.kind.clone(), l.source.clone())),
    );
    now.retain(|(kind, source)| !held.iter().any(|l| &l.kind == kind && &l.source == source));
    now.dedup();
    for (kind, source) in &now {
        if let Err(err) = flows::label_session(kind, source) {
            if kind == "secret" {
                return Err(Decision::deny(format!(
                    "toolgate flow could not record that this session takes in {source} \
                     ({err:?}); ask the operator (`toolgate flows list`, `toolgate flows clear`)"
                )));
            }
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
    let all: Vec<(&str, &str)> = all.take(MAX_LABELS_PER_FILE).collect();
    let labelled = if all.is_empty() {
        0
    } else {
        MAX_FILES_LABELLED
    };
    for path in reading.writes.iter().take(labelled) {
        // A file written again mostly holds its labels already: one read
        // rather than a write attempt per label.
        let on_file = flows::file_labels(path).unwrap_or_default();
        for (kind, source) in &all {
            if !on_file
                .iter()
                .any(|l| l.kind == *kind && l.source == *source)
            {
                let _ = flows::label_file(path, kind, source);
            }
        }
    }
    Ok(now
        .into_iter()
        .filter(|(kind, _)| kind == "secret")
        .map(|(_, source)| source)
        .collect())
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
