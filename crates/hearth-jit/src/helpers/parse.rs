//! `JSON.parse`, in the sandbox: a recursive descent over the string's
//! UTF-16 units into cells, which compiled code reads with the types its
//! trace saw (`codegen/dynamic.rs`). What the parser does not take —
//! malformed text (a `SyntaxError` in JavaScript), nesting past 64 —
//! leaves, and the isolate parses it. Numbers are the runtime's
//! (`json_number`: exact, every fraction and exponent).
//!
//! A cell is `[tag: i32][ptr: i32][number: f64]`; an array's `ptr` is an
//! array block of cell pointers, an object's an array block of
//! `(key, cell)` pairs in the text's order, a string's the string. The
//! cursor (a unit index into the text) is global [`CURSOR`].

use wasm_encoder::{BlockType, Instruction as I};

use super::{Consts, F, N, left};
use crate::codegen::{
    ALLOC, CURSOR, FnBuilder, JP_STRING, JP_VALUE, JP_WS, JSON_NUMBER, JSON_NUMBER_END, STR_EQ,
    layout, mem,
};

/// Cell tags.
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
}

/// Deeper nesting leaves (the isolate's parser takes it, or throws).
const MAX_DEPTH: i32 = 64;

/// Pushes the unit at the cursor of string `s` (local), or -1 at the end.
fn peek(f: &mut FnBuilder<'_, '_>, s: u32) {
    f.all([
        I::GlobalGet(CURSOR),
        I::LocalGet(s),
        I::I32Load(mem(0, 2)),
        I::I32LtU,
        I::If(BlockType::Result(N)),
        I::LocalGet(s),
        I::GlobalGet(CURSOR),
        I::I32Const(1),
        I::I32Shl,
        I::I32Add,
        I::I32Load16U(mem(layout::STR_UNITS, 1)),
        I::Else,
        I::I32Const(-1),
        I::End,
    ]);
}

fn advance(f: &mut FnBuilder<'_, '_>, n: i32) {
    f.all([
        I::GlobalGet(CURSOR),
        I::I32Const(n),
        I::I32Add,
        I::GlobalSet(CURSOR),
    ]);
}

/// Leaves unless the unit at the cursor is `c`; then steps over it.
fn expect(f: &mut FnBuilder<'_, '_>, s: u32, c: u8) {
    peek(f, s);
    f.all([I::I32Const(c as i32), I::I32Ne]);
    f.leave_if(left::JSON);
    advance(f, 1);
}

/// A new cell of `tag` with pointer local `ptr` (or 0), left in `out`.
fn new_cell(f: &mut FnBuilder<'_, '_>, out: u32, tag: i32, ptr: Option<u32>) {
    f.all([
        I::I32Const(16),
        I::Call(ALLOC),
        I::LocalTee(out),
        I::I32Const(tag),
        I::I32Store(mem(0, 2)),
    ]);
    if let Some(p) = ptr {
        f.all([
            I::LocalGet(out),
            I::LocalGet(p),
            I::I32Store(mem(cell::PTR, 2)),
        ]);
    }
}

/// Appends the item in locals `items` (i32s) to array block `block`,
/// doubling its room when full.
fn push_item(f: &mut FnBuilder<'_, '_>, block: u32, items: &[u32]) {
    let size = 4 * items.len() as i32;
    let at = f.local(N);
    f.grow_if_full(block, size);
    f.all([
        I::LocalGet(block),
        I::I32Load(mem(layout::ARR_DATA, 2)),
        I::LocalGet(block),
        I::I32Load(mem(0, 2)),
        I::I32Const(size),
        I::I32Mul,
        I::I32Add,
        I::LocalSet(at),
    ]);
    for (k, item) in items.iter().enumerate() {
        f.all([
            I::LocalGet(at),
            I::LocalGet(*item),
            I::I32Store(mem(4 * k as u64, 2)),
        ]);
    }
    f.all([
        I::LocalGet(block),
        I::LocalGet(block),
        I::I32Load(mem(0, 2)),
        I::I32Const(1),
        I::I32Add,
        I::I32Store(mem(0, 2)),
    ]);
}

