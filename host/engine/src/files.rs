//! Writing a file so that it is whole and on disk before anyone is told.

use std::io::Write as _;
use std::path::Path;

/// Replace `path` with `bytes`: written to a temporary file beside it,
/// synced, renamed over it, and the directory synced, so a crash leaves
/// the old file or the new one, never a torn one, and a caller that
/// returns has the new one on disk.
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()
}
