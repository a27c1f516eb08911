//! Reading what a hook event points at: a runtime's transcript, or a file
//! in the project. The path comes from the event, so from the agent's
//! side: whatever it names is read only if it is a regular file, opened
//! without blocking (a FIFO or a device named as the transcript would
//! otherwise hang the reader, or feed it forever), and only up to a bound
//! (a transcript's tail), so the cost is the same whatever the file's size.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The regular file at `path`, opened without blocking, and its length.
fn open_regular(path: &Path) -> std::io::Result<(std::fs::File, u64)> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok((file, metadata.len()))
}

/// The whole regular file at `path`, if it holds at most `max` bytes.
pub(crate) fn read_small(path: &Path, max: u64) -> std::io::Result<String> {
    let (file, len) = open_regular(path)?;
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

/// At most `max` bytes from the end of the regular file at `path`.
pub(crate) fn read_tail(path: &Path, max: u64) -> std::io::Result<String> {
    let (mut file, len) = open_regular(path)?;
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
        assert_eq!(read_tail(&path, 4).unwrap(), "6789");
        assert_eq!(read_tail(&path, 100).unwrap(), "0123456789");
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
        let err = read_tail(&fifo, 100).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        let err = read_tail(Path::new("/dev/zero"), 100).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    }
}
