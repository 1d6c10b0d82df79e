//! A llama model ready to decode, read from either file format: where its
//! bytes live, and where in them each tensor is.
//!
//! Both readers produce the same description (a [`Config`], the RoPE and
//! norm settings, and each matrix's type, shape and place), so the decode
//! loop (`decoder.rs`) never asks which file it came from. Matrices are
//! used in place, in their file type: no dequantized copy is made at load.
//! Only the norm vectors (a few KB) are copied out, as f32.

use std::fmt;
use std::io;
use std::path::Path;

use pool_matvec::{WeightType, Weights};

use crate::error::LoadError;
use crate::gguf::{Gguf, TensorInfo, Value, GGUF_MAGIC};
use crate::llama2c::{Config, HEADER_BYTES};
use crate::tokenizer::Tokenizer;

/// Which file format a model came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// A llama2.c checkpoint (the legacy f32 export).
    Llama2c,
    /// A GGUF file of this version.
    Gguf(u32),
}

impl fmt::Display for FileFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileFormat::Llama2c => f.write_str("llama2.c checkpoint"),
            FileFormat::Gguf(version) => write!(f, "GGUF v{version}"),
        }
    }
}

/// Where the model's weights are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residence {
    /// The file mapped shared and read-only, read in place (Linux and
    /// Android; [`Model::open_mapped`]): no copy, and the pages can be
    /// placed on a NUMA node (`MappedFile::place_span`).
    Mapped,
    /// A read-only copy in anonymous memory advised for transparent huge
    /// pages ([`Model::open`] on Linux and Android): fewer TLB misses while
    /// streaming, and nothing done to the file later reaches it.
    HugePageCopy,
    /// An ordinary heap copy ([`Model::from_bytes`], or `open` elsewhere).
    Heap,
}

/// The bytes a model reads.
#[derive(Debug)]
enum Storage {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    Mapped(pool_topo::MappedFile),
    #[cfg(any(target_os = "linux", target_os = "android"))]
    HugePages(pool_topo::HugePageCopy),
    /// `u64`s so every tensor offset that is a multiple of 8 is aligned.
    Heap(Vec<u64>, usize),
}

impl Storage {
    /// Rewrites the bytes with `edit` where they are this model's own copy;
    /// `None` for a mapped file (read in place, never written).
    fn modify<R>(&mut self, edit: impl FnOnce(&mut [u8]) -> R) -> Option<io::Result<R>> {
        match self {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Storage::Mapped(_) => None,
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Storage::HugePages(copy) => Some(copy.modify(edit)),
            Storage::Heap(words, len) => {
                // SAFETY: as in `bytes`, and `&mut self` makes the borrow
                // unique; any byte pattern is a valid u64.
                let bytes = unsafe {
                    std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), *len)
                };
                Some(Ok(edit(bytes)))
            }
        }
    }

    fn heap(bytes: &[u8]) -> Storage {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        for (word, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
            let mut le = [0u8; 8];
            le[..chunk.len()].copy_from_slice(chunk);
            *word = u64::from_le_bytes(le);
        }
        if cfg!(target_endian = "big") {
            for word in &mut words {
                *word = word.swap_bytes();
            }
        }
        Storage::Heap(words, bytes.len())
    }

    fn bytes(&self) -> &[u8] {
        match self {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Storage::Mapped(file) => file.as_bytes(),
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Storage::HugePages(copy) => copy.as_bytes(),
            Storage::Heap(words, len) => {
                // SAFETY: `words` holds `len.div_ceil(8)` initialised u64s,
                // which are at least `len` initialised bytes, laid out in
                // file order (little-endian words, swapped above on
                // big-endian targets).
                unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), *len) }
            }
        }
    }
}

/// A matrix's place in the model's bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MatrixRef {
    pub(crate) ty: WeightType,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) offset: usize,
    pub(crate) len: usize,
    /// Rows interleaved by sixteen in the model's own copy
    /// ([`pool_matvec::interleave_rows`]), not row-major as in the file.
    pub(crate) interleaved: bool,
}

