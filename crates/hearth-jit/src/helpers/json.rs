//! Building JSON text: a string builder that grows by doubling, and what
//! `JSON.stringify` appends to it (strings quoted as JavaScript quotes
//! them, numbers as `String(x)` prints them, `null` for the others). The
//! structure (brackets, keys, commas) is emitted by the compiler, which
//! knows every value's type (`codegen/json.rs`).
//!
//! A builder is `[str: i32][cap: i32]`, its `str` a string
//! (`[len][units]`) with room for `cap` units: finishing is reading `str`.

use wasm_encoder::{BlockType, Instruction as I};

use super::{Consts, N, left};
use crate::codegen::{ALLOC, FnBuilder, NUM_TO_STR, SB_PUSH, SB_ROOM, layout, mem};

/// The most units one append may ask room for (a string this long is
/// more than any sandbox's memory).
const MAX_ROOM: i32 = 1 << 28;

/// `sb_new() -> sb`: an empty builder with room for 16 units.
pub(super) fn sb_new(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let sb = f.local(N);
    f.all([
        I::I32Const(8),
        I::Call(ALLOC),
        I::LocalTee(sb),
        I::I32Const(layout::STR_UNITS as i32 + 2 * 16),
        I::Call(ALLOC),
        I::I32Store(mem(0, 2)),
        I::LocalGet(sb),
        I::I32Const(16),
        I::I32Store(mem(4, 2)),
        I::LocalGet(sb),
        I::I32Load(mem(0, 2)),
        I::I32Const(0),
        I::I32Store(mem(0, 2)),
        I::LocalGet(sb),
    ]);
}

/// `sb_room(sb, n) -> address`: makes room for `n` more units (moving
/// the string to twice its room, or more, when full) and returns where
/// the next unit goes. The length is not changed.
pub(super) fn sb_room(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let (sb, n) = (0, 1);
    let (s, len, cap, new) = (f.local(N), f.local(N), f.local(N), f.local(N));
    f.all([I::LocalGet(n), I::I32Const(MAX_ROOM), I::I32GtU]);
    f.leave_if(left::TEXT);
    f.all([
        I::LocalGet(sb),
        I::I32Load(mem(0, 2)),
        I::LocalTee(s),
        I::I32Load(mem(0, 2)),
        I::LocalTee(len),
        I::LocalGet(n),
        I::I32Add,
        I::LocalGet(sb),
        I::I32Load(mem(4, 2)),
        I::LocalTee(cap),
        I::I32GtU,
        I::If(BlockType::Empty),
        // cap = max(2 cap, len + n)
        I::LocalGet(cap),
        I::I32Const(1),
        I::I32Shl,
        I::LocalTee(cap),
        I::LocalGet(len),
        I::LocalGet(n),
        I::I32Add,
        I::LocalTee(new),
        I::LocalGet(cap),
        I::LocalGet(new),
        I::I32GtU,
        I::Select,
        I::LocalTee(cap),
        I::I32Const(MAX_ROOM),
        I::I32GtU,
    ]);
    f.leave_if(left::TEXT);
    f.all([
        I::LocalGet(cap),
        I::I32Const(1),
        I::I32Shl,
        I::I32Const(layout::STR_UNITS as i32),
        I::I32Add,
        I::Call(ALLOC),
        I::LocalTee(new),
        I::LocalGet(s),
        I::LocalGet(len),
        I::I32Const(1),
        I::I32Shl,
        I::I32Const(layout::STR_UNITS as i32),
        I::I32Add,
        I::MemoryCopy {
            src_mem: 0,
            dst_mem: 0,
        },
        I::LocalGet(sb),
        I::LocalGet(new),
        I::I32Store(mem(0, 2)),
        I::LocalGet(sb),
        I::LocalGet(cap),
        I::I32Store(mem(4, 2)),
        I::LocalGet(new),
        I::LocalSet(s),
        I::End,
        I::LocalGet(s),
        I::LocalGet(len),
        I::I32Const(1),
        I::I32Shl,
        I::I32Add,
        I::I32Const(layout::STR_UNITS as i32),
        I::I32Add,
    ]);
}

