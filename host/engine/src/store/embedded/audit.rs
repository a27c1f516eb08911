//! The audit chain in the redb file: links by number, and the signed head,
//! written by the writer in the decision log's transaction.

use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::RedbStore;
use crate::audit::{AuditRecord, AuditSettings, LinkHead, Pruned, SignedHead};
use crate::error::Result;
use crate::store::{AuditPage, AuditPass, AuditQueue, AuditTrail, AuditWriter};

/// seq → link (the exact bytes its hash covers).
pub(crate) const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");
/// host → the chain's signed head (JSON).
pub(crate) const AUDIT_HEAD: TableDefinition<&str, &[u8]> = TableDefinition::new("audit_head");

/// The chain's links for `decisions` (decided at, log bytes) and the
/// records waiting in `queue`, and its signed head: computed before the
/// write transaction (see [`AuditWriter::pass`]).
pub(super) fn prepare(
    db: &redb::Database,
    queue: &AuditQueue,
    writer: &mut AuditWriter,
    decisions: &[(u64, Vec<u8>)],
) -> std::result::Result<Option<AuditPass>, Box<dyn std::error::Error + Send + Sync>> {
    let host = queue.settings().map(|s| s.host).unwrap_or_default();
    let newest = || -> std::result::Result<_, redb::Error> {
        let txn = db.begin_read()?;
        let table = txn.open_table(AUDIT)?;
        let last = table.last()?;
        let last = last.map(|(seq, bytes)| (seq.value(), bytes.value().to_vec()));
        let heads = txn.open_table(AUDIT_HEAD)?;
        let head = heads.get(host.as_str())?;
        let head = head.and_then(|h| serde_json::from_slice::<SignedHead>(h.value()).ok());
        Ok((last, head))
    };
    Ok(writer.pass(queue, decisions, newest)?)
}

/// Store `pass` inside `txn`, apply the chain's retention (a prune link
/// and the head signed again when it removed links), and store the head.
pub(super) fn commit(
    txn: &redb::WriteTransaction,
    writer: &mut AuditWriter,
    mut pass: AuditPass,
) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut table = txn.open_table(AUDIT)?;
    for (seq, bytes) in &pass.links {
        table.insert(seq, bytes.as_slice())?;
    }
    if let Some((kept, removed)) = retain(&mut table, &pass.settings, crate::now_ms())? {
        let kept = kept.as_ref().map(|(seq, prev)| (*seq, prev.as_str()));
        if let Some((seq, bytes)) = writer.prune(&mut pass, kept, removed) {
            table.insert(seq, bytes.as_slice())?;
        }
    }
    let head = serde_json::to_vec(&pass.head)?;
    txn.open_table(AUDIT_HEAD)?
        .insert(pass.settings.host.as_str(), head.as_slice())?;
    Ok(())
}

/// Remove links over the count (see [`AuditSettings::excess`]) and past
/// their age, from the front; what went, if any did. The run removed must
/// chain (each link's `prev` the hash of the one before, its age read from
/// its own bytes): retention never signs a prune over links someone
/// changed — it stops, and `audit verify` shows where.
fn retain(
    table: &mut redb::Table<u64, &[u8]>,
    settings: &AuditSettings,
    now_ms: u64,
) -> std::result::Result<Option<Pruned>, redb::StorageError> {
    let excess = settings.excess(table.len()?);
    let cutoff = settings.cutoff_ms(now_ms);
    let first_is_old = table.first()?.is_some_and(|(_, bytes)| {
        serde_json::from_slice::<LinkHead>(bytes.value()).is_ok_and(|l| l.at_ms < cutoff)
    });
    if excess == 0 && !first_is_old {
        return Ok(None);
    }
    let mut run: Vec<u64> = Vec::new();
    let mut prev: Option<String> = None;
    let mut kept = None;
    for entry in table.iter()? {
        let (seq, bytes) = entry?;
        let (seq, bytes) = (seq.value(), bytes.value());
        let link = match serde_json::from_slice::<LinkHead>(bytes) {
            Ok(link) if prev.as_ref().is_none_or(|p| *p == link.prev) => link,
            _ => {
                tracing::error!(
                    seq,
                    "audit retention stopped: link {seq} does not follow the one before; run `toolgate audit verify`"
                );
                return Ok(None);
            }
        };
        if (run.len() as u64) >= excess && link.at_ms >= cutoff {
            kept = Some((seq, link.prev));
            break;
        }
        run.push(seq);
        prev = Some(crate::audit::link_hash(bytes));
    }
    let (Some(&from), Some(&to)) = (run.first(), run.last()) else {
        return Ok(None);
    };
    table.retain_in(from..=to, |_, _| false)?;
    Ok(Some((kept, run.len() as u64)))
}

impl AuditTrail for RedbStore {
    fn set_audit(&self, settings: Option<AuditSettings>) {
        self.settings.audit.set(settings);
    }

    fn audit(&self, record: AuditRecord) {
        self.settings.audit.push(record);
    }

    fn audit_links(&self, after: Option<u64>, limit: usize) -> Result<AuditPage> {
        let txn = self.db().begin_read().map_err(|e| self.error(e))?;
        let mut page = AuditPage::default();
        let table = match txn.open_table(AUDIT) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(page),
            Err(e) => return Err(self.error(e)),
        };
        let from = after.map_or(0, |seq| seq.saturating_add(1));
        for link in table.range(from..).map_err(|e| self.error(e))?.take(limit) {
            let (seq, bytes) = link.map_err(|e| self.error(e))?;
            page.links.push((
                seq.value(),
                String::from_utf8_lossy(bytes.value()).into_owned(),
            ));
        }
        let heads = match txn.open_table(AUDIT_HEAD) {
            Ok(heads) => heads,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(page),
            Err(e) => return Err(self.error(e)),
        };
        // This host's head (a redb file holds one chain; an old host name
        // may have left another head behind).
        let host = self.settings.audit.settings().map(|s| s.host);
        let head = match &host {
            Some(host) => heads.get(host.as_str()).map_err(|e| self.error(e))?,
            None => heads
                .first()
                .map_err(|e| self.error(e))?
                .map(|(_, head)| head),
        };
        page.head = head.and_then(|head| serde_json::from_slice::<SignedHead>(head.value()).ok());
        Ok(page)
    }
}
