//! The functions compiled code calls for what one instruction does not
//! do: allocating, JavaScript's number conversions, strings, and the
//! request and response. Emitted into every module, in the order of the
//! indices in [`codegen`](crate::codegen).

use wasm_encoder::{BlockType, Function, Instruction as I, ValType};

use crate::codegen::{
    ALLOC, ASCII_IN, ENVIRON_GET, ENVIRON_SIZES_GET, FD_READ, FD_WRITE, FnBuilder, HEAP,
    ModuleBuilder, RANDOM_GET, Ty, layout, mem,
};

/// Where a helper leaves compiled code, in place of a source offset.
pub mod left {
    /// An allocation the sandbox's memory limit refused.
    pub const MEMORY: u32 = u32::MAX;
    /// A number the compiled code cannot convert or print exactly.
    pub const NUMBER: u32 = u32::MAX - 1;
    /// A response status outside 200–599.
    pub const STATUS: u32 = u32::MAX - 2;
    /// A request body that is not ASCII, or a string too long.
    pub const TEXT: u32 = u32::MAX - 3;
    /// A host call that failed (the isolate makes it again).
    pub const HOST: u32 = u32::MAX - 4;
    /// JSON the compiled parser does not take (malformed, or nested deeper
    /// than it goes).
    pub const JSON: u32 = u32::MAX - 5;
}

mod json;
pub(crate) mod parse;

const F: ValType = ValType::F64;
const N: ValType = ValType::I32;

/// A helper: its parameters, its results, and what emits its body.
type Helper = (
    Vec<ValType>,
    Vec<ValType>,
    fn(&mut FnBuilder<'_, '_>, &Consts),
);

pub(crate) fn emit(m: &mut ModuleBuilder<'_>) -> Vec<(u32, Function)> {
    let prefix = b"status: ";
    let prefix_at = m.bytes(prefix);
    let nan = m.str_addr("NaN") as u32;
    let inf = m.str_addr("Infinity") as u32;
    let ninf = m.str_addr("-Infinity") as u32;
    let zero = m.str_addr("0") as u32;
    let null = m.str_addr("null") as u32;
    let helpers: Vec<Helper> = vec![
        (vec![N], vec![N], alloc),
        (vec![F], vec![N], to_int32),
        (vec![F, F], vec![F], rem),
        (vec![N, N], vec![N], concat),
        (vec![F], vec![N], num_to_str),
        (vec![N, N], vec![N], str_eq),
        (vec![N], vec![], write_response),
        (vec![], vec![N], read_body),
        (vec![N, N], vec![F], str_to_num),
        (vec![], vec![F], random),
        (vec![], vec![N], json::sb_new),
        (vec![N, N], vec![N], json::sb_room),
        (vec![N, N], vec![], json::sb_push),
        (vec![N, N], vec![], json::sb_quote),
        (vec![N, F], vec![], json::sb_num),
        (vec![N], vec![N], ascii_out),
        (vec![N, N], vec![N], ascii_in),
        (vec![N], vec![], parse::jp_ws),
        (vec![N], vec![N], parse::jp_string),
        (vec![N, N], vec![N], parse::jp_value),
        (vec![N], vec![N], parse::jp_parse),
        (vec![N, N], vec![N], parse::jp_get),
        (vec![N], vec![N], env_get),
    ];
    let consts = Consts {
        prefix_at,
        prefix_len: prefix.len() as i32,
        nan,
        inf,
        ninf,
        zero,
        null,
    };
    helpers
        .into_iter()
        .map(|(params, results, body)| {
            let n = params.len() as u32;
            let ty = m.type_index(params, results);
            let mut fb = FnBuilder::new(m, n, Ty::Undef, false);
            body(&mut fb, &consts);
            (ty, fb.finish())
        })
        .collect()
}

struct Consts {
    prefix_at: u32,
    prefix_len: i32,
    nan: u32,
    inf: u32,
    ninf: u32,
    zero: u32,
    null: u32,
}

impl FnBuilder<'_, '_> {
    fn all(&mut self, code: impl IntoIterator<Item = I<'static>>) {
        for i in code {
            self.emit(i);
        }
    }
}

/// `alloc(size) -> address`, 8-aligned, growing memory as needed.
fn alloc(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let (p, end, need) = (f.local(N), f.local(N), f.local(N));
    f.all([
        I::GlobalGet(HEAP),
        I::I32Const(7),
        I::I32Add,
        I::I32Const(-8),
        I::I32And,
        I::LocalTee(p),
        I::LocalGet(0),
        I::I32Add,
        I::LocalTee(end),
        I::LocalGet(p),
        I::I32LtU,
    ]);
    f.leave_if(left::MEMORY);
    // Pages needed: ceil(end / 64 KiB), in 64 bits.
    f.all([
        I::LocalGet(end),
        I::I64ExtendI32U,
        I::I64Const(65535),
        I::I64Add,
        I::I64Const(16),
        I::I64ShrU,
        I::I32WrapI64,
        I::LocalTee(need),
        I::MemorySize(0),
        I::I32GtU,
        I::If(BlockType::Empty),
        I::LocalGet(need),
        I::MemorySize(0),
        I::I32Sub,
        I::MemoryGrow(0),
        I::I32Const(-1),
        I::I32Eq,
    ]);
    f.leave_if(left::MEMORY);
    f.all([I::End, I::LocalGet(end), I::GlobalSet(HEAP), I::LocalGet(p)]);
}

