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
/// [`HugePageCopy::of`], written only before `of` returned, `PROT_READ`
/// from then on, and unmapped only by `Drop`; `len == 0` maps nothing.
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
        let len = bytes.len();
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
        // SAFETY: `len` writable bytes of our own mapping, nothing else
        // refers to them yet; `bytes` is a different object (the mapping
        // is fresh), so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), copy.ptr.as_ptr(), len) };
        // SAFETY: our own mapping; from here on it is only read.
        if unsafe { libc::mprotect(ptr, len, libc::PROT_READ) } != 0 {
            return Err(io::Error::last_os_error()); // `copy` unmaps on drop
        }
        Ok(copy)
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
}
