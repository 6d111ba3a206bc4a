//! JavaScript's conversions between numbers and strings: Number::toString
//! (ECMA-262 §6.1.6.1.20), StringToNumber (§7.1.4.1.1), ToInt32 (§7.1.6)
//! and `%` (§6.1.6.1.6). The shortest round-trip digits come from `core`'s
//! float formatting; the parse of a decimal literal from `core`'s
//! correctly rounded `f64::from_str`. Held to QuickJS by property tests
//! (`crates/hearth-jit/tests/runtime.rs`).

use core::fmt::Write;

use crate::text;

/// Room enough for any number `to_string` prints: a sign and 21 digits,
/// `-0.000000` and 17 digits, or 17 digits, a point and `e-308`.
pub const MAX_LEN: usize = 32;

/// 2^63: below it, `as i64` truncates exactly.
const TWO_63: f64 = 9_223_372_036_854_775_808.0;

/// ToInt32: the integer part, modulo 2^32, into the signed range; NaN and
/// the infinities are 0.
pub fn to_int32(x: f64) -> i32 {
    if !x.is_finite() {
        return 0;
    }
    if -TWO_63 < x && x < TWO_63 {
        return x as i64 as i32;
    }
    // |x| ≥ 2^63 is an integer: its 53-bit mantissa times 2^e, e ≥ 11.
    let bits = x.to_bits();
    let e = ((bits >> 52) & 0x7FF) as u32 - 1075;
    let mantissa = (bits & ((1 << 52) - 1)) | (1 << 52);
    let low = if e >= 32 { 0 } else { (mantissa << e) as u32 };
    if x < 0.0 {
        low.wrapping_neg() as i32
    } else {
        low as i32
    }
}

/// `a % b`: the remainder with the dividend's sign, exact (IEEE fmod),
/// which is what JavaScript's `%` is on numbers.
pub fn rem(a: f64, b: f64) -> f64 {
    a % b
}

/// A fixed buffer that `core::fmt` writes into.
struct Buf<'a> {
    bytes: &'a mut [u8],
    len: usize,
}

impl Buf<'_> {
    fn push(&mut self, b: &[u8]) {
        // Callers size the buffer for the longest output (MAX_LEN); a
        // longer write is cut short rather than panicking.
        let end = (self.len + b.len()).min(self.bytes.len());
        let n = end - self.len;
        self.bytes[self.len..end].copy_from_slice(&b[..n]);
        self.len = end;
    }

    fn zeros(&mut self, n: usize) {
        for _ in 0..n {
            self.push(b"0");
        }
    }
}

impl Write for Buf<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.push(s.as_bytes());
        Ok(())
    }
}