/// JavaScript's ToInt32: truncate, then modulo 2^32.
fn to_int32(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    f.all([
        I::LocalGet(0),
        I::F64Abs,
        I::F64Const(9223372036854775808.0.into()),
        I::F64Lt,
        I::If(BlockType::Result(N)),
        I::LocalGet(0),
        I::I64TruncSatF64S,
        I::I32WrapI64,
        I::Else,
        // NaN and the infinities are 0; a finite number past 2^63 leaves.
        I::LocalGet(0),
        I::LocalGet(0),
        I::F64Sub,
        I::F64Const(0.0.into()),
        I::F64Eq,
    ]);
    f.leave_if(left::NUMBER);
    f.all([I::I32Const(0), I::End]);
}

/// JavaScript's `%`: exact for integers below 2^53 (the result has the
/// dividend's sign), NaN and infinity as the language says; anything else
/// leaves.
fn rem(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let (a, b) = (0, 1);
    f.all([
        // NaN operands, a zero divisor or an infinite dividend: NaN.
        I::LocalGet(a),
        I::LocalGet(a),
        I::F64Ne,
        I::LocalGet(b),
        I::LocalGet(b),
        I::F64Ne,
        I::I32Or,
        I::LocalGet(b),
        I::F64Const(0.0.into()),
        I::F64Eq,
        I::I32Or,
        I::LocalGet(a),
        I::F64Abs,
        I::F64Const(f64::INFINITY.into()),
        I::F64Eq,
        I::I32Or,
        I::If(BlockType::Empty),
        I::F64Const(f64::NAN.into()),
        I::Return,
        I::End,
        I::LocalGet(b),
        I::F64Abs,
        I::F64Const(f64::INFINITY.into()),
        I::F64Eq,
        I::If(BlockType::Empty),
        I::LocalGet(a),
        I::Return,
        I::End,
    ]);
    let limit = 9007199254740992.0f64; // 2^53
    for x in [a, b] {
        f.all([
            I::LocalGet(x),
            I::F64Trunc,
            I::LocalGet(x),
            I::F64Ne,
            I::LocalGet(x),
            I::F64Abs,
            I::F64Const(limit.into()),
            I::F64Ge,
            I::I32Or,
        ]);
        f.leave_if(left::NUMBER);
    }
    f.all([
        I::LocalGet(a),
        I::I64TruncSatF64S,
        I::LocalGet(b),
        I::I64TruncSatF64S,
        I::I64RemS,
        I::F64ConvertI64S,
        I::LocalGet(a),
        I::F64Copysign,
    ]);
}

/// `a + b` of two strings.
fn concat(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let (a, b) = (0, 1);
    let (la, lb, s) = (f.local(N), f.local(N), f.local(N));
    f.all([
        I::LocalGet(a),
        I::I32Load(mem(0, 2)),
        I::LocalTee(la),
        I::I32Eqz,
        I::If(BlockType::Empty),
        I::LocalGet(b),
        I::Return,
        I::End,
        I::LocalGet(b),
        I::I32Load(mem(0, 2)),
        I::LocalTee(lb),
        I::I32Eqz,
        I::If(BlockType::Empty),
        I::LocalGet(a),
        I::Return,
        I::End,
        I::LocalGet(la),
        I::LocalGet(lb),
        I::I32Add,
        I::I32Const(1 << 28),
        I::I32GeU,
    ]);
    f.leave_if(left::TEXT);
    f.all([
        I::LocalGet(la),
        I::LocalGet(lb),
        I::I32Add,
        I::I32Const(1),
        I::I32Shl,
        I::I32Const(layout::STR_UNITS as i32),
        I::I32Add,
        I::Call(ALLOC),
        I::LocalTee(s),
        I::LocalGet(la),
        I::LocalGet(lb),
        I::I32Add,
        I::I32Store(mem(0, 2)),
        // units of a, then of b
        I::LocalGet(s),
        I::I32Const(4),
        I::I32Add,
        I::LocalGet(a),
        I::I32Const(4),
        I::I32Add,
        I::LocalGet(la),
        I::I32Const(1),
        I::I32Shl,
        I::MemoryCopy {
            src_mem: 0,
            dst_mem: 0,
        },
        I::LocalGet(s),
        I::I32Const(4),
        I::I32Add,
        I::LocalGet(la),
        I::I32Const(1),
        I::I32Shl,
        I::I32Add,
        I::LocalGet(b),
        I::I32Const(4),
        I::I32Add,
        I::LocalGet(lb),
        I::I32Const(1),
        I::I32Shl,
        I::MemoryCopy {
            src_mem: 0,
            dst_mem: 0,
        },
        I::LocalGet(s),
    ]);
}

