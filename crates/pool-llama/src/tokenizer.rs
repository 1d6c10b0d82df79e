//! Token pieces and scores: from a llama2.c tokenizer file, or from a GGUF
//! file's `tokenizer.ggml.*` keys; ids to text and text to ids.
//!
//! A llama2.c tokenizer file is an `i32` longest-piece length, then per
//! token an `f32` score, an `i32` byte length and the piece's bytes. A
//! GGUF vocabulary (`tokenizer.ggml.model = "llama"`, SentencePiece) writes
//! a space as `▁` (U+2581); it is read back as a space, so both behave the
//! same. Encoding is llama2.c's: a leading space, each character its own
//! piece (or its bytes' `<0xHH>` pieces), then the best-scoring adjacent
//! pair merged until no pair is a piece.

use std::collections::HashMap;
use std::path::Path;

use crate::error::LoadError;
use crate::gguf::{Gguf, Value};

/// The beginning-of-sequence token of llama2.c's vocabulary (and GGUF's
/// default).
pub const BOS: u32 = 1;

/// SentencePiece's space.
const SPIECE_SPACE: &str = "\u{2581}";

/// GGUF's token type of a control token (`<s>`, `</s>`).
const CONTROL: i64 = 3;

/// Token pieces and scores, to turn ids into text and text into ids.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    pieces: Vec<Vec<u8>>,
    scores: Vec<f32>,
    /// Tokens that stand for nothing in text (GGUF control tokens).
    control: Vec<bool>,
    bos: u32,
    /// Piece -> id, built on first use by `encode`.
    lookup: std::sync::OnceLock<HashMap<Vec<u8>, u32>>,
}

impl Tokenizer {
    /// Reads a llama2.c tokenizer file for a model of `vocab_size` tokens.
    pub fn open(path: impl AsRef<Path>, vocab_size: usize) -> Result<Tokenizer, LoadError> {
        Tokenizer::from_bytes(&std::fs::read(path)?, vocab_size)
    }

    /// Parses a llama2.c tokenizer file's bytes.
    pub fn from_bytes(bytes: &[u8], vocab_size: usize) -> Result<Tokenizer, LoadError> {
        let bad = |reason: String| LoadError::BadTokenizer(reason);
        let at = std::cell::Cell::new(0usize);
        let take = |n: usize, token: usize| -> Result<&[u8], LoadError> {
            let start = at.get();
            let piece = start.checked_add(n).and_then(|end| bytes.get(start..end));
            let Some(piece) = piece else {
                return Err(bad(format!(
                    "ends at byte {} inside token {token}'s record",
                    bytes.len()
                )));
            };
            at.set(start + n);
            Ok(piece)
        };
        let i32_at = |b: &[u8]| i32::from_le_bytes(b.try_into().expect("4 bytes"));
        let max_len = i32_at(take(4, 0)?);
        if max_len <= 0 {
            return Err(bad(format!("longest piece is {max_len} bytes")));
        }
        let mut pieces = Vec::with_capacity(vocab_size.min(1 << 20));
        let mut scores = Vec::with_capacity(vocab_size.min(1 << 20));
        for token in 0..vocab_size {
            if at.get() == bytes.len() {
                return Err(bad(format!(
                    "the tokenizer has {token} tokens, the model {vocab_size}"
                )));
            }
            let score = f32::from_le_bytes(take(4, token)?.try_into().expect("4 bytes"));
            let len = i32_at(take(4, token)?);
            if len < 0 || len > max_len {
                return Err(bad(format!(
                    "token {token} has length {len} (longest allowed {max_len})"
                )));
            }
            pieces.push(take(len as usize, token)?.to_vec());
            scores.push(score);
        }
        if at.get() != bytes.len() {
            return Err(bad(format!(
                "{} bytes after {vocab_size} tokens: the tokenizer has more tokens than the model?",
                bytes.len() - at.get()
            )));
        }
        let control = vec![false; pieces.len()];
        Ok(Tokenizer {
            pieces,
            scores,
            control,
            bos: BOS,
            lookup: Default::default(),
        })
    }

