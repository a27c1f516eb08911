//! `toolgate store copy` from and to a PostgreSQL database.

use super::client::{Param, Queries as _, Row};
use super::{PostgresStore, i64_of};
use crate::error::Result;
use crate::store::{Record, Transfer, stored_json};

/// Rows are read in pages, so a large store is never held in memory whole.
const PAGE: i64 = 1000;

impl PostgresStore {
    /// Every row of `query` (which takes the last seen key as `$1` and the
    /// page size as `$2`, ordered by that key), page by page.
    fn pages(
        &self,
        query: &str,
        first: i64,
        key_of: impl Fn(&Row) -> i64,
        mut each: impl FnMut(&Row) -> Result<()>,
    ) -> Result<()> {
        let mut after = first;
        loop {
            let rows = self
                .pool
                .for_maintenance()?
                .query(query, &[&after, &PAGE])
                .map_err(|e| self.pool.error(e))?;
            for row in &rows {
                each(row)?;
            }
            match rows.last() {
                Some(last) if rows.len() as i64 == PAGE => after = key_of(last),
                _ => return Ok(()),
            }
        }
    }

    /// Every row of a small table.
    fn all(&self, query: &str, each: impl FnMut(&Row) -> Result<()>) -> Result<()> {
        let rows = self
            .pool
            .for_maintenance()?
            .query(query, &[])
            .map_err(|e| self.pool.error(e))?;
        rows.iter().try_for_each(each)
    }
}

impl Transfer for PostgresStore {
    fn export(&self, each: &mut dyn FnMut(Record) -> Result<()>) -> Result<()> {
        self.all(
            "SELECT policy, key, value FROM state ORDER BY policy, key",
            |row| {
                each(Record::State {
                    policy: row.get(0),
                    key: row.get(1),
                    value: row.get(2),
                })
            },
        )?;
        self.all("SELECT body FROM gates", |row| {
            each(Record::Gate(stored_json(
                "gates",
                &row.get::<_, Vec<u8>>(0),
            )?))
        })?;
        let mut calls: Vec<(String, String, String, Vec<_>)> = Vec::new();
        self.all(
            "SELECT user_id, thread_id, fingerprint, body FROM resolutions \
             ORDER BY user_id, thread_id, fingerprint, seq",
            |row| {
                let call: (String, String, String) = (row.get(0), row.get(1), row.get(2));
                let recorded = stored_json("resolutions", &row.get::<_, Vec<u8>>(3))?;
                match calls.last_mut() {
                    Some((u, t, f, list)) if (&*u, &*t, &*f) == (&call.0, &call.1, &call.2) => {
                        list.push(recorded)
                    }
                    _ => calls.push((call.0, call.1, call.2, vec![recorded])),
                }
                Ok(())
            },
        )?;
        for (user_id, thread_id, fingerprint, recorded) in calls {
            each(Record::Resolutions {
                user_id,
                thread_id,
                fingerprint,
                recorded,
            })?;
        }
        self.all("SELECT session_id, turn, seen_at_ms FROM turns", |row| {
            each(Record::Turn {
                session: row.get(0),
                turn: row.get::<_, i64>(1) as u64,
                seen_at_ms: row.get::<_, i64>(2) as u64,
            })
        })?;
        self.all("SELECT key, seen_at_ms FROM agent_terminals", |row| {
            each(Record::AgentTerminal {
                key: row.get(0),
                seen_at_ms: row.get::<_, i64>(1) as u64,
            })
        })?;
        let seq = |row: &Row| row.get::<_, i64>(0);
        self.pages(
            "SELECT seq, body FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
            0,
            seq,
            |row| {
                each(Record::Event(stored_json(
                    "events",
                    &row.get::<_, Vec<u8>>(1),
                )?))
            },
        )?;
        self.pages(
            "SELECT seq, body FROM decisions WHERE seq > $1 ORDER BY seq LIMIT $2",
            0,
            seq,
            |row| {
                each(Record::Decision(stored_json(
                    "decisions",
                    &row.get::<_, Vec<u8>>(1),
                )?))
            },
        )
    }

    fn import_as_is(&self, record: Record) -> Result<()> {
        let execute = |query: &str, params: &[Param<'_>]| {
            self.pool
                .for_maintenance()?
                .execute(query, params)
                .map(drop)
                .map_err(|e| self.pool.error(e))
        };
        match record {
            Record::Resolutions {
                user_id,
                thread_id,
                fingerprint,
                recorded,
            } => recorded.iter().try_for_each(|r| {
                let body = serde_json::to_vec(r).expect("resolutions always serialise");
                execute(
                    "INSERT INTO resolutions (user_id, thread_id, fingerprint, expires_at_ms, body) \
                     VALUES ($1, $2, $3, $4, $5)",
                    &[
                        &user_id,
                        &thread_id,
                        &fingerprint,
                        &i64_of(r.expires_at_ms),
                        &body,
                    ],
                )
            }),
            Record::Turn {
                session,
                turn,
                seen_at_ms,
            } => execute(
                "INSERT INTO turns (session_id, turn, seen_at_ms) VALUES ($1, $2, $3) \
                 ON CONFLICT (session_id) DO UPDATE SET turn = EXCLUDED.turn, \
                 seen_at_ms = EXCLUDED.seen_at_ms",
                &[&session, &i64_of(turn), &i64_of(seen_at_ms)],
            ),
            Record::AgentTerminal { key, seen_at_ms } => execute(
                "INSERT INTO agent_terminals (key, seen_at_ms) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET seen_at_ms = EXCLUDED.seen_at_ms",
                &[&key, &i64_of(seen_at_ms)],
            ),
            // Everything else has a common path.
            other => self.import(other),
        }
    }
}
