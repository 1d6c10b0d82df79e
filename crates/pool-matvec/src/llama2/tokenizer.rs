//! The llama2.c tokenizer file: an `i32` longest-piece length, then per
//! token an `f32` score, an `i32` byte length and the piece's bytes.
//! Only decoding is needed for greedy generation from BOS.

use std::path::Path;

use super::checkpoint::LoadError;

/// Token pieces, to turn generated ids into text.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    pieces: Vec<Vec<u8>>,
}

/// The beginning-of-sequence token that generation starts from.
pub const BOS: u32 = 1;

impl Tokenizer {
    /// Reads a tokenizer file for a model of `vocab_size` tokens.
    pub fn open(path: impl AsRef<Path>, vocab_size: usize) -> Result<Tokenizer, LoadError> {
        Tokenizer::from_bytes(&std::fs::read(path)?, vocab_size)
    }

    /// Parses a tokenizer file's bytes.
    pub fn from_bytes(bytes: &[u8], vocab_size: usize) -> Result<Tokenizer, LoadError> {
        let bad = |reason: String| LoadError::BadTokenizer(reason);
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8], LoadError> {
            let piece = at
                .checked_add(n)
                .and_then(|end| bytes.get(at..end))
                .ok_or_else(|| bad(format!("ends at byte {} inside a record", bytes.len())))?;
            at += n;
            Ok(piece)
        };
        let i32_at = |b: &[u8]| i32::from_le_bytes(b.try_into().expect("4 bytes"));
        let max_len = i32_at(take(4)?);
        if max_len <= 0 {
            return Err(bad(format!("longest piece is {max_len} bytes")));
        }
        let mut pieces = Vec::with_capacity(vocab_size.min(1 << 20));
        for token in 0..vocab_size {
            let _score = take(4)?;
            let len = i32_at(take(4)?);
            if len < 0 || len > max_len {
                return Err(bad(format!(
                    "token {token} has length {len} (longest allowed {max_len})"
                )));
            }
            pieces.push(take(len as usize)?.to_vec());
        }
        if at != bytes.len() {
            return Err(bad(format!(
                "{} bytes after {vocab_size} tokens: made for another vocabulary?",
                bytes.len() - at
            )));
        }
        Ok(Tokenizer { pieces })
    }

    /// The bytes `token` stands for after `previous`, as llama2.c prints
    /// them: the leading space of the first piece after BOS is dropped and
    /// raw-byte pieces (`<0x41>`) become that byte. An id outside the
    /// vocabulary gives nothing.
    pub fn decode(&self, previous: u32, token: u32) -> &[u8] {
        let Some(piece) = self.pieces.get(token as usize) else {
            return &[];
        };
        let piece = match piece.as_slice() {
            [b' ', rest @ ..] if previous == BOS => rest,
            other => other,
        };
        if let Some(byte) = raw_byte(piece) {
            return &BYTES[byte as usize..byte as usize + 1];
        }
        piece
    }

    /// Tokens in the vocabulary.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// Whether the vocabulary is empty.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }
}

/// Every byte value, to hand out one-byte slices.
static BYTES: [u8; 256] = {
    let mut all = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        all[i] = i as u8;
        i += 1;
    }
    all
};

/// `<0xHH>` → `HH`.
fn raw_byte(piece: &[u8]) -> Option<u8> {
    let hex = piece.strip_prefix(b"<0x")?.strip_suffix(b">")?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(pieces: &[&[u8]]) -> Vec<u8> {
        let mut bytes = 8i32.to_le_bytes().to_vec();
        for piece in pieces {
            bytes.extend_from_slice(&0.0f32.to_le_bytes());
            bytes.extend_from_slice(&(piece.len() as i32).to_le_bytes());
            bytes.extend_from_slice(piece);
        }
        bytes
    }

    #[test]
    fn pieces_decode_as_llama2_c_prints_them() {
        let t = Tokenizer::from_bytes(&file(&[b"<unk>", b"<s>", b" Once", b"<0x41>"]), 4).unwrap();
        assert_eq!(t.decode(BOS, 2), b"Once");
        assert_eq!(t.decode(2, 2), b" Once");
        assert_eq!(t.decode(2, 3), b"A");
        assert_eq!(t.decode(2, 99), b"");
    }

    #[test]
    fn a_tokenizer_for_another_vocabulary_is_refused() {
        let bytes = file(&[b"a", b"b", b"c"]);
        assert!(Tokenizer::from_bytes(&bytes, 4).is_err(), "too few");
        assert!(Tokenizer::from_bytes(&bytes, 2).is_err(), "too many");
        assert!(Tokenizer::from_bytes(&bytes[..bytes.len() - 1], 3).is_err());
        assert!(Tokenizer::from_bytes(&[], 3).is_err());
    }
}
