//! GPT-2's byte ↔ unicode map for byte-level BPE: printable Latin-1 bytes (`!`..`~`, `¡`..`¬`,
//! `®`..`ÿ`) stand for themselves, the other 68 bytes for U+0100.. in byte order (space → `Ġ`,
//! newline → `Ċ`), so every byte string is a string of visible characters.

fn is_self(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// The character standing for byte `b`.
pub(crate) fn byte_to_char(b: u8) -> char {
    if is_self(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&x| !is_self(x)).count() as u32;
    char::from_u32(256 + rank).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The byte a character stands for, `None` for characters outside the map.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let u = c as u32;
    if u < 256 && is_self(u as u8) {
        return Some(u as u8);
    }
    let rank = u.checked_sub(256)?;
    (0..=255u8).filter(|&x| !is_self(x)).nth(rank as usize)
}

/// The 256-entry table, built once per tokenizer.
pub(crate) fn table() -> [char; 256] {
    let mut t = ['\0'; 256];
    for (b, c) in t.iter_mut().enumerate() {
        *c = byte_to_char(b as u8);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_byte() {
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b), "byte {b}");
        }
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(char_to_byte('€'), None);
    }
}
