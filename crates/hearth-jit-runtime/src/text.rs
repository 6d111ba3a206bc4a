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
    let start = units.iter().position(|&u| !is_white(u)).unwrap_or(units.len());
    let end = units.iter().rposition(|&u| !is_white(u)).map_or(start, |i| i + 1);
    &units[start..end]
}

/// Bytes as code units if every byte is ASCII: the compiled tier decodes
/// only ASCII exactly and leaves other text to the isolate.
pub fn ascii_units(bytes: &[u8], out: &mut [u16]) -> bool {
    if !bytes.is_ascii() {
        return false;
    }
    for (o, &b) in out.iter_mut().zip(bytes) {
        *o = u16::from(b);
    }
    true
}