/// Sets the builder's length to end at unit address `end`.
fn set_end(f: &mut FnBuilder<'_, '_>, sb: u32, end: u32) {
    let s = f.local(N);
    f.all([
        I::LocalGet(sb),
        I::I32Load(mem(0, 2)),
        I::LocalTee(s),
        I::LocalGet(end),
        I::LocalGet(s),
        I::I32Sub,
        I::I32Const(layout::STR_UNITS as i32),
        I::I32Sub,
        I::I32Const(1),
        I::I32ShrU,
        I::I32Store(mem(0, 2)),
    ]);
}

/// `sb_push(sb, string)`: appends the string's units.
pub(super) fn sb_push(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let (sb, s) = (0, 1);
    let (n, p) = (f.local(N), f.local(N));
    f.all([
        I::LocalGet(sb),
        I::LocalGet(s),
        I::I32Load(mem(0, 2)),
        I::LocalTee(n),
        I::Call(SB_ROOM),
        I::LocalTee(p),
        I::LocalGet(s),
        I::I32Const(layout::STR_UNITS as i32),
        I::I32Add,
        I::LocalGet(n),
        I::I32Const(1),
        I::I32Shl,
        I::MemoryCopy {
            src_mem: 0,
            dst_mem: 0,
        },
        I::LocalGet(p),
        I::LocalGet(n),
        I::I32Const(1),
        I::I32Shl,
        I::I32Add,
        I::LocalSet(p),
    ]);
    set_end(f, sb, p);
}

