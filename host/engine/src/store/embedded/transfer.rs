//! `toolgate store copy` from and to a redb file.

use redb::{ReadableDatabase as _, ReadableTable as _, TableDefinition, TableHandle as _};

use super::decisions::DECISIONS;
use super::gates::RESOLUTIONS;
use super::hygiene::TURN_SEEN;
use super::terminals::AGENT_TERMINALS;
use super::{EVENTS, GATES, RedbStore, STATE, TURNS};
use crate::error::Result;
use crate::store::{Record, Transfer, stored_json};

impl RedbStore {
    /// Every row of `table`, or none when the table was never created.
    fn rows<K, V, T>(
        &self,
        table: TableDefinition<K, V>,
        mut each: impl FnMut(K::SelfType<'_>, V::SelfType<'_>) -> Result<T>,
    ) -> Result<()>
    where
        K: redb::Key + 'static,
        V: redb::Value + 'static,
    {
        let txn = self.db().begin_read().map_err(|e| self.error(e))?;
        let table = match txn.open_table(table) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(e) => return Err(self.error(e)),
        };
        for entry in table.iter().map_err(|e| self.error(e))? {
            let (key, value) = entry.map_err(|e| self.error(e))?;
            each(key.value(), value.value())?;
        }
        Ok(())
    }
}

impl Transfer for RedbStore {
    fn export(&self, each: &mut dyn FnMut(Record) -> Result<()>) -> Result<()> {
        self.rows(STATE, |(policy, key), value| {
            each(Record::State {
                policy: policy.into(),
                key: key.into(),
                value: value.to_vec(),
            })
        })?;
        self.rows(GATES, |_, value| {
            each(Record::Gate(stored_json(GATES.name(), value)?))
        })?;
        self.rows(RESOLUTIONS, |(user, thread, fingerprint), value| {
            each(Record::Resolutions {
                user_id: user.into(),
                thread_id: thread.into(),
                fingerprint: fingerprint.into(),
                recorded: stored_json(RESOLUTIONS.name(), value)?,
            })
        })?;
        let mut seen = std::collections::HashMap::new();
        self.rows(TURN_SEEN, |session, at| {
            seen.insert(session.to_string(), at);
            Ok(())
        })?;
        self.rows(TURNS, |session, turn| {
            each(Record::Turn {
                session: session.into(),
                turn,
                seen_at_ms: seen.get(session).copied().unwrap_or_else(crate::now_ms),
            })
        })?;
        self.rows(AGENT_TERMINALS, |key, seen_at_ms| {
            each(Record::AgentTerminal {
                key: key.into(),
                seen_at_ms,
            })
        })?;
        self.rows(EVENTS, |_, value| {
            each(Record::Event(stored_json(EVENTS.name(), value)?))
        })?;
        self.rows(DECISIONS, |_, value| {
            each(Record::Decision(stored_json(DECISIONS.name(), value)?))
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