/// One transformer layer's tensors.
#[derive(Debug, Clone)]
pub(crate) struct LayerRefs {
    pub(crate) attn_norm: Vec<f32>,
    pub(crate) wq: MatrixRef,
    pub(crate) wk: MatrixRef,
    pub(crate) wv: MatrixRef,
    pub(crate) wo: MatrixRef,
    pub(crate) ffn_norm: Vec<f32>,
    pub(crate) gate: MatrixRef,
    pub(crate) up: MatrixRef,
    pub(crate) down: MatrixRef,
}

/// Rotary position embedding settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rope {
    /// The frequency base (`10000` for llama and llama2).
    pub base: f32,
    /// Dimensions of each head that are rotated (the head size for
    /// llama), in adjacent pairs.
    pub dims: usize,
}

/// A llama-architecture model ready to decode: from a GGUF file or a
/// llama2.c checkpoint.
///
/// ```
/// # #[cfg(not(miri))] { // writes and reads a file
/// use pool_llama::{write_random_checkpoint, Config, Model};
/// use pool_matvec::Serial;
///
/// let config = Config { dim: 64, hidden_dim: 96, n_layers: 2, n_heads: 4, n_kv_heads: 2,
///                       vocab_size: 50, seq_len: 16, shared_classifier: true };
/// let path = std::env::temp_dir().join(format!("doc-model-{}.bin", std::process::id()));
/// write_random_checkpoint(&path, &config, 7).unwrap();
/// let model = Model::open(&path).unwrap();
/// let pool = pool_core::Pool::new(1);
/// assert_eq!(model.generate(&pool, 8, |_, _| {}), model.generate(&Serial, 8, |_, _| {}));
/// # std::fs::remove_file(&path).unwrap();
/// # }
/// ```
#[derive(Debug)]
pub struct Model {
    pub(crate) config: Config,
    pub(crate) rope: Rope,
    pub(crate) rms_eps: f32,
    format: FileFormat,
    storage: Storage,
    pub(crate) embedding: MatrixRef,
    pub(crate) layers: Vec<LayerRefs>,
    pub(crate) final_norm: Vec<f32>,
    pub(crate) output: MatrixRef,
    tokenizer: Option<Tokenizer>,
    pub(crate) bos: u32,
}