/// An empty array block (`[len][cap][data]`) in `out`, with room for 4
/// items of `item` words.
fn new_block(f: &mut FnBuilder<'_, '_>, out: u32, item: i32) {
    f.all([
        I::I32Const(12),
        I::Call(ALLOC),
        I::LocalTee(out),
        I::I32Const(4),
        I::I32Store(mem(layout::ARR_CAP, 2)),
        I::LocalGet(out),
        I::I32Const(0),
        I::I32Store(mem(0, 2)),
        I::LocalGet(out),
        I::I32Const(16 * item),
        I::Call(ALLOC),
        I::I32Store(mem(layout::ARR_DATA, 2)),
    ]);
}

/// `jp_ws(s)`: steps over JSON's whitespace.
pub(super) fn jp_ws(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let s = 0;
    let c = f.local(N);
    f.all([I::Block(BlockType::Empty), I::Loop(BlockType::Empty)]);
    peek(f, s);
    f.all([
        I::LocalTee(c),
        I::I32Const(b' ' as i32),
        I::I32Eq,
        I::LocalGet(c),
        I::I32Const(b'\t' as i32),
        I::I32Eq,
        I::I32Or,
        I::LocalGet(c),
        I::I32Const(b'\n' as i32),
        I::I32Eq,
        I::I32Or,
        I::LocalGet(c),
        I::I32Const(b'\r' as i32),
        I::I32Eq,
        I::I32Or,
        I::I32Eqz,
        I::BrIf(1),
    ]);
    advance(f, 1);
    f.all([I::Br(0), I::End, I::End]);
}

/// `jp_string(s) -> string`: the string literal at the cursor (which is
/// at its `"`), unescaped.
pub(super) fn jp_string(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let s = 0;
    let (start, end, c, out, n, x, k) = (
        f.local(N),
        f.local(N),
        f.local(N),
        f.local(N),
        f.local(N),
        f.local(N),
        f.local(N),
    );
    expect(f, s, b'"');
    // First, where it ends: a string takes at most its text's units.
    f.all([
        I::GlobalGet(CURSOR),
        I::LocalTee(start),
        I::LocalSet(end),
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(end),
        I::LocalGet(s),
        I::I32Load(mem(0, 2)),
        I::I32GeU,
    ]);
    f.leave_if(left::JSON);
    f.all([
        I::LocalGet(s),
        I::LocalGet(end),
        I::I32Const(1),
        I::I32Shl,
        I::I32Add,
        I::I32Load16U(mem(layout::STR_UNITS, 1)),
        I::LocalTee(c),
        I::I32Const(b'"' as i32),
        I::I32Eq,
        I::BrIf(1),
        I::LocalGet(end),
        I::LocalGet(c),
        I::I32Const(b'\\' as i32),
        I::I32Eq,
        I::I32Const(1),
        I::I32Add,
        I::I32Add,
        I::LocalSet(end),
        I::Br(0),
        I::End,
        I::End,
        I::LocalGet(end),
        I::LocalGet(start),
        I::I32Sub,
        I::I32Const(1),
        I::I32Shl,
        I::I32Const(layout::STR_UNITS as i32),
        I::I32Add,
        I::Call(ALLOC),
        I::LocalSet(out),
    ]);
    // Then the units, escapes decoded.
    f.all([I::Block(BlockType::Empty), I::Loop(BlockType::Empty)]);
    peek(f, s);
    f.all([
        I::LocalTee(c),
        I::I32Const(b'"' as i32),
        I::I32Eq,
        I::BrIf(1),
        // A control character must be escaped in JSON.
        I::LocalGet(c),
        I::I32Const(0x20),
        I::I32LtU,
    ]);
    f.leave_if(left::JSON);
    advance(f, 1);
    f.all([
        I::LocalGet(c),
        I::I32Const(b'\\' as i32),
        I::I32Eq,
        I::If(BlockType::Empty),
    ]);
    peek(f, s);
    f.emit(I::LocalSet(c));
    advance(f, 1);
    // `\uXXXX`: four hex digits.
    f.all([
        I::LocalGet(c),
        I::I32Const(b'u' as i32),
        I::I32Eq,
        I::If(BlockType::Empty),
        I::I32Const(0),
        I::LocalSet(x),
        I::I32Const(0),
        I::LocalSet(k),
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(k),
        I::I32Const(4),
        I::I32GeU,
        I::BrIf(1),
    ]);
    peek(f, s);
    // A hex digit's value, or 16 for anything else.
    f.all([
        I::LocalTee(c),
        I::I32Const(48),
        I::I32Sub,
        I::LocalTee(n),
        I::I32Const(10),
        I::I32LtU,
        I::If(BlockType::Result(N)),
        I::LocalGet(n),
        I::Else,
        I::LocalGet(c),
        I::I32Const(0x20),
        I::I32Or,
        I::I32Const(b'a' as i32),
        I::I32Sub,
        I::LocalTee(n),
        I::I32Const(6),
        I::I32LtU,
        I::If(BlockType::Result(N)),
        I::LocalGet(n),
        I::I32Const(10),
        I::I32Add,
        I::Else,
        I::I32Const(16),
        I::End,
        I::End,
        I::LocalTee(n),
        I::I32Const(16),
        I::I32Eq,
    ]);
    f.leave_if(left::JSON);
    advance(f, 1);
    f.all([
        I::LocalGet(x),
        I::I32Const(4),
        I::I32Shl,
        I::LocalGet(n),
        I::I32Or,
        I::LocalSet(x),
        I::LocalGet(k),
        I::I32Const(1),
        I::I32Add,
        I::LocalSet(k),
        I::Br(0),
        I::End,
        I::End,
        I::LocalGet(x),
        I::LocalSet(c),
        I::Else,
    ]);
    // The one-letter escapes; any other letter is malformed.
    f.all([I::I32Const(-1), I::LocalSet(x)]);
    for (name, unit) in [
        (b'"', b'"'),
        (b'\\', b'\\'),
        (b'/', b'/'),
        (b'b', 8),
        (b'f', 12),
        (b'n', b'\n'),
        (b'r', b'\r'),
        (b't', b'\t'),
    ] {
        f.all([
            I::LocalGet(c),
            I::I32Const(name as i32),
            I::I32Eq,
            I::If(BlockType::Empty),
            I::I32Const(unit as i32),
            I::LocalSet(x),
            I::End,
        ]);
    }
    f.all([I::LocalGet(x), I::I32Const(-1), I::I32Eq]);
    f.leave_if(left::JSON);
    f.all([I::LocalGet(x), I::LocalSet(c), I::End, I::End]);
    f.all([
        I::LocalGet(out),
        I::LocalGet(out),
        I::I32Load(mem(0, 2)),
        I::LocalTee(n),
        I::I32Const(1),
        I::I32Shl,
        I::I32Add,
        I::LocalGet(c),
        I::I32Store16(mem(layout::STR_UNITS, 1)),
        I::LocalGet(out),
        I::LocalGet(n),
        I::I32Const(1),
        I::I32Add,
        I::I32Store(mem(0, 2)),
        I::Br(0),
        I::End,
        I::End,
    ]);
    advance(f, 1);
    f.emit(I::LocalGet(out));
}

