//! `JSON.parse` (ECMA-262 §25.5.1, RFC 8259's grammar) over a string's
//! UTF-16 units: a recursive descent that hands each value to a
//! [`Builder`]. In wasm the builder makes the cells compiled code reads
//! (`abi::json_parse`); natively, tests build a tree and hold it to
//! QuickJS's.
//!
//! What it does not take — malformed text, where JavaScript throws a
//! `SyntaxError`, and nesting deeper than [`MAX_DEPTH`] — is
//! [`Malformed`]: compiled code leaves, and the isolate parses it.

use crate::number;

/// How compiled code keeps a parsed value: a cell `[tag: i32][ptr: i32]
/// [number: f64]`. An array's `ptr` is an array block (`[len][cap][data]`)
/// of cell pointers, an object's an array block of `(key, cell)` pairs in
/// the text's order, a string's the string.
pub mod cell {
    pub const NULL: i32 = 0;
    pub const FALSE: i32 = 1;
    pub const TRUE: i32 = 2;
    pub const NUMBER: i32 = 3;
    pub const STRING: i32 = 4;
    pub const ARRAY: i32 = 5;
    pub const OBJECT: i32 = 6;
    /// Where a cell keeps its pointer and its number.
    pub const PTR: u64 = 4;
    pub const NUM: u64 = 8;
    pub const SIZE: u32 = 16;
}

/// Arrays and objects nest at most this deep; deeper is refused (the
/// isolate's parser takes it, or throws).
pub const MAX_DEPTH: u32 = 64;

/// Text `JSON.parse` would throw on, or nested past [`MAX_DEPTH`].
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed;

/// What the parser makes values with.
pub trait Builder {
    /// A finished value.
    type Value: Copy;
    /// An array or object being filled.
    type List;
    fn null(&mut self) -> Self::Value;
    fn boolean(&mut self, b: bool) -> Self::Value;
    fn number(&mut self, x: f64) -> Self::Value;
    /// A string of `len` units, which `fill` writes.
    fn string(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u16])) -> Self::Value;
    /// An object's key, made as [`string`](Builder::string) is.
    type Key: Copy;
    fn key(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u16])) -> Self::Key;
    /// Scratch of `len` bytes for reading one number (`number::json_number`).
    fn with_scratch(
        &mut self,
        len: usize,
        f: &mut dyn FnMut(&mut [u8]) -> Option<f64>,
    ) -> Option<f64>;
    fn list(&mut self, object: bool) -> Self::List;
    /// Appends an array's item (`key` is `None`) or an object's pair, in
    /// the text's order; repeated keys are all kept, and the last wins
    /// when read, as in JavaScript.
    fn push(&mut self, list: &mut Self::List, key: Option<Self::Key>, value: Self::Value);
    fn finish(&mut self, list: Self::List, object: bool) -> Self::Value;
}

/// The whole of `text` as one value.
pub fn parse<B: Builder>(text: &[u16], b: &mut B) -> Result<B::Value, Malformed> {
    let mut p = Parser { text, at: 0 };
    let v = p.value(b, 0)?;
    p.skip_white();
    if p.at == text.len() {
        Ok(v)
    } else {
        Err(Malformed)
    }
}

