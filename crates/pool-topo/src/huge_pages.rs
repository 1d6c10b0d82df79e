//! A read-only copy of some bytes in anonymous memory backed by
//! transparent huge pages where the kernel allows them.
//!
//! Weights read once per token stream through hundreds of MB: with 4 KiB
//! pages every 4 KiB costs a TLB entry, and the page walks compete with the
//! stream. Measured on this project's 2-CPU CI machine over a 438 MB
//! checkpoint: a one-thread read 13.1 GB/s from the file mapping, 15.2 from
//! a huge-page copy; two threads 14.7-22.3 vs 26.9-30.0. A file mapping
//! gets huge pages only from file systems that offer them
//! (`CONFIG_READ_ONLY_THP_FOR_FS`, tmpfs `huge=`), so the copy is the
//! portable way to have them, at the price of the copy's memory and of
//! the NUMA page placement that only a shared file mapping allows
//! ([`crate::MappedFile::place_span`]).

use std::io;
use std::ptr::NonNull;

/// Bytes copied into anonymous memory advised `MADV_HUGEPAGE`, then made
/// read-only. Linux and Android.
///
/// # Invariants
///
/// `ptr..ptr + len` is a private anonymous mapping created by
/// [`HugePageCopy::of`], written only before `of` returned and inside
/// [`HugePageCopy::modify`] (which holds `&mut self`), `PROT_READ` at
/// every other time, and unmapped only by `Drop`; `len == 0` maps nothing.
#[derive(Debug)]
pub struct HugePageCopy {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: read-only after construction (invariants): any thread may read.
unsafe impl Send for HugePageCopy {}
// SAFETY: as above.
unsafe impl Sync for HugePageCopy {}

impl HugePageCopy {
    /// Copies `bytes`. If the kernel refuses the huge-page advice (THP
    /// disabled, `never`), the copy is still made, on normal pages, and
    /// a `tracing` warning says so.
    pub fn of(bytes: &[u8]) -> io::Result<HugePageCopy> {
        HugePageCopy::filled(bytes.len(), |target| {
            target.copy_from_slice(bytes);
            Ok(())
        })
    }

