//! `toolgate store copy` from and to a redb file.

use std::collections::HashMap;

use redb::{ReadableDatabase as _, ReadableTable as _, TableDefinition, TableHandle as _};

use super::decisions::DECISIONS;
use super::gates::RESOLUTIONS;
use super::hygiene::TURN_SEEN;
use super::terminals::AGENT_TERMINALS;
use super::{EVENTS, PENDING_GATES, RedbStore, STATE, TURNS};
use crate::error::Result;
use crate::store::{Lost, Record, Transfer, stored_json};

impl RedbStore {
    /// Every row of `table` (none when the table was never created), read
    /// by `read` into a record for `sink`, with the key it names in a
    /// report of what was lost.
    fn rows<K, V>(
        &self,
        table: TableDefinition<K, V>,
        sink: &mut Sink<'_>,
        mut read: impl FnMut(K::SelfType<'_>, V::SelfType<'_>) -> (String, Result<Record>),
    ) -> Result<()>
    where
        K: redb::Key + 'static,
        V: redb::Value + 'static,
    {
        let name = table.name().to_string();
        let txn = self.db().begin_read().map_err(|e| self.error(e))?;
        let table = match txn.open_table(table) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(e) => return sink.unreadable(&name, "the whole table".into(), self.error(e)),
        };
        let entries = match table.iter() {
            Ok(entries) => entries,
            Err(e) => return sink.unreadable(&name, "the whole table".into(), self.error(e)),
        };
        let mut last = None;
        for entry in entries {
            let (key, value) = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    let rest = match last {
                        Some(key) => format!("every row after {key}"),
                        None => "every row".into(),
                    };
                    return sink.unreadable(&name, rest, self.error(e));
                }
            };
            let (key, record) = read(key.value(), value.value());
            sink.take(&name, &key, record)?;
            last = Some(key);
        }
        Ok(())
    }

    /// When each session's turn last moved (ms).
    fn turns_seen(&self) -> std::result::Result<HashMap<String, u64>, redb::Error> {
        let txn = self.db().begin_read()?;
        let table = match txn.open_table(TURN_SEEN) {
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(HashMap::new()),
            table => table?,
        };
        table
            .iter()?
            .map(|entry| {
                let (session, at) = entry?;
                Ok((session.value().to_string(), at.value()))
            })
            .collect()
    }

    /// Every record, into `sink`.
    fn export_into(&self, sink: &mut Sink<'_>) -> Result<()> {
        self.rows(STATE, sink, |(policy, key), value| {
            let record = Record::State {
                policy: policy.into(),
                key: key.into(),
                value: value.to_vec(),
            };
            (format!("{policy}/{key}"), Ok(record))
        })?;
        self.rows(PENDING_GATES, sink, |(user, thread, request_id), value| {
            let gate = stored_json(PENDING_GATES.name(), value).map(Record::Gate);
            (
                format!("user {user}, thread {thread}, request {request_id}"),
                gate,
            )
        })?;
        self.rows(RESOLUTIONS, sink, |(user, thread, fingerprint), value| {
            let recorded = stored_json(RESOLUTIONS.name(), value);
            let record = recorded.map(|recorded| Record::Resolutions {
                user_id: user.into(),
                thread_id: thread.into(),
                fingerprint: fingerprint.into(),
                recorded,
            });
            (format!("{user}/{thread}/{fingerprint}"), record)
        })?;
        // When each session's turn last moved; a time that cannot be read
        // is now.
        let seen = self.turns_seen().unwrap_or_default();
        self.rows(TURNS, sink, |session, turn| {
            let record = Record::Turn {
                session: session.into(),
                turn,
                seen_at_ms: seen.get(session).copied().unwrap_or_else(crate::now_ms),
            };
            (session.to_string(), Ok(record))
        })?;
        self.rows(AGENT_TERMINALS, sink, |key, seen_at_ms| {
            let record = Record::AgentTerminal {
                key: key.into(),
                seen_at_ms,
            };
            (key.to_string(), Ok(record))
        })?;
        self.rows(EVENTS, sink, |seq, value| {
            let event = stored_json(EVENTS.name(), value).map(Record::Event);
            (format!("event {seq}"), event)
        })?;
        self.rows(DECISIONS, sink, |seq, value| {
            let entry = stored_json(DECISIONS.name(), value).map(Record::Decision);
            (format!("entry {seq}"), entry)
        })
    }
}

/// Where exported records go, and what becomes of one that cannot be read:
/// a strict export fails on it, a salvage reports it and goes on.
struct Sink<'a> {
    each: &'a mut dyn FnMut(Record) -> Result<()>,
    lost: Option<&'a mut dyn FnMut(Lost)>,
}

impl Sink<'_> {
    /// The record at `key` of `table`, or why it could not be read.
    fn take(&mut self, table: &str, key: &str, record: Result<Record>) -> Result<()> {
        match record {
            Ok(record) => (self.each)(record),
            Err(err) => self.unreadable(table, key.to_string(), err),
        }
    }

    /// `what` of `table` could not be read.
    fn unreadable(&mut self, table: &str, what: String, err: crate::Error) -> Result<()> {
        match &mut self.lost {
            Some(lost) => {
                lost(Lost {
                    table: table.to_string(),
                    what,
                    why: err.report(),
                });
                Ok(())
            }
            None => Err(err),
        }
    }
}

impl Transfer for RedbStore {
    fn export(&self, each: &mut dyn FnMut(Record) -> Result<()>) -> Result<()> {
        self.export_into(&mut Sink { each, lost: None })
    }

    fn export_salvaging(
        &self,
        each: &mut dyn FnMut(Record) -> Result<()>,
        lost: &mut dyn FnMut(Lost),
    ) -> Result<()> {
        self.export_into(&mut Sink {
            each,
            lost: Some(lost),
        })
    }

    fn import_as_is(&self, record: Record) -> Result<()> {
        let put =
            |write: &dyn Fn(&redb::WriteTransaction) -> std::result::Result<(), redb::Error>| {
                let txn = self.db().begin_write().map_err(|e| self.error(e))?;
                write(&txn).map_err(|e| self.error(e))?;
                txn.commit().map_err(|e| self.error(e))
            };
        match record {
            Record::Resolutions {
                user_id,
                thread_id,
                fingerprint,
                recorded,
            } => {
                let bytes = serde_json::to_vec(&recorded).expect("resolutions always serialise");
                self.may_hold_resolutions
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                put(&|txn| {
                    txn.open_table(RESOLUTIONS)?.insert(
                        (user_id.as_str(), thread_id.as_str(), fingerprint.as_str()),
                        bytes.as_slice(),
                    )?;
                    Ok(())
                })
            }
            Record::Turn {
                session,
                turn,
                seen_at_ms,
            } => put(&|txn| {
                txn.open_table(TURNS)?.insert(session.as_str(), turn)?;
                txn.open_table(TURN_SEEN)?
                    .insert(session.as_str(), seen_at_ms)?;
                Ok(())
            }),
            Record::AgentTerminal { key, seen_at_ms } => put(&|txn| {
                txn.open_table(AGENT_TERMINALS)?
                    .insert(key.as_str(), seen_at_ms)?;
                Ok(())
            }),
            // Everything else has a common path.
            other => self.import(other),
        }
    }
}
