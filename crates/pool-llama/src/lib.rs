//! A llama decoder on the pool: the files people download (GGUF, F32 to
//! Q4_K_M) and llama2.c checkpoints, decoded with every matvec a row job
//! of [`pool_matvec`], bit-identical whatever the executor or thread count.
//!
//! - [`Model::open`] reads either format (told apart by the file's first
//!   bytes) into memory; [`Model::open_mapped`] reads it in place
//!   (`unsafe`: the file must not change meanwhile). Tensors are used in
//!   their file type: F32, F16, Q8_0, Q4_0, Q4_K and Q6_K, so Q8_0, Q4_0
//!   and Q4_K_M files run; any other type is an error naming the tensor.
//! - [`Model::generate`] decodes greedily from BOS on any executor (a
//!   `pool_core::Pool`, [`pool_matvec::Serial`], your own
//!   [`pool_matvec::Broadcast`] executor); [`Model::generate_after`]
//!   after a prompt ([`Tokenizer::encode`]).
//! - [`gguf::Gguf`]: the GGUF container itself (metadata and tensor
//!   infos), checked against the file before anything is read.
//!
//! ```
//! # #[cfg(not(miri))] { // writes and reads a file
//! use pool_llama::{write_random_checkpoint, Config, Model};
//! let config = Config { dim: 64, hidden_dim: 96, n_layers: 2, n_heads: 4, n_kv_heads: 4,
//!                       vocab_size: 300, seq_len: 32, shared_classifier: true };
//! let path = std::env::temp_dir().join(format!("doc-llama-{}.bin", std::process::id()));
//! write_random_checkpoint(&path, &config, 1).unwrap();
//! let model = Model::open(&path).unwrap();
//! let tokens = model.generate(&pool_core::Pool::new(1), 4, |_, _| {});
//! assert_eq!(tokens.len(), 4);
//! # std::fs::remove_file(&path).unwrap();
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
mod decoder;
mod error;
pub mod gguf;
mod llama2c;
mod model;
mod sampling;
mod tokenizer;

pub use decoder::State;
pub use error::LoadError;
pub use llama2c::{write_random_checkpoint, write_random_tokenizer, Config, HEADER_BYTES};
pub use model::{FileFormat, Model, Residence, Rope};
pub use sampling::{argmax, argmax_on};
pub use tokenizer::{Tokenizer, BOS};
