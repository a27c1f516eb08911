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
    let newest = || -> std::result::Result<Option<Vec<u8>>, String> {
        let read = || -> std::result::Result<Option<Vec<u8>>, redb::Error> {
            let txn = db.begin_read()?;
            let table = txn.open_table(AUDIT)?;
            Ok(table.last()?.map(|(_, bytes)| bytes.value().to_vec()))
        };
        read().map_err(|e| e.to_string())
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
/// their age, from the front; what went, if any did.
fn retain(
    table: &mut redb::Table<u64, &[u8]>,
    settings: &AuditSettings,
    now_ms: u64,
) -> std::result::Result<Option<Pruned>, redb::StorageError> {
    let before = table.len()?;
    let first = table.first()?.map(|(seq, _)| seq.value());
    let excess = settings.excess(before);
    if let Some(first) = first.filter(|_| excess > 0) {
        // Links are numbered without gaps: these are the oldest over.
        table.retain_in(first..first + excess, |_, _| false)?;
    }
    let cutoff = settings.cutoff_ms(now_ms);
    let first = loop {
        let Some((seq, link)) = table.first()?.map(|(seq, bytes)| {
            (
                seq.value(),
                serde_json::from_slice::<LinkHead>(bytes.value()),
            )
        }) else {
            break None;
        };
        match link {
            Ok(link) if link.at_ms >= cutoff => break Some((seq, link.prev)),
            _ => {
                table.remove(seq)?;
            }
        }
    };
    let removed = before - table.len()?;
    Ok((removed > 0).then_some((first, removed)))
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
        // One process writes a redb file: its chain is the only one.
        if let Some((_, head)) = heads.first().map_err(|e| self.error(e))? {
            page.head = serde_json::from_slice::<SignedHead>(head.value()).ok();
        }
        Ok(page)
    }
}
