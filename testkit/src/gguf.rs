//! A GGUF writer for tests: files of any shape, type and metadata,
//! including broken ones, written the way llama.cpp's `gguf` writer lays
//! them out (header, key/values, tensor infos, data aligned).

/// A metadata value, in GGUF's types.
#[derive(Debug, Clone, PartialEq)]
pub enum Meta {
    /// `u8` (type 0).
    U8(u8),
    /// `u32` (type 4).
    U32(u32),
    /// `i32` (type 5).
    I32(i32),
    /// `f32` (type 6).
    F32(f32),
    /// `bool` (type 7).
    Bool(bool),
    /// A string (type 8).
    Str(String),
    /// `u64` (type 10).
    U64(u64),
    /// An array of strings.
    Strings(Vec<String>),
    /// An array of `f32`.
    F32s(Vec<f32>),
    /// An array of `i32`.
    I32s(Vec<i32>),
}

/// A tensor to write: its name, dimensions (row length first), ggml type
/// id and bytes (already in that type's layout).
#[derive(Debug, Clone)]
pub struct Tensor {
    /// Its name.
    pub name: String,
    /// Its dimensions, row length first.
    pub dims: Vec<u64>,
    /// Its ggml type id (0 F32, 1 F16, 2 Q4_0, 8 Q8_0, 12 Q4_K, 14 Q6_K).
    pub ggml_type: u32,
    /// Its data.
    pub data: Vec<u8>,
}

/// A GGUF file being put together.
#[derive(Debug, Clone)]
pub struct GgufWriter {
    /// The version written (3 unless a test wants another).
    pub version: u32,
    /// The data alignment (32 unless `general.alignment` says otherwise).
    pub alignment: u64,
    /// The metadata, in order.
    pub metadata: Vec<(String, Meta)>,
    /// The tensors, in order.
    pub tensors: Vec<Tensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter {
            version: 3,
            alignment: 32,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }
}

impl GgufWriter {
    /// An empty version-3 file.
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    /// Adds a metadata key.
    pub fn meta(&mut self, key: &str, value: Meta) -> &mut Self {
        self.metadata.push((key.to_owned(), value));
        self
    }

    /// Adds a tensor.
    pub fn tensor(&mut self, name: &str, dims: &[u64], ggml_type: u32, data: Vec<u8>) -> &mut Self {
        self.tensors.push(Tensor {
            name: name.to_owned(),
            dims: dims.to_vec(),
            ggml_type,
            data,
        });
        self
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            string(&mut out, key);
            value_bytes(&mut out, value);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            offsets.push(offset);
            offset = (offset + t.data.len() as u64).next_multiple_of(self.alignment);
        }
        for (t, offset) in self.tensors.iter().zip(&offsets) {
            string(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ggml_type.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
        }
        let start = (out.len() as u64).next_multiple_of(self.alignment);
        out.resize(start as usize, 0);
        for (t, offset) in self.tensors.iter().zip(&offsets) {
            out.resize((start + offset) as usize, 0);
            out.extend_from_slice(&t.data);
        }
        out
    }
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn value_bytes(out: &mut Vec<u8>, value: &Meta) {
    let ty = |out: &mut Vec<u8>, t: u32| out.extend_from_slice(&t.to_le_bytes());
    match value {
        Meta::U8(v) => {
            ty(out, 0);
            out.push(*v);
        }
        Meta::U32(v) => {
            ty(out, 4);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Meta::I32(v) => {
            ty(out, 5);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Meta::F32(v) => {
            ty(out, 6);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Meta::Bool(v) => {
            ty(out, 7);
            out.push(u8::from(*v));
        }
        Meta::Str(s) => {
            ty(out, 8);
            string(out, s);
        }
        Meta::U64(v) => {
            ty(out, 10);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Meta::Strings(items) => {
            ty(out, 9);
            ty(out, 8);
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for s in items {
                string(out, s);
            }
        }
        Meta::F32s(items) => {
            ty(out, 9);
            ty(out, 6);
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for v in items {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        Meta::I32s(items) => {
            ty(out, 9);
            ty(out, 5);
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for v in items {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
}