impl Model {
    /// Opens a model (GGUF or llama2.c, told apart by the file's first
    /// bytes), reading it into memory: on Linux and Android a copy on
    /// transparent huge pages ([`Residence::HugePageCopy`]), elsewhere the
    /// heap. Whatever happens to the file afterwards cannot reach the
    /// model. [`Model::open_mapped`] reads it in place instead.
    ///
    /// Where the CPU's kernels read them faster
    /// ([`pool_matvec::interleaving_pays`]: AVX-512 VNNI), the copy's
    /// Q8_0, Q4_0, Q4_K and Q6_K matrices are rearranged into rows interleaved by
    /// sixteen: the same bytes, no dequantized copy, and the same logits to
    /// the bit ([`Model::interleaved_matrices`] counts them).
    pub fn open(path: impl AsRef<Path>) -> Result<Model, LoadError> {
        let path = path.as_ref();
        refuse_directory(path)?;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            Model::from_storage(Storage::HugePages(pool_topo::HugePageCopy::read_file(
                path,
            )?))
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            Model::from_bytes(&std::fs::read(path)?)
        }
    }

    /// Opens a model mapped shared and read-only ([`Residence::Mapped`]):
    /// no copy, the page cache's pages read in place, and the mapping can
    /// be placed on a NUMA node ([`Model::mapped_file`]). Linux and
    /// Android; elsewhere it reads the file into memory.
    ///
    /// # Safety
    ///
    /// The contract of [`pool_topo::MappedFile::from_file`]: nobody may
    /// truncate or write the file while the model lives (a truncation
    /// makes the next read die of `SIGBUS`).
    pub unsafe fn open_mapped(path: impl AsRef<Path>) -> Result<Model, LoadError> {
        let path = path.as_ref();
        refuse_directory(path)?;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            // SAFETY: the caller's promise, passed on.
            let file = unsafe { pool_topo::MappedFile::open(path)? };
            Model::from_storage(Storage::Mapped(file))
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            Model::open(path)
        }
    }

    /// A model from a file's bytes, copied.
    pub fn from_bytes(bytes: &[u8]) -> Result<Model, LoadError> {
        Model::from_storage(Storage::heap(bytes))
    }

    fn from_storage(storage: Storage) -> Result<Model, LoadError> {
        let bytes = storage.bytes();
        if bytes.starts_with(&GGUF_MAGIC) {
            let description = gguf_description(bytes)?;
            let mut model = description.with(storage);
            model.interleave()?;
            Ok(model)
        } else {
            let description = llama2c_description(bytes).map_err(|err| match err {
                LoadError::BadHeader(reason) if bytes.len() >= 4 => LoadError::BadHeader(format!(
                    "{reason} (and it is not a GGUF file either: it starts with {:02x?}, not \
                     \"GGUF\")",
                    &bytes[..4]
                )),
                other => other,
            })?;
            Ok(description.with(storage))
        }
    }

    /// The model's shape. For a GGUF model, `seq_len` is the context
    /// length and `shared_classifier` whether `output.weight` is absent.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// RoPE's settings.
    pub fn rope(&self) -> Rope {
        self.rope
    }

    /// RMSNorm's epsilon.
    pub fn rms_eps(&self) -> f32 {
        self.rms_eps
    }

    /// The file format it came from.
    pub fn format(&self) -> FileFormat {
        self.format
    }

    /// Where the weights are.
    pub fn residence(&self) -> Residence {
        match &self.storage {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Storage::Mapped(_) => Residence::Mapped,
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Storage::HugePages(_) => Residence::HugePageCopy,
            Storage::Heap(..) => Residence::Heap,
        }
    }

    /// The mapping the weights are read from, for NUMA placement
    /// (`MappedFile::place_span`); `None` when they were copied.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[cfg_attr(docsrs, doc(cfg(any(target_os = "linux", target_os = "android"))))]
    pub fn mapped_file(&self) -> Option<&pool_topo::MappedFile> {
        match &self.storage {
            Storage::Mapped(file) => Some(file),
            _ => None,
        }
    }

    /// The tokenizer stored in the file (GGUF's `tokenizer.ggml.*`);
    /// `None` for a llama2.c checkpoint, whose tokenizer is a file of its
    /// own ([`Tokenizer::open`]).
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_ref()
    }

    /// The token generation starts from.
    pub fn bos(&self) -> u32 {
        self.bos
    }

    /// How many of the matrices a token multiplies by were rearranged
    /// into rows interleaved by sixteen at load (see [`Model::open`]).
    pub fn interleaved_matrices(&self) -> usize {
        let mut offsets: Vec<usize> = self
            .matrices()
            .filter(|m| m.interleaved)
            .map(|m| m.offset)
            .collect();
        offsets.sort_unstable();
        offsets.dedup();
        offsets.len()
    }

    /// The matrix `m`, viewed in the model's bytes.
    pub(crate) fn weights(&self, m: &MatrixRef) -> Weights<'_> {
        let bytes = &self.storage.bytes()[m.offset..m.offset + m.len];
        if m.interleaved {
            Weights::interleaved(m.ty, m.rows, m.cols, bytes)
        } else {
            Weights::new(m.ty, m.rows, m.cols, bytes)
        }
        .expect("every matrix was checked at load")
    }

    /// Where this CPU's kernels read a type faster interleaved
    /// ([`pool_matvec::interleaving_pays`]: Q8_0, Q4_0, Q4_K and Q6_K on
    /// AVX-512 VNNI) and the weights are the model's own copy ([`Model::open`],
    /// [`Model::from_bytes`]), rearranges every such matrix a token
    /// multiplies by (the embedding too when the output shares it) into
    /// rows interleaved by sixteen: the same bytes and values, the same
    /// logits to the bit, and on an Intel Xeon with AVX-512 VNNI 1.5-1.8x
    /// the Q8_0 kernel's speed from cache. A mapped file
    /// ([`Model::open_mapped`]) is read in place as the file has it.
    fn interleave(&mut self) -> Result<(), LoadError> {
        let mut targets: Vec<MatrixRef> = Vec::new();
        for m in self.matrices() {
            if pool_matvec::interleaving_pays(m.ty) && !targets.iter().any(|t| t.offset == m.offset)
            {
                targets.push(*m);
            }
        }
        if targets.is_empty() {
            return Ok(());
        }
        let done = self.storage.modify(|bytes| {
            targets.iter().try_for_each(|m| {
                let matrix = &mut bytes[m.offset..m.offset + m.len];
                pool_matvec::interleave_rows(m.ty, matrix, m.rows, m.cols)
            })
        });
        match done {
            None => return Ok(()),
            Some(result) => result?.map_err(|err| {
                LoadError::BadGguf(format!("a matrix could not be interleaved: {err}"))
            })?,
        }
        let rearranged = |m: &mut MatrixRef| {
            // The same tensor (a tied output and embedding), not another
            // that a crafted file placed on the same bytes.
            if targets
                .iter()
                .any(|t| t.offset == m.offset && t.len == m.len && t.ty == m.ty)
            {
                m.interleaved = true;
            }
        };
        for l in &mut self.layers {
            for m in [
                &mut l.wq,
                &mut l.wk,
                &mut l.wv,
                &mut l.wo,
                &mut l.gate,
                &mut l.up,
                &mut l.down,
            ] {
                rearranged(m);
            }
        }
        rearranged(&mut self.output);
        rearranged(&mut self.embedding);
        Ok(())
    }

    /// Every matrix a token reads, in order (the embedding is not one: a
    /// token reads one row of it).
    fn matrices(&self) -> impl Iterator<Item = &MatrixRef> {
        self.layers
            .iter()
            .flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down])
            .chain(std::iter::once(&self.output))
    }

    /// Weight bytes every token reads: every matrix, the norms and one
    /// embedding row (the KV cache comes on top, growing with the position).
    pub fn bytes_per_token(&self) -> usize {
        let matrices: usize = self.matrices().map(|m| m.len).sum();
        let norms = 4
            * (self.final_norm.len()
                + self
                    .layers
                    .iter()
                    .map(|l| l.attn_norm.len() + l.ffn_norm.len())
                    .sum::<usize>());
        matrices + norms + self.embedding.len / self.embedding.rows.max(1)
    }

    /// KV-cache bytes the token at position `pos` reads: every layer's
    /// keys and values for positions `0..=pos` (f32). They come on top of
    /// [`Model::bytes_per_token`]: 4.7 MB a token on average over the
    /// first 128 positions of stories110M, 7 % of its Q4_0 weights.
    pub fn kv_cache_bytes_at(&self, pos: usize) -> usize {
        let c = &self.config;
        c.n_layers * 2 * (pos + 1) * c.kv_dim() * std::mem::size_of::<f32>()
    }

    /// Each tensor type the model's matrices use and how many matrices of
    /// it, the embedding counted too (`[(Q4_K, 73), (Q6_K, 12)]`).
    pub fn tensor_types(&self) -> Vec<(WeightType, usize)> {
        let mut counts: Vec<(WeightType, usize)> = Vec::new();
        let tied = self.config.shared_classifier;
        let all = self
            .matrices()
            .take(7 * self.layers.len() + usize::from(!tied))
            .chain(std::iter::once(&self.embedding));
        for m in all {
            match counts.iter_mut().find(|(t, _)| *t == m.ty) {
                Some((_, n)) => *n += 1,
                None => counts.push((m.ty, 1)),
            }
        }
        counts
    }

    /// Every byte of the weights, for a read-bandwidth ceiling over the
    /// same memory the decode streams.
    pub fn weight_bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// A llama2.c checkpoint's values after the header (what llama2.c's
    /// own code reads); `None` for a GGUF model.
    pub fn llama2c_values(&self) -> Option<&[f32]> {
        if self.format != FileFormat::Llama2c {
            return None;
        }
        let bytes = &self.storage.bytes()[HEADER_BYTES..];
        // SAFETY: every bit pattern is a valid f32; `align_to` hands out
        // only the aligned middle, and the load checked the prefix empty
        // (the storage is 8-aligned and the header 28 bytes).
        let (prefix, values, _) = unsafe { bytes.align_to::<f32>() };
        prefix.is_empty().then_some(values)
    }
}

