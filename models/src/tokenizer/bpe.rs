//! Byte-level BPE of one text fragment: pre-tokenize into words, write each word's bytes as GPT-2's
//! byte characters, then repeatedly merge the adjacent pair with the lowest merge rank (ties: the
//! leftmost pair) and emit each symbol's id.

use super::{bytes, pretok::PreTokenizer, Tokenizer};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

#[derive(Debug)]
pub(crate) struct Bpe {
    ranks: HashMap<(String, String), u32>,
    pre: PreTokenizer,
    byte_chars: [char; 256],
}

impl Bpe {
    pub(crate) fn new(merges: &[String], pre: PreTokenizer) -> Result<Bpe, String> {
        if merges.is_empty() {
            return Err("tokenizer.ggml.merges is missing or empty (byte-level BPE needs its merges)".into());
        }
        let mut ranks = HashMap::with_capacity(merges.len());
        for (i, m) in merges.iter().enumerate() {
            // The separator is the first space after the first byte, as llama.cpp splits it.
            let cut = m.as_bytes().iter().skip(1).position(|&b| b == b' ').map(|p| p + 1);
            let Some(cut) = cut else {
                return Err(format!("tokenizer.ggml.merges[{i}] = {m:?} is not 'left right'"));
            };
            let rank = u32::try_from(i).map_err(|_| "tokenizer.ggml.merges has too many entries".to_string())?;
            // The first occurrence of a pair keeps its rank.
            ranks.entry((m[..cut].to_string(), m[cut + 1..].to_string())).or_insert(rank);
        }
        Ok(Bpe { ranks, pre, byte_chars: bytes::table() })
    }

    pub(crate) fn tokenize(&self, tok: &Tokenizer, text: &str, out: &mut Vec<u32>) {
        for word in self.pre.split(text) {
            let encoded: String = word.bytes().map(|b| self.byte_chars[b as usize]).collect();
            if self.pre.ignore_merges {
                if let Some(&id) = tok.ids.get(&encoded) {
                    out.push(id);
                    continue;
                }
            }
            self.merge_word(tok, &encoded, out);
        }
    }

    fn rank(&self, a: &str, b: &str) -> Option<u32> {
        // The map is keyed by owned pairs; the words are short, so the copies are cheap.
        self.ranks.get(&(a.to_string(), b.to_string())).copied()
    }

    fn merge_word(&self, tok: &Tokenizer, word: &str, out: &mut Vec<u32>) {
        // Symbols are byte ranges of `word`; `len == 0` marks one merged away.
        let start: Vec<usize> = word.char_indices().map(|(i, _)| i).collect();
        let n = start.len();
        let mut len: Vec<usize> = (0..n).map(|i| start.get(i + 1).copied().unwrap_or(word.len()) - start[i]).collect();
        let mut prev: Vec<Option<usize>> = (0..n).map(|i| i.checked_sub(1)).collect();
        let mut next: Vec<Option<usize>> = (0..n).map(|i| (i + 1 < n).then_some(i + 1)).collect();
        let piece = |start: &[usize], len: &[usize], i: usize| word[start[i]..start[i] + len[i]].to_string();

        // (rank, left) ascending; the right index and the pair's text detect stale entries.
        let mut heap: BinaryHeap<Reverse<(u32, usize, usize, String)>> = BinaryHeap::new();
        let queue = |heap: &mut BinaryHeap<_>, start: &[usize], len: &[usize], l: Option<usize>, r: Option<usize>| {
            let (Some(l), Some(r)) = (l, r) else { return };
            let (a, b) = (piece(start, len, l), piece(start, len, r));
            if let Some(rank) = self.rank(&a, &b) {
                heap.push(Reverse((rank, l, r, a + &b)));
            }
        };
        for i in 1..n {
            queue(&mut heap, &start, &len, Some(i - 1), Some(i));
        }
        while let Some(Reverse((_, l, r, text))) = heap.pop() {
            if len[l] == 0 || len[r] == 0 || next[l] != Some(r) {
                continue;
            }
            if word.get(start[l]..start[r] + len[r]) != Some(text.as_str()) {
                continue;
            }
            len[l] += len[r];
            len[r] = 0;
            next[l] = next[r];
            if let Some(nx) = next[r] {
                prev[nx] = Some(l);
            }
            queue(&mut heap, &start, &len, prev[l], Some(l));
            queue(&mut heap, &start, &len, Some(l), next[l]);
        }
        let mut at = (n > 0).then_some(0);
        while let Some(i) = at {
            let p = &word[start[i]..start[i] + len[i]];
            match tok.ids.get(p) {
                Some(&id) => out.push(id),
                // Not a token: each single-byte character that is one (llama.cpp's fallback).
                None => {
                    for c in p.chars().filter(|c| c.len_utf8() == 1) {
                        out.extend(tok.ids.get(&*c.encode_utf8(&mut [0; 4])).copied());
                    }
                }
            }
            at = next[i];
        }
    }
}
