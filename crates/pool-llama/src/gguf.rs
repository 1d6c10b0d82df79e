//! The GGUF container (llama.cpp's model format), versions 2 and 3: a
//! header, typed metadata key/values, tensor infos, and the tensor data
//! at an aligned offset. This file reads the container; `model.rs` reads
//! a llama model out of it.
//!
//! Layout (little-endian): magic `GGUF`, `u32` version, `u64` tensor
//! count, `u64` metadata count; each key/value a string key, a `u32` value
//! type and the value; each tensor info a string name, a `u32` dimension
//! count, that many `u64` dimensions (the first is the row length), a
//! `u32` ggml type and a `u64` offset into the data section, which starts
//! at the next multiple of `general.alignment` (default 32) after the
//! infos. Strings are a `u64` length and UTF-8 bytes.
//!
//! Every count and length is checked against the bytes that remain
//! before anything is allocated, so a corrupt or hostile file is an error
//! naming the problem, never a panic, an out-of-bounds read or a huge
//! allocation (`tests/gguf.rs` fuzzes it).

use std::fmt;

use crate::error::LoadError;

/// The first four bytes of every GGUF file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";

/// The data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `u8`, `u16`, `u32`, `u64` (type ids 0, 2, 4, 10), widened.
    Unsigned(u64),
    /// `i8`, `i16`, `i32`, `i64` (1, 3, 5, 11), widened.
    Signed(i64),
    /// `f32`, `f64` (6, 12), widened.
    Float(f64),
    /// `bool` (7).
    Bool(bool),
    /// A string (8).
    String(String),
    /// An array (9) of one element type.
    Array(Vec<Value>),
}

impl Value {
    /// The value as a non-negative integer, whatever its integer type.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Unsigned(v) => Some(v),
            Value::Signed(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float (floats, and integers exactly).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Float(v) => Some(v),
            Value::Unsigned(v) => Some(v as f64),
            Value::Signed(v) => Some(v as f64),
            _ => None,
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    /// A short name of the value's kind, for errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Unsigned(_) => "unsigned integer",
            Value::Signed(_) => "signed integer",
            Value::Float(_) => "float",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
        }
    }
}

/// One tensor's info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Its name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Its dimensions, row length first.
    pub dims: Vec<u64>,
    /// Its ggml type id.
    pub ggml_type: u32,
    /// Its offset in the file (the data section's start plus its own).
    pub offset: u64,
}

/// A parsed GGUF file: metadata and tensor infos (the data stays where
/// it is).
#[derive(Debug, Clone)]
pub struct Gguf {
    /// The format version (2 or 3).
    pub version: u32,
    /// The data alignment.
    pub alignment: u64,
    /// The metadata, in file order.
    pub metadata: Vec<(String, Value)>,
    /// The tensor infos, in file order, offsets made absolute.
    pub tensors: Vec<TensorInfo>,
    /// Where the data section starts.
    pub data_offset: u64,
}

impl Gguf {
    /// Parses the header, metadata and tensor infos of `bytes` (a whole
    /// file), checking that every tensor lies inside the file and on the
    /// alignment (its size from its dimensions and type; a type this crate
    /// cannot read is checked only for its offset).
    pub fn parse(bytes: &[u8]) -> Result<Gguf, LoadError> {
        let mut r = Reader { bytes, at: 0 };
        let magic = r.take(4, &|| "the magic".into())?;
        if magic != GGUF_MAGIC {
            return Err(LoadError::NotGguf {
                magic: magic.try_into().expect("4 bytes"),
            });
        }
        let version = r.u32(&|| "the version".into())?;
        if !(2..=3).contains(&version) {
            return Err(LoadError::GgufVersion(version));
        }
        let tensor_count = r.u64(&|| "the tensor count".into())?;
        let kv_count = r.u64(&|| "the metadata count".into())?;
        // Each key/value needs at least 12 bytes, each tensor info 24.
        r.fits(kv_count, 12, &|| "metadata entries".into())?;
        let mut metadata = Vec::with_capacity(kv_count as usize);
        for i in 0..kv_count {
            let key = r.string(&|| format!("metadata key {i}"))?;
            let value_type = r.u32(&|| format!("the type of {key:?}"))?;
            let value = r.value(value_type, &key, 0)?;
            metadata.push((key, value));
        }
        let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some((_, v)) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() => a,
                _ => {
                    return Err(LoadError::BadGguf(format!(
                        "general.alignment is {v:?}, not a power of two"
                    )))
                }
            },
        };
        r.fits(tensor_count, 24, &|| "tensor infos".into())?;
        let mut tensors = Vec::with_capacity(tensor_count as usize);
        for i in 0..tensor_count {
            let name = r.string(&|| format!("tensor {i}'s name"))?;
            let n_dims = r.u32(&|| format!("{name}'s dimension count"))?;
            if n_dims == 0 || n_dims > 4 {
                return Err(LoadError::BadGguf(format!(
                    "tensor {name} has {n_dims} dimensions (1 to 4 allowed)"
                )));
            }
            let dims = (0..n_dims)
                .map(|_| r.u64(&|| format!("{name}'s dimensions")))
                .collect::<Result<Vec<_>, _>>()?;
            let ggml_type = r.u32(&|| format!("{name}'s type"))?;
            let offset = r.u64(&|| format!("{name}'s offset"))?;
            tensors.push(TensorInfo {
                name,
                dims,
                ggml_type,
                offset,
            });
        }
        let data_offset = (r.at as u64).next_multiple_of(alignment);
        for t in &mut tensors {
            if !t.offset.is_multiple_of(alignment) {
                return Err(LoadError::TensorMisaligned {
                    tensor: t.name.clone(),
                    offset: t.offset,
                    alignment,
                });
            }
            let size = tensor_bytes(t.ggml_type, &t.dims);
            let start = data_offset.checked_add(t.offset);
            let end = start.zip(size).and_then(|(s, n)| s.checked_add(n));
            let file = bytes.len() as u64;
            if start.is_none_or(|s| s > file) || end.is_some_and(|e| e > file) {
                return Err(LoadError::TensorOutOfBounds {
                    tensor: t.name.clone(),
                    offset: start.unwrap_or(u64::MAX),
                    bytes: size,
                    file,
                });
            }
            t.offset = start.expect("checked above");
        }
        Ok(Gguf {
            version,
            alignment,
            metadata,
            tensors,
            data_offset,
        })
    }

    /// The value of metadata `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The tensor named `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

