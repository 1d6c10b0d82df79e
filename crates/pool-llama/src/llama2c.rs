//! The llama2.c checkpoint format (the legacy f32 export, "version 0").
//!
//! A header of 7 little-endian `i32` (`dim`, `hidden_dim`, `n_layers`,
//! `n_heads`, `n_kv_heads`, `vocab_size`, `seq_len`; a negative
//! `vocab_size` means a separate classifier), then f32 tensors in this
//! order: token embedding (`vocab x dim`), attention RMS weights
//! (`layers x dim`), `wq` (`layers x dim x dim`), `wk` and `wv`
//! (`layers x kv_dim x dim`), `wo` (`layers x dim x dim`), FFN RMS weights
//! (`layers x dim`), `w1` (`layers x hidden x dim`), `w2`
//! (`layers x dim x hidden`), `w3` (`layers x hidden x dim`), the final RMS
//! weight (`dim`), the RoPE tables (`2 x seq_len x head_size / 2`, unused:
//! RoPE is computed, as llama2.c does), and the classifier (`vocab x dim`)
//! when it is not shared with the embedding.

use std::io::{self, Write};
use std::ops::Range;
use std::path::Path;

use pool_matvec::XorShift;

use crate::error::LoadError;

/// Bytes of the header: 7 `i32`.
pub const HEADER_BYTES: usize = 28;