struct Parser<'a> {
    text: &'a [u16],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u16> {
        self.text.get(self.at).copied()
    }

    /// JSON's whitespace: space, tab, line feed, carriage return.
    fn skip_white(&mut self) {
        while let Some(0x20 | 0x09 | 0x0A | 0x0D) = self.peek() {
            self.at += 1;
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), Malformed> {
        if self.peek() == Some(u16::from(c)) {
            self.at += 1;
            Ok(())
        } else {
            Err(Malformed)
        }
    }

    fn value<B: Builder>(&mut self, b: &mut B, depth: u32) -> Result<B::Value, Malformed> {
        // `depth` arrays and objects hold this value: it may be one more.
        if depth >= MAX_DEPTH {
            return Err(Malformed);
        }
        self.skip_white();
        let literal = |p: &mut Self, word: &[u8]| word.iter().try_for_each(|&c| p.expect(c));
        match self.peek().ok_or(Malformed)? {
            0x22 => self.string(|len, fill| b.string(len, fill)),
            0x74 => literal(self, b"true").map(|()| b.boolean(true)),
            0x66 => literal(self, b"false").map(|()| b.boolean(false)),
            0x6E => literal(self, b"null").map(|()| b.null()),
            c @ (0x5B | 0x7B) => {
                let object = c == 0x7B;
                let close = if object { b'}' } else { b']' };
                self.at += 1;
                let mut list = b.list(object);
                self.skip_white();
                if self.peek() != Some(u16::from(close)) {
                    loop {
                        let key = if object {
                            self.skip_white();
                            let key = self.string(|len, fill| b.key(len, fill))?;
                            self.skip_white();
                            self.expect(b':')?;
                            Some(key)
                        } else {
                            None
                        };
                        let v = self.value(b, depth + 1)?;
                        b.push(&mut list, key, v);
                        self.skip_white();
                        if self.peek() != Some(u16::from(b',')) {
                            break;
                        }
                        self.at += 1;
                    }
                }
                self.expect(close)?;
                Ok(b.finish(list, object))
            }
            _ => {
                let rest = &self.text[self.at..];
                let len = number::json_number_len(rest).map_err(|_| Malformed)?;
                let x = b
                    .with_scratch(len, &mut |scratch| {
                        number::json_number(rest, scratch).ok().map(|(x, _)| x)
                    })
                    .ok_or(Malformed)?;
                self.at += len;
                Ok(b.number(x))
            }
        }
    }

    /// The string literal at the cursor (at its `"`), unescaped, made by
    /// `make` from its length and what fills it.
    fn string<T>(
        &mut self,
        make: impl FnOnce(usize, &mut dyn FnMut(&mut [u16])) -> T,
    ) -> Result<T, Malformed> {
        self.expect(b'"')?;
        // First its length, checking it as it goes; then the units.
        let start = self.at;
        let mut len = 0;
        loop {
            match self.peek().ok_or(Malformed)? {
                0x22 => break,
                // A control character must be escaped in JSON.
                0..0x20 => return Err(Malformed),
                0x5C => {
                    self.at += 1;
                    self.escape()?;
                }
                _ => self.at += 1,
            }
            len += 1;
        }
        let end = self.at;
        self.at += 1;
        let mut body = Parser {
            text: &self.text[..end],
            at: start,
        };
        Ok(make(len, &mut |out| {
            for o in out.iter_mut() {
                let u = body.text[body.at];
                body.at += 1;
                // Checked above: every escape here is whole and valid.
                *o = if u == 0x5C {
                    body.escape().unwrap_or(0)
                } else {
                    u
                };
            }
        }))
    }

    /// The unit an escape (after its `\`) stands for, the cursor after it.
    fn escape(&mut self) -> Result<u16, Malformed> {
        let c = self.peek().ok_or(Malformed)?;
        self.at += 1;
        let unit = match u8::try_from(c).map_err(|_| Malformed)? {
            b'"' => 0x22,
            b'\\' => 0x5C,
            b'/' => 0x2F,
            b'b' => 0x08,
            b'f' => 0x0C,
            b'n' => 0x0A,
            b'r' => 0x0D,
            b't' => 0x09,
            // Four hex digits: one code unit, a lone surrogate included.
            b'u' => {
                let mut x = 0u16;
                for _ in 0..4 {
                    let d = self.peek().and_then(|u| char::from_u32(u32::from(u)));
                    let d = d.and_then(|d| d.to_digit(16)).ok_or(Malformed)?;
                    x = (x << 4) | d as u16;
                    self.at += 1;
                }
                x
            }
            _ => return Err(Malformed),
        };
        Ok(unit)
    }
}
