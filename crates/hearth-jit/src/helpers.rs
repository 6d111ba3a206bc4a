//! The functions compiled code calls that are still emitted into every
//! module, instruction by instruction, in the order of the indices in
//! [`codegen`](crate::codegen): `JSON.stringify`'s printer and the
//! environment. Allocation, numbers, strings, `JSON.parse`, the request
//! body, the response and `Math.random` are the runtime's (`crates/hearth-jit-runtime`), which modules import.

use wasm_encoder::{BlockType, Function, Instruction as I, ValType};

use crate::codegen::{
    ALLOC, ASCII_IN, ENVIRON_GET, ENVIRON_SIZES_GET, FnBuilder, ModuleBuilder, Ty, layout, mem,
};

pub use hearth_jit_runtime::left;

mod json;

const F: ValType = ValType::F64;
const N: ValType = ValType::I32;

/// A helper: its parameters, its results, and what emits its body.
type Helper = (
    Vec<ValType>,
    Vec<ValType>,
    fn(&mut FnBuilder<'_, '_>, &Consts),
);

pub(crate) fn emit(m: &mut ModuleBuilder<'_>) -> Vec<(u32, Function)> {
    let null = m.str_addr("null") as u32;
    let helpers: Vec<Helper> = vec![
        (vec![], vec![N], json::sb_new),
        (vec![N, N], vec![N], json::sb_room),
        (vec![N, N], vec![], json::sb_push),
        (vec![N, N], vec![], json::sb_quote),
        (vec![N, F], vec![], json::sb_num),
        (vec![N], vec![N], ascii_out),
        (vec![N], vec![N], env_get),
    ];
    let consts = Consts { null };
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
    null: u32,
}

impl FnBuilder<'_, '_> {
    fn all(&mut self, code: impl IntoIterator<Item = I<'static>>) {
        for i in code {
            self.emit(i);
        }
    }
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
