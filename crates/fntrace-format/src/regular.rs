//! Opening input files that must be regular files: traces, and the object
//! files a trace names (paths from a trace are untrusted). A FIFO would
//! block `open(2)` forever, a character device such as `/dev/zero` reads
//! without end; both are rejected before anything reads them, and files
//! read whole are bounded.

use std::fs::{File, FileType, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// Largest file [`read_regular`] reads into memory by default (object
/// files of the exports and listings): 2 GiB.
pub const MAX_READ_BYTES: u64 = 2 << 30;

/// What a file of type `ft` is, for messages ("a directory", "a FIFO").
pub fn file_kind(ft: FileType) -> &'static str {
    if ft.is_file() {
        "a regular file"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

/// What the file of metadata `m` is, for messages.
fn kind(m: &Metadata) -> &'static str {
    file_kind(m.file_type())
}

/// `Err` (kind `InvalidInput`, "not a regular file (a FIFO)") unless `m`
/// is a regular file's.
fn regular(m: &Metadata) -> io::Result<()> {
    if m.is_file() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({})", kind(m)),
        ))
    }
}

/// The metadata of `path` (following symbolic links) if it is a regular
/// file; an error saying what it is otherwise. Nothing is opened: this is
/// the check to make before handing a path to code that opens it itself.
pub fn check_regular(path: &Path) -> io::Result<Metadata> {
    let m = std::fs::metadata(path)?;
    regular(&m)?;
    Ok(m)
}

/// Opens `path` for reading if it is a regular file, with its metadata.
/// The type is checked before `open(2)` (which blocks on a FIFO) and
/// again on the open file (in case the path was replaced in between).
pub fn open_regular(path: &Path) -> io::Result<(File, Metadata)> {
    check_regular(path)?;
    let f = File::open(path)?;
    let m = f.metadata()?;
    regular(&m)?;
    Ok((f, m))
}

/// Reads the whole of `path` if it is a regular file of at most `max`
/// bytes (a file that grows while being read is cut at `max + 1` bytes
/// and rejected too).
pub fn read_regular(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let too_big = |len: u64| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("file is {len} bytes, more than the {max} bytes read whole"),
        )
    };
    let (f, m) = open_regular(path)?;
    if m.len() > max {
        return Err(too_big(m.len()));
    }
    let mut v = Vec::with_capacity(m.len() as usize);
    f.take(max + 1).read_to_end(&mut v)?;
    if v.len() as u64 > max {
        return Err(too_big(v.len() as u64));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_are_rejected_without_reading() {
        for p in ["/dev/zero", "/dev/null", "/"] {
            let e = read_regular(Path::new(p), MAX_READ_BYTES).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{p}");
            assert!(e.to_string().starts_with("not a regular file ("), "{e}");
        }
    }

    #[test]
    fn regular_files_are_read_up_to_the_bound() {
        let p = std::env::temp_dir().join(format!("fntrace-regular-{}", std::process::id()));
        std::fs::write(&p, b"0123456789").unwrap();
        assert_eq!(read_regular(&p, 10).unwrap(), b"0123456789");
        let e = read_regular(&p, 9).unwrap_err();
        assert!(e.to_string().contains("more than the 9 bytes"), "{e}");
        std::fs::remove_file(&p).unwrap();
    }
}
