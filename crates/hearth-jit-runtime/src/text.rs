//! Strings as JavaScript sees them: UTF-16 code units.

/// Whether `u` is white space to `Number(…)` and `String.prototype.trim`
/// (ECMA-262 §7.1.4.1, StrWhiteSpaceChar: WhiteSpace and LineTerminator).
pub fn is_white(u: u16) -> bool {
    matches!(
        u,
        0x09..=0x0D // tab, line feed, vertical tab, form feed, carriage return
            | 0x20
            | 0xA0
            | 0x1680
            | 0x2000..=0x200A
            | 0x2028
            | 0x2029
            | 0x202F
            | 0x205F
            | 0x3000
            | 0xFEFF
    )
}

/// `units` without the white space at either end.
pub fn trim(units: &[u16]) -> &[u16] {
    let start = units
        .iter()
        .position(|&u| !is_white(u))
        .unwrap_or(units.len());
    let end = units
        .iter()
        .rposition(|&u| !is_white(u))
        .map_or(start, |i| i + 1);
    &units[start..end]
}

/// Bytes as code units if every byte is ASCII: the compiled tier decodes
/// only ASCII exactly and leaves other text to the isolate. Eight bytes at
/// a time: one check of the high bits, and each byte spread to a unit in
/// two 64-bit stores (a request body is the largest text it converts).
pub fn ascii_units(bytes: &[u8], out: &mut [u16]) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let out = &mut out[..bytes.len()];
    let mut words = bytes.chunks_exact(8);
    let mut units = out.chunks_exact_mut(8);
    for (w, u) in (&mut words).zip(&mut units) {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(w);
        let w = u64::from_le_bytes(eight);
        if w & HIGH != 0 {
            return false;
        }
        let (lo, hi) = (spread(w as u32), spread((w >> 32) as u32));
        let at = u.as_mut_ptr().cast::<u64>();
        // SAFETY: `u` is 8 units, 16 bytes: two u64s, written unaligned;
        // units are little-endian as the lanes are (wasm32 is; the native
        // build's tests run on x86-64, also little-endian).
        unsafe {
            at.write_unaligned(lo.to_le());
            at.add(1).write_unaligned(hi.to_le());
        }
    }
    let rest = words.remainder();
    if !rest.is_ascii() {
        return false;
    }
    for (u, &b) in units.into_remainder().iter_mut().zip(rest) {
        *u = u16::from(b);
    }
    true
}

/// Writes `units` as UTF-8 into `out`, a lone surrogate as U+FFFD (as
/// `TextEncoder` does); returns the length. `out` must hold three bytes
/// per unit (a surrogate pair takes four for two).
pub fn utf8(units: &[u16], out: &mut [u8]) -> usize {
    let (mut at, mut i) = (0, 0);
    while let Some(&u) = units.get(i) {
        // Four ASCII units at once: one check, one 32-bit store.
        if let (Some(four), Some(dst)) = (units.get(i..i + 4), out.get_mut(at..at + 4)) {
            let w = u64::from(four[0])
                | u64::from(four[1]) << 16
                | u64::from(four[2]) << 32
                | u64::from(four[3]) << 48;
            if w & 0xFF80_FF80_FF80_FF80 == 0 {
                let packed = (w & 0xFF)
                    | (w >> 8 & 0xFF00)
                    | (w >> 16 & 0xFF_0000)
                    | (w >> 24 & 0xFF00_0000);
                dst.copy_from_slice(&(packed as u32).to_le_bytes());
                at += 4;
                i += 4;
                continue;
            }
        }
        // ASCII, most of any response, a byte each.
        if u < 0x80 {
            out[at] = u as u8;
            at += 1;
            i += 1;
            continue;
        }
        // One character: a pair, or a lone surrogate.
        let c = char::decode_utf16(units[i..].iter().copied().take(2))
            .next()
            .and_then(Result::ok)
            .unwrap_or(char::REPLACEMENT_CHARACTER);
        i += if c == char::REPLACEMENT_CHARACTER {
            1
        } else {
            c.len_utf16()
        };
        at += c.encode_utf8(&mut out[at..]).len();
    }
    at
}