/// `String(x)` for what prints exactly without a float-printing
/// algorithm: NaN, the infinities and integers below 2^53.
fn num_to_str(f: &mut FnBuilder<'_, '_>, c: &Consts) {
    let x = 0;
    let (v, pos, n, s, k, neg) = (
        f.local(ValType::I64),
        f.local(N),
        f.local(N),
        f.local(N),
        f.local(N),
        f.local(N),
    );
    let top = (layout::DIGITS + 24) as i32;
    f.all([
        I::LocalGet(x),
        I::LocalGet(x),
        I::F64Ne,
        I::If(BlockType::Empty),
        I::I32Const(c.nan as i32),
        I::Return,
        I::End,
        I::LocalGet(x),
        I::F64Const(f64::INFINITY.into()),
        I::F64Eq,
        I::If(BlockType::Empty),
        I::I32Const(c.inf as i32),
        I::Return,
        I::End,
        I::LocalGet(x),
        I::F64Const(f64::NEG_INFINITY.into()),
        I::F64Eq,
        I::If(BlockType::Empty),
        I::I32Const(c.ninf as i32),
        I::Return,
        I::End,
        I::LocalGet(x),
        I::F64Trunc,
        I::LocalGet(x),
        I::F64Ne,
        I::LocalGet(x),
        I::F64Abs,
        I::F64Const(9007199254740992.0.into()),
        I::F64Ge,
        I::I32Or,
    ]);
    f.leave_if(left::NUMBER);
    f.all([
        // 0 and -0 both print "0".
        I::LocalGet(x),
        I::F64Const(0.0.into()),
        I::F64Eq,
        I::If(BlockType::Empty),
        I::I32Const(c.zero as i32),
        I::Return,
        I::End,
        I::LocalGet(x),
        I::F64Const(0.0.into()),
        I::F64Lt,
        I::LocalSet(neg),
        I::LocalGet(x),
        I::F64Abs,
        I::I64TruncSatF64U,
        I::LocalSet(v),
        I::I32Const(top),
        I::LocalSet(pos),
        I::Loop(BlockType::Empty),
        I::LocalGet(pos),
        I::I32Const(1),
        I::I32Sub,
        I::LocalTee(pos),
        I::LocalGet(v),
        I::I64Const(10),
        I::I64RemU,
        I::I32WrapI64,
        I::I32Const(48),
        I::I32Add,
        I::I32Store8(mem(0, 0)),
        I::LocalGet(v),
        I::I64Const(10),
        I::I64DivU,
        I::LocalTee(v),
        I::I64Const(0),
        I::I64Ne,
        I::BrIf(0),
        I::End,
        I::LocalGet(neg),
        I::If(BlockType::Empty),
        I::LocalGet(pos),
        I::I32Const(1),
        I::I32Sub,
        I::LocalTee(pos),
        I::I32Const(45),
        I::I32Store8(mem(0, 0)),
        I::End,
        I::I32Const(top),
        I::LocalGet(pos),
        I::I32Sub,
        I::LocalTee(n),
        I::I32Const(1),
        I::I32Shl,
        I::I32Const(4),
        I::I32Add,
        I::Call(ALLOC),
        I::LocalTee(s),
        I::LocalGet(n),
        I::I32Store(mem(0, 2)),
        I::I32Const(0),
        I::LocalSet(k),
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(k),
        I::LocalGet(n),
        I::I32GeU,
        I::BrIf(1),
        I::LocalGet(s),
        I::LocalGet(k),
        I::I32Const(1),
        I::I32Shl,
        I::I32Add,
        I::LocalGet(pos),
        I::LocalGet(k),
        I::I32Add,
        I::I32Load8U(mem(0, 0)),
        I::I32Store16(mem(layout::STR_UNITS, 1)),
        I::LocalGet(k),
        I::I32Const(1),
        I::I32Add,
        I::LocalSet(k),
        I::Br(0),
        I::End,
        I::End,
        I::LocalGet(s),
    ]);
}

/// `a === b` of two strings.
fn str_eq(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let (a, b) = (0, 1);
    let (len, i) = (f.local(N), f.local(N));
    f.all([
        I::LocalGet(a),
        I::LocalGet(b),
        I::I32Eq,
        I::If(BlockType::Empty),
        I::I32Const(1),
        I::Return,
        I::End,
        I::LocalGet(a),
        I::I32Load(mem(0, 2)),
        I::LocalTee(len),
        I::LocalGet(b),
        I::I32Load(mem(0, 2)),
        I::I32Ne,
        I::If(BlockType::Empty),
        I::I32Const(0),
        I::Return,
        I::End,
        I::Loop(BlockType::Empty),
        I::LocalGet(i),
        I::LocalGet(len),
        I::I32GeU,
        I::If(BlockType::Empty),
        I::I32Const(1),
        I::Return,
        I::End,
        I::LocalGet(a),
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Shl,
        I::I32Add,
        I::I32Load16U(mem(layout::STR_UNITS, 1)),
        I::LocalGet(b),
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Shl,
        I::I32Add,
        I::I32Load16U(mem(layout::STR_UNITS, 1)),
        I::I32Ne,
        I::If(BlockType::Empty),
        I::I32Const(0),
        I::Return,
        I::End,
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Add,
        I::LocalSet(i),
        I::Br(0),
        I::End,
        I::I32Const(0),
    ]);
}

