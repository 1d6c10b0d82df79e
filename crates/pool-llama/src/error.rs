//! Why a model or tokenizer could not be loaded: one error type for both
//! file formats, each variant naming the problem (and the key, tensor or
//! offset it was found at).

use std::fmt;
use std::io;

/// Why a model or tokenizer could not be loaded.
#[derive(Debug)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read or mapped.
    Io(io::Error),
    /// A llama2.c header whose values make no model.
    BadHeader(String),
    /// The file ends before the data its header announces.
    Truncated {
        /// Bytes the header implies.
        needed: usize,
        /// Bytes in the file.
        found: usize,
    },
    /// A GGUF file ends inside a field.
    TruncatedAt {
        /// The field being read.
        what: String,
        /// Bytes needed to read it.
        needed: usize,
        /// Bytes in the file.
        found: usize,
    },
    /// The file holds bytes after the data the header announces.
    TrailingBytes {
        /// Bytes the header implies.
        expected: usize,
        /// Bytes in the file.
        found: usize,
    },
    /// A tokenizer that does not match its format or the model.
    BadTokenizer(String),
    /// Something this build cannot do.
    Unsupported(&'static str),
    /// Neither a GGUF file nor a llama2.c checkpoint.
    NotGguf {
        /// The file's first four bytes.
        magic: [u8; 4],
    },
    /// A GGUF version this reader does not read.
    GgufVersion(u32),
    /// A GGUF file whose structure is broken (the message says where).
    BadGguf(String),
    /// A metadata key the model needs is missing.
    MissingKey(String),
    /// A metadata key holds the wrong kind of value.
    KeyType {
        /// The key.
        key: String,
        /// What it must hold.
        expected: &'static str,
        /// What it holds.
        found: &'static str,
    },
    /// A model of another architecture than llama.
    Architecture(String),
    /// A tensor the model needs is missing.
    MissingTensor(String),
    /// A tensor in a type this crate has no kernel for.
    UnsupportedType {
        /// The tensor.
        tensor: String,
        /// Its type's name (ggml's), or its id.
        ty: String,
    },
    /// A tensor whose dimensions do not match the metadata.
    TensorShape {
        /// The tensor.
        tensor: String,
        /// The dimensions the metadata implies, row length first.
        expected: Vec<u64>,
        /// Its dimensions.
        found: Vec<u64>,
    },
    /// A tensor that does not lie inside the file.
    TensorOutOfBounds {
        /// The tensor.
        tensor: String,
        /// Where it starts.
        offset: u64,
        /// Its size, when known.
        bytes: Option<u64>,
        /// The file's size.
        file: u64,
    },
    /// A tensor whose offset is not on the file's alignment.
    TensorMisaligned {
        /// The tensor.
        tensor: String,
        /// Its offset in the data section.
        offset: u64,
        /// The alignment.
        alignment: u64,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Io(err) if err.kind() == io::ErrorKind::IsADirectory => {
                write!(f, "cannot read the file: it is a directory, not a model file")
            }
            LoadError::Io(err) => write!(f, "cannot read the file: {err}"),
            LoadError::BadHeader(reason) => write!(f, "not a llama2.c checkpoint: {reason}"),
            LoadError::Truncated { needed, found } => write!(
                f,
                "truncated: the header implies {needed} bytes, the file has {found}"
            ),
            LoadError::TruncatedAt {
                what,
                needed,
                found,
            } => write!(
                f,
                "truncated: the file ends at byte {found} inside {what} (needs {needed})"
            ),
            LoadError::TrailingBytes { expected, found } => write!(
                f,
                "the header implies {expected} bytes, the file has {found} (another version of the format?)"
            ),
            LoadError::BadTokenizer(reason) => write!(f, "bad tokenizer: {reason}"),
            LoadError::Unsupported(reason) => write!(f, "unsupported here: {reason}"),
            LoadError::NotGguf { magic } => write!(
                f,
                "not a GGUF file (magic {magic:02x?}, expected \"GGUF\")"
            ),
            LoadError::GgufVersion(version) => write!(
                f,
                "GGUF version {version} is not supported (versions 2 and 3 are)"
            ),
            LoadError::BadGguf(reason) => write!(f, "malformed GGUF: {reason}"),
            LoadError::MissingKey(key) => write!(f, "the metadata key {key} is missing"),
            LoadError::KeyType {
                key,
                expected,
                found,
            } => write!(f, "the metadata key {key} holds a {found}, not a {expected}"),
            LoadError::Architecture(arch) => write!(
                f,
                "architecture {arch:?} is not supported (only \"llama\" is)"
            ),
            LoadError::MissingTensor(name) => write!(f, "the tensor {name} is missing"),
            LoadError::UnsupportedType { tensor, ty } => write!(
                f,
                "tensor {tensor} has type {ty}, which has no kernel here (supported: F32, F16, \
                 Q8_0, Q4_0, Q4_K, Q6_K)"
            ),
            LoadError::TensorShape {
                tensor,
                expected,
                found,
            } => write!(
                f,
                "tensor {tensor} has dimensions {found:?}, the metadata implies {expected:?}"
            ),
            LoadError::TensorOutOfBounds {
                tensor,
                offset,
                bytes,
                file,
            } => match bytes {
                Some(bytes) => write!(
                    f,
                    "tensor {tensor} ({bytes} bytes at offset {offset}) runs past the end of the \
                     {file}-byte file"
                ),
                None => write!(
                    f,
                    "tensor {tensor} at offset {offset} has a size that overflows or does not \
                     fit the {file}-byte file"
                ),
            },
            LoadError::TensorMisaligned {
                tensor,
                offset,
                alignment,
            } => write!(
                f,
                "tensor {tensor}'s offset {offset} is not a multiple of the alignment {alignment}"
            ),
        }
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LoadError::Io(err) => Some(err),
            _ => None,
        }
    }
}

impl From<io::Error> for LoadError {
    fn from(err: io::Error) -> Self {
        LoadError::Io(err)
    }
}