/// Four bytes, each into the low half of a 16-bit lane.
fn spread(x: u32) -> u64 {
    let x = u64::from(x);
    (x & 0xFF) | ((x & 0xFF00) << 8) | ((x & 0xFF_0000) << 16) | ((x & 0xFF00_0000) << 24)
}

/// The most units [`json_quote`] writes for `len` units: every one as
/// `\uxxxx`, and the quotes.
pub fn json_quote_room(len: usize) -> usize {
    6 * len + 2
}

/// `units` quoted as `JSON.stringify` quotes a string (ECMA-262
/// §25.5.2.3, QuoteJSONString): `"` and `\` escaped, `\b \f \n \r \t` by
/// name, other units below U+0020 and lone surrogates as `\uxxxx`
/// (lowercase hex), surrogate pairs and the rest as they are. `out` holds
/// [`json_quote_room`] units; returns how many it wrote.
pub fn json_quote(units: &[u16], out: &mut [u16]) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut n = 0;
    let mut put = |u: u16| {
        out[n] = u;
        n += 1;
    };
    put(u16::from(b'"'));
    let mut i = 0;
    while i < units.len() {
        let u = units[i];
        let named = match u {
            0x22 => Some(b'"'),
            0x5C => Some(b'\\'),
            0x08 => Some(b'b'),
            0x0C => Some(b'f'),
            0x0A => Some(b'n'),
            0x0D => Some(b'r'),
            0x09 => Some(b't'),
            _ => None,
        };
        let pair = (0xD800..0xDC00).contains(&u)
            && units
                .get(i + 1)
                .is_some_and(|v| (0xDC00..0xE000).contains(v));
        if let Some(c) = named {
            put(u16::from(b'\\'));
            put(u16::from(c));
        } else if pair {
            put(u);
            put(units[i + 1]);
            i += 1;
        } else if u < 0x20 || (0xD800..0xE000).contains(&u) {
            put(u16::from(b'\\'));
            put(u16::from(b'u'));
            for shift in [12, 8, 4, 0] {
                put(u16::from(HEX[usize::from((u >> shift) & 15)]));
            }
        } else {
            put(u);
        }
        i += 1;
    }
    put(u16::from(b'"'));
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_is_the_standard_librarys_lossy_conversion() {
        // Lone surrogates of either half, pairs, and each width of UTF-8.
        let cases: [&[u16]; 6] = [
            &[],
            &[0x41, 0xE9, 0x20AC],
            &[0xD83D, 0xDE00, 0x21],
            &[0xD800],
            &[0xDC00, 0xD800, 0x41, 0xD800, 0xD800, 0xDFFF],
            &[0xFFFF, 0x7F, 0x80, 0x7FF, 0x800],
        ];
        for units in cases {
            let mut out = vec![0; 3 * units.len()];
            let n = utf8(units, &mut out);
            assert_eq!(
                &out[..n],
                String::from_utf16_lossy(units).as_bytes(),
                "{units:x?}"
            );
        }
    }

    #[test]
    fn ascii_units_is_the_plain_widening_for_any_bytes() {
        // Every length to 40 and a non-ASCII byte at every place.
        for len in 0..40 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 % 128) as u8).collect();
            let mut out = vec![0xFFFF; len];
            assert!(ascii_units(&bytes, &mut out));
            let plain: Vec<u16> = bytes.iter().map(|&b| u16::from(b)).collect();
            assert_eq!(out, plain, "{len}");
            for at in 0..len {
                let mut bad = bytes.clone();
                bad[at] |= 0x80;
                assert!(!ascii_units(&bad, &mut out), "{len} {at}");
            }
        }
    }
}