/// Writes the response as CGI output: its header lines (made when
/// compiling, as the isolate's `Response` would have them) and `status`,
/// then the body as UTF-8, lone surrogates as U+FFFD (as `TextEncoder`
/// does).
fn write_response(f: &mut FnBuilder<'_, '_>, c: &Consts) {
    let r = 0;
    let (status, body, len, out, p, i, u, next) = (
        f.local(N),
        f.local(N),
        f.local(N),
        f.local(N),
        f.local(N),
        f.local(N),
        f.local(N),
        f.local(N),
    );
    let (headers, hlen) = (f.local(N), f.local(N));
    let x = f.local(F);
    f.all([
        I::LocalGet(r),
        I::F64Load(mem(0, 3)),
        I::LocalTee(x),
        I::I32TruncSatF64U,
        I::LocalTee(status),
        I::F64ConvertI32U,
        I::LocalGet(x),
        I::F64Ne,
        I::LocalGet(status),
        I::I32Const(200),
        I::I32LtU,
        I::I32Or,
        I::LocalGet(status),
        I::I32Const(599),
        I::I32GtU,
        I::I32Or,
    ]);
    f.leave_if(left::STATUS);
    // The header lines, then `status: `.
    f.all([
        I::LocalGet(r),
        I::I32Load(mem(layout::RESP_HEADERS, 2)),
        I::LocalTee(headers),
        I::I32Load(mem(0, 2)),
        I::LocalSet(hlen),
        I::LocalGet(r),
        I::I32Load(mem(layout::RESP_BODY, 2)),
        I::LocalTee(body),
        I::I32Load(mem(0, 2)),
        I::LocalTee(len),
        I::I32Const(3),
        I::I32Mul,
        I::LocalGet(hlen),
        I::I32Add,
        I::I32Const(c.prefix_len + 5),
        I::I32Add,
        I::Call(ALLOC),
        I::LocalTee(out),
        I::LocalGet(headers),
        I::I32Const(4),
        I::I32Add,
        I::LocalGet(hlen),
        I::MemoryCopy {
            src_mem: 0,
            dst_mem: 0,
        },
        I::LocalGet(out),
        I::LocalGet(hlen),
        I::I32Add,
        I::LocalTee(p),
        I::I32Const(c.prefix_at as i32),
        I::I32Const(c.prefix_len),
        I::MemoryCopy {
            src_mem: 0,
            dst_mem: 0,
        },
        I::LocalGet(p),
        I::I32Const(c.prefix_len),
        I::I32Add,
        I::LocalSet(p),
    ]);
    // Three digits of the status, then a blank line.
    for (k, div) in [100, 10, 1].into_iter().enumerate() {
        f.all([
            I::LocalGet(p),
            I::LocalGet(status),
            I::I32Const(div),
            I::I32DivU,
            I::I32Const(10),
            I::I32RemU,
            I::I32Const(48),
            I::I32Add,
            I::I32Store8(mem(k as u64, 0)),
        ]);
    }
    f.all([
        I::LocalGet(p),
        I::I32Const(10),
        I::I32Store8(mem(3, 0)),
        I::LocalGet(p),
        I::I32Const(10),
        I::I32Store8(mem(4, 0)),
        I::LocalGet(p),
        I::I32Const(5),
        I::I32Add,
        I::LocalSet(p),
    ]);
    // UTF-16 to UTF-8.
    let byte = |f: &mut FnBuilder<'_, '_>, offset: u64, value: Vec<I<'static>>| {
        f.emit(I::LocalGet(p));
        f.all(value);
        f.emit(I::I32Store8(mem(offset, 0)));
    };
    let advance = |f: &mut FnBuilder<'_, '_>, n: i32| {
        f.all([I::LocalGet(p), I::I32Const(n), I::I32Add, I::LocalSet(p)]);
    };
    f.all([
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(i),
        I::LocalGet(len),
        I::I32GeU,
        I::BrIf(1),
        I::LocalGet(body),
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Shl,
        I::I32Add,
        I::I32Load16U(mem(layout::STR_UNITS, 1)),
        I::LocalTee(u),
        I::I32Const(0x80),
        I::I32LtU,
        I::If(BlockType::Empty),
    ]);
    byte(f, 0, vec![I::LocalGet(u)]);
    advance(f, 1);
    f.all([
        I::Else,
        I::LocalGet(u),
        I::I32Const(0x800),
        I::I32LtU,
        I::If(BlockType::Empty),
    ]);
    byte(
        f,
        0,
        vec![
            I::LocalGet(u),
            I::I32Const(6),
            I::I32ShrU,
            I::I32Const(0xC0),
            I::I32Or,
        ],
    );
    byte(
        f,
        1,
        vec![
            I::LocalGet(u),
            I::I32Const(63),
            I::I32And,
            I::I32Const(0x80),
            I::I32Or,
        ],
    );
    advance(f, 2);
    f.all([I::Else]);
    // A high surrogate followed by a low one: one code point, 4 bytes.
    f.all([
        I::LocalGet(u),
        I::I32Const(0xFC00),
        I::I32And,
        I::I32Const(0xD800),
        I::I32Eq,
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Add,
        I::LocalGet(len),
        I::I32LtU,
        I::I32And,
        I::If(BlockType::Result(N)),
        I::LocalGet(body),
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Add,
        I::I32Const(1),
        I::I32Shl,
        I::I32Add,
        I::I32Load16U(mem(layout::STR_UNITS, 1)),
        I::LocalTee(next),
        I::I32Const(0xFC00),
        I::I32And,
        I::I32Const(0xDC00),
        I::I32Eq,
        I::Else,
        I::I32Const(0),
        I::End,
        I::If(BlockType::Empty),
        // cp = 0x10000 + ((u - 0xD800) << 10) + (next - 0xDC00)
        I::LocalGet(u),
        I::I32Const(0xD800),
        I::I32Sub,
        I::I32Const(10),
        I::I32Shl,
        I::LocalGet(next),
        I::I32Const(0xDC00),
        I::I32Sub,
        I::I32Add,
        I::I32Const(0x10000),
        I::I32Add,
        I::LocalSet(u),
    ]);
    byte(
        f,
        0,
        vec![
            I::LocalGet(u),
            I::I32Const(18),
            I::I32ShrU,
            I::I32Const(0xF0),
            I::I32Or,
        ],
    );
    byte(
        f,
        1,
        vec![
            I::LocalGet(u),
            I::I32Const(12),
            I::I32ShrU,
            I::I32Const(63),
            I::I32And,
            I::I32Const(0x80),
            I::I32Or,
        ],
    );
    byte(
        f,
        2,
        vec![
            I::LocalGet(u),
            I::I32Const(6),
            I::I32ShrU,
            I::I32Const(63),
            I::I32And,
            I::I32Const(0x80),
            I::I32Or,
        ],
    );
    byte(
        f,
        3,
        vec![
            I::LocalGet(u),
            I::I32Const(63),
            I::I32And,
            I::I32Const(0x80),
            I::I32Or,
        ],
    );
    advance(f, 4);
    f.all([
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Add,
        I::LocalSet(i),
        I::Else,
        // A lone surrogate is U+FFFD.
        I::LocalGet(u),
        I::I32Const(0xF800),
        I::I32And,
        I::I32Const(0xD800),
        I::I32Eq,
        I::If(BlockType::Empty),
        I::I32Const(0xFFFD),
        I::LocalSet(u),
        I::End,
    ]);
    byte(
        f,
        0,
        vec![
            I::LocalGet(u),
            I::I32Const(12),
            I::I32ShrU,
            I::I32Const(0xE0),
            I::I32Or,
        ],
    );
    byte(
        f,
        1,
        vec![
            I::LocalGet(u),
            I::I32Const(6),
            I::I32ShrU,
            I::I32Const(63),
            I::I32And,
            I::I32Const(0x80),
            I::I32Or,
        ],
    );
    byte(
        f,
        2,
        vec![
            I::LocalGet(u),
            I::I32Const(63),
            I::I32And,
            I::I32Const(0x80),
            I::I32Or,
        ],
    );
    advance(f, 3);
    f.all([
        I::End, // surrogate pair or not
        I::End, // < 0x800
        I::End, // < 0x80
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Add,
        I::LocalSet(i),
        I::Br(0),
        I::End,
        I::End,
        // One iovec at SCRATCH: [out, p - out]; the count at SCRATCH + 8.
        I::I32Const(layout::SCRATCH as i32),
        I::LocalGet(out),
        I::I32Store(mem(0, 2)),
        I::I32Const(layout::SCRATCH as i32),
        I::LocalGet(p),
        I::LocalGet(out),
        I::I32Sub,
        I::I32Store(mem(4, 2)),
        I::I32Const(1),
        I::I32Const(layout::SCRATCH as i32),
        I::I32Const(1),
        I::I32Const(layout::SCRATCH as i32 + 8),
        I::Call(FD_WRITE),
        // A refused write is a response past its limit: trap, and the
        // sandbox says so.
        I::If(BlockType::Empty),
        I::Unreachable,
        I::End,
    ]);
}

