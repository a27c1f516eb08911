//! Where agents' hooks came from: session and terminal keys (`sid:N`,
//! `tty:N`) with when a hook last came from them, so the daemon can tell a
//! person's terminal from an agent's (see `toolgate::daemon::peer`, in the server crate). Kept in
//! the store, so a restarted daemon does not forget them.

use redb::{ReadableDatabase as _, TableDefinition};

use super::RedbStore;
use crate::error::Result;
use crate::store::TerminalStore;

/// key → when an agent's hook last came from it (ms).
pub(super) const AGENT_TERMINALS: TableDefinition<&str, u64> =
    TableDefinition::new("agent_terminals");

impl TerminalStore for RedbStore {
    fn record_agent_terminals(&self, keys: &[String]) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let txn = self.db().begin_write().map_err(|e| self.error(e))?;
        {
            let mut table = txn.open_table(AGENT_TERMINALS).map_err(|e| self.error(e))?;
            for key in keys {
                table
                    .insert(key.as_str(), crate::now_ms())
                    .map_err(|e| self.error(e))?;
            }
        }
        txn.commit().map_err(|e| self.error(e))?;
        Ok(())
    }

    fn is_agent_terminal(&self, keys: &[String]) -> Result<bool> {
        let txn = self.db().begin_read().map_err(|e| self.error(e))?;
        let table = match txn.open_table(AGENT_TERMINALS) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(false),
            Err(e) => return Err(self.error(e)),
        };
        for key in keys {
            if table
                .get(key.as_str())
                .map_err(|e| self.error(e))?
                .is_some()
            {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