    /// Reads the whole file at `path` into a new copy, with `read(2)`: no
    /// mapping of the file is ever made, so nothing another process does to
    /// the file afterwards (truncating it, writing it) can reach this
    /// memory. This is the sound way to hold weights from safe code; a
    /// file that changes length while it is read is an error.
    pub fn read_file(path: impl AsRef<std::path::Path>) -> io::Result<HugePageCopy> {
        use std::io::Read;
        let path = path.as_ref();
        let mut file = std::fs::File::open(path)?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large to read"))?;
        HugePageCopy::filled(len, |target| {
            file.read_exact(target).map_err(|err| {
                io::Error::new(
                    err.kind(),
                    format!(
                        "{}: read {len} bytes: {err} (did the file shrink while read?)",
                        path.display()
                    ),
                )
            })?;
            let mut probe = [0u8; 1];
            if file.read(&mut probe)? != 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: the file grew while it was read", path.display()),
                ));
            }
            Ok(())
        })
    }

    /// A fresh anonymous mapping of `len` bytes advised for huge pages,
    /// written by `fill`, then made read-only.
    fn filled(
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> io::Result<()>,
    ) -> io::Result<HugePageCopy> {
        if len == 0 {
            return Ok(HugePageCopy {
                ptr: NonNull::dangling(),
                len: 0,
            });
        }
        // SAFETY: a fresh private anonymous mapping chosen by the kernel:
        // it aliases no Rust object.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let copy = HugePageCopy {
            ptr: NonNull::new(ptr.cast()).expect("mmap never returns NULL on success"),
            len,
        };
        // SAFETY: advice on our own fresh mapping; it changes no contents.
        if unsafe { libc::madvise(ptr, len, libc::MADV_HUGEPAGE) } != 0 {
            tracing::warn!(
                "MADV_HUGEPAGE refused ({}): the copy uses normal pages",
                io::Error::last_os_error()
            );
        }
        // SAFETY: `len` writable, zeroed bytes of our own fresh mapping;
        // nothing else refers to them, and the `&mut` ends before the
        // mapping is made read-only below.
        fill(unsafe { std::slice::from_raw_parts_mut(copy.ptr.as_ptr(), len) })?;
        // SAFETY: our own mapping; from here on it is only read.
        if unsafe { libc::mprotect(ptr, len, libc::PROT_READ) } != 0 {
            return Err(io::Error::last_os_error()); // `copy` unmaps on drop
        }
        Ok(copy)
    }

    /// Rewrites the copy with `edit` (a loader rearranging its tensors'
    /// bytes for its kernels, say): writable for the call, read-only again
    /// after it. `&mut self` keeps every reader out meanwhile.
    ///
    /// # Errors
    ///
    /// If the kernel refuses to change the protection; the bytes are then
    /// unchanged (`edit` runs only once the copy is writable).
    pub fn modify<R>(&mut self, edit: impl FnOnce(&mut [u8]) -> R) -> io::Result<R> {
        if self.len == 0 {
            return Ok(edit(&mut []));
        }
        let ptr = self.ptr.as_ptr().cast::<libc::c_void>();
        // SAFETY: our own mapping (invariants), `len` bytes long.
        if unsafe { libc::mprotect(ptr, self.len, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `len` writable bytes at `ptr` now; `&mut self` excludes
        // every other borrow of them, and this one ends before the
        // mapping is made read-only again.
        let result = edit(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) });
        // SAFETY: our own mapping; read-only again from here.
        if unsafe { libc::mprotect(ptr, self.len, libc::PROT_READ) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(result)
    }

    /// The copied bytes.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: invariants: `len` readable bytes at `ptr` while `self`
        // lives (a dangling, zero-length slice when empty).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Bytes of this copy the kernel backs with huge pages now (from
    /// `/proc/self/smaps`); `None` if that cannot be read.
    pub fn huge_page_bytes(&self) -> Option<usize> {
        let start = self.ptr.as_ptr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            // A mapping's header: "start-end perms offset dev inode [path]".
            let header = line
                .split_once(' ')
                .and_then(|(range, _)| range.split_once('-'))
                .and_then(|(from, to)| {
                    let from = usize::from_str_radix(from, 16).ok()?;
                    usize::from_str_radix(to, 16).ok().map(|_| from)
                });
            if let Some(from) = header {
                inside = from == start;
            } else if let Some(kb) = line.strip_prefix("AnonHugePages:").filter(|_| inside) {
                let kb = kb.trim().trim_end_matches("kB").trim();
                return kb.parse::<usize>().ok().map(|kb| kb * 1024);
            }
        }
        None
    }
}

impl Drop for HugePageCopy {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: invariants: our own mapping, unmapped only here; no
            // borrow of it outlives `self`.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_holds_the_same_bytes() {
        let bytes: Vec<u8> = (0..5_000_000u32).map(|i| (i * 7) as u8).collect();
        let copy = HugePageCopy::of(&bytes).unwrap();
        assert_eq!(copy.as_bytes(), &bytes[..]);
        assert!(copy.huge_page_bytes().is_some(), "smaps has the mapping");
        assert!(HugePageCopy::of(&[]).unwrap().as_bytes().is_empty());
    }

    #[test]
    fn a_modified_copy_holds_the_edit_and_is_read_only_again() {
        let mut copy = HugePageCopy::of(&[1u8; 10_000]).unwrap();
        let sum = copy
            .modify(|bytes| {
                bytes[9_999] = 7;
                bytes.iter().map(|&b| u32::from(b)).sum::<u32>()
            })
            .unwrap();
        assert_eq!(sum, 9_999 + 7);
        assert_eq!(copy.as_bytes()[9_999], 7);
        let start = copy.as_bytes().as_ptr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let header = smaps
            .lines()
            .find(|l| l.starts_with(&format!("{start:x}-")))
            .expect("the copy's mapping in smaps");
        assert!(header.contains(" r--p "), "read-only again: {header}");
        assert_eq!(
            HugePageCopy::of(&[]).unwrap().modify(|b| b.len()).unwrap(),
            0
        );
    }

    #[test]
    fn a_file_read_into_a_copy_is_not_reached_by_a_later_truncation() {
        let path = std::env::temp_dir().join(format!("hpc-read-{}.bin", std::process::id()));
        let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 13) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let copy = HugePageCopy::read_file(&path).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(0)
            .unwrap();
        std::fs::write(&path, b"changed").unwrap();
        assert_eq!(
            copy.as_bytes(),
            &bytes[..],
            "the copy is the file as it was read"
        );
        std::fs::remove_file(&path).unwrap();
        assert!(
            HugePageCopy::read_file(&path).is_err(),
            "a missing file is an error"
        );
    }
}