/// `await request.text()`: stdin whole, as a string; a body that is not
/// ASCII leaves (decoding UTF-8 exactly is the isolate's).
fn read_body(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let (start, total, n) = (f.local(N), f.local(N), f.local(N));
    const CHUNK: i32 = 65536;
    f.all([
        I::I32Const(0),
        I::Call(ALLOC),
        I::LocalSet(start),
        I::Loop(BlockType::Empty),
        // Room for the next chunk right after what was read.
        I::LocalGet(start),
        I::LocalGet(total),
        I::I32Add,
        I::GlobalSet(HEAP),
        I::I32Const(CHUNK),
        I::Call(ALLOC),
        I::Drop,
        I::I32Const(layout::SCRATCH as i32),
        I::LocalGet(start),
        I::LocalGet(total),
        I::I32Add,
        I::I32Store(mem(0, 2)),
        I::I32Const(layout::SCRATCH as i32),
        I::I32Const(CHUNK),
        I::I32Store(mem(4, 2)),
        I::I32Const(0),
        I::I32Const(layout::SCRATCH as i32),
        I::I32Const(1),
        I::I32Const(layout::SCRATCH as i32 + 8),
        I::Call(FD_READ),
    ]);
    f.leave_if(left::TEXT);
    f.all([
        I::I32Const(layout::SCRATCH as i32 + 8),
        I::I32Load(mem(0, 2)),
        I::LocalTee(n),
        I::LocalGet(total),
        I::I32Add,
        I::LocalSet(total),
        I::LocalGet(n),
        I::BrIf(0),
        I::End,
        I::LocalGet(start),
        I::LocalGet(total),
        I::I32Add,
        I::GlobalSet(HEAP),
        I::LocalGet(start),
        I::LocalGet(total),
        I::Call(ASCII_IN),
    ]);
}