/// A clear error for a directory given as a model (reading one fails with
/// a code that reads as nonsense).
fn refuse_directory(path: &Path) -> Result<(), LoadError> {
    if std::fs::metadata(path)?.is_dir() {
        return Err(LoadError::Io(io::Error::new(
            io::ErrorKind::IsADirectory,
            format!("{} is a directory", path.display()),
        )));
    }
    Ok(())
}

/// What a reader found, before it is joined to its bytes.
struct Description {
    config: Config,
    rope: Rope,
    rms_eps: f32,
    format: FileFormat,
    embedding: MatrixRef,
    layers: Vec<LayerRefs>,
    final_norm: Vec<f32>,
    output: MatrixRef,
    tokenizer: Option<Tokenizer>,
    bos: u32,
}

impl Description {
    fn with(self, storage: Storage) -> Model {
        Model {
            config: self.config,
            rope: self.rope,
            rms_eps: self.rms_eps,
            format: self.format,
            storage,
            embedding: self.embedding,
            layers: self.layers,
            final_norm: self.final_norm,
            output: self.output,
            tokenizer: self.tokenizer,
            bos: self.bos,
        }
    }
}

/// `n` little-endian f32s at `offset`.
fn f32s_at(bytes: &[u8], offset: usize, n: usize) -> Vec<f32> {
    bytes[offset..offset + 4 * n]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect()
}