/// Pushes the value of the number literal at the cursor, read by the
/// runtime (exact, as `JSON.parse` reads it), and steps over it.
fn number(f: &mut FnBuilder<'_, '_>, s: u32) {
    f.all([
        I::LocalGet(s),
        I::GlobalGet(CURSOR),
        I::Call(JSON_NUMBER),
        I::Call(JSON_NUMBER_END),
        I::GlobalSet(CURSOR),
    ]);
}

/// `jp_value(s, depth) -> cell`: the value at the cursor.
pub(super) fn jp_value(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let (s, depth) = (0, 1);
    let (c, out, block, key, v) = (f.local(N), f.local(N), f.local(N), f.local(N), f.local(N));
    f.all([I::LocalGet(depth), I::I32Const(MAX_DEPTH), I::I32GtU]);
    f.leave_if(left::JSON);
    f.all([I::LocalGet(s), I::Call(JP_WS)]);
    peek(f, s);
    f.emit(I::LocalSet(c));
    let is = |f: &mut FnBuilder<'_, '_>, ch: u8| {
        f.all([
            I::LocalGet(c),
            I::I32Const(ch as i32),
            I::I32Eq,
            I::If(BlockType::Empty),
        ]);
    };
    // A string.
    is(f, b'"');
    f.all([I::LocalGet(s), I::Call(JP_STRING), I::LocalSet(key)]);
    new_cell(f, out, cell::STRING, Some(key));
    f.all([I::LocalGet(out), I::Return, I::End]);
    // The literals.
    for (word, tag) in [
        ("true", cell::TRUE),
        ("false", cell::FALSE),
        ("null", cell::NULL),
    ] {
        is(f, word.as_bytes()[0]);
        for ch in word.bytes() {
            expect(f, s, ch);
        }
        new_cell(f, out, tag, None);
        f.all([I::LocalGet(out), I::Return, I::End]);
    }
    // An array: values and commas up to `]`; an object: `"key": value`
    // pairs and commas up to `}`.
    let items: [(u8, u8, i32, &[u32]); 2] = [
        (b'[', b']', cell::ARRAY, &[v]),
        (b'{', b'}', cell::OBJECT, &[key, v]),
    ];
    for (open, close, tag, item) in items {
        is(f, open);
        advance(f, 1);
        new_block(f, block, item.len() as i32);
        f.all([I::LocalGet(s), I::Call(JP_WS)]);
        peek(f, s);
        f.all([
            I::I32Const(close as i32),
            I::I32Ne,
            I::If(BlockType::Empty),
            I::Loop(BlockType::Empty),
        ]);
        if tag == cell::OBJECT {
            f.all([
                I::LocalGet(s),
                I::Call(JP_WS),
                I::LocalGet(s),
                I::Call(JP_STRING),
                I::LocalSet(key),
                I::LocalGet(s),
                I::Call(JP_WS),
            ]);
            expect(f, s, b':');
        }
        f.all([
            I::LocalGet(s),
            I::LocalGet(depth),
            I::I32Const(1),
            I::I32Add,
            I::Call(JP_VALUE),
            I::LocalSet(v),
        ]);
        push_item(f, block, item);
        f.all([I::LocalGet(s), I::Call(JP_WS)]);
        peek(f, s);
        f.all([I::I32Const(b',' as i32), I::I32Eq, I::If(BlockType::Empty)]);
        advance(f, 1);
        f.all([I::Br(1), I::End, I::End, I::End]);
        expect(f, s, close);
        new_cell(f, out, tag, Some(block));
        f.all([I::LocalGet(out), I::Return, I::End]);
    }
    // Otherwise, a number.
    let x = f.local(F);
    number(f, s);
    f.emit(I::LocalSet(x));
    new_cell(f, out, cell::NUMBER, None);
    f.all([
        I::LocalGet(out),
        I::LocalGet(x),
        I::F64Store(mem(cell::NUM, 3)),
        I::LocalGet(out),
    ]);
}