/// `Number(s)` for a decimal integer of at most 15 digits, with an
/// optional sign and surrounding ASCII whitespace (the empty string is 0);
/// anything else leaves.
fn str_to_num(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let s = 0;
    let (i, end, neg, v, u) = (
        f.local(N),
        f.local(N),
        f.local(N),
        f.local(ValType::I64),
        f.local(N),
    );
    let x = f.local(F);
    let unit = |f: &mut FnBuilder<'_, '_>, at: Vec<I<'static>>| {
        f.emit(I::LocalGet(s));
        f.all(at);
        f.all([
            I::I32Const(1),
            I::I32Shl,
            I::I32Add,
            I::I32Load16U(mem(layout::STR_UNITS, 1)),
        ]);
    };
    let is_space = |f: &mut FnBuilder<'_, '_>| {
        // 9–13 or 32
        f.all([
            I::LocalTee(u),
            I::I32Const(32),
            I::I32Eq,
            I::LocalGet(u),
            I::I32Const(9),
            I::I32Sub,
            I::I32Const(5),
            I::I32LtU,
            I::I32Or,
        ]);
    };
    f.all([I::LocalGet(s), I::I32Load(mem(0, 2)), I::LocalSet(end)]);
    // Trim the front.
    f.all([
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(i),
        I::LocalGet(end),
        I::I32GeU,
        I::BrIf(1),
    ]);
    unit(f, vec![I::LocalGet(i)]);
    is_space(f);
    f.all([
        I::I32Eqz,
        I::BrIf(1),
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Add,
        I::LocalSet(i),
        I::Br(0),
        I::End,
        I::End,
    ]);
    // Trim the back.
    f.all([
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(end),
        I::LocalGet(i),
        I::I32LeU,
        I::BrIf(1),
    ]);
    unit(f, vec![I::LocalGet(end), I::I32Const(1), I::I32Sub]);
    is_space(f);
    f.all([
        I::I32Eqz,
        I::BrIf(1),
        I::LocalGet(end),
        I::I32Const(1),
        I::I32Sub,
        I::LocalSet(end),
        I::Br(0),
        I::End,
        I::End,
        I::LocalGet(i),
        I::LocalGet(end),
        I::I32Eq,
        I::If(BlockType::Empty),
        I::F64Const(0.0.into()),
        I::Return,
        I::End,
    ]);
    // A sign.
    unit(f, vec![I::LocalGet(i)]);
    f.all([
        I::LocalTee(u),
        I::I32Const(45),
        I::I32Eq,
        I::LocalTee(neg),
        I::LocalGet(u),
        I::I32Const(43),
        I::I32Eq,
        I::I32Or,
        I::LocalGet(i),
        I::I32Add,
        I::LocalSet(i),
        // No digits, or too many to be exact.
        I::LocalGet(i),
        I::LocalGet(end),
        I::I32Eq,
        I::LocalGet(end),
        I::LocalGet(i),
        I::I32Sub,
        I::I32Const(15),
        I::I32GtU,
        I::I32Or,
    ]);
    f.leave_if(left::NUMBER);
    f.all([
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(i),
        I::LocalGet(end),
        I::I32GeU,
        I::BrIf(1),
    ]);
    unit(f, vec![I::LocalGet(i)]);
    f.all([
        I::I32Const(48),
        I::I32Sub,
        I::LocalTee(u),
        I::I32Const(9),
        I::I32GtU,
    ]);
    f.leave_if(left::NUMBER);
    f.all([
        I::LocalGet(v),
        I::I64Const(10),
        I::I64Mul,
        I::LocalGet(u),
        I::I64ExtendI32U,
        I::I64Add,
        I::LocalSet(v),
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Add,
        I::LocalSet(i),
        I::Br(0),
        I::End,
        I::End,
        I::LocalGet(v),
        I::F64ConvertI64S,
        I::LocalTee(x),
        I::F64Neg,
        I::LocalGet(x),
        I::LocalGet(neg),
        I::Select,
    ]);
}

