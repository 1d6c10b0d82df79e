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
use crate::two_nodes::{
    begin_file_span, finish_file_span, read_on_node, touch_pages, PendingSpan, Placement, SpanMove,
    SpanPlacement,
};

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
    /// `node`: a cold span (fewer than half of its sampled pages in the
    /// page cache) is read in from a thread pinned to the node's CPUs (a
    /// fill: the page cache fills where the reads happen); a resident span
    /// with fewer than 90 % of its sample on the node is dropped
    /// (`madvise(MADV_DONTNEED)` on this mapping,
    /// `posix_fadvise(POSIX_FADV_DONTNEED)` on the file) and read again
    /// the same way. A second call finds it in place and moves nothing.
    /// The contents never change: the mapping is the file's, shared, and
    /// read-only. Linux and Android.
    pub fn place_span(&self, range: Range<usize>, node: &NumaNode) -> io::Result<SpanPlacement> {
        self.place_span_with(range, node, |_| {})
    }

    /// [`MappedFile::place_span`], calling `on_move` before a read starts
    /// (a re-read of a large span from disk can take seconds: say so
    /// first). Not called when the span is in place.
    pub fn place_span_with(
        &self,
        range: Range<usize>,
        node: &NumaNode,
        mut on_move: impl FnMut(&SpanMove),
    ) -> io::Result<SpanPlacement> {
        match self.begin_placement(range, node)? {
            Placement::Done(placement) => Ok(placement),
            Placement::Read(pending) => {
                on_move(&pending.as_move());
                read_on_node(self.span(&pending), node, pending.pages())?;
                self.finish_placement(pending)
            }
        }
    }

    /// The first step of [`MappedFile::place_span`], for an executor that
    /// reads the pages with its own threads on the node (a pool bound to
    /// two nodes reads each side's span with that side's threads):
    /// decides, and drops the span's pages when it sits elsewhere. Then
    /// read every page with [`MappedFile::read_span_pages`] from threads
    /// on the node (split the pages among them as you like), and call
    /// [`MappedFile::finish_placement`].
    pub fn begin_placement(&self, range: Range<usize>, node: &NumaNode) -> io::Result<Placement> {
        self.check_span(&range)?;
        let span = &self.as_bytes()[range.clone()];
        // SAFETY: the contract of `begin_file_span`: `span` lies in this
        // shared, read-only mapping of `self.file` at offset `range.start`,
        // and the mapping starts on a page boundary (invariants), so the
        // pages it rounds out to are this mapping's too.
        unsafe { begin_file_span(span, range, &self.file, node) }
    }

    /// Reads pages `pages` of a pending span (`0..pending.pages()` in
    /// all; any split among threads). Call it on the node's CPUs.
    pub fn read_span_pages(&self, pending: &PendingSpan, pages: Range<usize>) {
        touch_pages(self.span(pending), pages);
    }

    /// The last step: samples the span again and reports where it sits.
    pub fn finish_placement(&self, pending: PendingSpan) -> io::Result<SpanPlacement> {
        finish_file_span(self.span(&pending), pending)
    }

    fn span(&self, pending: &PendingSpan) -> &[u8] {
        // A `PendingSpan` is only made by `begin_placement`, which checked
        // the range; a span of another (shorter) file reads what exists.
        let end = pending.range.end.min(self.len);
        &self.as_bytes()[pending.range.start.min(end)..end]
    }

    fn check_span(&self, range: &Range<usize>) -> io::Result<()> {
        if range.start > range.end || range.end > self.len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("span {range:?} is not inside the {}-byte file", self.len),
            ));
        }
        Ok(())
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