/// A model's shape, from the checkpoint header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Model width.
    pub dim: usize,
    /// Feed-forward width.
    pub hidden_dim: usize,
    /// Transformer layers.
    pub n_layers: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_heads`).
    pub n_kv_heads: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Longest sequence (positions in the KV cache).
    pub seq_len: usize,
    /// Whether the classifier is the token embedding (no `wcls` tensor).
    pub shared_classifier: bool,
}

impl Config {
    /// The stories15M shape (dim 288, 6 layers, 6 heads, 256 positions).
    pub const STORIES_15M: Config = Config {
        dim: 288,
        hidden_dim: 768,
        n_layers: 6,
        n_heads: 6,
        n_kv_heads: 6,
        vocab_size: 32000,
        seq_len: 256,
        shared_classifier: true,
    };

    /// The stories110M shape (dim 768, 12 layers, 12 heads, 1024
    /// positions): 438 MB read per token.
    pub const STORIES_110M: Config = Config {
        dim: 768,
        hidden_dim: 2048,
        n_layers: 12,
        n_heads: 12,
        n_kv_heads: 12,
        vocab_size: 32000,
        seq_len: 1024,
        shared_classifier: true,
    };

    /// Width of one head.
    pub fn head_size(&self) -> usize {
        self.dim / self.n_heads
    }

    /// Width of the keys and values (`n_kv_heads * head_size`).
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_size()
    }

    /// Weight bytes every token reads: every matrix, the RMS weights and
    /// one embedding row (the KV cache comes on top, growing with the
    /// position).
    pub fn bytes_per_token(&self) -> usize {
        let (d, h, kv) = (self.dim, self.hidden_dim, self.kv_dim());
        let per_layer = 2 * d * d + 2 * kv * d + 3 * h * d + 2 * d;
        4 * (self.n_layers * per_layer + self.vocab_size * d + 2 * d)
    }

    /// The header as written to a checkpoint; `None` if a size does not
    /// fit the format's `i32`.
    pub fn header(&self) -> Option<[i32; 7]> {
        let i = |v: usize| i32::try_from(v).ok();
        let vocab = i(self.vocab_size)?;
        Some([
            i(self.dim)?,
            i(self.hidden_dim)?,
            i(self.n_layers)?,
            i(self.n_heads)?,
            i(self.n_kv_heads)?,
            if self.shared_classifier {
                vocab
            } else {
                -vocab
            },
            i(self.seq_len)?,
        ])
    }

    /// Parses and checks a header (the first 28 bytes of a checkpoint).
    pub fn from_header(bytes: &[u8]) -> Result<Config, LoadError> {
        let Some(header) = bytes.get(..HEADER_BYTES) else {
            return Err(LoadError::Truncated {
                needed: HEADER_BYTES,
                found: bytes.len(),
            });
        };
        let field =
            |i: usize| i32::from_le_bytes(header[4 * i..4 * i + 4].try_into().expect("4 bytes"));
        let positive = |i: usize, name: &'static str| match field(i) {
            v if v > 0 => Ok(v as usize),
            v => Err(LoadError::BadHeader(format!(
                "{name} is {v}, must be positive"
            ))),
        };
        let vocab = field(5);
        if vocab == 0 || vocab == i32::MIN {
            return Err(LoadError::BadHeader(format!("vocab_size is {vocab}")));
        }
        let config = Config {
            dim: positive(0, "dim")?,
            hidden_dim: positive(1, "hidden_dim")?,
            n_layers: positive(2, "n_layers")?,
            n_heads: positive(3, "n_heads")?,
            n_kv_heads: positive(4, "n_kv_heads")?,
            vocab_size: vocab.unsigned_abs() as usize,
            seq_len: positive(6, "seq_len")?,
            shared_classifier: vocab > 0,
        };
        config.check()?;
        Ok(config)
    }

    /// The shape rules the decoder relies on.
    pub(crate) fn check(&self) -> Result<(), LoadError> {
        let bad = |reason: String| Err(LoadError::BadHeader(reason));
        if !self.dim.is_multiple_of(self.n_heads) {
            return bad(format!(
                "dim {} is not a multiple of n_heads {}",
                self.dim, self.n_heads
            ));
        }
        if !self.head_size().is_multiple_of(2) {
            return bad(format!(
                "head size {} is odd (RoPE rotates pairs)",
                self.head_size()
            ));
        }
        if self.n_kv_heads > self.n_heads || !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!(
                "n_heads {} is not a multiple of n_kv_heads {}",
                self.n_heads, self.n_kv_heads
            ));
        }
        Ok(())
    }

    /// Where each tensor lies, in f32 values after the header, and the
    /// total count; `None` if the sizes overflow.
    pub(crate) fn layout(&self) -> Option<Layout> {
        let (d, h, l, kv) = (self.dim, self.hidden_dim, self.n_layers, self.kv_dim());
        let mut at = 0usize;
        let mut take = |values: Option<usize>| -> Option<Range<usize>> {
            let end = at.checked_add(values?)?;
            let range = at..end;
            at = end;
            Some(range)
        };
        let m = |a: usize, b: usize| a.checked_mul(b);
        let m3 = |a: usize, b: usize, c: usize| a.checked_mul(b)?.checked_mul(c);
        let embedding = take(m(self.vocab_size, d))?;
        let rms_att = take(m(l, d))?;
        let wq = take(m3(l, d, d))?;
        let wk = take(m3(l, kv, d))?;
        let wv = take(m3(l, kv, d))?;
        let wo = take(m3(l, d, d))?;
        let rms_ffn = take(m(l, d))?;
        let w1 = take(m3(l, h, d))?;
        let w2 = take(m3(l, d, h))?;
        let w3 = take(m3(l, h, d))?;
        let rms_final = take(Some(d))?;
        let _rope = take(m(self.seq_len, self.head_size()))?;
        let classifier = if self.shared_classifier {
            embedding.clone()
        } else {
            take(m(self.vocab_size, d))?
        };
        Some(Layout {
            embedding,
            rms_att,
            wq,
            wk,
            wv,
            wo,
            rms_ffn,
            w1,
            w2,
            w3,
            rms_final,
            classifier,
            total: at,
        })
    }

    /// The checkpoint's size in bytes, if it fits a `usize`.
    pub fn file_bytes(&self) -> Option<usize> {
        self.layout()?
            .total
            .checked_mul(4)?
            .checked_add(HEADER_BYTES)
    }
}

/// Tensor ranges in f32 values after the header.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) embedding: Range<usize>,
    pub(crate) rms_att: Range<usize>,
    pub(crate) wq: Range<usize>,
    pub(crate) wk: Range<usize>,
    pub(crate) wv: Range<usize>,
    pub(crate) wo: Range<usize>,
    pub(crate) rms_ffn: Range<usize>,
    pub(crate) w1: Range<usize>,
    pub(crate) w2: Range<usize>,
    pub(crate) w3: Range<usize>,
    pub(crate) rms_final: Range<usize>,
    pub(crate) classifier: Range<usize>,
    pub(crate) total: usize,
}

/// Writes a checkpoint of shape `config` with random weights from `seed`:
/// matrices uniform in ±1/√cols, embeddings in ±1, RMS weights near 1.
/// For tests and benchmarks; no download needed.
pub fn write_random_checkpoint(
    path: impl AsRef<Path>,
    config: &Config,
    seed: u64,
) -> io::Result<()> {
    config
        .check()
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err.to_string()))?;
    let layout = config.layout().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "model too large for this platform",
        )
    })?;
    let header = config
        .header()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a size does not fit an i32"))?;
    let file = std::fs::File::create(path)?;
    let mut out = io::BufWriter::with_capacity(1 << 20, file);
    for v in header {
        out.write_all(&v.to_le_bytes())?;
    }
    let mut rng = XorShift(seed | 1);
    let mut write = |values: usize, scale: f32, offset: f32| -> io::Result<()> {
        let mut buf = Vec::with_capacity(4 * 4096);
        for chunk in 0..values.div_ceil(4096) {
            buf.clear();
            for _ in chunk * 4096..(chunk * 4096 + 4096).min(values) {
                buf.extend_from_slice(&(offset + rng.uniform() * scale).to_le_bytes());
            }
            out.write_all(&buf)?;
        }
        Ok(())
    };
    let (d, h) = (config.dim as f32, config.hidden_dim as f32);
    let len = |r: &Range<usize>| r.len();
    write(len(&layout.embedding), 1.0, 0.0)?;
    write(len(&layout.rms_att), 0.1, 1.0)?;
    for r in [&layout.wq, &layout.wk, &layout.wv, &layout.wo] {
        write(len(r), 1.0 / d.sqrt(), 0.0)?;
    }
    write(len(&layout.rms_ffn), 0.1, 1.0)?;
    write(len(&layout.w1), 1.0 / d.sqrt(), 0.0)?;
    write(len(&layout.w2), 1.0 / h.sqrt(), 0.0)?;
    write(len(&layout.w3), 1.0 / d.sqrt(), 0.0)?;
    write(len(&layout.rms_final), 0.1, 1.0)?;
    write(config.seq_len * config.head_size(), 0.0, 0.0)?;
    if !config.shared_classifier {
        write(len(&layout.classifier), 1.0 / d.sqrt(), 0.0)?;
    }
    out.flush()
}

/// Writes a llama2.c tokenizer file of `vocab_size` tokens, made up but
/// shaped like llama's: `<unk>`, `<s>`, `</s>`, the 256 byte pieces
/// `<0x00>`..`<0xFF>`, then pieces of letters with and without a leading
/// space, longer ones scoring higher (so merges build words). For
/// random-weight models (their tokens are meaningless anyway) and for
/// llama.cpp's converter, which copies a vocabulary from such a file.
///
/// # Errors
///
/// If `vocab_size` is below 259 (the special and byte tokens), or the
/// file cannot be written.
pub fn write_random_tokenizer(path: impl AsRef<Path>, vocab_size: usize) -> io::Result<()> {
    if vocab_size < 259 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a vocabulary of {vocab_size} cannot hold the 3 special and 256 byte tokens"),
        ));
    }
    let mut pieces: Vec<(Vec<u8>, f32)> = vec![
        (b"<unk>".to_vec(), 0.0),
        (b"<s>".to_vec(), 0.0),
        (b"</s>".to_vec(), 0.0),
    ];
    pieces.extend((0..=255u8).map(|b| (format!("<0x{b:02X}>").into_bytes(), 0.0)));
    let letters = b"etaoinshrdlucmfwypvbgkjqxz";
    let mut rng = XorShift(0x5eed);
    let mut seen = std::collections::HashSet::new();
    // Single letters and a space first, so every word can be spelled.
    for piece in std::iter::once(b" ".to_vec()).chain(letters.iter().map(|&l| vec![l])) {
        seen.insert(piece.clone());
        pieces.push((piece, -1000.0));
    }
    while pieces.len() < vocab_size {
        let len = 2 + (rng.next_u64() % 6) as usize;
        let mut piece: Vec<u8> = (0..len)
            .map(|_| letters[(rng.next_u64() % letters.len() as u64) as usize])
            .collect();
        if rng.next_u64().is_multiple_of(2) {
            piece.insert(0, b' ');
        }
        if seen.insert(piece.clone()) {
            let score = -(pieces.len() as f32) / 1000.0;
            pieces.push((piece, score));
        }
    }
    let longest = pieces.iter().map(|(p, _)| p.len()).max().unwrap_or(1);
    let mut out = io::BufWriter::new(std::fs::File::create(path)?);
    out.write_all(&(longest as i32).to_le_bytes())?;
    for (piece, score) in &pieces {
        out.write_all(&score.to_le_bytes())?;
        out.write_all(&(piece.len() as i32).to_le_bytes())?;
        out.write_all(piece)?;
    }
    out.flush()
}