/// Checks a matrix's place and alignment in `bytes`.
fn checked_matrix(bytes: &[u8], name: &str, m: MatrixRef) -> Result<MatrixRef, LoadError> {
    let slice = bytes
        .get(m.offset..m.offset + m.len)
        .ok_or(LoadError::TensorOutOfBounds {
            tensor: name.to_owned(),
            offset: m.offset as u64,
            bytes: Some(m.len as u64),
            file: bytes.len() as u64,
        })?;
    Weights::new(m.ty, m.rows, m.cols, slice)
        .map_err(|err| LoadError::BadGguf(format!("tensor {name}: {err}")))?;
    Ok(m)
}

/// A llama2.c checkpoint's description.
fn llama2c_description(bytes: &[u8]) -> Result<Description, LoadError> {
    let config = Config::from_header(bytes)?;
    let (Some(layout), Some(expected)) = (config.layout(), config.file_bytes()) else {
        return Err(LoadError::BadHeader(format!(
            "{config:?} does not fit this platform's address space"
        )));
    };
    match bytes.len() {
        found if found < expected => {
            return Err(LoadError::Truncated {
                needed: expected,
                found,
            })
        }
        found if found > expected => return Err(LoadError::TrailingBytes { expected, found }),
        _ => {}
    }
    let (dim, hidden, kv) = (config.dim, config.hidden_dim, config.kv_dim());
    let at = |range: &std::ops::Range<usize>, layer: usize, size: usize| {
        HEADER_BYTES + 4 * (range.start + layer * size)
    };
    let matrix = |range: &std::ops::Range<usize>, layer: usize, rows: usize, cols: usize| {
        checked_matrix(
            bytes,
            "a llama2.c matrix",
            MatrixRef {
                ty: WeightType::F32,
                rows,
                cols,
                offset: at(range, layer, rows * cols),
                len: 4 * rows * cols,
                interleaved: false,
            },
        )
    };
    let mut layers = Vec::with_capacity(config.n_layers);
    for l in 0..config.n_layers {
        layers.push(LayerRefs {
            attn_norm: f32s_at(bytes, at(&layout.rms_att, l, dim), dim),
            wq: matrix(&layout.wq, l, dim, dim)?,
            wk: matrix(&layout.wk, l, kv, dim)?,
            wv: matrix(&layout.wv, l, kv, dim)?,
            wo: matrix(&layout.wo, l, dim, dim)?,
            ffn_norm: f32s_at(bytes, at(&layout.rms_ffn, l, dim), dim),
            gate: matrix(&layout.w1, l, hidden, dim)?,
            up: matrix(&layout.w3, l, hidden, dim)?,
            down: matrix(&layout.w2, l, dim, hidden)?,
        });
    }
    Ok(Description {
        config,
        rope: Rope {
            base: 10000.0,
            dims: config.head_size(),
        },
        rms_eps: 1e-5,
        format: FileFormat::Llama2c,
        embedding: matrix(&layout.embedding, 0, config.vocab_size, dim)?,
        layers,
        final_norm: f32s_at(bytes, at(&layout.rms_final, 0, dim), dim),
        output: matrix(&layout.classifier, 0, config.vocab_size, dim)?,
        tokenizer: None,
        bos: crate::tokenizer::BOS,
    })
}

