//! The workspace's docs, compiled: every Rust snippet of `embedding.md`
//! and of the README is a doctest of this crate (`cargo test -p
//! pool-docs`), so a doc that stops compiling fails the tests. Not under
//! Miri: the snippets build pools and leave the global one behind.

#[cfg(all(doctest, not(miri)))]
#[doc = include_str!("embedding.md")]
pub struct Embedding;

#[cfg(all(doctest, not(miri)))]
#[doc = include_str!("../README.md")]
pub struct Readme;