/// `Math.random()` as the isolate's prelude computes it: xorshift128 on
/// four 32-bit words, seeded on first use by one host call for 16 random
/// bytes (taped, so a replay draws the same numbers); the state lives at
/// [`layout::RANDOM`] and starts unseeded with each instance.
fn random(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let (t, s) = (f.local(N), f.local(N));
    let at = layout::RANDOM;
    let word = |k: u32| mem(u64::from(4 + 4 * k), 2);
    f.all([
        I::I32Const(at as i32),
        I::I32Load(mem(0, 2)),
        I::I32Eqz,
        I::If(BlockType::Empty),
        I::I32Const(at as i32 + 4),
        I::I32Const(16),
        I::Call(RANDOM_GET),
        I::Drop,
        I::I32Const(at as i32),
        I::I32Const(1),
        I::I32Store(mem(0, 2)),
        // All four zero: the first is 1.
        I::I32Const(at as i32),
        I::I32Load(word(0)),
        I::I32Const(at as i32),
        I::I32Load(word(1)),
        I::I32Or,
        I::I32Const(at as i32),
        I::I32Load(word(2)),
        I::I32Or,
        I::I32Const(at as i32),
        I::I32Load(word(3)),
        I::I32Or,
        I::I32Eqz,
        I::If(BlockType::Empty),
        I::I32Const(at as i32),
        I::I32Const(1),
        I::I32Store(word(0)),
        I::End,
        I::End,
    ]);
    // t = s3; s = s0; s3 = s2; s2 = s1; s1 = s;
    f.all([
        I::I32Const(at as i32),
        I::I32Load(word(3)),
        I::LocalSet(t),
        I::I32Const(at as i32),
        I::I32Load(word(0)),
        I::LocalSet(s),
        I::I32Const(at as i32),
        I::I32Const(at as i32),
        I::I32Load(word(2)),
        I::I32Store(word(3)),
        I::I32Const(at as i32),
        I::I32Const(at as i32),
        I::I32Load(word(1)),
        I::I32Store(word(2)),
        I::I32Const(at as i32),
        I::LocalGet(s),
        I::I32Store(word(1)),
    ]);
    // t ^= t << 11; t ^= t >>> 8; s0 = t ^ s ^ (s >>> 19);
    f.all([
        I::LocalGet(t),
        I::LocalGet(t),
        I::I32Const(11),
        I::I32Shl,
        I::I32Xor,
        I::LocalTee(t),
        I::LocalGet(t),
        I::I32Const(8),
        I::I32ShrU,
        I::I32Xor,
        I::LocalSet(t),
        I::I32Const(at as i32),
        I::LocalGet(t),
        I::LocalGet(s),
        I::I32Xor,
        I::LocalGet(s),
        I::I32Const(19),
        I::I32ShrU,
        I::I32Xor,
        I::LocalTee(t),
        I::I32Store(word(0)),
        // s0 / 2^32
        I::LocalGet(t),
        I::F64ConvertI32U,
        I::F64Const(4294967296.0.into()),
        I::F64Div,
    ]);
}

/// `ascii_out(string) -> bytes`: the string's units as bytes (its UTF-8,
/// as the isolate sends a KV key or value), or leaves for text that is
/// not ASCII. The length is the string's.
fn ascii_out(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let s = 0;
    let (n, out, i, u) = (f.local(N), f.local(N), f.local(N), f.local(N));
    f.all([
        I::LocalGet(s),
        I::I32Load(mem(0, 2)),
        I::LocalTee(n),
        I::Call(ALLOC),
        I::LocalSet(out),
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(i),
        I::LocalGet(n),
        I::I32GeU,
        I::BrIf(1),
        I::LocalGet(s),
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Shl,
        I::I32Add,
        I::I32Load16U(mem(layout::STR_UNITS, 1)),
        I::LocalTee(u),
        I::I32Const(0x80),
        I::I32GeU,
    ]);
    f.leave_if(left::TEXT);
    f.all([
        I::LocalGet(out),
        I::LocalGet(i),
        I::I32Add,
        I::LocalGet(u),
        I::I32Store8(mem(0, 0)),
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Add,
        I::LocalSet(i),
        I::Br(0),
        I::End,
        I::End,
        I::LocalGet(out),
    ]);
}

