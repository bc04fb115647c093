//! SentencePiece-style tokenization of one text fragment (spaces already `▁`): start from single
//! UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is the highest-scoring
//! token (ties: the leftmost pair), then emit each symbol's id, or its bytes' `<0xNN>` tokens when
//! the symbol is not a token.

use super::Tokenizer;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    /// The heap pops the greatest: the highest score, then the leftmost pair.
    fn cmp(&self, o: &Self) -> Ordering {
        self.score.total_cmp(&o.score).then(o.left.cmp(&self.left))
    }
}

pub(crate) fn tokenize(tok: &Tokenizer, text: &str, out: &mut Vec<u32>) {
    let mut syms: Vec<Symbol> = Vec::with_capacity(text.len());
    for (start, c) in text.char_indices() {
        let i = syms.len();
        syms.push(Symbol { start, len: c.len_utf8(), prev: i.checked_sub(1), next: None });
        if i > 0 {
            syms[i - 1].next = Some(i);
        }
    }
    if syms.is_empty() {
        return;
    }
    let mut heap = BinaryHeap::new();
    let push = |heap: &mut BinaryHeap<Bigram>, syms: &[Symbol], left: Option<usize>, right: Option<usize>| {
        let (Some(l), Some(r)) = (left, right) else { return };
        let (a, b) = (syms[l], syms[r]);
        let piece = &text[a.start..b.start + b.len];
        if let Some(&id) = tok.ids.get(piece) {
            heap.push(Bigram { score: tok.score(id), left: l, right: r, len: piece.len() });
        }
    };
    for i in 1..syms.len() {
        push(&mut heap, &syms, Some(i - 1), Some(i));
    }
    while let Some(bg) = heap.pop() {
        let (l, r) = (syms[bg.left], syms[bg.right]);
        // Stale: one side was merged away or grew since the pair was queued.
        if l.len == 0 || r.len == 0 || l.len + r.len != bg.len {
            continue;
        }
        syms[bg.left].len += r.len;
        syms[bg.right].len = 0;
        syms[bg.left].next = r.next;
        if let Some(n) = r.next {
            syms[n].prev = Some(bg.left);
        }
        push(&mut heap, &syms, syms[bg.left].prev, Some(bg.left));
        push(&mut heap, &syms, Some(bg.left), syms[bg.left].next);
    }
    let mut at = Some(0);
    while let Some(i) = at {
        let s = syms[i];
        let piece = &text[s.start..s.start + s.len];
        match tok.ids.get(piece) {
            Some(&id) => out.push(id),
            None => {
                for &b in piece.as_bytes() {
                    out.extend(tok.byte_tokens[b as usize].or(tok.unk));
                }
            }
        }
        at = s.next;
    }
}
