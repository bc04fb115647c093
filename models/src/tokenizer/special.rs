//! Cutting special tokens out of the text before the model's algorithm sees it (llama.cpp's
//! `tokenizer_st_partition`): for each special token, longest text first, every occurrence in every
//! remaining text fragment becomes that token. User-defined tokens (Gemma's `\n`, `<div>`, …) are
//! always cut; control and unknown tokens (`<bos>`, `<start_of_turn>`) only when `parse_special`.

use super::{attr, Tokenizer};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

pub(crate) fn partition<'a>(tok: &Tokenizer, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
    let mut frags = Vec::new();
    if text.is_empty() {
        return frags;
    }
    frags.push(Fragment::Text(text));
    for &id in &tok.special_order {
        let a = tok.attr(id);
        if !parse_special && a & (attr::CONTROL | attr::UNKNOWN) != 0 {
            continue;
        }
        let needle = tok.texts[id as usize].as_str();
        if !frags.iter().any(|f| matches!(f, Fragment::Text(t) if t.contains(needle))) {
            continue;
        }
        let mut next = Vec::with_capacity(frags.len() + 2);
        for f in frags {
            match f {
                Fragment::Text(mut t) => {
                    while let Some(at) = t.find(needle) {
                        if at > 0 {
                            next.push(Fragment::Text(&t[..at]));
                        }
                        next.push(Fragment::Token(id));
                        t = &t[at + needle.len()..];
                    }
                    if !t.is_empty() {
                        next.push(Fragment::Text(t));
                    }
                }
                token => next.push(token),
            }
        }
        frags = next;
    }
    frags
}
