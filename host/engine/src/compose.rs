//! The composition rules, as a pure function over plain data: no wasm, no
//! store. Policies vote in priority order:
//!
//! - the **first deny wins**, and no later policy is asked;
//! - otherwise the **first pause** wins over allow;
//! - **skip** abstains; with only allows and skips the call is allowed;
//! - **notes** of every policy that voted are kept, in order.
//!
//! A policy that failed votes as its fail mode says ([`failure_ballot`]):
//! `open` → skip with a note, `closed` → deny naming it and the cause.

use crate::config::FailMode;

/// One policy's answer. `P` is what a pause carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vote<P> {
    /// Let it run.
    Allow,
    /// Abstain.
    Skip,
    /// Refuse, with the reason the agent reads.
    Deny(String),
    /// Ask a person.
    Pause(P),
}

/// A vote with who cast it and the notes it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ballot<P> {
    /// The policy's name.
    pub policy: String,
    /// Its vote.
    pub vote: Vote<P>,
    /// Its notes for the agent.
    pub notes: Vec<String>,
}

/// The composed verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Composed<P> {
    /// Every policy allowed or abstained.
    Allow,
    /// `policy` denied: the first to do so.
    Deny {
        /// The denying policy.
        policy: String,
        /// Its reason, for the agent.
        reason: String,
    },
    /// `policy` paused (the first to), and none denied.
    Pause {
        /// The pausing policy.
        policy: String,
        /// What it asks.
        pause: P,
    },
}

/// Whether to ask the next policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Ask the next policy.
    Continue,
    /// A deny decided: ask no more.
    Stop,
}

/// Ballots so far, in priority order.
#[derive(Debug)]
pub struct Composer<P> {
    notes: Vec<(String, String)>,
    deny: Option<(String, String)>,
    pause: Option<(String, P)>,
}

impl<P> Default for Composer<P> {
    fn default() -> Self {
        Self {
            notes: Vec::new(),
            deny: None,
            pause: None,
        }
    }
}

impl<P> Composer<P> {
    /// Count one ballot; after a deny, every further ballot is ignored.
    pub fn add(&mut self, ballot: Ballot<P>) -> Next {
        if self.deny.is_some() {
            return Next::Stop;
        }
        let Ballot {
            policy,
            vote,
            notes,
        } = ballot;
        self.notes
            .extend(notes.into_iter().map(|note| (policy.clone(), note)));
        match vote {
            Vote::Deny(reason) => {
                self.deny = Some((policy, reason));
                return Next::Stop;
            }
            Vote::Pause(pause) if self.pause.is_none() => self.pause = Some((policy, pause)),
            Vote::Pause(_) | Vote::Allow | Vote::Skip => {}
        }
        Next::Continue
    }

    /// Whether a deny has decided.
    pub fn is_denied(&self) -> bool {
        self.deny.is_some()
    }

    /// The deny that decided, if one did: the policy and its reason.
    pub fn denied(&self) -> Option<(&str, &str)> {
        self.deny
            .as_ref()
            .map(|(policy, reason)| (policy.as_str(), reason.as_str()))
    }

    /// The outcome, and every note as (policy, text) in order.
    pub fn finish(self) -> (Composed<P>, Vec<(String, String)>) {
        let outcome = match (self.deny, self.pause) {
            (Some((policy, reason)), _) => Composed::Deny { policy, reason },
            (None, Some((policy, pause))) => Composed::Pause { policy, pause },
            (None, None) => Composed::Allow,
        };
        (outcome, self.notes)
    }
}

/// Compose ballots in priority order (a convenience over [`Composer`]).
pub fn compose<P>(
    ballots: impl IntoIterator<Item = Ballot<P>>,
) -> (Composed<P>, Vec<(String, String)>) {
    let mut composer = Composer::default();
    for ballot in ballots {
        if composer.add(ballot) == Next::Stop {
            break;
        }
    }
    composer.finish()
}