/// Bytes of a tensor of ggml type `ty` and `dims`: `None` for a type this
/// crate does not know the size of, or an overflow.
fn tensor_bytes(ty: u32, dims: &[u64]) -> Option<u64> {
    let weight_type = pool_matvec::WeightType::from_ggml_id(ty)?;
    let values = dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d))?;
    let block = weight_type.block_values() as u64;
    if !values.is_multiple_of(block) {
        return None;
    }
    (values / block).checked_mul(weight_type.block_bytes() as u64)
}

/// What a read is of, for its error: made only when the read fails (a
/// tokenizer's 32,000 strings each formatting their description up front
/// cost most of a parse).
type What<'w> = &'w dyn Fn() -> String;

/// A cursor over the file's bytes; every read is checked.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: What<'_>) -> Result<&'a [u8], LoadError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len());
        let Some(end) = end else {
            return Err(LoadError::TruncatedAt {
                what: what(),
                needed: self.at.saturating_add(n),
                found: self.bytes.len(),
            });
        };
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn u32(&mut self, what: What<'_>) -> Result<u32, LoadError> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self, what: What<'_>) -> Result<u64, LoadError> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }

    /// Fails unless `count` items of at least `each` bytes fit in what
    /// remains (so a corrupt count never drives an allocation).
    fn fits(&self, count: u64, each: u64, what: What<'_>) -> Result<(), LoadError> {
        let remaining = (self.bytes.len() - self.at) as u64;
        if count.checked_mul(each).is_none_or(|n| n > remaining) {
            return Err(LoadError::BadGguf(format!(
                "truncated or corrupt: {count} {} cannot fit in the {remaining} bytes left",
                what()
            )));
        }
        Ok(())
    }

    fn string(&mut self, what: What<'_>) -> Result<String, LoadError> {
        let len = self.u64(what)?;
        self.fits(len, 1, &|| format!("bytes of {}", what()))?;
        let bytes = self.take(len as usize, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| LoadError::BadGguf(format!("{} is not UTF-8", what())))
    }

    /// A value of GGUF type `ty`; `depth` guards nested arrays.
    fn value(&mut self, ty: u32, key: &str, depth: u32) -> Result<Value, LoadError> {
        let what = || format!("the value of {key:?}");
        Ok(match ty {
            0 => Value::Unsigned(u64::from(self.take(1, &what)?[0])),
            1 => Value::Signed(i64::from(self.take(1, &what)?[0] as i8)),
            2 => Value::Unsigned(u64::from(u16::from_le_bytes(
                self.take(2, &what)?.try_into().expect("2 bytes"),
            ))),
            3 => Value::Signed(i64::from(i16::from_le_bytes(
                self.take(2, &what)?.try_into().expect("2 bytes"),
            ))),
            4 => Value::Unsigned(u64::from(self.u32(&what)?)),
            5 => Value::Signed(i64::from(self.u32(&what)? as i32)),
            6 => Value::Float(f64::from(f32::from_bits(self.u32(&what)?))),
            7 => match self.take(1, &what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                other => {
                    return Err(LoadError::BadGguf(format!(
                        "{} is a bool of value {other}",
                        what()
                    )))
                }
            },
            8 => Value::String(self.string(&what)?),
            9 => {
                if depth > 0 {
                    return Err(LoadError::BadGguf(format!(
                        "{} nests arrays, which llama models do not use",
                        what()
                    )));
                }
                let element = self.u32(&what)?;
                let count = self.u64(&what)?;
                let least = match element {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => 8,
                    _ => 1,
                };
                self.fits(count, least, &|| format!("elements of {}", what()))?;
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(element, key, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::Unsigned(self.u64(&what)?),
            11 => Value::Signed(self.u64(&what)? as i64),
            12 => Value::Float(f64::from_bits(self.u64(&what)?)),
            other => {
                return Err(LoadError::BadGguf(format!(
                    "{} has value type {other}, which GGUF does not define",
                    what()
                )))
            }
        })
    }
}

impl fmt::Display for Gguf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GGUF v{}, {} metadata entries, {} tensors",
            self.version,
            self.metadata.len(),
            self.tensors.len()
        )
    }
}