    /// The vocabulary of a GGUF file (`tokenizer.ggml.tokens`, `scores`,
    /// `token_type`, `bos_token_id`).
    pub(crate) fn from_gguf(file: &Gguf) -> Result<Tokenizer, LoadError> {
        let array = |key: &str| -> Result<Option<&[Value]>, LoadError> {
            file.get(key)
                .map(|value| {
                    value.as_array().ok_or_else(|| LoadError::KeyType {
                        key: key.to_owned(),
                        expected: "array",
                        found: value.kind(),
                    })
                })
                .transpose()
        };
        if let Some(model) = file.get("tokenizer.ggml.model") {
            if model.as_str().is_some_and(|m| m != "llama") {
                tracing::warn!(
                    tokenizer = ?model,
                    "pool-llama: a tokenizer other than llama's SentencePiece: ids decode to \
                     its pieces, prompts are encoded as llama's would be"
                );
            }
        }
        let tokens = array("tokenizer.ggml.tokens")?
            .ok_or_else(|| LoadError::MissingKey("tokenizer.ggml.tokens".into()))?;
        let pieces = tokens
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .map(|s| s.replace(SPIECE_SPACE, " ").into_bytes())
                    .ok_or_else(|| {
                        LoadError::BadTokenizer(format!(
                            "token {i} is a {}, not a string",
                            v.kind()
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let n = pieces.len();
        let per_token = |key: &str| -> Result<Option<&[Value]>, LoadError> {
            match array(key)? {
                Some(values) if values.len() != n => Err(LoadError::BadTokenizer(format!(
                    "{key} has {} entries for {n} tokens",
                    values.len()
                ))),
                other => Ok(other),
            }
        };
        let scores = match per_token("tokenizer.ggml.scores")? {
            Some(values) => values
                .iter()
                .map(|v| v.as_f64().map(|s| s as f32))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| LoadError::BadTokenizer("a score is not a number".into()))?,
            None => vec![0.0; n],
        };
        let control = match per_token("tokenizer.ggml.token_type")? {
            Some(values) => values
                .iter()
                .map(|v| matches!(v, Value::Signed(CONTROL) | Value::Unsigned(3)))
                .collect(),
            None => vec![false; n],
        };
        if n == 0 {
            return Err(LoadError::BadTokenizer(
                "tokenizer.ggml.tokens is empty".into(),
            ));
        }
        let bos = file
            .get("tokenizer.ggml.bos_token_id")
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(BOS);
        Ok(Tokenizer {
            pieces,
            scores,
            control,
            bos,
            lookup: Default::default(),
        })
    }

    /// The bytes `token` stands for after `previous`, as llama2.c prints
    /// them: the leading space of the first piece after BOS is dropped,
    /// raw-byte pieces (`<0x41>`) become that byte, and control tokens
    /// (GGUF's `<s>`, `</s>`) nothing. An id outside the vocabulary gives
    /// nothing.
    pub fn decode(&self, previous: u32, token: u32) -> &[u8] {
        let Some(piece) = self.pieces.get(token as usize) else {
            return &[];
        };
        if self.control[token as usize] {
            return &[];
        }
        let piece = match piece.as_slice() {
            [b' ', rest @ ..] if previous == self.bos => rest,
            other => other,
        };
        if let Some(byte) = raw_byte(piece) {
            return &BYTES[byte as usize..byte as usize + 1];
        }
        piece
    }

    /// `text` as token ids (without BOS): llama2.c's greedy merge by score.
    /// Bytes with no piece of their own use `<0xHH>` pieces; a byte with
    /// neither is skipped (and logged).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let lookup = self.lookup.get_or_init(|| {
            let mut map = HashMap::with_capacity(self.pieces.len());
            for (id, piece) in self.pieces.iter().enumerate().rev() {
                // The first id wins when two tokens share a piece.
                map.insert(piece.clone(), id as u32);
            }
            map
        });
        let mut tokens: Vec<u32> = Vec::with_capacity(text.len() + 1);
        if text.is_empty() {
            return tokens;
        }
        let prefixed = format!(" {text}");
        for c in prefixed.chars() {
            let mut utf8 = [0u8; 4];
            let bytes = c.encode_utf8(&mut utf8).as_bytes();
            if let Some(&id) = lookup.get(bytes) {
                tokens.push(id);
                continue;
            }
            for &b in bytes {
                match lookup.get(format!("<0x{b:02X}>").as_bytes()) {
                    Some(&id) => tokens.push(id),
                    None => tracing::warn!(byte = b, "pool-llama: a byte with no token: skipped"),
                }
            }
        }
        loop {
            let mut best: Option<(f32, usize, u32)> = None;
            for i in 0..tokens.len().saturating_sub(1) {
                let mut merged = self.pieces[tokens[i] as usize].clone();
                merged.extend_from_slice(&self.pieces[tokens[i + 1] as usize]);
                if let Some(&id) = lookup.get(&merged) {
                    let score = self.scores[id as usize];
                    if best.is_none_or(|(top, _, _)| score > top) {
                        best = Some((score, i, id));
                    }
                }
            }
            let Some((_, i, id)) = best else {
                break;
            };
            tokens[i] = id;
            tokens.remove(i + 1);
        }
        tokens
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

    fn file(pieces: &[(&[u8], f32)]) -> Vec<u8> {
        let mut bytes = 8i32.to_le_bytes().to_vec();
        for (piece, score) in pieces {
            bytes.extend_from_slice(&score.to_le_bytes());
            bytes.extend_from_slice(&(piece.len() as i32).to_le_bytes());
            bytes.extend_from_slice(piece);
        }
        bytes
    }

    #[test]
    fn pieces_decode_as_llama2_c_prints_them() {
        let pieces: [(&[u8], f32); 4] = [
            (b"<unk>", 0.0),
            (b"<s>", 0.0),
            (b" Once", 0.0),
            (b"<0x41>", 0.0),
        ];
        let t = Tokenizer::from_bytes(&file(&pieces), 4).unwrap();
        assert_eq!(t.decode(BOS, 2), b"Once");
        assert_eq!(t.decode(2, 2), b" Once");
        assert_eq!(t.decode(2, 3), b"A");
        assert_eq!(t.decode(2, 99), b"");
    }

    #[test]
    fn a_tokenizer_for_another_vocabulary_is_refused_saying_so() {
        let bytes = file(&[(b"a", 0.0), (b"b", 0.0), (b"c", 0.0)]);
        let short = Tokenizer::from_bytes(&bytes, 4).unwrap_err().to_string();
        assert!(
            short.contains("the tokenizer has 3 tokens, the model 4"),
            "{short}"
        );
        assert!(Tokenizer::from_bytes(&bytes, 2).is_err(), "too many");
        let cut = Tokenizer::from_bytes(&bytes[..bytes.len() - 1], 3)
            .unwrap_err()
            .to_string();
        assert!(cut.contains("inside token 2's record"), "{cut}");
        assert!(Tokenizer::from_bytes(&[], 3).is_err());
    }

    #[test]
    fn text_encodes_by_merging_the_best_scoring_pairs() {
        let pieces: [(&[u8], f32); 9] = [
            (b"<unk>", 0.0),
            (b"<s>", 0.0),
            (b" ", -1.0),
            (b"a", -1.0),
            (b"b", -1.0),
            (b"ab", -0.5),
            (b" ab", -0.1),
            (b"<0xC3>", 0.0),
            (b"<0xA9>", 0.0),
        ];
        let t = Tokenizer::from_bytes(&file(&pieces), 9).unwrap();
        assert_eq!(t.encode("ab"), [6]);
        assert_eq!(t.encode("abb"), [6, 4]);
        // A character with no piece becomes its bytes' pieces.
        assert_eq!(t.encode("é"), [2, 7, 8]);
        assert_eq!(t.encode(""), Vec::<u32>::new());
    }
}