/// The ballot of a policy that failed, as its fail mode prescribes.
pub fn failure_ballot<P>(policy: &str, fail_mode: FailMode, failure: &str) -> Ballot<P> {
    match fail_mode {
        FailMode::Open => Ballot {
            policy: policy.to_string(),
            vote: Vote::Skip,
            notes: vec![format!(
                "toolgate: policy `{policy}` {failure} and was skipped (fail-open)"
            )],
        },
        FailMode::Closed => Ballot {
            policy: policy.to_string(),
            vote: Vote::Deny(format!(
                "toolgate: policy `{policy}` {failure}; it is fail-closed, so the call is denied. \
                 An operator can inspect it with `toolgate plugins list` and the host log."
            )),
            notes: Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ballot(policy: &str, vote: Vote<&'static str>) -> Ballot<&'static str> {
        Ballot {
            policy: policy.into(),
            vote,
            notes: vec![format!("{policy} says hi")],
        }
    }

    #[test]
    fn the_rules_as_a_table() {
        use Vote::*;
        let deny = || Deny("no".to_string());
        // (votes in priority order, the outcome, how many policies voted)
        type Case = (Vec<Vote<&'static str>>, Composed<&'static str>, usize);
        let cases: Vec<Case> = vec![
            (vec![], Composed::Allow, 0),
            (vec![Allow, Allow], Composed::Allow, 2),
            (vec![Skip, Skip], Composed::Allow, 2),
            (
                vec![Allow, deny(), Allow],
                Composed::Deny {
                    policy: "p1".into(),
                    reason: "no".into(),
                },
                2,
            ),
            (
                vec![Pause("a"), deny()],
                Composed::Deny {
                    policy: "p1".into(),
                    reason: "no".into(),
                },
                2,
            ),
            (
                vec![Allow, Pause("a"), Pause("b")],
                Composed::Pause {
                    policy: "p1".into(),
                    pause: "a",
                },
                3,
            ),
            (
                vec![Skip, Pause("a"), Allow],
                Composed::Pause {
                    policy: "p1".into(),
                    pause: "a",
                },
                3,
            ),
            (
                vec![deny(), deny()],
                Composed::Deny {
                    policy: "p0".into(),
                    reason: "no".into(),
                },
                1,
            ),
        ];
        for (votes, expected, voted) in cases {
            let ballots = votes
                .iter()
                .enumerate()
                .map(|(i, v)| ballot(&format!("p{i}"), v.clone()));
            let (outcome, notes) = compose(ballots);
            assert_eq!(outcome, expected, "{votes:?}");
            assert_eq!(
                notes.len(),
                voted,
                "notes of the policies that voted: {votes:?}"
            );
        }
    }

    #[test]
    fn fail_modes_vote_as_configured() {
        let open: Ballot<()> = failure_ballot("p", FailMode::Open, "exceeded its deadline");
        assert_eq!(open.vote, Vote::Skip);
        assert!(
            open.notes[0].contains("exceeded its deadline") && open.notes[0].contains("fail-open")
        );
        let closed: Ballot<()> = failure_ballot("p", FailMode::Closed, "trapped");
        assert!(
            matches!(closed.vote, Vote::Deny(ref r) if r.contains("`p` trapped") && r.contains("fail-closed"))
        );
    }

    fn any_vote() -> impl Strategy<Value = Vote<u8>> {
        prop_oneof![
            Just(Vote::Allow),
            Just(Vote::Skip),
            any::<u8>().prop_map(|n| Vote::Deny(format!("reason {n}"))),
            any::<u8>().prop_map(Vote::Pause),
        ]
    }

    proptest! {
        #[test]
        fn composition_follows_the_rules(votes in proptest::collection::vec(any_vote(), 0..12)) {
            let ballots = votes.iter().enumerate().map(|(i, v)| Ballot {
                policy: format!("p{i}"),
                vote: v.clone(),
                notes: vec![format!("n{i}")],
            });
            let (outcome, notes) = compose(ballots);
            let first_deny = votes.iter().position(|v| matches!(v, Vote::Deny(_)));
            let voted = first_deny.map_or(votes.len(), |i| i + 1);
            // Notes: exactly those of the policies asked, in order.
            let expected_notes: Vec<_> = (0..voted).map(|i| (format!("p{i}"), format!("n{i}"))).collect();
            prop_assert_eq!(notes, expected_notes);
            match first_deny {
                Some(i) => prop_assert_eq!(outcome, Composed::Deny {
                    policy: format!("p{i}"),
                    reason: match &votes[i] { Vote::Deny(r) => r.clone(), _ => unreachable!() },
                }),
                None => match votes.iter().position(|v| matches!(v, Vote::Pause(_))) {
                    Some(i) => prop_assert_eq!(outcome, Composed::Pause {
                        policy: format!("p{i}"),
                        pause: match votes[i] { Vote::Pause(p) => p, _ => unreachable!() },
                    }),
                    None => prop_assert_eq!(outcome, Composed::Allow),
                },
            }
        }
    }
}
