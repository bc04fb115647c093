//! Ids → bytes → text, as llama.cpp's `token_to_piece` / `detokenize`: SentencePiece pieces have
//! `▁` turned back into spaces and byte tokens become their byte; BPE pieces go back through GPT-2's
//! byte map; control and unknown tokens print only when asked. Pieces are bytes, not text: a
//! character split over byte tokens is whole only once its last byte arrives, which is what
//! [`StreamDecoder`] waits for.

use super::{attr, bytes, Tokenizer, TokenizerModel};

impl Tokenizer {
    /// The bytes one token stands for. `special`: control/unknown tokens print their text (else nothing).
    /// Ids outside the vocabulary give nothing.
    pub fn piece(&self, id: u32, special: bool) -> Vec<u8> {
        let Some(text) = self.texts.get(id as usize) else { return Vec::new() };
        let a = self.attr(id);
        if a & (attr::CONTROL | attr::UNKNOWN) != 0 {
            return if special { text.as_bytes().to_vec() } else { Vec::new() };
        }
        if a & attr::USER_DEFINED != 0 {
            return text.as_bytes().to_vec();
        }
        if a & attr::NORMAL != 0 {
            return match self.model {
                TokenizerModel::Spm => text.replace('\u{2581}', " ").into_bytes(),
                TokenizerModel::Bpe => {
                    let mut out = Vec::with_capacity(text.len());
                    for c in text.chars() {
                        match bytes::char_to_byte(c) {
                            Some(b) => out.push(b),
                            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                        }
                    }
                    out
                }
            };
        }
        if a & attr::BYTE != 0 {
            return byte_of(text).map(|b| vec![b]).unwrap_or_default();
        }
        Vec::new()
    }

    /// Ids → bytes as llama.cpp's `detokenize`: `remove_special` drops a leading BOS / trailing EOS
    /// the vocabulary adds; `unparse_special` prints control tokens; with `add_space_prefix` the
    /// first piece loses one leading space (unless a BOS was removed); BPE vocabularies (except
    /// Qwen 2's) get llama.cpp's space clean-up around punctuation and contractions.
    pub fn decode_bytes(&self, ids: &[u32], remove_special: bool, unparse_special: bool) -> Vec<u8> {
        let mut ids = ids;
        let mut strip_space = self.add_space_prefix;
        if remove_special && self.add_bos && self.bos.is_some() && ids.first().copied() == self.bos {
            strip_space = false;
            ids = &ids[1..];
        }
        if remove_special && self.add_eos && self.eos.is_some() && ids.last().copied() == self.eos {
            ids = &ids[..ids.len() - 1];
        }
        let mut out = Vec::new();
        for &id in ids {
            let p = self.piece(id, unparse_special);
            let skip = usize::from(strip_space && p.first() == Some(&b' '));
            out.extend_from_slice(&p[skip..]);
            strip_space = false;
        }
        if self.clean_spaces {
            clean_spaces(&mut out);
        }
        out
    }

    /// [`decode_bytes`](Self::decode_bytes) as text; invalid UTF-8 becomes U+FFFD.
    pub fn decode(&self, ids: &[u32], remove_special: bool, unparse_special: bool) -> String {
        String::from_utf8_lossy(&self.decode_bytes(ids, remove_special, unparse_special)).into_owned()
    }
}

/// `<0xNN>` → `NN`.
fn byte_of(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// llama.cpp's three clean-up passes: drop the space before `?!.,`; turn ` ' ` into `'`; drop the
/// space before `'s`, `'m`, `'re`, `'ve`.
fn clean_spaces(t: &mut Vec<u8>) {
    let mut out: Vec<u8> = Vec::with_capacity(t.len());
    for (i, &x) in t.iter().enumerate() {
        if i > 0 && t[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            out.pop();
        }
        out.push(x);
    }
    let mut t1 = std::mem::take(&mut out);
    let mut i = 0;
    while i < t1.len() {
        let x = t1[i];
        if i > 0 && x == b'\'' && i + 1 < t1.len() && t1[i - 1] == b' ' && t1[i + 1] == b' ' {
            out.pop();
            out.push(x);
            // llama.cpp blanks the dropped space in place; the next comparison sees that.
            t1[i + 1] = 0;
            i += 2;
            continue;
        }
        out.push(x);
        i += 1;
    }
    let t2 = std::mem::take(&mut out);
    for (i, &x) in t2.iter().enumerate() {
        if i > 0 && t2[i - 1] == b' ' && x == b'\'' && i + 1 < t2.len() {
            let x1 = t2[i + 1];
            let x2 = t2.get(i + 2).copied();
            if matches!(x1, b's' | b'm') || matches!((x1, x2), (b'r', Some(b'e')) | (b'v', Some(b'e'))) {
                out.pop();
            }
        }
        out.push(x);
    }
    *t = out;
}

/// Turns generated ids into text as they come: bytes of a character split over several tokens are
/// held back until the character is complete, so every returned string is whole UTF-8.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
    started: bool,
    strip_leading_space: bool,
}

impl StreamDecoder {
    /// `strip_leading_space`: drop one leading space of the first piece (decoding a whole text of
    /// an `add_space_prefix` vocabulary; not for tokens that continue a prompt).
    pub fn new(strip_leading_space: bool) -> StreamDecoder {
        StreamDecoder { pending: Vec::new(), started: false, strip_leading_space }
    }

    /// Adds one token; returns the text that is now complete (possibly empty). Control tokens
    /// print nothing unless `special`.
    pub fn push(&mut self, tok: &Tokenizer, id: u32, special: bool) -> String {
        let p = tok.piece(id, special);
        let skip = usize::from(!self.started && self.strip_leading_space && p.first() == Some(&b' '));
        if !p.is_empty() {
            self.started = true;
        }
        self.pending.extend_from_slice(&p[skip..]);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    // Valid prefix is known-good UTF-8.
                    out.push_str(&String::from_utf8_lossy(&self.pending[..good]));
                    match e.error_len() {
                        // Incomplete sequence at the end: wait for the next token.
                        None => {
                            self.pending.drain(..good);
                            return out;
                        }
                        // Invalid bytes: one replacement character, then carry on.
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..good + bad);
                        }
                    }
                }
            }
        }
    }

    /// The held-back bytes at the end of generation (an unfinished character), as U+FFFD.
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}