/// `ascii_in(bytes, len) -> string`: ASCII bytes as a string (a KV value,
/// as the isolate decodes it), or leaves for bytes that are not ASCII.
fn ascii_in(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let (b, n) = (0, 1);
    let (s, i, u) = (f.local(N), f.local(N), f.local(N));
    f.all([I::LocalGet(n), I::I32Const(1 << 28), I::I32GeU]);
    f.leave_if(left::TEXT);
    f.all([
        I::LocalGet(n),
        I::I32Const(1),
        I::I32Shl,
        I::I32Const(layout::STR_UNITS as i32),
        I::I32Add,
        I::Call(ALLOC),
        I::LocalTee(s),
        I::LocalGet(n),
        I::I32Store(mem(0, 2)),
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(i),
        I::LocalGet(n),
        I::I32GeU,
        I::BrIf(1),
        I::LocalGet(b),
        I::LocalGet(i),
        I::I32Add,
        I::I32Load8U(mem(0, 0)),
        I::LocalTee(u),
        I::I32Const(0x80),
        I::I32GeU,
    ]);
    f.leave_if(left::TEXT);
    f.all([
        I::LocalGet(s),
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Shl,
        I::I32Add,
        I::LocalGet(u),
        I::I32Store16(mem(layout::STR_UNITS, 1)),
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Add,
        I::LocalSet(i),
        I::Br(0),
        I::End,
        I::End,
        I::LocalGet(s),
    ]);
}

/// `env_get(prefix) -> string or 0`: the value of the first variable in
/// WASI's environment that starts with `prefix` (a `[len][bytes]` block,
/// `NAME=`), or 0 if none does. The wasm tier lists the function's own
/// variables first, before CGI's, so the first match is the one the
/// isolate's `env.NAME` has. The environment is read once per invocation,
/// into `[count][pointer × count][strings]` kept at `layout::ENVIRON`.
fn env_get(f: &mut FnBuilder<'_, '_>, _: &Consts) {
    let prefix = 0;
    let (list, count, i, p, k, len) = (
        f.local(N),
        f.local(N),
        f.local(N),
        f.local(N),
        f.local(N),
        f.local(N),
    );
    let scratch = layout::SCRATCH as i32;
    f.all([
        I::I32Const(layout::ENVIRON as i32),
        I::I32Load(mem(0, 2)),
        I::LocalTee(list),
        I::I32Eqz,
        I::If(BlockType::Empty),
        I::I32Const(scratch),
        I::I32Const(scratch + 4),
        I::Call(ENVIRON_SIZES_GET),
        I::Drop,
        I::I32Const(scratch),
        I::I32Load(mem(0, 2)),
        I::LocalTee(count),
        I::I32Const(2),
        I::I32Shl,
        I::I32Const(4),
        I::I32Add,
        I::I32Const(scratch + 4),
        I::I32Load(mem(0, 2)),
        I::I32Add,
        I::Call(ALLOC),
        I::LocalTee(list),
        I::LocalGet(count),
        I::I32Store(mem(0, 2)),
        I::LocalGet(list),
        I::I32Const(4),
        I::I32Add,
        I::LocalGet(list),
        I::I32Const(4),
        I::I32Add,
        I::LocalGet(count),
        I::I32Const(2),
        I::I32Shl,
        I::I32Add,
        I::Call(ENVIRON_GET),
    ]);
    f.leave_if(left::HOST);
    f.all([
        I::I32Const(layout::ENVIRON as i32),
        I::LocalGet(list),
        I::I32Store(mem(0, 2)),
        I::End,
        I::LocalGet(list),
        I::I32Load(mem(0, 2)),
        I::LocalSet(count),
        // For each variable: does it start with the prefix?
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(i),
        I::LocalGet(count),
        I::I32GeU,
        I::BrIf(1),
        I::LocalGet(list),
        I::LocalGet(i),
        I::I32Const(2),
        I::I32Shl,
        I::I32Add,
        I::I32Load(mem(4, 2)),
        I::LocalSet(p),
        I::I32Const(0),
        I::LocalSet(k),
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(k),
        I::LocalGet(prefix),
        I::I32Load(mem(0, 2)),
        I::I32GeU,
        I::BrIf(1),
        // A shorter variable ends in a NUL, which no prefix holds.
        I::LocalGet(p),
        I::LocalGet(k),
        I::I32Add,
        I::I32Load8U(mem(0, 0)),
        I::LocalGet(prefix),
        I::LocalGet(k),
        I::I32Add,
        I::I32Load8U(mem(4, 0)),
        I::I32Ne,
        I::If(BlockType::Empty),
        // Not this one: the next.
        I::LocalGet(i),
        I::I32Const(1),
        I::I32Add,
        I::LocalSet(i),
        I::Br(3),
        I::End,
        I::LocalGet(k),
        I::I32Const(1),
        I::I32Add,
        I::LocalSet(k),
        I::Br(0),
        I::End,
        I::End,
        // Found: the value runs from after the prefix to the NUL.
        I::LocalGet(p),
        I::LocalGet(k),
        I::I32Add,
        I::LocalSet(p),
        I::Block(BlockType::Empty),
        I::Loop(BlockType::Empty),
        I::LocalGet(p),
        I::LocalGet(len),
        I::I32Add,
        I::I32Load8U(mem(0, 0)),
        I::I32Eqz,
        I::BrIf(1),
        I::LocalGet(len),
        I::I32Const(1),
        I::I32Add,
        I::LocalSet(len),
        I::Br(0),
        I::End,
        I::End,
        I::LocalGet(p),
        I::LocalGet(len),
        I::Call(ASCII_IN),
        I::Return,
        I::End,
        I::End,
        I::I32Const(0),
    ]);
}
