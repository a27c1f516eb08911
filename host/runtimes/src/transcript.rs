//! Reading what a hook event points at: a runtime's transcript, or a file
//! in the project. The path comes from the event, so from the agent's
//! side: whatever it names is read only if it is a regular file, opened
//! without blocking (a FIFO or a device named as the transcript would
//! otherwise hang the reader, or feed it forever), and only up to a bound
//! (a transcript's tail), so the cost is the same whatever the file's size.
//!
//! A tenant's path (its user id says whose:
//! [`toolgate_wire::request::owner_of_user`]) is read only if the tenant
//! owns the file: the daemon reads as its own user, and must not read for an
//! agent what the agent cannot (a confused deputy). Ownership is checked on
//! the file opened, after the open, so no path swapped in between (a
//! symlink, a renamed directory) can put another file in its place; the
//! last component is not followed at all.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt};
use std::path::Path;

/// The regular file at `path`, opened without blocking, and its length;
/// with `owner`, only a file that user owns.
fn open_regular(path: &Path, owner: Option<u32>) -> std::io::Result<(std::fs::File, u64)> {
    let no_follow = if owner.is_some() { libc::O_NOFOLLOW } else { 0 };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | no_follow)
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    if let Some(owner) = owner
        && metadata.uid() != owner
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "owned by user {}, not by the caller (user {owner})",
                metadata.uid()
            ),
        ));
    }
    Ok((file, metadata.len()))
}

/// The whole regular file at `path`, if it holds at most `max` bytes.
pub fn read_small(path: &Path, max: u64) -> std::io::Result<String> {
    let (file, len) = open_regular(path, None)?;
    if len > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("larger than {max} bytes"),
        ));
    }
    let mut text = String::new();
    file.take(max).read_to_string(&mut text)?;
    Ok(text)
}

/// At most `max` bytes from the end of the regular file at `path`; with
/// `owner`, only of a file that user owns.
pub fn read_tail(path: &Path, max: u64, owner: Option<u32>) -> std::io::Result<String> {
    let (mut file, len) = open_regular(path, owner)?;
    let start = len.saturating_sub(max);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::with_capacity((len - start) as usize);
    file.take(max).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_only_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, "0123456789").unwrap();
        assert_eq!(read_tail(&path, 4, None).unwrap(), "6789");
        assert_eq!(read_tail(&path, 100, None).unwrap(), "0123456789");
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        // With no writer, a blocking open would never return.
        let err = read_tail(&fifo, 100, None).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        let err = read_tail(Path::new("/dev/zero"), 100, None).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_tenants_path_is_read_only_if_the_tenant_owns_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let own = dir.path().join("own.jsonl");
        std::fs::write(&own, "mine").unwrap();
        let me = std::fs::metadata(&own).unwrap().uid();
        assert_eq!(read_tail(&own, 100, Some(me)).unwrap(), "mine");
        // Another user's file, directly or through a symlink swapped in
        // for the caller's own, is refused whatever its mode.
        let other = me + 1;
        let err = read_tail(&own, 100, Some(other)).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&own, &link).unwrap();
        assert!(read_tail(&link, 100, Some(me)).is_err());
        assert_eq!(read_tail(&link, 100, None).unwrap(), "mine");
        // A directory on the way swapped for a symlink to another's: the
        // file opened is checked, not the path.
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::write(theirs.join("t.jsonl"), "secret").unwrap();
        let swapped = dir.path().join("swapped");
        std::os::unix::fs::symlink(&theirs, &swapped).unwrap();
        let err = read_tail(&swapped.join("t.jsonl"), 100, Some(other)).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
    }
}
