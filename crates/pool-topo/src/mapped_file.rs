//! A file mapped shared and read-only: the only memory whose page-cache
//! pages [`MappedFile::place_span`] may drop and read again.
//!
//! Mapping is `unsafe`, as in `memmap2`: the bytes are handed out as a
//! `&[u8]`, which Rust assumes no one changes, yet another process (or
//! safe `std::fs` code in this one) can write the file, and a truncation
//! turns the next read of a page past the new end into `SIGBUS`. The
//! caller of [`MappedFile::open`] promises that neither happens while the
//! mapping lives. Safe code reads the file into memory instead
//! ([`crate::HugePageCopy::read_file`]), which nothing done to the file
//! afterwards can reach.
//!
//! ```compile_fail,E0133
//! // Mapping a file is unsafe: the file could change under the `&[u8]`.
//! let file = pool_topo::MappedFile::open("/etc/hostname").unwrap();
//! ```
//!
//! Dropping pages (`madvise(MADV_DONTNEED)`) is harmless only on a shared
//! file mapping: the next access faults the same bytes back from the page
//! cache or the file. On heap memory or a private mapping that was written
//! to, it wipes the contents, and the neighbouring data on the first and
//! last pages with them. So the placement is a method of a type that can
//! only hold a whole file mapped `PROT_READ` + `MAP_SHARED` by this crate:
//! a heap slice or a private mapping cannot be passed at all.
//!
//! ```compile_fail
//! // There is no free function taking any `&[u8]` any more:
//! let weights = vec![0u8; 1 << 20];
//! pool_topo::place_span(&weights, todo!(), 0, todo!());
//! ```

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;

use crate::numa::NumaNode;
use crate::two_nodes::{place_file_span, SpanPlacement};

/// A whole file, mapped shared and read-only for as long as this value
/// lives (unmapped on drop).
///
/// # Invariants
///
/// `ptr..ptr + len` is a `PROT_READ`, `MAP_SHARED` mapping of `file` from
/// offset 0, created by [`MappedFile::from_file`] and unmapped only by
/// `Drop`; `len == 0` maps nothing (`ptr` dangling). The file is neither
/// truncated nor written while it lives (the contract of `from_file`).
#[derive(Debug)]
pub struct MappedFile {
    ptr: NonNull<u8>,
    len: usize,
    file: File,
}

// SAFETY: the mapping is read-only and shared; nothing in this type writes
// through it, so any thread may read it at any time (invariants).
unsafe impl Send for MappedFile {}
// SAFETY: as above: shared reads only.
unsafe impl Sync for MappedFile {}

impl MappedFile {
    /// Opens `path` read-only and maps it whole.
    ///
    /// # Safety
    ///
    /// As for [`MappedFile::from_file`]: nobody may truncate or write the
    /// file while the returned mapping lives.
    pub unsafe fn open(path: impl AsRef<Path>) -> io::Result<MappedFile> {
        // SAFETY: the caller's promise, passed on.
        unsafe { MappedFile::from_file(File::open(path)?) }
    }

    /// Maps `file` whole, shared and read-only. The file must be opened for
    /// reading; its current length is mapped.
    ///
    /// # Safety
    ///
    /// Until the returned value is dropped, the file must not be truncated
    /// (a read of a page past the new end raises `SIGBUS`) or written (the
    /// bytes behind the `&[u8]` of [`MappedFile::as_bytes`] would change),
    /// by this process or any other. Model files an engine ships read-only
    /// meet this; a file another program may rewrite does not: read it
    /// with [`crate::HugePageCopy::read_file`] instead.
    pub unsafe fn from_file(file: File) -> io::Result<MappedFile> {
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large to map"))?;
        if len == 0 {
            return Ok(MappedFile {
                ptr: NonNull::dangling(),
                len: 0,
                file,
            });
        }
        // SAFETY: a fresh mapping (address chosen by the kernel) of `len`
        // bytes of an open descriptor, read-only and shared: it aliases no
        // Rust object.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(MappedFile {
            ptr: NonNull::new(ptr.cast()).expect("mmap never returns NULL on success"),
            len,
            file,
        })
    }

    /// The mapped bytes.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: invariants: `len` readable bytes at `ptr` for as long as
        // `self` lives (a dangling, zero-length slice when empty).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The file's mapped length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Makes the page-cache pages behind bytes `range` of the file sit on
    /// `node`: if fewer than 90 % of the resident sample are there, drop
    /// them (`madvise(MADV_DONTNEED)` on this mapping,
    /// `posix_fadvise(POSIX_FADV_DONTNEED)` on the file) and read them
    /// again from a thread pinned to the node's CPUs. A second call finds
    /// them in place and moves nothing. The contents never change: the
    /// mapping is the file's, shared, and read-only. Linux and Android.
    pub fn place_span(&self, range: Range<usize>, node: &NumaNode) -> io::Result<SpanPlacement> {
        if range.start > range.end || range.end > self.len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("span {range:?} is not inside the {}-byte file", self.len),
            ));
        }
        let span = &self.as_bytes()[range.clone()];
        // SAFETY: the contract of `place_file_span`: `span` lies in this
        // shared, read-only mapping of `self.file` at offset `range.start`,
        // and the mapping starts on a page boundary (invariants), so the
        // pages it rounds out to are this mapping's too.
        unsafe { place_file_span(span, &self.file, range.start as u64, node) }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: invariants: our own mapping, unmapped only here; no
            // borrow of it outlives `self`.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        }
    }
}