/// `jp_parse(s) -> cell`: the whole text as one value, or leaves.
pub(super) fn jp_parse(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let s = 0;
    let out = f.local(N);
    f.all([
        I::I32Const(0),
        I::GlobalSet(CURSOR),
        I::LocalGet(s),
        I::I32Const(0),
        I::Call(JP_VALUE),
        I::LocalSet(out),
        I::LocalGet(s),
        I::Call(JP_WS),
        I::GlobalGet(CURSOR),
        I::LocalGet(s),
        I::I32Load(mem(0, 2)),
        I::I32Ne,
    ]);
    f.leave_if(left::JSON);
    f.emit(I::LocalGet(out));
}

/// `jp_get(pairs, key) -> cell`: the value of `key` in an object's
/// pairs (the last, as JavaScript keeps the last of a repeated key), or 0.
pub(super) fn jp_get(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let (pairs, key) = (0, 1);
    let (i, at) = (f.local(N), f.local(N));
    f.all([
        I::LocalGet(pairs),
        I::I32Load(mem(0, 2)),
        I::LocalSet(i),
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(i),
        I::I32Eqz,
        I::BrIf(1),
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Sub,
        I::LocalSet(i),
        I::LocalGet(pairs),
        I::I32Load(mem(layout::ARR_DATA, 2)),
        I::LocalGet(i),
        I::I32Const(3),
        I::I32Shl,
        I::I32Add,
        I::LocalTee(at),
        I::I32Load(mem(0, 2)),
        I::LocalGet(key),
        I::Call(STR_EQ),
        I::If(BlockType::Empty),
        I::LocalGet(at),
        I::I32Load(mem(4, 2)),
        I::Return,
        I::End,
        I::Br(0),
        I::End,
        I::End,
        I::I32Const(0),
    ]);
}