/// Writes `String(x)` into `out`; returns its length.
pub fn to_string(x: f64, out: &mut [u8; MAX_LEN]) -> usize {
    let mut w = Buf { bytes: out, len: 0 };
    if x.is_nan() {
        w.push(b"NaN");
        return w.len;
    }
    if x == 0.0 {
        w.push(b"0");
        return w.len;
    }
    let x = if x < 0.0 {
        w.push(b"-");
        -x
    } else {
        x
    };
    if x.is_infinite() {
        w.push(b"Infinity");
        return w.len;
    }
    // An integer below 2^53, the common case, is its digits: no search
    // for the shortest.
    if x < 9_007_199_254_740_992.0 && x == (x as u64) as f64 {
        let mut digits = [0u8; 16];
        let mut at = digits.len();
        let mut v = x as u64;
        loop {
            at -= 1;
            digits[at] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        w.push(&digits[at..]);
        return w.len;
    }
    // How many digits read back as x, fewest: `{:e}` gives the shortest
    // `d[.ddd]e[-]N`. Of the k-digit decimals the spec takes the closest
    // to x, ties to even, which is `{:.(k-1)e}` (exact, ties to even);
    // the shortest one `{:e}` gives rounds a tie up.
    let mut sci = [0u8; MAX_LEN];
    let k = {
        let mut s = Buf {
            bytes: &mut sci,
            len: 0,
        };
        let _ = write!(s, "{x:e}");
        let len = s.len;
        let e_at = sci[..len].iter().position(|&b| b == b'e').unwrap_or(len);
        sci[..e_at].iter().filter(|b| b.is_ascii_digit()).count()
    };
    let mut s = Buf {
        bytes: &mut sci,
        len: 0,
    };
    let _ = write!(s, "{x:.*e}", k.saturating_sub(1));
    let len = s.len;
    let sci = &sci[..len];
    let e_at = sci.iter().position(|&b| b == b'e').unwrap_or(sci.len());
    let mut digits = [0u8; MAX_LEN];
    let mut k = 0;
    for &b in sci[..e_at].iter().filter(|b| b.is_ascii_digit()) {
        digits[k] = b;
        k += 1;
    }
    let digits = &digits[..k];
    let exp = parse_exponent(&sci[(e_at + 1).min(sci.len())..]);
    // x = 0.d₁d₂…d_k × 10^n
    let n = exp + 1;
    let k = k as i32;
    if k <= n && n <= 21 {
        w.push(digits);
        w.zeros((n - k) as usize);
    } else if 0 < n && n <= 21 {
        w.push(&digits[..n as usize]);
        w.push(b".");
        w.push(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        w.push(b"0.");
        w.zeros((-n) as usize);
        w.push(digits);
    } else {
        w.push(&digits[..1]);
        if k > 1 {
            w.push(b".");
            w.push(&digits[1..]);
        }
        w.push(if n - 1 < 0 { b"e-" } else { b"e+" });
        let _ = write!(w, "{}", (n - 1).unsigned_abs());
    }
    w.len
}

/// `-?digits` as an i32 (the exponent `{:e}` printed: at most 3 digits).
fn parse_exponent(b: &[u8]) -> i32 {
    let (neg, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    let v = digits
        .iter()
        .fold(0i32, |v, &d| v * 10 + i32::from(d - b'0'));
    if neg { -v } else { v }
}

/// Why [`parse`] gives no number: the text needs more than it does.
#[derive(Debug, PartialEq, Eq)]
pub struct TooLong;

/// `Number(s)` of UTF-16 `units`: NaN for text that is not a number.
/// `scratch` must hold `units.len()` bytes (the literal is copied there to
/// be parsed). A hexadecimal, octal or binary literal past 64 bits is
/// [`TooLong`] (the isolate rounds it).
pub fn parse(units: &[u16], scratch: &mut [u8]) -> Result<f64, TooLong> {
    let s = text::trim(units);
    if s.is_empty() {
        return Ok(0.0);
    }
    if let [0x30, p, rest @ ..] = s {
        let radix = match *p {
            0x78 | 0x58 => 16, // x X
            0x6F | 0x4F => 8,  // o O
            0x62 | 0x42 => 2,  // b B
            _ => 0,
        };
        if radix != 0 {
            return radix_integer(rest, radix);
        }
    }
    let (sign, body) = match s {
        [0x2D, rest @ ..] => (-1.0, rest),
        [0x2B, rest @ ..] => (1.0, rest),
        _ => (1.0, s),
    };
    if body.iter().copied().eq("Infinity".bytes().map(u16::from)) {
        return Ok(sign * f64::INFINITY);
    }
    if !is_decimal(body) {
        return Ok(f64::NAN);
    }
    // ASCII throughout, checked: one byte per unit.
    let Some(bytes) = scratch.get_mut(..s.len()) else {
        return Err(TooLong);
    };
    for (b, &u) in bytes.iter_mut().zip(s) {
        *b = u as u8;
    }
    Ok(core::str::from_utf8(bytes)
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
        .unwrap_or(f64::NAN))
}

/// StrUnsignedDecimalLiteral without `Infinity`: digits with at most one
/// point, at least one digit, then an optional exponent.
fn is_decimal(s: &[u16]) -> bool {
    let digit = |u: &u16| (0x30..=0x39).contains(u);
    let int = s.iter().take_while(|u| digit(u)).count();
    let mut i = int;
    let mut frac = 0;
    if s.get(i) == Some(&0x2E) {
        i += 1;
        frac = s[i..].iter().take_while(|u| digit(u)).count();
        i += frac;
    }
    if int + frac == 0 {
        return false;
    }
    if let Some(&(0x65 | 0x45)) = s.get(i) {
        i += 1;
        if let Some(&(0x2B | 0x2D)) = s.get(i) {
            i += 1;
        }
        let exp = s[i..].iter().take_while(|u| digit(u)).count();
        if exp == 0 {
            return false;
        }
        i += exp;
    }
    i == s.len()
}

/// The digits after `0x`, `0o` or `0b`: NaN if there are none or one is
/// not of the radix; [`TooLong`] past 64 bits.
fn radix_integer(digits: &[u16], radix: u32) -> Result<f64, TooLong> {
    if digits.is_empty() {
        return Ok(f64::NAN);
    }
    let mut v: u64 = 0;
    for &u in digits {
        let Some(d) = char::from_u32(u32::from(u)).and_then(|c| c.to_digit(radix)) else {
            return Ok(f64::NAN);
        };
        v = v
            .checked_mul(u64::from(radix))
            .and_then(|v| v.checked_add(u64::from(d)))
            .ok_or(TooLong)?;
    }
    // `as` rounds to nearest, ties to even: the spec's rounding.
    Ok(v as f64)
}

/// Why [`json_number`] reads no number: the text there is not one.
#[derive(Debug, PartialEq, Eq)]
pub struct NotJson;

/// How many units the JSON number at the start of `units` takes (RFC
/// 8259 §6: `-`, `0` or digits not starting with `0`, a fraction, an
/// exponent); what follows it is the caller's.
pub fn json_number_len(units: &[u16]) -> Result<usize, NotJson> {
    let digits = |from: usize| {
        units[from.min(units.len())..]
            .iter()
            .take_while(|u| (0x30..=0x39).contains(*u))
            .count()
    };
    let mut i = usize::from(units.first() == Some(&0x2D));
    match units.get(i) {
        Some(0x30) => i += 1,
        Some(0x31..=0x39) => i += digits(i),
        _ => return Err(NotJson),
    }
    if units.get(i) == Some(&0x2E) {
        let n = digits(i + 1);
        if n == 0 {
            return Err(NotJson);
        }
        i += 1 + n;
    }
    if let Some(0x65 | 0x45) = units.get(i) {
        i += 1;
        if let Some(0x2B | 0x2D) = units.get(i) {
            i += 1;
        }
        let n = digits(i);
        if n == 0 {
            return Err(NotJson);
        }
        i += n;
    }
    Ok(i)
}

/// The JSON number at the start of `units` and how many units it takes
/// ([`json_number_len`]). `scratch` must hold that many bytes. The value
/// is the correctly rounded double, as `JSON.parse` gives.
pub fn json_number(units: &[u16], scratch: &mut [u8]) -> Result<(f64, usize), NotJson> {
    let n = json_number_len(units)?;
    let bytes = scratch.get_mut(..n).ok_or(NotJson)?;
    for (b, &u) in bytes.iter_mut().zip(units) {
        *b = u as u8;
    }
    core::str::from_utf8(bytes)
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
        .map(|x| (x, n))
        .ok_or(NotJson)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(x: f64) -> String {
        let mut out = [0u8; MAX_LEN];
        let n = to_string(x, &mut out);
        String::from_utf8(out[..n].to_vec()).unwrap_or_default()
    }

    fn num(s: &str) -> Result<f64, TooLong> {
        let units: Vec<u16> = s.encode_utf16().collect();
        parse(&units, &mut vec![0; units.len()])
    }

    #[test]
    fn numbers_print_in_each_of_the_four_forms() {
        for (x, s) in [
            (123.0, "123"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (1.5, "1.5"),
            (0.000001, "0.000001"),
            (1e-7, "1e-7"),
            (1.25e-7, "1.25e-7"),
            (-0.0, "0"),
            (-2.5, "-2.5"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (f64::NEG_INFINITY, "-Infinity"),
            // …238.25 exactly: of .2 and .3, the even.
            (583171126317238.2, "583171126317238.2"),
        ] {
            assert_eq!(show(x), s, "{x:e}");
        }
    }

    #[test]
    fn strings_read_as_the_grammar_says() {
        assert_eq!(num("  12.5e1\n"), Ok(125.0));
        assert_eq!(num(""), Ok(0.0));
        assert_eq!(num("0x1F"), Ok(31.0));
        assert_eq!(num("-Infinity"), Ok(f64::NEG_INFINITY));
        assert!(num("-0").is_ok_and(|x| x == 0.0 && x.is_sign_negative()));
        for nan in [
            "1_000", "-0x1", "0x", "inf", "1e", ".", "1..2", "++1", "NaN",
        ] {
            assert!(num(nan).is_ok_and(f64::is_nan), "{nan}");
        }
        assert_eq!(num("0x10000000000000000"), Err(TooLong));
    }

    #[test]
    fn json_numbers_are_read_to_their_end() {
        let read = |s: &str| {
            let units: Vec<u16> = s.encode_utf16().collect();
            let n = json_number_len(&units)?;
            json_number(&units, &mut vec![0; n])
        };
        assert_eq!(read("-12.5e1,"), Ok((-125.0, 7)));
        assert_eq!(read("0]"), Ok((0.0, 1)));
        assert_eq!(read("01"), Ok((0.0, 1)), "the caller refuses what follows");
        assert!(read("-0").is_ok_and(|(x, n)| x == 0.0 && x.is_sign_negative() && n == 2));
        for bad in ["-", "1.", ".5", "1e", "+1", "1e+", "x"] {
            assert_eq!(read(bad), Err(NotJson), "{bad}");
        }
    }

    #[test]
    fn to_int32_wraps_past_two_to_the_63() {
        assert_eq!(to_int32(2f64.powi(64) + 2f64.powi(12)), 4096);
        assert_eq!(to_int32(-(2f64.powi(63)) - 2f64.powi(11)), -2048);
        assert_eq!(to_int32(4294967295.5), -1);
        assert_eq!(to_int32(f64::NAN), 0);
    }
}