/// Reads a GGUF llama model's metadata and tensors.
fn gguf_description(bytes: &[u8]) -> Result<Description, LoadError> {
    let file = Gguf::parse(bytes)?;
    let arch = string(&file, "general.architecture")?;
    if arch != "llama" {
        return Err(LoadError::Architecture(arch.to_owned()));
    }
    let count = |key: &str| -> Result<usize, LoadError> {
        let value = required(&file, key)?;
        value
            .as_u64()
            .and_then(|v| usize::try_from(v).ok())
            .filter(|&v| v > 0)
            .ok_or_else(|| LoadError::KeyType {
                key: key.to_owned(),
                expected: "positive integer",
                found: value.kind(),
            })
    };
    let optional_count = |key: &str| -> Result<Option<usize>, LoadError> {
        file.get(key).map(|_| count(key)).transpose()
    };
    let float = |key: &str| -> Result<Option<f32>, LoadError> {
        file.get(key)
            .map(|value| {
                value
                    .as_f64()
                    .map(|v| v as f32)
                    .ok_or_else(|| LoadError::KeyType {
                        key: key.to_owned(),
                        expected: "float",
                        found: value.kind(),
                    })
            })
            .transpose()
    };
    let dim = count("llama.embedding_length")?;
    let n_layers = count("llama.block_count")?;
    // Each layer is 9 tensors: a count beyond them is corrupt, and must
    // fail before anything is sized by it (the fuzzer found a 400 GB
    // allocation here).
    if n_layers > file.tensors.len() / 9 {
        return Err(LoadError::BadGguf(format!(
            "llama.block_count is {n_layers}, but the file holds only {} tensors (9 per layer)",
            file.tensors.len()
        )));
    }
    let hidden_dim = count("llama.feed_forward_length")?;
    let n_heads = count("llama.attention.head_count")?;
    let n_kv_heads = optional_count("llama.attention.head_count_kv")?.unwrap_or(n_heads);
    let seq_len = count("llama.context_length")?;
    let rms_eps = float("llama.attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5);
    let rope_base = float("llama.rope.freq_base")?.unwrap_or(10000.0);
    let tokenizer = Tokenizer::from_gguf(&file)?;
    let vocab_size = tokenizer.len();
    let output_tensor = file.tensor("output.weight");
    let config = Config {
        dim,
        hidden_dim,
        n_layers,
        n_heads,
        n_kv_heads,
        vocab_size,
        seq_len,
        shared_classifier: output_tensor.is_none(),
    };
    config.check().map_err(|err| match err {
        LoadError::BadHeader(reason) => LoadError::BadGguf(reason),
        other => other,
    })?;
    let rope_dims = optional_count("llama.rope.dimension_count")?.unwrap_or(config.head_size());
    if rope_dims > config.head_size() || !rope_dims.is_multiple_of(2) {
        return Err(LoadError::BadGguf(format!(
            "llama.rope.dimension_count is {rope_dims}: more than the head size {} or odd",
            config.head_size()
        )));
    }
    let kv = config.kv_dim();
    let tensor = |name: &str| {
        file.tensor(name)
            .ok_or_else(|| LoadError::MissingTensor(name.to_owned()))
    };
    let matrix = |name: &str, cols: usize, rows: usize| -> Result<MatrixRef, LoadError> {
        gguf_matrix(bytes, tensor(name)?, cols, rows)
    };
    let norm = |name: &str| gguf_vector(bytes, tensor(name)?, dim);
    let mut layers = Vec::with_capacity(n_layers);
    for l in 0..n_layers {
        let name = |part: &str| format!("blk.{l}.{part}.weight");
        layers.push(LayerRefs {
            attn_norm: norm(&name("attn_norm"))?,
            wq: matrix(&name("attn_q"), dim, dim)?,
            wk: matrix(&name("attn_k"), dim, kv)?,
            wv: matrix(&name("attn_v"), dim, kv)?,
            wo: matrix(&name("attn_output"), dim, dim)?,
            ffn_norm: norm(&name("ffn_norm"))?,
            gate: matrix(&name("ffn_gate"), dim, hidden_dim)?,
            up: matrix(&name("ffn_up"), dim, hidden_dim)?,
            down: matrix(&name("ffn_down"), hidden_dim, dim)?,
        });
    }
    let embedding = matrix("token_embd.weight", dim, vocab_size)?;
    let output = match output_tensor {
        Some(t) => gguf_matrix(bytes, t, dim, vocab_size)?,
        None => embedding,
    };
    let bos = match file.get("tokenizer.ggml.bos_token_id") {
        Some(value) => value
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .filter(|&v| (v as usize) < vocab_size)
            .ok_or_else(|| {
                LoadError::BadTokenizer(format!("bos_token_id {value:?} is not a token"))
            })?,
        None => crate::tokenizer::BOS,
    };
    Ok(Description {
        config,
        rope: Rope {
            base: rope_base,
            dims: rope_dims,
        },
        rms_eps,
        format: FileFormat::Gguf(file.version),
        embedding,
        layers,
        final_norm: norm("output_norm.weight")?,
        output,
        tokenizer: Some(tokenizer),
        bos,
    })
}

/// A required metadata value.
pub(crate) fn required<'a>(file: &'a Gguf, key: &str) -> Result<&'a Value, LoadError> {
    file.get(key)
        .ok_or_else(|| LoadError::MissingKey(key.to_owned()))
}

