//! loom models of pool-core's dispatch protocol live in `tests/`; this
//! library is empty. They compile pool-core itself with `--cfg loom`, so the
//! models check the shipped protocol through its `sync` facade, not a copy.
