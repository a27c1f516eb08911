//! `toolgate gates`: calls paused for a person.

use std::process::ExitCode;

use toolgate::daemon::DaemonRequest;
use toolgate::gates::{GateResolution, PendingGate};

use crate::target::Target;

#[derive(clap::Subcommand)]
pub enum GatesCommand {
    /// List pending (unexpired) gates as JSON lines.
    List {
        /// Only this user's.
        #[arg(long)]
        user: Option<String>,
    },
    /// Resolve a pending gate. The channel must be the one the call came
    /// from, or a trusted one (config `trusted_channels`).
    Resolve {
        /// The gate's user.
        #[arg(long)]
        user: String,
        /// The gate's thread.
        #[arg(long)]
        thread: String,
        /// The request id from the pause decision.
        #[arg(long)]
        request_id: String,
        /// The channel resolving it.
        #[arg(long)]
        channel: String,
        /// What the person decided.
        #[arg(long, value_enum)]
        decision: DecisionArg,
        /// With `approve`: remember it for this action.
        #[arg(long)]
        always: bool,
        /// With `authenticated`: the credential supplied.
        #[arg(long)]
        credential: Option<String>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum DecisionArg {
    /// Approve the call.
    Approve,
    /// The credential is now available.
    Authenticated,
    /// Refuse the call.
    Deny,
}

pub fn run(target: &Target, command: GatesCommand) -> anyhow::Result<ExitCode> {
    match command {
        GatesCommand::List { user } => {
            let gates: Vec<PendingGate> =
                serde_json::from_value(target.call(DaemonRequest::Gates { user })?)?;
            for gate in gates {
                println!("{}", serde_json::to_string(&gate)?);
            }
        }
        GatesCommand::Resolve {
            user,
            thread,
            request_id,
            channel,
            decision,
            always,
            credential,
        } => {
            let resolution = match decision {
                DecisionArg::Approve => GateResolution::Approve { always },
                DecisionArg::Deny => GateResolution::Deny,
                DecisionArg::Authenticated => GateResolution::Authenticated {
                    credential: credential.ok_or_else(|| {
                        anyhow::anyhow!("--decision authenticated needs --credential NAME")
                    })?,
                },
            };
            let gate = target.call(DaemonRequest::Resolve {
                user,
                thread,
                request_id,
                channel,
                resolution,
            })?;
            println!("{gate}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