/// `sb_quote(sb, string)`: appends the string as JSON, as
/// `JSON.stringify` quotes it: `"` and `\` escaped, `\b \f \n \r \t`
/// by name, other units below U+0020 and lone surrogates as `\u00xx`
/// (lowercase hex), surrogate pairs as they are.
pub(super) fn sb_quote(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let (sb, s) = (0, 1);
    let (n, p, i, j, u) = (f.local(N), f.local(N), f.local(N), f.local(N), f.local(N));
    let (short, esc) = (f.local(N), f.local(N));
    let unit_at = |f: &mut FnBuilder<'_, '_>, i: u32| {
        f.all([
            I::LocalGet(s),
            I::LocalGet(i),
            I::I32Const(1),
            I::I32Shl,
            I::I32Add,
            I::I32Load16U(mem(layout::STR_UNITS, 1)),
        ]);
    };
    let put = |f: &mut FnBuilder<'_, '_>, unit: I<'static>| {
        f.all([
            I::LocalGet(p),
            unit,
            I::I32Store16(mem(0, 1)),
            I::LocalGet(p),
            I::I32Const(2),
            I::I32Add,
            I::LocalSet(p),
        ]);
    };
    // Room for the worst case: every unit as `\uxxxx`, and the quotes.
    f.all([
        I::LocalGet(s),
        I::I32Load(mem(0, 2)),
        I::LocalTee(n),
        I::I32Const(MAX_ROOM / 6),
        I::I32GtU,
    ]);
    f.leave_if(left::TEXT);
    f.all([
        I::LocalGet(sb),
        I::LocalGet(n),
        I::I32Const(6),
        I::I32Mul,
        I::I32Const(2),
        I::I32Add,
        I::Call(SB_ROOM),
        I::LocalSet(p),
    ]);
    put(f, I::I32Const(b'"' as i32));
    f.all([
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(i),
        I::LocalGet(n),
        I::I32GeU,
        I::BrIf(1),
    ]);
    unit_at(f, i);
    f.all([I::LocalSet(u)]);
    // The escape's second character, or 0 if none is by name.
    f.emit(I::I32Const(0));
    f.emit(I::LocalSet(short));
    for (unit, name) in [
        (b'"', b'"'),
        (b'\\', b'\\'),
        (8, b'b'),
        (12, b'f'),
        (b'\n', b'n'),
        (b'\r', b'r'),
        (b'\t', b't'),
    ] {
        f.all([
            I::LocalGet(u),
            I::I32Const(unit as i32),
            I::I32Eq,
            I::If(BlockType::Empty),
            I::I32Const(name as i32),
            I::LocalSet(short),
            I::End,
        ]);
    }
    f.all([I::LocalGet(short), I::If(BlockType::Empty)]);
    put(f, I::I32Const(b'\\' as i32));
    put(f, I::LocalGet(short));
    f.all([I::Else]);
    // Below U+0020, or a surrogate without its other half: `\u` escape.
    f.all([
        I::LocalGet(u),
        I::I32Const(0x20),
        I::I32LtU,
        I::LocalSet(esc),
        I::LocalGet(u),
        I::I32Const(0xF800),
        I::I32And,
        I::I32Const(0xD800),
        I::I32Eq,
        I::If(BlockType::Empty),
        I::I32Const(1),
        I::LocalSet(esc),
        I::LocalGet(u),
        I::I32Const(0xDC00),
        I::I32LtU,
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Add,
        I::LocalTee(j),
        I::LocalGet(n),
        I::I32LtU,
        I::I32And,
        I::If(BlockType::Empty),
    ]);
    unit_at(f, j);
    f.all([
        I::I32Const(0xFC00),
        I::I32And,
        I::I32Const(0xDC00),
        I::I32Eq,
        I::If(BlockType::Empty),
    ]);
    // A high surrogate and a low one: a pair, copied as it is.
    put(f, I::LocalGet(u));
    f.all([I::LocalGet(j), I::LocalSet(i)]);
    unit_at(f, i);
    f.all([
        I::LocalSet(u),
        I::I32Const(0),
        I::LocalSet(esc),
        I::End,
        I::End,
        I::End,
        I::LocalGet(esc),
        I::If(BlockType::Empty),
    ]);
    put(f, I::I32Const(b'\\' as i32));
    put(f, I::I32Const(b'u' as i32));
    for shift in [12, 8, 4, 0] {
        // A hex digit, lowercase: d + '0', or + 'a' - 10 past 9.
        let d = f.local(N);
        f.all([
            I::LocalGet(u),
            I::I32Const(shift),
            I::I32ShrU,
            I::I32Const(15),
            I::I32And,
            I::LocalTee(d),
            I::I32Const(48),
            I::I32Add,
            I::LocalGet(d),
            I::I32Const(87),
            I::I32Add,
            I::LocalGet(d),
            I::I32Const(10),
            I::I32LtU,
            I::Select,
            I::LocalSet(d),
        ]);
        put(f, I::LocalGet(d));
    }
    f.all([I::Else]);
    put(f, I::LocalGet(u));
    f.all([I::End, I::End]);
    f.all([
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Add,
        I::LocalSet(i),
        I::Br(0),
        I::End,
        I::End,
    ]);
    put(f, I::I32Const(b'"' as i32));
    set_end(f, sb, p);
}

/// `sb_num(sb, x)`: appends `x` as `JSON.stringify` prints a number:
/// `null` for NaN and the infinities, else as `String(x)` (which leaves
/// where it cannot print exactly).
pub(super) fn sb_num(f: &mut FnBuilder<'_, '_>, c: &Consts) {
    let (sb, x) = (0, 1);
    f.all([
        I::LocalGet(sb),
        I::LocalGet(x),
        I::LocalGet(x),
        I::F64Sub,
        I::LocalGet(x),
        I::LocalGet(x),
        I::F64Sub,
        I::F64Eq,
        I::If(BlockType::Result(N)),
        I::LocalGet(x),
        I::Call(NUM_TO_STR),
        I::Else,
        I::I32Const(c.null as i32),
        I::End,
        I::Call(SB_PUSH),
    ]);
}
