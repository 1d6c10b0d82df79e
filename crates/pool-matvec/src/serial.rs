//! The serial executor: the whole job on the calling thread.

/// Runs everything on the calling thread: one call over a row job's whole
/// range, so code written against an executor needs no branch for "no
/// pool". Every kernel and decoder takes it where it takes a pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Serial;