/// A required string value.
fn string<'a>(file: &'a Gguf, key: &str) -> Result<&'a str, LoadError> {
    let value = required(file, key)?;
    value.as_str().ok_or_else(|| LoadError::KeyType {
        key: key.to_owned(),
        expected: "string",
        found: value.kind(),
    })
}

/// A supported type, or an error naming the tensor and its type.
fn weight_type(t: &TensorInfo) -> Result<WeightType, LoadError> {
    WeightType::from_ggml_id(t.ggml_type).ok_or_else(|| LoadError::UnsupportedType {
        tensor: t.name.clone(),
        ty: WeightType::ggml_name(t.ggml_type)
            .map_or_else(|| format!("id {}", t.ggml_type), str::to_owned),
    })
}

/// A `rows x cols` matrix tensor (GGUF dims `[cols, rows]`).
fn gguf_matrix(
    bytes: &[u8],
    t: &TensorInfo,
    cols: usize,
    rows: usize,
) -> Result<MatrixRef, LoadError> {
    let expected = [cols as u64, rows as u64];
    if t.dims != expected {
        return Err(LoadError::TensorShape {
            tensor: t.name.clone(),
            expected: expected.to_vec(),
            found: t.dims.clone(),
        });
    }
    let ty = weight_type(t)?;
    let len = ty
        .row_bytes(cols)
        .and_then(|row| row.checked_mul(rows))
        .ok_or_else(|| {
            LoadError::BadGguf(format!(
                "tensor {}: a row of {cols} is not whole {ty} blocks",
                t.name
            ))
        })?;
    checked_matrix(
        bytes,
        &t.name,
        MatrixRef {
            ty,
            rows,
            cols,
            offset: usize::try_from(t.offset).map_err(|_| {
                LoadError::BadGguf(format!("tensor {}: offset past the address space", t.name))
            })?,
            len,
            interleaved: false,
        },
    )
}

/// A vector of `n` values (F32 or F16), copied out as f32.
fn gguf_vector(bytes: &[u8], t: &TensorInfo, n: usize) -> Result<Vec<f32>, LoadError> {
    if t.dims != [n as u64] {
        return Err(LoadError::TensorShape {
            tensor: t.name.clone(),
            expected: vec![n as u64],
            found: t.dims.clone(),
        });
    }
    let ty = weight_type(t)?;
    let m = gguf_matrix(
        bytes,
        &TensorInfo {
            dims: vec![n as u64, 1],
            ..t.clone()
        },
        n,
        1,
    )?;
    if !matches!(ty, WeightType::F32 | WeightType::F16) {
        return Err(LoadError::UnsupportedType {
            tensor: t.name.clone(),
            ty: format!("{ty} (a norm must be F32 or F16)"),
        });
    }
    let weights =
        Weights::new(m.ty, 1, n, &bytes[m.offset..m.offset + m.len]).expect("checked just above");
    let mut out = vec![0.0; n];
    weights.row_into(0, &mut out);
    Ok(out)
}
