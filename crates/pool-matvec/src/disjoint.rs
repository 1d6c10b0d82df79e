//! Handing disjoint row ranges of one `&mut [T]` to several participants.

use std::marker::PhantomData;

/// A `&mut [T]` split by range across threads.
///
/// # Invariants
///
/// Built from a `&mut [T]` borrowed for `'a`, so nothing else touches the
/// slice meanwhile. [`DisjointRows::rows`] must be called with ranges that
/// never overlap while any earlier one is alive: `run_rows` hands out each
/// range exactly once per job.
pub(crate) struct DisjointRows<'a, T> {
    ptr: *mut T,
    len: usize,
    /// Under loom, one cell per row, accessed whenever the row is handed
    /// out (`rows`: a write) or read (`all`): loom then reports two
    /// participants holding the same row without a happens-before between
    /// them, which is the invariant this type rests on.
    #[cfg(loom)]
    claims: Box<[loom::cell::UnsafeCell<()>]>,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: sharing a `DisjointRows` lets threads obtain `&mut` to disjoint
// ranges only (type invariant), which is what `T: Send` permits.
unsafe impl<T: Send> Sync for DisjointRows<'_, T> {}

impl<'a, T> DisjointRows<'a, T> {
    pub(crate) fn new(slice: &'a mut [T]) -> Self {
        DisjointRows {
            ptr: slice.as_mut_ptr(),
            len: slice.len(),
            #[cfg(loom)]
            claims: (0..slice.len())
                .map(|_| loom::cell::UnsafeCell::new(()))
                .collect(),
            _borrow: PhantomData,
        }
    }

    /// Elements in the slice.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The elements `start..end`.
    ///
    /// # Safety
    ///
    /// No other live reference from this `DisjointRows` may overlap
    /// `start..end` (the type's invariant).
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn rows(&self, start: usize, end: usize) -> &mut [T] {
        assert!(
            start <= end && end <= self.len,
            "rows {start}..{end} of {}",
            self.len
        );
        #[cfg(loom)]
        for claim in &self.claims[start..end] {
            claim.with_mut(|_| ());
        }
        // SAFETY: in bounds (checked above) of the slice borrowed for 'a;
        // exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), end - start) }
    }

    /// The whole slice, shared.
    ///
    /// # Safety
    ///
    /// No reference from [`DisjointRows::rows`] may be alive, and none may
    /// be created while the returned one is (a phased job: between the
    /// barrier after the phase that wrote the rows and the barrier before
    /// the next phase that writes them).
    #[inline]
    pub(crate) unsafe fn all(&self) -> &[T] {
        #[cfg(loom)]
        for claim in self.claims.iter() {
            claim.with(|_| ());
        }
        // SAFETY: the slice borrowed for 'a; no `&mut` into it is alive
        // meanwhile (the caller's contract).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}
